/**
 * bench/failover/many-ips — failover with many IPs on the failing node: when
 * does the LAST one move? With N IPv6 service addresses (2001:db8:100::1…)
 * all owned by n1 (it starts first; n2 and n3 join with a long hand-over
 * hold, so nothing moves to them before the failure), fail n1 and record,
 * per IP, when another node's MAC first announces it (its first unsolicited
 * NA goes out the moment its entry answers; tcpdump in the client stamps
 * them in the kernel). Reports the distribution over IPs per trial and
 * pooled: median, p90, p99 and the last IP (max), and IPs that never moved.
 *
 *   node --import tsx bench/failover/many-ips.ts [--ips 1000] [--trials 3] [--only wire-floor,node-loss,clean-stop,crash]
 *
 * `wire-floor` sends the same NAs from the two other nodes with no agent at
 * all (lab/na-burst.ts, prebuilt frames, one signal): the lab's own time to
 * carry N announcements to the client, the floor each hand-over stands on.
 *
 * Times are from the trigger (not from the old owner's last answer, as in
 * bench/failover's ARP gap): a few ms longer for the same hand-over.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { Lab, sleep, supervisedAgentPid, waitFor, type Host, type LabProcess } from '../../lab/lab.js';
import { LabEtcd } from '../../lab/etcd.js';
import { HERALD, startAgent } from '../../test/helpers/lab-tools.js';

const args = process.argv.slice(2);
const value = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const N = Number(value('ips') ?? 1000);
const TRIALS = Number(value('trials') ?? 3);
const ONLY = (value('only') ?? 'wire-floor,node-loss,clean-stop,crash').split(',');
const NA_BURST = fileURLToPath(new URL('../../lab/na-burst.ts', import.meta.url));
const log = (s: string) => process.stderr.write(s + '\n');
const tmp = mkdtempSync(join(tmpdir(), 'herald-many-'));

/** tcpdump, kernel-stamped, with a ring that holds a burst of thousands of frames. */
const CAPTURE = ['-i', 'eth0', '-n', '-e', '-tt', '-l', '--immediate-mode', '-s', '128', '-B', '16384'];
/** Frames the capture itself lost (tcpdump's summary line), so a lossy capture is never read as late announcements. */
const captureDrops = (text: string) => Number(/(\d+) packets? dropped by kernel/.exec(text)?.[1] ?? NaN);

const hex = (i: number) => i.toString(16);
/** The objects, in files of ≤ 100 (herald apply writes a file in one transaction; etcd allows 128 operations). */
const manifests = (n: number): string[] => {
  const objs = [
    `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: { name: many }\nspec:\n  blocks: [{ start: '2001:db8:100::1', stop: '2001:db8:100::${hex(n)}' }]`,
    `apiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata: { name: many }\nspec:\n  loadBalancerIPs: true\n  interfaces: ['^eth0$']`,
    ...Array.from({ length: n }, (_, i) => `apiVersion: v1\nkind: Service\nmetadata: { name: s${i}, namespace: many }\nspec:\n  type: LoadBalancer\n  ipFamilies: [IPv6]\n  ports: [{ port: 80 }]`),
  ];
  const files: string[] = [];
  for (let i = 0; i < objs.length; i += 100) files.push(objs.slice(i, i + 100).join('\n---\n') + '\n');
  return files;
};

function ownedCount(h: Host): number {
  const r = h.exec(HERALD, ['status', '--json', '--status-socket', h.statusSocket]);
  if (r.code !== 0) return -1;
  return (JSON.parse(r.stdout) as { owned: unknown[] }).owned.length;
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};
const ms = (x: number) => (Number.isFinite(x) ? `${Math.round(x)} ms` : '—');

interface TrialOut {
  gaps: number[];
  missing: number;
  /** Frames the client's capture dropped (should be 0). */
  captureDrops: number;
}

/**
 * The floor: the same N unsolicited NAs, already built, sent by the two
 * would-be successors (every other address each) the moment the trigger
 * comes, with no agent, no store and no control plane: what the lab's wire
 * and receive paths alone take to carry a 1,000-IP hand-over to the client.
 */
async function floorTrial(lab: Lab, n: number): Promise<TrialOut> {
  const [, ...rest] = lab.nodes as [Host, ...Host[]];
  const senders = rest.map((h, k) =>
    h.spawn('na-burst', process.execPath, ['--import', 'tsx', NA_BURST, '--iface', 'eth0', '--mac', h.mac(), '--prefix', '2001:db8:100::', '--from', String(1 + k), '--to', String(n), '--step', String(rest.length)]),
  );
  const collector = lab.client.spawn('tcpdump', 'tcpdump', [...CAPTURE, 'icmp6 and ip6[40] == 136']);
  try {
    for (const s of senders) await s.waitForOutput('ready', 20_000);
    await collector.waitForOutput('listening on', 10_000);
    await sleep(1000 + Math.random() * 500);
    const trigWall = Date.now();
    for (const s of senders) s.signal('SIGUSR1');
    for (const s of senders) await s.waitForOutput('sent', 10_000);
    await sleep(1000);
    await collector.stop('SIGINT', 5000);
    log(`    senders: ${senders.map((s) => /sent .*/.exec(s.text())?.[0]).join('; ')}`);
    const seen = firstAnnouncements(collector.text(), undefined, trigWall);
    return collect(seen, n, collector.text());
  } finally {
    if (collector.running) await collector.stop('SIGKILL', 2000);
    for (const s of senders) if (s.running) await s.stop('SIGKILL', 2000);
  }
}

/** Per target, the first NA (ms after the trigger) from a MAC other than `oldMac`. */
function firstAnnouncements(capture: string, oldMac: string | undefined, trigWall: number): Map<string, number> {
  // "1700000000.123456 02:00:..:12 > 33:33:00:00:00:01, ethertype IPv6 (0x86dd), length 86: … neighbor advertisement, tgt is 2001:db8:100::5, …"
  const seen = new Map<string, number>();
  for (const line of capture.split('\n')) {
    const m = /^(\d+\.\d+) ([0-9a-f:]{17}) > .*tgt is ([0-9a-f:]+)/.exec(line);
    if (!m || m[2] === oldMac) continue;
    const t = Number(m[1]) * 1000 - trigWall;
    if (t >= 0 && !(seen.get(m[3]!)! <= t)) seen.set(m[3]!, t);
  }
  return seen;
}

function collect(seen: Map<string, number>, n: number, capture: string): TrialOut {
  const gaps: number[] = [];
  let missing = 0;
  for (let i = 1; i <= n; i++) {
    const t = seen.get(`2001:db8:100::${hex(i)}`);
    if (t === undefined) missing++;
    else gaps.push(t);
  }
  return { gaps, missing, captureDrops: captureDrops(capture) };
}

async function trial(lab: Lab, etcd: LabEtcd, failure: string, n: number, idx: number): Promise<TrialOut> {
  if (failure === 'wire-floor') return floorTrial(lab, n);
  const prefix = `/herald-many-${failure}-${idx}/`;
  const [n1, ...rest] = lab.nodes as [Host, ...Host[]];
  for (const [k, text] of manifests(n).entries()) {
    const file = join(tmp, `m-${failure}-${idx}-${k}.yaml`);
    writeFileSync(file, text);
    n1.must(HERALD, ['apply', '-f', file, '--etcd', etcd.endpoint, '--prefix', `${prefix}manifests/`]);
  }
  const agentArgs = ['--store', 'etcd', '--etcd', etcd.endpoint, '--etcd-prefix', prefix, '--handover-hold', '10m', ...(process.env.HERALD_FAILOVER_TRACE ? ['--log-format', 'json', '--log-level', 'debug'] : []), ...(process.env.HERALD_FAILOVER_AGENT_ARGS?.split(' ').filter(Boolean) ?? [])];
  const agents = new Map<Host, LabProcess>();
  let collector: LabProcess | undefined;
  let senders: LabProcess[] = [];
  try {
    agents.set(n1, startAgent(n1, agentArgs, `many-${idx}`));
    await waitFor(() => ownedCount(n1) === n, { timeoutMs: 90_000, intervalMs: 2000, what: `n1 to own all ${n} IPs`, onTimeout: () => `owns ${ownedCount(n1)}; ${agents.get(n1)!.text().slice(-1500)}` });
    for (const h of rest) agents.set(h, startAgent(h, agentArgs, `many-${idx}`));
    // Candidates once their candidacy keys are in: they own nothing (the hold keeps every IP on n1).
    await waitFor(() => rest.every((h) => ownedCount(h) === 0) && ownedCount(n1) === n, { timeoutMs: 30_000, intervalMs: 2000, what: "the others up, owning nothing" });
    await sleep(3000);
    // Kernel timestamps (tcpdump -tt): a JavaScript reader on a loaded machine would stamp frames when it gets to them.
    // A short snap length and a 16 MiB buffer: in immediate mode libpcap uses a
    // TPACKET_V2 ring of snap-length slots, and the default 262144 left ~8 slots
    // in the default 2 MiB — a 500-frame burst lost most of its frames in the
    // capture itself ("packets dropped by kernel"), which looked like late announcements.
    collector = lab.client.spawn('tcpdump', 'tcpdump', [...CAPTURE, 'icmp6 and ip6[40] == 136']);
    await collector.waitForOutput('listening on', 10_000);
    // Tracing: the successors' own egress too (when did each NA leave?), and the drop counters.
    senders = process.env.HERALD_FAILOVER_TRACE ? rest.map((h) => h.spawn('tcpdump-out', 'tcpdump', [...CAPTURE, '-Q', 'out', 'icmp6 and ip6[40] == 136'])) : [];
    for (const s of senders) await s.waitForOutput('listening on', 10_000);
    const drops = () => [lab.client, ...rest].map((h) => `${h.name}: ${h.exec('ip', ['-s', '-s', 'link', 'show', 'eth0']).stdout.replace(/\s+/g, ' ').slice(0, 600)}`).join('\n');
    const softnet = () => readFileSync('/proc/net/softnet_stat', 'utf8').split('\n').filter(Boolean).map((l) => l.split(' ').slice(0, 3).map((x) => parseInt(x, 16)).join('/')).join(' ');
    const before = process.env.HERALD_FAILOVER_TRACE ? `${drops()}\nsoftnet ${softnet()}` : '';
    await sleep(300 + Math.random() * 500);
    // A whole-machine profile of the first second after the trigger (perf record -a -g), to see where a hand-over's time goes.
    const perf = process.env.HERALD_FAILOVER_PERF ? spawn('perf', ['record', '-a', '-g', '-q', '-k', 'CLOCK_REALTIME', '-o', `${process.env.HERALD_FAILOVER_PERF}.${failure}-${idx}`, '--', 'sleep', '3'], { stdio: 'ignore' }) : undefined;
    if (perf) await sleep(1500); // perf -a takes a while to start
    const trigWall = Date.now();
    if (perf) log(`    profile ${process.env.HERALD_FAILOVER_PERF}.${failure}-${idx}: trigger at ${trigWall} (CLOCK_REALTIME ms)`);
    if (failure === 'node-loss') lab.setPort(n1, 'eth0', false);
    else if (failure === 'clean-stop') agents.get(n1)!.signal('SIGTERM');
    else process.kill(supervisedAgentPid(agents.get(n1)!)!, 'SIGKILL');
    await sleep(4000);
    await collector.stop('SIGINT', 5000);
    if (process.env.HERALD_FAILOVER_TRACE) {
      log(`    before:\n${before}\n    after:\n${drops()}\nsoftnet ${softnet()}`);
      for (const [k, s] of senders.entries()) {
        await s.stop('SIGINT', 5000);
        const ts = s.text().split('\n').map((l) => /^(\d+\.\d+) /.exec(l)).filter((m) => m).map((m) => Number(m![1]) * 1000 - trigWall);
        const hist = new Map<number, number>();
        for (const t of ts) hist.set(Math.floor(t / 100) * 100, (hist.get(Math.floor(t / 100) * 100) ?? 0) + 1);
        writeFileSync(join(tmpdir(), `herald-many-${failure}-${idx}.${rest[k]!.name}.txt`), `${trigWall}\n${s.text()}`);
        log(`    ${rest[k]!.name} sent ${ts.length} NAs (capture dropped ${captureDrops(s.text())}); per 100 ms: ${[...hist].sort((a, b) => a[0] - b[0]).map(([t, c]) => `${t}:${c}`).join(' ')}`);
      }
      const rx = collector.text().split('\n').map((l) => /^(\d+\.\d+) ([0-9a-f:]{17}) >/.exec(l)).filter((m) => m && m[2] !== n1.mac()).map((m) => Number(m![1]) * 1000 - trigWall);
      const hist = new Map<number, number>();
      for (const t of rx) hist.set(Math.floor(t / 100) * 100, (hist.get(Math.floor(t / 100) * 100) ?? 0) + 1);
      log(`    client got ${rx.length} NAs; per 100 ms: ${[...hist].sort((a, b) => a[0] - b[0]).map(([t, c]) => `${t}:${c}`).join(' ')}`);
      writeFileSync(join(tmpdir(), `herald-many-${failure}-${idx}.client.txt`), `${trigWall}\n${collector.text()}`);
    }
    const seen = firstAnnouncements(collector.text(), n1.mac(), trigWall);
    if (process.env.HERALD_FAILOVER_TRACE) {
      // The hand-over path, from the agents' logs (first occurrence of each message per node).
      const seen = new Set<string>();
      const lines: Array<[number, string]> = [];
      for (const [h, a] of agents) {
        for (const line of a.text().split('\n')) {
          const m = /^\{.*"time":(\d+).*"msg":"([^"]*)"/.exec(line);
          if (!m || Number(m[1]) < trigWall - 20 || seen.has(`${h.name}${m[2]}`)) continue;
          seen.add(`${h.name}${m[2]}`);
          lines.push([Number(m[1]) - trigWall, `      +${Number(m[1]) - trigWall} ms ${h.name} ${m[2]} (${a.text().split(m[2]!).length - 1}×)`]);
        }
      }
      for (const [, l] of lines.sort((a, b) => a[0] - b[0]).slice(0, 40)) log(l);
      // The batch-level trace points (debug): every one after the trigger, per node, with its fields.
      const trace: Array<[number, string]> = [];
      for (const [h, a] of agents) {
        for (const line of a.text().split('\n')) {
          if (!line.startsWith('{') || !line.includes('"trace: ') && !line.includes('fenced') && !line.includes('handed ownership')) continue;
          let j: Record<string, unknown>;
          try {
            j = JSON.parse(line) as Record<string, unknown>;
          } catch {
            continue;
          }
          const t = Number(j.time) - trigWall;
          if (t < -20 || t > 4000) continue;
          const { time: _t, level: _l, msg, node: _n, module: _m, pid: _p, hostname: _hn, ...rest } = j;
          trace.push([t, `      +${t} ms ${h.name} ${String(msg)} ${JSON.stringify(rest)}`]);
        }
      }
      for (const [, l] of trace.sort((a, b) => a[0] - b[0]).slice(0, 200)) log(l);
      writeFileSync(join(tmpdir(), `herald-many-${failure}-${idx}.trace.txt`), trace.map(([, l]) => l).join('\n'));
      // The failing node's own output: its supervisor's lines (each with the ms since the death) are not JSON.
      writeFileSync(join(tmpdir(), `herald-many-${failure}-${idx}.n1.txt`), `${trigWall}\n${agents.get(n1)!.text()}`);
      for (const line of agents.get(n1)!.text().split('\n')) if (line.startsWith('herald supervisor:')) log(`      n1 ${line}`);
    }
    return collect(seen, n, collector.text());
  } finally {
    if (collector?.running) await collector.stop('SIGKILL', 2000);
    for (const s of senders) if (s.running) await s.stop('SIGKILL', 2000);
    await Promise.all([...agents.values()].map((a) => a.stop('SIGKILL')));
    for (const h of lab.nodes) h.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', h.pinDir]);
    lab.setPort(n1, 'eth0', true);
  }
}

async function main(): Promise<void> {
  const lab = Lab.create({ nodes: 3, tag: 'fm', storeHost: true });
  const etcd = new LabEtcd(lab.store!);
  try {
    [lab.client, ...lab.nodes].forEach((h, i) => {
      h.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.disable_ipv6=0']);
      h.must('ip', ['-6', 'addr', 'add', `2001:db8::${i === 0 ? 1 : (0x10 + i).toString(16)}/64`, 'dev', 'eth0', 'nodad']);
    });
    await etcd.start();
    const lines: string[] = [];
    /** Median over trials of the last IP, per case (for the ratios to the wire floor). */
    const lastMedian = new Map<string, number>();
    for (const failure of ONLY) {
      const pooled: number[] = [];
      const lasts: number[] = [];
      let missing = 0;
      const load = loadavg()[0]!.toFixed(1);
      for (let i = 0; i < TRIALS; i++) {
        const r = await trial(lab, etcd, failure, N, i);
        pooled.push(...r.gaps);
        lasts.push(r.missing ? Infinity : Math.max(...r.gaps));
        missing += r.missing;
        log(`  herald/${failure} ${N} IPs #${i + 1}: first ${ms(Math.min(...r.gaps))}, median ${ms(pct(r.gaps, 50))}, p99 ${ms(pct(r.gaps, 99))}, last IP ${ms(Math.max(...r.gaps))}${r.missing ? `, ${r.missing} never moved` : ''}, capture dropped ${r.captureDrops} (load ${loadavg()[0]!.toFixed(1)})`);
      }
      lastMedian.set(failure, pct(lasts, 50));
      lines.push(
        `herald/${failure.padEnd(10)} ${N} IPs × ${TRIALS}: per IP median ${ms(pct(pooled, 50))}, p90 ${ms(pct(pooled, 90))}, p99 ${ms(pct(pooled, 99))}; last IP per trial ${lasts.map(ms).join(', ')}${missing ? `; ${missing} IP-trials never moved` : ''} (load ${load} → ${loadavg()[0]!.toFixed(1)})`,
      );
    }
    const floor = lastMedian.get('wire-floor');
    if (floor !== undefined) {
      for (const [failure, last] of lastMedian) if (failure !== 'wire-floor') lines.push(`herald/${failure}: last IP (median of trials) ${(last / floor).toFixed(1)}× the wire floor's (${ms(last)} vs ${ms(floor)})`);
    }
    console.log(lines.join('\n'));
    console.log('Gap per IP: trigger → first announcement of the IP by another MAC (its first unsolicited NA goes out as its entry answers).');
  } finally {
    await etcd.stop?.();
    await lab.destroy();
    rmSync(tmp, { recursive: true, force: true });
    rmSync(etcd.dataDir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
