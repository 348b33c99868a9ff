/**
 * bench/failover/spurious.ts — zero spurious moves under stress (issue #16).
 *
 * The failover lab of bench/failover (a client, three nodes, etcd; herald with
 * its defaults and --local-routes), the same probe (a fresh ARP request and an
 * HTTP GET for the service IP every 10 ms from the client). Nothing fails; for
 * --minutes per condition the machine is made hostile and we count what moved:
 *
 *   cpu   both cores saturated: `stress-ng --cpu <cores>` at the agents' own
 *         priority for the whole window.
 *   heap  the agents under heap/GC pressure and an ARP flood of other hosts'
 *         traffic: 1,000 more services (IPv6, their own pool) spread over the
 *         three agents, `herald status --json` fetched from every agent
 *         back to back (each answer for ~1,000 IPs allocates megabytes in the
 *         agent), and trafgen flooding the segment with other hosts' ARP
 *         (requests and replies between 203.0.113.x addresses, broadcast).
 *
 * A spurious move is any ARP reply or gratuitous ARP for the VIP from another
 * MAC, any service IP whose owner (by every agent's status) differs at the end
 * of the window, and any gap: the longest stretch without an ARP answer and
 * the longest between two served HTTP requests are printed.
 *
 * --silence 150ms,200ms,300ms adds the trade-off curve: for each wire-silence
 * value, --trials node-loss failovers (the gap) and a --curve-minutes window
 * under the cpu condition (the moves).
 *
 * --no-settle starts the heap window without waiting for the spread to settle,
 * so the planned hand-overs from the first agent up to the preferred nodes
 * happen under the load (a hand-over must not leave an IP unanswered longer
 * than a crash would).
 *
 * Every agent logs JSON to <run dir>/<window>-<node>.log (--run-dir, default a
 * fresh directory under the system's temporary one, printed); for every ARP
 * silence over 1 s the agents' log lines from 1 s before it to 0.5 s after are
 * printed against the probe's timeline (ms since the load started).
 *
 *   node --import tsx bench/failover/spurious.ts [--minutes 10] [--only cpu|heap] [--no-settle] [--run-dir DIR]
 *        [--silence 150ms,200ms,300ms --trials 10 --curve-minutes 2]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep, type Host } from '../../lab/lab.js';
import { HERALD } from '../../test/helpers/lab-tools.js';
import { FailoverBench, ownerLinkDown, type Scenario, type Setup } from './harness.js';
import { heraldSetup, type HeraldScenario } from './herald-cases.js';
import { foreignArpFrame } from '../lib/foreign-arp.js';

const args = process.argv.slice(2);
const opt = (name: string, dflt: string) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] ? args[i + 1]! : dflt;
};
const MINUTES = Number(opt('--minutes', '10'));
const ONLY = opt('--only', '');
const SILENCES = opt('--silence', '').split(',').filter(Boolean);
const TRIALS = Number(opt('--trials', '10'));
const CURVE_MINUTES = Number(opt('--curve-minutes', '2'));
const FLOOD_PPS = Number(opt('--flood-pps', '20000'));
const NO_SETTLE = args.includes('--no-settle');
const RUN_DIR = opt('--run-dir', '') || mkdtempSync(join(tmpdir(), 'herald-spurious-run-'));
mkdirSync(RUN_DIR, { recursive: true });
// JSON logs (with their wall-clock time), so they can be laid against the probe's timeline.
process.env.HERALD_FAILOVER_TRACE ??= '1';
process.env.HERALD_FAILOVER_LOG_DIR = RUN_DIR;
const EXTRA_SERVICES = 1000;
const log = (s: string) => process.stderr.write(s + '\n');

/** 1,000 IPv6 services from their own pool (they never compete for the bench's IPv4 VIP), 100 per file. */
function extraManifests(n: number): string[] {
  const files = [
    `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: many }
spec:
  blocks: [{ cidr: "2001:db8:200::/112" }]
`,
  ];
  for (let f = 0; f * 100 < n; f++) {
    const docs: string[] = [];
    for (let i = f * 100; i < Math.min(n, (f + 1) * 100); i++) {
      docs.push(`apiVersion: v1
kind: Service
metadata: { name: s${i}, namespace: many }
spec: { type: LoadBalancer, ipFamilies: [IPv6], ipFamilyPolicy: SingleStack, ports: [{ port: 80 }] }`);
    }
    files.push(docs.join('\n---\n') + '\n');
  }
  return files;
}


type Condition = 'cpu' | 'heap';

interface LoadScenario extends Scenario {
  startLoad(): void;
  /** Date.now() when the load started (the trigger: the probe's timeline is relative to it). */
  loadStartedAt?: number;
  /** node → its agent's log file. */
  logs: Map<string, string>;
  owners(): Map<string, string>;
  ownersAtStart?: Map<string, string>;
  statusFetches: number;
}

/** Owner of every service IP, as each agent's status says (ip → node). */
function ownersOf(nodes: readonly Host[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const n of nodes) {
    const r = n.exec(HERALD, ['status', '--json', '--status-socket', n.statusSocket]);
    if (r.code !== 0) continue;
    for (const o of (JSON.parse(r.stdout) as { owned: Array<{ ip: string }> }).owned) out.set(o.ip, out.has(o.ip) ? `${out.get(o.ip)}+${n.name}` : n.name);
  }
  return out;
}

function withLoad(condition: Condition, agentArgs: string[]): Setup {
  const setup = heraldSetup(agentArgs, condition === 'heap' ? extraManifests(EXTRA_SERVICES) : [], condition === 'heap');
  return async (bench) => {
    const sc = await setup(bench);
    const logs = (sc as HeraldScenario).logFiles;
    let owner = sc.owner;
    if (condition === 'heap' && !NO_SETTLE) {
      // Every extra service placed, and the spread settled (the first agent up holds everything
      // for the hand-over hold, then hands IPs to their preferred nodes — planned moves, not the
      // spurious ones this counts): the same owners for 15 s before the window starts.
      const deadline = Date.now() + 180_000;
      let last = '';
      let stableSince = Date.now();
      for (;;) {
        const owners = ownersOf(bench.nodes);
        const text = JSON.stringify([...owners].sort());
        if (text !== last || owners.size < EXTRA_SERVICES + 1) {
          last = text;
          stableSince = Date.now();
        } else if (Date.now() - stableSince >= 15_000) {
          owner = bench.nodes.find((n) => n.name === owners.get(bench.vip)) ?? owner;
          break;
        }
        if (Date.now() > deadline) throw new Error(`ownership not settled after 180 s (${owners.size} of ${EXTRA_SERVICES + 1} IPs owned)`);
        await sleep(2000);
      }
    }
    const children: ChildProcess[] = [];
    let stopped = false;
    let loop: Promise<void> | undefined;
    const ls: LoadScenario = {
      ...sc,
      owner,
      logs,
      statusFetches: 0,
      owners: () => ownersOf(bench.nodes),
      startLoad() {
        ls.loadStartedAt = Date.now();
        ls.ownersAtStart = ownersOf(bench.nodes);
        const seconds = Math.ceil(MINUTES * 60) + 60;
        if (condition === 'cpu') {
          children.push(spawn('stress-ng', ['--cpu', String(cpus().length), '--timeout', `${seconds}s`, '--quiet'], { stdio: 'ignore', detached: true }));
        } else {
          const conf = join(tmpdir(), `herald-spurious-flood-${process.pid}.cfg`);
          writeFileSync(conf, foreignArpFrame(1, 'ff:ff:ff:ff:ff:ff') + foreignArpFrame(2, 'ff:ff:ff:ff:ff:ff'));
          // Its own process group: killing `timeout` alone would leave trafgen flooding.
          children.push(
            spawn('timeout', ['-s', 'KILL', String(seconds), 'ip', 'netns', 'exec', bench.lab.client.netns, 'trafgen', '-o', 'eth0', '-i', conf, '-P', '1', '-b', `${FLOOD_PPS}pps`, '-q'], { stdio: 'ignore', detached: true }),
          );
          loop = (async () => {
            while (!stopped) {
              for (const n of bench.nodes) {
                await new Promise<void>((r) => {
                  const c = spawn('ip', ['netns', 'exec', n.netns, HERALD, 'status', '--json', '--status-socket', n.statusSocket], { stdio: 'ignore' });
                  c.on('exit', () => r());
                });
                ls.statusFetches++;
              }
            }
          })();
        }
      },
      teardown: async () => {
        stopped = true;
        for (const c of children) {
          try {
            if (c.pid) process.kill(-c.pid, 'SIGKILL'); // the whole group: stress-ng's workers, trafgen under timeout
          } catch {
            c.kill('SIGKILL');
          }
        }
        await loop;
        await sc.teardown();
      },
    };
    return ls;
  };
}

interface WindowResult {
  condition: string;
  minutes: number;
  foreignReplies: boolean;
  garps: number;
  arpSilenceMs: number;
  httpGapMs: number;
  httpFailures: number;
  ipsMoved: number;
  ips: number;
  statusFetches: number;
  probeLateTicks: number;
  load: string;
  /** ARP silences over 1 s, [from, to] in ms since the load started. */
  silences: Array<[number, number]>;
  logs: Record<string, string>;
}

/** The agents' log lines between `fromMs − 1 s` and `toMs + 0.5 s` (ms since `startedAt`), in time order. */
function logWindow(logs: Map<string, string>, startedAt: number, fromMs: number, toMs: number, max = 80): string[] {
  const out: Array<[number, string]> = [];
  for (const [node, file] of logs) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      const m = /^\{.*"time":(\d+)/.exec(line);
      if (!m) continue;
      const t = Number(m[1]) - startedAt;
      if (t < fromMs - 1000 || t > toMs + 500) continue;
      let rest = line;
      try {
        const { level, time, pid, hostname, msg, ...fields } = JSON.parse(line) as Record<string, unknown>;
        void level; void time; void pid; void hostname;
        rest = `${String(msg)} ${JSON.stringify(fields)}`;
      } catch {
        /* the raw line */
      }
      out.push([t, `${t >= 0 ? '+' : ''}${t} ms ${node} ${rest.slice(0, 220)}`]);
    }
  }
  const sorted = out.sort((a, b) => a[0] - b[0]).map(([, l]) => l);
  return sorted.length > max ? [...sorted.slice(0, max / 2), `… ${sorted.length - max} lines …`, ...sorted.slice(-max / 2)] : sorted;
}

async function runWindow(bench: FailoverBench, condition: Condition, minutes: number, agentArgs: string[] = []): Promise<WindowResult> {
  let scenario: LoadScenario | undefined;
  let moved = 0;
  let ips = 0;
  let fetches = 0;
  const label = `herald/${condition}-${minutes}min${agentArgs.length ? ` ${agentArgs.join(' ')}` : ''}`;
  const r = await bench.runTrials(
    label,
    async (b) => {
      scenario = (await withLoad(condition, agentArgs)(b)) as LoadScenario;
      // Read the owners and load counters before the harness tears the scenario down.
      const teardown = scenario.teardown;
      const sc = scenario;
      scenario.teardown = async () => {
        if (sc.ownersAtStart) {
          const end = sc.owners();
          ips = sc.ownersAtStart.size;
          moved = [...sc.ownersAtStart].filter(([ip, node]) => end.get(ip) !== node).length;
          fetches = sc.statusFetches;
        }
        await teardown();
      };
      return scenario;
    },
    (_b, sc) => (sc as LoadScenario).startLoad(),
    1,
    { preMs: 2000, phaseJitterMs: 0, postMs: minutes * 60_000, retries: 1, httpTimeoutMs: 500, probeNice: -15 },
  );
  const t = r.trials[0]!;
  const sc = scenario!;
  for (const [from, to] of t.arpSilences) {
    log(`  ARP silence ${Math.round(to - from)} ms, from +${Math.round(from)} to +${Math.round(to)} ms after the load started; the agents' log lines:`);
    if (sc.loadStartedAt !== undefined) for (const l of logWindow(sc.logs, sc.loadStartedAt, from, to)) log(`      ${l}`);
  }
  return {
    condition,
    minutes,
    foreignReplies: t.newOwner !== null,
    garps: t.garps,
    arpSilenceMs: Math.round(t.arpSilenceMs),
    httpGapMs: Math.round(t.httpGapMs),
    httpFailures: t.httpFailures,
    ipsMoved: moved,
    ips,
    statusFetches: fetches,
    probeLateTicks: t.probeLateTicks,
    silences: t.arpSilences,
    logs: Object.fromEntries(sc.logs),
    load: loadavg().map((x) => x.toFixed(1)).join(' '),
  };
}

function printWindow(w: WindowResult): void {
  log(
    `  ${w.condition} ${w.minutes} min: other MAC answered ${w.foreignReplies ? 'YES' : 'no'}, gratuitous ARPs ${w.garps}, ` +
      `longest ARP silence ${w.arpSilenceMs} ms, longest HTTP gap ${w.httpGapMs} ms (${w.httpFailures} failed GETs), ` +
      `IPs whose owner changed ${w.ipsMoved}/${w.ips}${w.statusFetches ? `, ${w.statusFetches} status fetches` : ''}; probe late ticks ${w.probeLateTicks}; load ${w.load}`,
  );
}

async function main(): Promise<void> {
  const bench = await FailoverBench.create({ log: (l) => log(l) });
  const results: unknown[] = [];
  try {
    // The heap condition's IPv6 services: every node reachable over IPv6 on the segment, as in --family 6.
    [bench.lab.client, ...bench.lab.nodes].forEach((h, i) => {
      h.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.disable_ipv6=0']);
      h.must('ip', ['-6', 'addr', 'add', `2001:db8::${i === 0 ? 1 : (0x10 + i).toString(16)}/64`, 'dev', 'eth0', 'nodad']);
    });
    log(`bench/failover/spurious — ${MINUTES} min per condition, herald defaults, ${cpus().length} cores${NO_SETTLE ? ', heap window not waiting for the spread to settle' : ''}; agent logs in ${RUN_DIR}`);
    for (const c of ['cpu', 'heap'] as const) {
      if (ONLY && ONLY !== c) continue;
      const w = await runWindow(bench, c, MINUTES);
      printWindow(w);
      results.push(w);
    }
    for (const silence of SILENCES) {
      const args = ['--wire-silence', silence];
      const loss = await bench.runTrials(`herald/node-loss silence ${silence}`, heraldSetup(args), (b, sc) => ownerLinkDown(b, sc), TRIALS, { postMs: 3000 });
      const w = await runWindow(bench, 'cpu', CURVE_MINUTES, args);
      log(
        `  curve: --wire-silence ${silence}: node-loss ARP gap p50 ${Math.round(loss.summary.arpGap.median ?? NaN)} ms, p99 ${Math.round(loss.summary.arpGap.p99 ?? NaN)} ms (${TRIALS} trials); ` +
          `cpu ${CURVE_MINUTES} min: other MAC ${w.foreignReplies ? 'YES' : 'no'}, IPs moved ${w.ipsMoved}/${w.ips}, longest ARP silence ${w.arpSilenceMs} ms`,
      );
      results.push({ silence, nodeLoss: loss.summary.arpGap, window: w });
    }
    process.stdout.write(JSON.stringify(results, null, 2) + '\n');
  } finally {
    await bench.destroy();
  }
}

await main();
