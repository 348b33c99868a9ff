/**
 * bench/k8s/answered — N LoadBalancer Services applied through a real
 * kube-apiserver, with three real agents (`herald agent --kubernetes`,
 * datapath and all) in lab namespaces and a CiliumL2AnnouncementPolicy, until
 * every Service's IP is **answered on the wire**: a Neighbor Solicitation
 * sweep from the client (lab/nd-sweep.ts, AF_PACKET), from the moment the
 * last create returned, asks for every address of the pool's first N + 16 every
 * 200 ms until each was answered by a solicited advertisement, and records
 * when. Times from the first create:
 *
 *   created     the last create returned
 *   status      every Service has its IP in status.loadBalancer.ingress
 *   answered    the last of those IPs was first answered on the wire
 *
 * The Services are IPv6 (10,000 cluster IPs fit the second service CIDR), so
 * the wire check is NDP; the L2 path is the one ARP takes (the same
 * l2-announce table, program and ownership). Cilium's L2 announcements take
 * one Lease per Service and win each by a write (anchors: ≥ N / its client
 * QPS for the Leases alone) — printed as arithmetic, as in bench/k8s.
 *
 * The creates keep --concurrency requests in flight (a sliding window over
 * one keep-alive client). Printed on the way: the create rate and the CPU
 * seconds the three agents (each its supervisor + agent process group) and the
 * API server spent per 1,000 creates — the per-create cost curve. After every
 * IP was answered: API write requests/s in steady state (apiserver_request_total,
 * non-read verbs, over --steady-s seconds).
 *
 *   node --import tsx bench/k8s/answered.ts [--services 1000] [--concurrency 16] [--steady-s 10]
 *     [--cpu-prof DIR] [--json]
 *
 * --cpu-prof DIR: a V8 CPU profile of each agent process from the first create
 * to its exit at the end (bench/k8s/cpu-prof.mjs, preloaded; DIR/agent-<pid>.cpuprofile).
 */
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor, type LabProcess } from '../../lab/lab.js';
import { KubeApiError, KubeClient } from '../../src/intent/sources/kube-client.js';
import { applyObject, requestTotal, KUBE_SERVICE_CIDR } from '../../test/helpers/kube.js';
import { KubeLab } from '../../test/helpers/kube-lab.js';
import { HERALD, startAgent } from '../../test/helpers/lab-tools.js';

const PROF_PRELOAD = fileURLToPath(new URL('./cpu-prof.mjs', import.meta.url));
const SWEEP = fileURLToPath(new URL('../../lab/nd-sweep.ts', import.meta.url));
const POOL_PREFIX = '2001:db8:1::';
const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const N = Number(opt('services', '1000'));
const CONCURRENCY = Number(opt('concurrency', '16'));
const STEADY_S = Number(opt('steady-s', '10'));
const CPU_PROF = args.includes('--cpu-prof') ? opt('cpu-prof', '') : undefined;
const WRITE_VERBS = ['POST', 'PUT', 'PATCH', 'DELETE', 'APPLY'];
const TICK_S = 100;
/** CPU seconds (user + system) of every process in a process group, or of one process. */
function cpuSeconds(match: (pid: number, pgrp: number, cmd: string) => boolean): number {
  let ticks = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const f = stat.slice(close + 2).split(' ');
      if (!match(Number(d), Number(f[2]), stat.slice(stat.indexOf('(') + 1, close))) continue;
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks / TICK_S;
}
const log = (s: string) => process.stderr.write(`bench/k8s/answered: ${s}\n`);
const mono = () => Number(process.hrtime.bigint()) / 1e6;

async function main(): Promise<void> {
  // API server, CRDs, RBAC, the lab, Node objects and a bridge per node (the agents are started here, optionally profiled).
  const k = await KubeLab.create({ nodes: 3, tag: 'k8sans', kube: { serviceCidrs: `${KUBE_SERVICE_CIDR},2001:db8:ffff::/108` } });
  const { kube, lab } = k;
  let admin: KubeClient | undefined;
  const out = join(tmpdir(), `herald-nd-sweep-${process.pid}.json`);
  const startFile = join(tmpdir(), `herald-nd-sweep-${process.pid}.start`);
  let sweep: LabProcess | undefined;
  const agents: LabProcess[] = [];
  try {
    [lab.client, ...lab.nodes].forEach((h, i) => h.must('ip', ['-6', 'addr', 'add', `2001:db8::${i === 0 ? 1 : (0x10 + i).toString(16)}/64`, 'dev', 'eth0', 'nodad']));
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'bench' }, spec: { blocks: [{ cidr: `${POOL_PREFIX}/112` }] } });
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'bench' }, spec: { loadBalancerIPs: true, interfaces: ['^eth0$'] } });
    for (const n of lab.nodes) {
      const agentArgs = ['--kubernetes', '--kubeconfig', kube.kubeconfig(`herald:${n.netns}`, ['system:masters']), '--responder-map-size', String(Math.max(16_384, 2 * N))];
      agents.push(
        CPU_PROF
          ? n.spawn('agent', process.execPath, ['--import', PROF_PRELOAD, HERALD, 'agent', '--node', n.netns, '--bpf-pin-dir', n.pinDir, '--state-dir', n.stateDir, '--status-socket', n.statusSocket, ...agentArgs], { HERALD_BENCH_CPU_PROF: CPU_PROF })
          : startAgent(n, agentArgs, 'agent'),
      );
    }
    for (const a of agents) await a.waitForOutput('agent running', 60_000);
    // Every node live for the others and one LB-IPAM leader, before the clock starts.
    const st = (i: number) => JSON.parse(lab.nodes[i]!.must(HERALD, ['status', '--json', '--status-socket', lab.nodes[i]!.statusSocket]));
    await waitFor(() => lab.nodes.every((_, i) => st(i).kubernetes.leases.liveNodes.length === 3 && st(i).kubernetes.leases.leaders['herald-ipam']), { timeoutMs: 60_000, what: 'three live nodes and an LB-IPAM leader', onTimeout: () => agents.map((a) => a.text().slice(-600)).join('\n') });

    sweep = lab.client.spawn('nd-sweep', process.execPath, ['--import', 'tsx', SWEEP, '--iface', 'eth0', '--src-ip', '2001:db8::fa', '--src-mac', '02:00:00:00:02:fa', '--prefix', POOL_PREFIX, '--count', String(N + 16), '--out-json', out, '--start-file', startFile, '--duration-ms', String(24 * 3600_000)]);
    await sweep.waitForOutput('ready t0Ns=', 30_000);
    admin = await KubeClient.create({ kubeconfig: kube.kubeconfig('admin', ['system:masters']), keepAlive: true });
    const svc = (i: number) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: `svc-${i}`, namespace: 'default' }, spec: { type: 'LoadBalancer', allocateLoadBalancerNodePorts: false, ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack', ports: [{ port: 80, protocol: 'TCP' }] } });
    const apply = async (i: number): Promise<void> => {
      for (let attempt = 0; ; attempt++) {
        try {
          await admin!.request('POST', '/api/v1/namespaces/default/services', svc(i));
          return;
        } catch (e) {
          if (e instanceof KubeApiError && e.status === 409) return;
          if (attempt >= 3) throw e;
        }
      }
    };
    const answeredNow = () => Number([...(sweep?.text() ?? '').matchAll(/answered (\d+)/g)].at(-1)?.[1] ?? 0);
    // Ours (another run's API server may be on the machine): its command line names our directory.
    const apiserverPid = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).find((d) => {
      try {
        const cmdline = readFileSync(`/proc/${d}/cmdline`, 'utf8');
        return cmdline.includes('kube-apiserver') && cmdline.includes(kube.dir);
      } catch {
        return false;
      }
    });
    const apiserverCpu = () => cpuSeconds((pid) => String(pid) === apiserverPid);
    const agentCpu = () => agents.map((a) => cpuSeconds((_pid, pgrp) => pgrp === a.pid));
    const curve: { upTo: number; seconds: number; perSecond: number; agentsCpuS: number[]; apiserverCpuS: number }[] = [];
    if (CPU_PROF) writeFileSync(join(CPU_PROF, 'start'), '');
    const t0 = mono();
    let done = 0;
    let next = 0;
    let mark = { t: t0, agents: agentCpu(), api: apiserverCpu(), done: 0 };
    const block = N >= 5000 ? 1000 : Math.max(100, N / 10);
    const sample = (): void => {
      const t = mono();
      const a = agentCpu();
      const api = apiserverCpu();
      const row = { upTo: done, seconds: (t - mark.t) / 1000, perSecond: (done - mark.done) / ((t - mark.t) / 1000), agentsCpuS: a.map((v, i) => Math.round((v - mark.agents[i]!) * 10) / 10), apiserverCpuS: Math.round((api - mark.api) * 10) / 10 };
      curve.push(row);
      log(`${done} created after ${((t - t0) / 1000).toFixed(0)} s: ${row.perSecond.toFixed(1)}/s over the last ${done - mark.done}; CPU s in that block: agents ${row.agentsCpuS.join(' / ')}, API server ${row.apiserverCpuS}`);
      mark = { t, agents: a, api, done };
    };
    // A sliding window of CONCURRENCY creates in flight.
    await Promise.all(
      Array.from({ length: Math.min(CONCURRENCY, N) }, async () => {
        for (;;) {
          const i = next++;
          if (i >= N) return;
          await apply(i);
          done++;
          if (done % block === 0 || done === N) sample();
        }
      }),
    );
    const created = mono() - t0;
    log(`${N} created in ${(created / 1000).toFixed(1)} s`);
    // The sweep starts asking once the last create returned (it was started idle before): 10,000
    // solicitations every 200 ms while the Services are created would load the 2-core machine the API
    // server and agents share. An IP answered earlier counts as answered at the first round (the last
    // IP is what is timed).
    writeFileSync(startFile, '');


    // Every status written: the IPs to look for.
    let ips: string[] = [];
    let statusAt = 0;
    await waitFor(
      async () => {
        const list = await kube.api('GET', '/api/v1/namespaces/default/services');
        ips = (list.body.items as any[]).map((s) => s.status?.loadBalancer?.ingress?.[0]?.ip).filter((ip): ip is string => typeof ip === 'string');
        if (ips.length < N) return false;
        statusAt = mono() - t0;
        return true;
      },
      { timeoutMs: 600_000, intervalMs: N >= 5000 ? 500 : 100, what: `status written on ${N} Services`, onTimeout: () => `${ips.length} written` },
    );
    log(`every status written after ${(statusAt / 1000).toFixed(1)} s`);
    // Every IP answered (the sweep's count covers the pool's first N + 16 addresses).
    await waitFor(() => answeredNow() >= N, { timeoutMs: 600_000, intervalMs: 100, what: `${N} IPs answered on the wire`, onTimeout: () => `${answeredNow()} answered; owned ${lab.nodes.map((_, i) => (st(i).owned as unknown[]).length).join('/')}; sweep: ${sweep!.text().slice(-300)}` });
    sweep.signal('SIGTERM');
    await waitFor(() => { try { return readFileSync(out, 'utf8').length > 0; } catch { return false; } }, { timeoutMs: 30_000, what: 'the sweep result' });
    const result = JSON.parse(readFileSync(out, 'utf8')) as { t0Ns: string; answered: Record<string, number>; rounds: number; sent: number };
    const sweepT0 = Number(BigInt(result.t0Ns)) / 1e6;
    const times = ips.map((ip) => result.answered[ip]).map((ms) => (ms === undefined ? NaN : sweepT0 + ms - t0));
    const missing = times.filter((t) => Number.isNaN(t)).length;
    const answeredAt = Math.max(...times.filter((t) => !Number.isNaN(t)));
    const owned = lab.nodes.map((_, i) => (st(i).owned as unknown[]).length);
    // API writes in steady state: every Service answered, nothing changing.
    await new Promise((r) => setTimeout(r, 5000));
    const writes = (m: string) => requestTotal(m, (l) => WRITE_VERBS.includes(l.verb ?? ''));
    const w0 = writes(await kube.metrics());
    const s0 = mono();
    await new Promise((r) => setTimeout(r, STEADY_S * 1000));
    const steadyWritesPerS = (writes(await kube.metrics()) - w0) / ((mono() - s0) / 1000);
    const r = { services: N, concurrency: CONCURRENCY, steadyWritesPerS: Math.round(steadyWritesPerS * 100) / 100, curve, createdMs: Math.round(created), statusMs: Math.round(statusAt), answeredMs: Math.round(answeredAt), answeredAfterLastCreateMs: Math.round(answeredAt - created), missing, owned, sweep: { rounds: result.rounds, sent: result.sent } };
    if (args.includes('--json')) console.log(JSON.stringify(r));
    else {
      console.log(`${N} Services, 3 agents (lab), L2 announcement policy; from the first create:`);
      console.log(`created ${(created / 1000).toFixed(1)} s · every status written ${(statusAt / 1000).toFixed(1)} s · every IP answered on the wire ${(answeredAt / 1000).toFixed(1)} s (+${((answeredAt - created) / 1000).toFixed(2)} s after the last create)${missing ? ` · ${missing} of the status IPs never answered` : ''}`);
      console.log(`IPs owned per node: ${owned.join(' / ')}; sweep: ${result.rounds} rounds, ${result.sent} solicitations`);
      console.log(`creates ${CONCURRENCY} in flight; per block: ${curve.map((c) => `${c.upTo}: ${c.perSecond.toFixed(1)}/s, agents ${c.agentsCpuS.join('/')} s, API server ${c.apiserverCpuS} s`).join('; ')}`);
      console.log(`API writes in steady state: ${steadyWritesPerS.toFixed(2)}/s over ${STEADY_S} s (the API server's own included)`);
      console.log(`Cilium's L2 announcements: one Lease per Service, created and then renewed every 2 s by its holder — ${N} Lease creates before all are announced and ${(N / 2).toFixed(0)} renewals/s after (herald: 3 node Leases, 1.5 writes/s, bench/k8s)`);
    }
  } finally {
    sweep?.signal('SIGTERM');
    if (CPU_PROF) {
      // Let the agents exit on their own (their profiles are written at exit).
      for (const a of agents) a.signal('SIGTERM');
      await Promise.race([Promise.all(agents.map((a) => a.exited)), new Promise((r) => setTimeout(r, 60_000))]);
    }
    admin?.close();
    await k.destroy();
    rmSync(out, { force: true });
    rmSync(startFile, { force: true });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
