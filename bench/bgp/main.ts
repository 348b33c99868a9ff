/**
 * bench/bgp — readiness lost → path gone from the upstream router's FIB.
 *
 * One herald BGP node (control plane, host-route and BIRD reconcilers, its
 * own BIRD) peers with an upstream BIRD (`merge paths`) in lab namespaces.
 * Each trial makes the endpoint ready, waits for the route in the router's
 * FIB, then marks it not ready and times, from the control plane's update
 * with the new (already parsed) snapshot:
 *   node   — the host route deleted in the node's kernel (herald's share)
 *   router — the route deleted from the router's FIB (BIRD learn + BGP UPDATE)
 * Both are read from `ip monitor route` streams (kernel event order, no polling).
 * The anchor, in the same run: herald's own tick-only setting
 * (`--bgp-tick-only 2s`, flock's design — its reconciler acts on a 2 s ticker),
 * each change made at a random phase of the tick; then the ratio.
 *
 * `--case crash`: the node vanishes as in a power loss — every packet in
 * and out of it dropped (nftables in its namespace), so no FIN, no carrier
 * loss, nothing tells the router — timed from the drop to the route's
 * deletion in the router's FIB, with BFD (100 ms × 3, both sides) and
 * without (the hold timer, 9 s here, 90 s by default), side by side in one
 * run. (A kill -9 of BIRD alone is no test of this: the kernel closes its TCP
 * session at once.) The drop is lifted between trials and the session
 * re-established.
 *
 * `--case scale`: 10,000 anycast IPs (IPv6, 2001:db8:100::/112 — the
 * documentation ranges hold no 10,000 IPv4 addresses) over an IPv6 session.
 * Side by side with flock's way, a static BIRD configuration reloaded per
 * change (flock templates bird.conf and runs `birdc configure`): (1) from
 * the intent with 10,000 ready services to all 10,000 in the router's FIB
 * (counted on `ip monitor route` there); (2) per single readiness change
 * among 10,000: the agent's CPU (this process: control plane and
 * reconcilers; the static peer: rendering the file and birdc), BIRD's CPU
 * (/proc/<pid>/schedstat, ns) and children's (birdc), and the time to
 * the router's FIB.
 *
 * `--nice N`: the whole bench — both arms, their BIRDs and the router's,
 * which inherit it — at CPU priority N, as the agent runs (`herald agent`
 * takes -10 by default, and under systemd its session's autogroup too). Start
 * the bench with `setsid` so that it leads its own session and the autogroup's
 * nice is set as well; otherwise only the threads' nice changes, which on an
 * autogroup kernel orders them only against the other processes of the same
 * session. Default: not changed (0).
 *
 *   node --import tsx bench/bgp/main.ts [--case readiness|crash|scale] [--trials 30] [--ips 10000] [--nice N] [--json]
 */
import { anycastBgpManifests, anycastServiceManifests, bgpPeeringManifests, upstreamBirdConfig } from '../../test/helpers/bgp-manifests.js';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { loadavg, tmpdir } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { HeraldBgpNode, parse } from '../../lab/bgp-node.js';
import { parseManifests, type IntentSnapshot } from '../../src/intent/index.js';
import { manifestLimitDefaults } from '../../src/intent/limits.js';
import { applyNice, leadsSession, parseNice } from '../../src/cli/nice.js';

const execAsync = promisify(execFile);

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const CASE = opt('case', 'readiness');
const NICE = args.includes('--nice') ? parseNice(opt('nice', '0')) : undefined;
/** What the priority is, for the header: nice, and whether the session's autogroup has it too. */
const priority = (() => {
  if (NICE === undefined) return 'nice 0 (not changed)';
  const failed = applyNice(NICE);
  if (failed) throw new Error(`--nice ${NICE}: ${failed}`);
  return `nice ${NICE}${leadsSession() ? ' (own session: autogroup too)' : ' (threads only: not a session leader, start with setsid)'}`;
})();
const TRIALS = Number(opt('trials', CASE === 'crash' ? '10' : '30'));
const ROUTER = `hlbbgpr${process.pid}`;
const NODE = `hlbbgpn${process.pid}`;
const VIP = '203.0.113.10';
const ip = (ns: string, ...a: string[]) => execFileSync('ip', ['-n', ns, ...a], { encoding: 'utf8' });

const intent = (ready: boolean) =>
  anycastBgpManifests(
    { peer: { name: 'router', address: '192.0.2.1', asn: 65100 } },
    { endpoints: [{ address: '198.51.100.10', node: 'node-1', ready }] },
  );

/** `ip monitor route` in a namespace: resolves waiters on matching lines, stamped on arrival. */
class RouteMonitor {
  private readonly child: ChildProcess;
  private buf = '';
  private waiters: { re: RegExp; resolve: (t: number) => void }[] = [];
  constructor(ns: string) {
    this.child = spawn('ip', ['-n', ns, 'monitor', 'route'], { stdio: ['ignore', 'pipe', 'ignore'] });
    this.child.stdout!.on('data', (d: Buffer) => {
      const t = performance.now();
      this.buf += d.toString();
      const lines = this.buf.split('\n');
      this.buf = lines.pop() ?? '';
      for (const line of lines) {
        this.waiters = this.waiters.filter((w) => (w.re.test(line) ? (w.resolve(t), false) : true));
      }
    });
  }
  next(re: RegExp, timeoutMs = 30_000): Promise<number> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no route event ${re} within ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({ re, resolve: (t) => (clearTimeout(timer), resolve(t)) });
    });
  }
  stop(): void {
    this.child.kill('SIGKILL');
  }
}

const q = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

const dir = mkdtempSync(join(tmpdir(), 'herald-bench-bgp-'));
const summary = (xs: number[]) => ({ p50: +q(xs, 50).toFixed(2), p99: +q(xs, 99).toFixed(2), max: +Math.max(...xs).toFixed(2) });
const vipRe = VIP.replace(/\./g, '\\.');

/** Router and node namespaces, the router's BIRD (BFD when asked) and route monitors; torn down by `close`. */
async function withLab<T>(bfd: boolean, run: (l: { node: HeraldBgpNode; routerMon: RouteMonitor; nodeMon: RouteMonitor }) => Promise<T>, tickMs?: number): Promise<T>;
async function withLab<T>(bfd: boolean, run: (l: { node: HeraldBgpNode; routerMon: RouteMonitor; nodeMon: RouteMonitor }) => Promise<T>, tickMs?: number): Promise<T> {
  let router: ChildProcess | undefined;
  let node: HeraldBgpNode | undefined;
  const monitors: RouteMonitor[] = [];
  try {
    for (const ns of [ROUTER, NODE]) {
      execFileSync('ip', ['netns', 'add', ns]);
      ip(ns, 'link', 'set', 'lo', 'up');
    }
    ip(NODE, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ROUTER);
    ip(NODE, 'addr', 'add', '192.0.2.2/24', 'dev', 'eth0');
    ip(NODE, 'link', 'set', 'eth0', 'up');
    ip(ROUTER, 'addr', 'add', '192.0.2.1/24', 'dev', 'eth0');
    ip(ROUTER, 'link', 'set', 'eth0', 'up');
    ip(NODE, 'link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'be1');
    ip(NODE, 'addr', 'add', '198.51.100.1/24', 'dev', 'be0');
    ip(NODE, 'link', 'set', 'be0', 'up');
    ip(NODE, 'link', 'set', 'be1', 'up');
    writeFileSync(
      join(dir, 'router.conf'),
      upstreamBirdConfig({ neighbors: ['192.0.2.2'], mergePaths: true, bfd }),
    );
    router = spawn('ip', ['netns', 'exec', ROUTER, 'bird', '-f', '-c', join(dir, 'router.conf'), '-s', join(dir, 'router.ctl')], { stdio: 'ignore' });
    const routerMon = new RouteMonitor(ROUTER);
    const nodeMon = new RouteMonitor(NODE);
    monitors.push(routerMon, nodeMon);
    node = new HeraldBgpNode({ netns: NODE, nodeName: 'node-1', routerId: '192.0.2.2', stateDir: join(dir, 'node'), ingress: new Map([['default/web', [VIP]]]), ...(bfd ? { bfd: { intervalMs: 100, multiplier: 3 } } : {}), ...(tickMs ? { tickMs } : {}) });
    return await run({ node, routerMon, nodeMon });
  } finally {
    for (const m of monitors) m.stop();
    await node?.stop().catch(() => {});
    router?.kill('SIGKILL');
    for (const ns of [ROUTER, NODE]) spawnSyncQuiet('ip', ['netns', 'del', ns]);
  }
}

const TICK_MS = 2000;

/** Readiness lost → route gone, TRIALS times; `tickMs`: herald's tick-only setting (changes made at a random phase of the tick). */
async function readinessTrials(tickMs?: number): Promise<{ nodeMs: number[]; routerMs: number[] }> {
  return withLab(
    false,
    async ({ node, routerMon, nodeMon }) => {
      const [ready, notReady] = [parse(intent(true)), parse(intent(false))]; // parsing is the intent source's, not timed
      const nodeMs: number[] = [];
      const routerMs: number[] = [];
      for (let i = 0; i < TRIALS; i++) {
        const added = routerMon.next(new RegExp(`^${vipRe} via 192\\.0\\.2\\.2`), i === 0 ? 60_000 : 30_000);
        await node.set(ready);
        await added;
        // De-phase from BIRD's timers, and in tick-only mode from the tick (set() returned just after one).
        await new Promise((r) => setTimeout(r, 50 + Math.random() * (tickMs ?? 100)));
        const nodeGone = nodeMon.next(new RegExp(`^Deleted ${vipRe} `));
        const routerGone = routerMon.next(new RegExp(`^Deleted ${vipRe} `));
        const t0 = performance.now();
        await node.set(notReady);
        nodeMs.push((await nodeGone) - t0);
        routerMs.push((await routerGone) - t0);
      }
      return { nodeMs, routerMs };
    },
    tickMs,
  );
}

async function readinessCase(): Promise<void> {
  const loadStart = loadavg().map((x) => +x.toFixed(1));
  const events = await readinessTrials();
  const tick = await readinessTrials(TICK_MS);
  const result = {
    trials: TRIALS,
    priority,
    loadAverage: { start: loadStart, end: loadavg().map((x) => +x.toFixed(1)) },
    eventDriven: { nodeKernelMs: summary(events.nodeMs), routerFibMs: summary(events.routerMs) },
    tickOnly: { tickMs: TICK_MS, nodeKernelMs: summary(tick.nodeMs), routerFibMs: summary(tick.routerMs) },
  };
  if (args.includes('--json')) console.log(JSON.stringify(result, null, 2));
  else {
    const row = (name: string, r: { p50: number; p99: number; max: number }) => console.log(`  ${name.padEnd(40)} p50 ${String(r.p50).padStart(8)}  p99 ${String(r.p99).padStart(8)}  max ${String(r.max).padStart(8)}`);
    console.log(`readiness lost → route gone, ${TRIALS} trials per arm (ms); ${priority}; load average ${loadStart.join(' ')} → ${result.loadAverage.end.join(' ')}`);
    row('event-driven: node kernel', result.eventDriven.nodeKernelMs);
    row('event-driven: router FIB (end to end)', result.eventDriven.routerFibMs);
    row(`tick-only ${TICK_MS} ms: node kernel`, result.tickOnly.nodeKernelMs);
    row(`tick-only ${TICK_MS} ms: router FIB`, result.tickOnly.routerFibMs);
    const ratio = (a: number, b: number) => (a / b).toFixed(1);
    console.log(`  ratio (router FIB, tick-only / event-driven): p50 ${ratio(result.tickOnly.routerFibMs.p50, result.eventDriven.routerFibMs.p50)}×, p99 ${ratio(result.tickOnly.routerFibMs.p99, result.eventDriven.routerFibMs.p99)}×`);
  }
}

/** The node goes silent → the route gone from the router's FIB; the silence is lifted and the session re-established for the next trial. */
const SILENCE = `table inet hlsilence {
  chain in { type filter hook input priority -300; policy drop; }
  chain out { type filter hook output priority -300; policy drop; }
}
`;

async function crashTrials(bfd: boolean): Promise<number[]> {
  return withLab(bfd, async ({ node, routerMon }) => {
    const ms: number[] = [];
    for (let i = 0; i < TRIALS; i++) {
      const added = routerMon.next(new RegExp(`^${vipRe} via 192\\.0\\.2\\.2`), 60_000);
      if (i === 0) await node.set(parse(intent(true)));
      await added;
      await new Promise((r) => setTimeout(r, 1000 + Math.random() * 500)); // BFD up, de-phased from the timers
      const gone = routerMon.next(new RegExp(`^Deleted ${vipRe} `), 30_000);
      const t0 = performance.now();
      execFileSync('ip', ['netns', 'exec', NODE, 'nft', '-f', '-'], { input: SILENCE });
      ms.push((await gone) - t0);
      execFileSync('ip', ['netns', 'exec', NODE, 'nft', 'delete', 'table', 'inet', 'hlsilence']);
      process.stderr.write(`crash ${bfd ? 'BFD' : 'hold timer'} trial ${i + 1}: ${ms.at(-1)!.toFixed(1)} ms\n`);
    }
    return ms;
  });
}

async function crashCase(): Promise<void> {
  const withBfd = await crashTrials(true);
  const holdOnly = await crashTrials(false);
  const result = { trials: TRIALS, bfdMs: summary(withBfd), holdTimerMs: summary(holdOnly) };
  if (args.includes('--json')) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(`node loss (all its packets dropped) → route gone from the router's FIB, ${TRIALS} trials each (ms)`);
    console.log(`  BFD 100 ms × 3        p50 ${result.bfdMs.p50}  p99 ${result.bfdMs.p99}  max ${result.bfdMs.max}`);
    console.log(`  hold timer only (9 s) p50 ${result.holdTimerMs.p50}  p99 ${result.holdTimerMs.p99}  max ${result.holdTimerMs.max}`);
    console.log(`  ratio (p99, hold timer / BFD): ${(result.holdTimerMs.p99 / result.bfdMs.p99).toFixed(1)}×`);
  }
}


// ---- --case scale ----------------------------------------------------------
const IPS = Number(opt('ips', '10000'));
const vip6 = (i: number) => `2001:db8:100::${(i + 1).toString(16)}`;
const scaleIntent = () => {
  const docs = [bgpPeeringManifests({ peer: { name: 'router', address: '2001:db8:2::1', asn: 65100 }, family: 'ipv6' })];
  for (let i = 0; i < IPS; i++) docs.push(anycastServiceManifests({ name: `web-${i}`, family: 'ipv6', endpoints: [{ address: '2001:db8:1::10', node: 'node-1', ready: true }] }));
  return docs.join('\n---\n');
};

/** The snapshot with service `i`'s only endpoint ready or not (a copy; the rest shared). */
function withReadiness(base: IntentSnapshot, i: number, ready: boolean): IntentSnapshot {
  const key = [...base.endpointSlices.keys()].find((k) => k.endsWith(`/web-${i}-1`))!;
  const slice = base.endpointSlices.get(key)!;
  const endpoints = slice.endpoints.map((e) => ({ ...e, conditions: { ...e.conditions, ready } }));
  return { ...base, endpointSlices: new Map(base.endpointSlices).set(key, { ...slice, endpoints }) };
}

const schedNs = (pid: number): number => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
/** CPU of this process's reaped children (ip, birdc), ms (clock ticks: 10 ms resolution). */
const childrenMs = (): number => {
  const f = readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[13]) + Number(f[14])) * 10; // cutime, cstime (fields 16, 17)
};
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

interface ScaleResult {
  allInFibMs: number;
  nodeKernelMs: number;
  /** CPU from the intent to all in the router's FIB: the agent (this process, and for the static peer its birdc children) and the node's BIRD. */
  initialCpu: { agentMs: number; birdMs: number };
  perChange: { agentCpuMs: number; birdCpuMs: number; childrenCpuMs: number; routerFibMs: { p50: number; p99: number; max: number } };
}

/** Router and node namespaces over IPv6, the router's BIRD importing into its kernel. */
async function withLab6<T>(run: (l: { routerMon: RouteMonitor; nodeMon: RouteMonitor }) => Promise<T>): Promise<T> {
  let router: ChildProcess | undefined;
  const monitors: RouteMonitor[] = [];
  try {
    for (const ns of [ROUTER, NODE]) {
      execFileSync('ip', ['netns', 'add', ns]);
      ip(ns, 'link', 'set', 'lo', 'up');
    }
    ip(NODE, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ROUTER);
    ip(NODE, '-6', 'addr', 'add', '2001:db8:2::2/64', 'dev', 'eth0', 'nodad');
    ip(NODE, 'link', 'set', 'eth0', 'up');
    ip(ROUTER, '-6', 'addr', 'add', '2001:db8:2::1/64', 'dev', 'eth0', 'nodad');
    ip(ROUTER, 'link', 'set', 'eth0', 'up');
    ip(NODE, 'link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'be1');
    ip(NODE, '-6', 'addr', 'add', '2001:db8:1::1/64', 'dev', 'be0', 'nodad');
    ip(NODE, 'link', 'set', 'be0', 'up');
    ip(NODE, 'link', 'set', 'be1', 'up');
    writeFileSync(
      join(dir, 'router.conf'),
      upstreamBirdConfig({ neighbors: ['2001:db8:2::2'], family: 'ipv6' }),
    );
    router = spawn('ip', ['netns', 'exec', ROUTER, 'bird', '-f', '-c', join(dir, 'router.conf'), '-s', join(dir, 'router.ctl')], { stdio: 'ignore' });
    const routerMon = new RouteMonitor(ROUTER);
    const nodeMon = new RouteMonitor(NODE);
    monitors.push(routerMon, nodeMon);
    return await run({ routerMon, nodeMon });
  } finally {
    for (const m of monitors) m.stop();
    router?.kill('SIGKILL');
    for (const ns of [ROUTER, NODE]) spawnSyncQuiet('ip', ['netns', 'del', ns]);
  }
}


/**
 * Polls the number of routes of a protocol under 2001:db8:100::/112 in a
 * namespace until it reaches `n`; the time of the first poll that saw them
 * all. (An `ip monitor` loses events when 10,000 routes arrive at once: its
 * netlink buffer overflows.) Each poll lists the table, tens of ms at 10,000,
 * so it polls every 25 ms (the resolution of the times it gives): polling
 * more often took CPU from what it measures on a 2-core machine.
 */
async function pollCount(ns: string, proto: string, n: number, timeoutMs = 120_000): Promise<number> {
  // A shell loop in its own process: polling from this one would take CPU from the control plane it measures.
  const script = `while [ "$(ip -n ${ns} -6 route show root 2001:db8:100::/112 proto ${proto} | wc -l)" -lt ${n} ]; do sleep 0.025; done`;
  const child = spawn('sh', ['-c', script], { stdio: 'ignore' });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve, reject) =>
    child.on('exit', (code) => {
      const t = performance.now();
      clearTimeout(timer);
      if (code === 0) resolve(t);
      else reject(new Error(`${ns}: fewer than ${n} routes (proto ${proto}) within ${timeoutMs} ms`));
    }),
  );
}
const CHANGES = Number(opt('changes', '20'));

/**
 * A full garbage collection before each arm's timed part: parsing 20,000
 * manifests leaves hundreds of MB of garbage, which would otherwise be
 * collected inside whichever arm runs first.
 */
setFlagsFromString('--expose-gc');
const fullGc = runInNewContext('gc') as () => void;

/** BENCH_PROF=<file>: a CPU profile (.cpuprofile, for Chrome DevTools) of this process from now until stop(). */
async function cpuProfile(file: string): Promise<{ stop(): Promise<void> }> {
  const { Session } = await import('node:inspector/promises');
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async stop() {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}

async function scaleHerald(base: IntentSnapshot, empty: IntentSnapshot): Promise<ScaleResult> {
  return withLab6(async ({ routerMon }) => {
    const ingress = new Map<string, string[]>();
    for (let i = 0; i < IPS; i++) ingress.set(`default/web-${i}`, [vip6(i)]);
    const node = new HeraldBgpNode({ netns: NODE, nodeName: 'node-1', routerId: '192.0.2.2', stateDir: join(dir, 'herald'), ingress });
    try {
      await node.set(empty); // BIRD up, the session comes up with nothing to advertise
      await waitEstablished(() => node.bird.sessions());
      const prof = process.env.BENCH_PROF ? await cpuProfile(process.env.BENCH_PROF) : undefined; // the initial pass's CPU profile
      const birdPid = node.bird.status().pid!;
      fullGc();
      const b0 = schedNs(birdPid);
      const t0 = performance.now();
      const c0 = cpuMs();
      node.control.update({ snapshot: base, ingress, node: { name: 'node-1', labels: {} } });
      if (process.env.BENCH_DEBUG) {
        const t1 = performance.now();
        const c1 = cpuMs();
        void node.routes.settled().then(() => process.stderr.write(`initial: control plane ${(t1 - t0).toFixed(0)} ms (cpu ${(c1 - c0).toFixed(0)}), routes reconciled at ${(performance.now() - t0).toFixed(0)} ms (cpu ${(cpuMs() - c0).toFixed(0)})\n`));
      }
      // The node's kernel holds them all once the host-route reconciler has them acked (no second poller on the node).
      const [nodeT, routerT] = await Promise.all([node.routes.settled({ timeoutMs: 120_000 }).then(() => performance.now()), pollCount(ROUTER, 'bird', IPS)]);
      const initialCpu = { agentMs: +(cpuMs() - c0).toFixed(0), birdMs: +((schedNs(birdPid) - b0) / 1e6).toFixed(0) };
      await prof?.stop();
      const nodeKernelMs = nodeT - t0;
      const allInFibMs = routerT - t0;
      await node.routes.settled();
      return { allInFibMs, nodeKernelMs, initialCpu, perChange: await perChange(node.bird.status().pid!, routerMon, (i, ready) => {
        const snapshot = withReadiness(base, i, ready);
        return async () => {
          const a = cpuMs();
          node.control.update({ snapshot, ingress, node: { name: 'node-1', labels: {} } });
          const b = cpuMs();
          await node.routes.settled();
          const c = cpuMs();
          await node.birdReconciler.settled();
          if (process.env.BENCH_DEBUG) process.stderr.write(`cpu: update ${(b - a).toFixed(1)} routes ${(c - b).toFixed(1)} bird ${(cpuMs() - c).toFixed(1)} ms; rss ${(process.memoryUsage().rss / 1e6).toFixed(0)} MB\n`);
        };
      }) };
    } finally {
      await node.stop().catch(() => {});
    }
  });
}

/** flock's way: bird.conf with every advertised IP as a static route, rewritten and `birdc configure`d per change. */
async function scaleStatic(): Promise<ScaleResult> {
  return withLab6(async ({ routerMon }) => {
    const conf = join(dir, 'static.conf');
    const ctl = join(dir, 'static.ctl');
    const render = (ready: (i: number) => boolean) => {
      const lines = [
        'router id 192.0.2.2;',
        'protocol device {}',
        'protocol static anycast {',
        '  ipv6;',
      ];
      for (let i = 0; i < IPS; i++) if (ready(i)) lines.push(`  route ${vip6(i)}/128 via 2001:db8:1::10;`);
      lines.push(
        '}',
        'protocol bgp upstream {',
        '  local as 65000; neighbor 2001:db8:2::1 as 65100;',
        '  hold time 9; keepalive time 3; connect delay time 1; error wait time 1,5; connect retry time 1;',
        '  ipv6 { import none; export where proto = "anycast"; };',
        '}',
        '',
      );
      return lines.join('\n');
    };
    const configure = async (text: string) => {
      writeFileSync(conf, text);
      const { stdout } = await execAsync('ip', ['netns', 'exec', NODE, 'birdc', '-s', ctl, 'configure']);
      if (!/Reconfigured|Reconfiguration in progress/.test(stdout)) throw new Error(`birdc configure: ${stdout}`);
    };
    writeFileSync(conf, render(() => false));
    const bird = spawn('ip', ['netns', 'exec', NODE, 'bird', '-f', '-c', conf, '-s', ctl], { stdio: 'ignore' });
    try {
      const sessions = async () => {
        const { stdout } = await execAsync('ip', ['netns', 'exec', NODE, 'birdc', '-s', ctl, 'show', 'protocols']);
        return [...stdout.matchAll(/^upstream\s+BGP\s+\S+\s+\S+\s+\S+\s+(\S+)/gm)].map((m) => ({ info: m[1]! }));
      };
      await waitEstablished(sessions);
      fullGc();
      const [b0, c0, ch0] = [schedNs(bird.pid!), cpuMs(), childrenMs()];
      const t0 = performance.now();
      await configure(render(() => true));
      const allInFibMs = (await pollCount(ROUTER, 'bird', IPS)) - t0;
      const initialCpu = { agentMs: +(cpuMs() - c0 + childrenMs() - ch0).toFixed(0), birdMs: +((schedNs(bird.pid!) - b0) / 1e6).toFixed(0) };
      const notReady = new Set<number>();
      return { allInFibMs, nodeKernelMs: NaN, initialCpu, perChange: await perChange(bird.pid!, routerMon, (i, ready) => async () => {
        if (ready) notReady.delete(i);
        else notReady.add(i);
        await configure(render((j) => !notReady.has(j)));
      }) };
    } finally {
      bird.kill('SIGKILL');
    }
  });
}

/** CHANGES single readiness changes (one IP withdrawn, then restored), each timed to the router's FIB. */
async function perChange(birdPid: number, routerMon: RouteMonitor, prepare: (i: number, ready: boolean) => () => Promise<void>): Promise<ScaleResult['perChange']> {
  let agent = 0;
  let bird = 0;
  let children = 0;
  const fib: number[] = [];
  for (let k = 0; k < CHANGES; k++) {
    const i = (17 + Math.floor(k / 2) * 797) % IPS; // spread over the 10,000: withdrawn, then restored
    const ready = k % 2 === 1;
    await new Promise((r) => setTimeout(r, 50));
    const seen = routerMon.next(new RegExp(`^${ready ? '' : 'Deleted '}${vip6(i)} `), 30_000);
    const change = prepare(i, ready); // the new intent snapshot: the intent source's work, not timed
    const [c0, b0, ch0, t0] = [cpuMs(), schedNs(birdPid), childrenMs(), performance.now()];
    await change();
    agent += cpuMs() - c0;
    fib.push((await seen) - t0);
    await new Promise((r) => setTimeout(r, 100)); // BIRD done exporting
    bird += (schedNs(birdPid) - b0) / 1e6;
    children += childrenMs() - ch0;
  }
  return { agentCpuMs: +(agent / CHANGES).toFixed(2), birdCpuMs: +(bird / CHANGES).toFixed(2), childrenCpuMs: +(children / CHANGES).toFixed(2), routerFibMs: summary(fib) };
}

async function waitEstablished(sessions: () => Promise<{ info: string }[]>): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if ((await sessions().catch(() => [])).some((s) => s.info === 'Established')) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('BGP session not established within 60 s');
}

async function scaleCase(): Promise<void> {
  const loadStart = loadavg().map((x) => +x.toFixed(1));
  const p0 = performance.now();
  const load = parseManifests(scaleIntent(), 'scale.yaml', { ...manifestLimitDefaults, maxBytes: 64 * 1024 * 1024, maxDocuments: 100_000 });
  if (load.errors.length > 0 || !load.snapshot) throw new Error(JSON.stringify(load.errors.slice(0, 3)));
  const base = load.snapshot;
  const parseMs = performance.now() - p0;
  const empty = { ...base, services: new Map(), endpointSlices: new Map() } as IntentSnapshot;
  const herald = await scaleHerald(base, empty);
  process.stderr.write(`herald: ${JSON.stringify(herald)}\n`);
  if (process.env.BENCH_ONLY === "herald") return;
  const flock = await scaleStatic();
  process.stderr.write(`static reload: ${JSON.stringify(flock)}\n`);
  const result = { ips: IPS, changes: CHANGES, priority, parseMs: +parseMs.toFixed(0), loadAverage: { start: loadStart, end: loadavg().map((x) => +x.toFixed(1)) }, herald, staticReload: flock };
  if (args.includes('--json')) console.log(JSON.stringify(result, null, 2));
  else {
    const f = (n: number) => (Number.isNaN(n) ? '-' : n.toFixed(1));
    console.log(`${IPS} anycast IPs (manifests parsed in ${result.parseMs} ms, not timed below); ${priority}; load average ${loadStart.join(' ')} → ${result.loadAverage.end.join(' ')}`);
    console.log(`                                   herald (kernel routes, BIRD learns)   static bird.conf + birdc configure (flock)`);
    console.log(`  intent → all in router FIB (ms)   ${f(herald.allInFibMs).padEnd(37)} ${f(flock.allInFibMs)}`);
    console.log(`  intent → all in node kernel (ms)  ${f(herald.nodeKernelMs)}`);
    console.log(`  … CPU: agent / BIRD (ms)          ${`${herald.initialCpu.agentMs} / ${herald.initialCpu.birdMs}`.padEnd(37)} ${flock.initialCpu.agentMs} / ${flock.initialCpu.birdMs}`);
    console.log(`  per change, agent CPU (ms)        ${f(herald.perChange.agentCpuMs).padEnd(37)} ${f(flock.perChange.agentCpuMs)}`);
    console.log(`  per change, BIRD CPU (ms)         ${f(herald.perChange.birdCpuMs).padEnd(37)} ${f(flock.perChange.birdCpuMs)}`);
    console.log(`  per change, children CPU (ms)     ${f(herald.perChange.childrenCpuMs).padEnd(37)} ${f(flock.perChange.childrenCpuMs)}`);
    console.log(`  per change → router FIB p50/p99   ${`${f(herald.perChange.routerFibMs.p50)} / ${f(herald.perChange.routerFibMs.p99)}`.padEnd(37)} ${f(flock.perChange.routerFibMs.p50)} / ${f(flock.perChange.routerFibMs.p99)}`);
    const tot = (r: ScaleResult) => r.perChange.agentCpuMs + r.perChange.birdCpuMs + r.perChange.childrenCpuMs;
    console.log(`  ratios (static / herald): all in FIB ${(flock.allInFibMs / herald.allInFibMs).toFixed(2)}×, CPU per change (all) ${(tot(flock) / tot(herald)).toFixed(1)}×`);
  }
}

function spawnSyncQuiet(cmd: string, a: string[]): void {
  try {
    execFileSync(cmd, a, { stdio: 'ignore' });
  } catch {
    /* already gone */
  }
}

try {
  if (CASE === 'scale') await scaleCase();
  else if (CASE === 'crash') await crashCase();
  else if (CASE === 'readiness') await readinessCase();
  else throw new Error(`--case ${CASE}: readiness, crash or scale`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
