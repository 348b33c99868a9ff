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
 * The anchor is flock's design bound (a 2 s tick, worst case); herald has no
 * tick-only mode to run beside it yet.
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
 *   node --import tsx bench/bgp/main.ts [--case readiness|crash] [--trials 30] [--json]
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { HeraldBgpNode, parse } from '../../lab/bgp-node.js';

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const CASE = opt('case', 'readiness');
const TRIALS = Number(opt('trials', CASE === 'crash' ? '10' : '30'));
const ROUTER = `hlbbgpr${process.pid}`;
const NODE = `hlbbgpn${process.pid}`;
const VIP = '203.0.113.10';
const ip = (ns: string, ...a: string[]) => execFileSync('ip', ['-n', ns, ...a], { encoding: 'utf8' });

const intent = (ready: boolean) => `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec:
  bgpInstances: [{ name: i, localASN: 65000, peers: [{ name: router, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: p } }] }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: p }
spec:
  timers: { holdTimeSeconds: 9, keepAliveTimeSeconds: 3, connectRetryTimeSeconds: 1 }
  families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: lb, labels: { advertise: bgp } }
spec:
  advertisements: [{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { anycast: "yes" } } }]
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, labels: { anycast: "yes" } }
spec: { type: LoadBalancer, externalTrafficPolicy: Local, ports: [{ port: 80 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-1, namespace: default, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints: [{ addresses: [198.51.100.10], nodeName: node-1, conditions: { ready: ${ready} } }]
`;

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
async function withLab<T>(bfd: boolean, run: (l: { node: HeraldBgpNode; routerMon: RouteMonitor; nodeMon: RouteMonitor }) => Promise<T>): Promise<T> {
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
      `router id 192.0.2.1;
protocol device {}
protocol kernel { merge paths on; ipv4 { import none; export all; }; }
${bfd ? 'protocol bfd { interface "*" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }' : ''}
protocol bgp node1 {
  local as 65100; neighbor 192.0.2.2 as 65000;
  hold time 9; keepalive time 3; connect delay time 1; error wait time 1,5; connect retry time 1;${bfd ? ' bfd on;' : ''}
  ipv4 { import all; export none; };
}
`,
    );
    router = spawn('ip', ['netns', 'exec', ROUTER, 'bird', '-f', '-c', join(dir, 'router.conf'), '-s', join(dir, 'router.ctl')], { stdio: 'ignore' });
    const routerMon = new RouteMonitor(ROUTER);
    const nodeMon = new RouteMonitor(NODE);
    monitors.push(routerMon, nodeMon);
    node = new HeraldBgpNode({ netns: NODE, nodeName: 'node-1', routerId: '192.0.2.2', stateDir: join(dir, 'node'), ingress: new Map([['default/web', [VIP]]]), ...(bfd ? { bfd: { intervalMs: 100, multiplier: 3 } } : {}) });
    return await run({ node, routerMon, nodeMon });
  } finally {
    for (const m of monitors) m.stop();
    await node?.stop().catch(() => {});
    router?.kill('SIGKILL');
    for (const ns of [ROUTER, NODE]) spawnSyncQuiet('ip', ['netns', 'del', ns]);
  }
}

async function readinessCase(): Promise<void> {
  await withLab(false, async ({ node, routerMon, nodeMon }) => {
    const [ready, notReady] = [parse(intent(true)), parse(intent(false))]; // parsing is the intent source's, not timed
    const nodeMs: number[] = [];
    const routerMs: number[] = [];
    for (let i = 0; i < TRIALS; i++) {
      const added = routerMon.next(new RegExp(`^${vipRe} via 192\\.0\\.2\\.2`), i === 0 ? 60_000 : 30_000);
      await node.set(ready);
      await added;
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 100)); // de-phase from BIRD's timers
      const nodeGone = nodeMon.next(new RegExp(`^Deleted ${vipRe} `));
      const routerGone = routerMon.next(new RegExp(`^Deleted ${vipRe} `));
      const t0 = performance.now();
      await node.set(notReady);
      nodeMs.push((await nodeGone) - t0);
      routerMs.push((await routerGone) - t0);
    }
    const result = { trials: TRIALS, nodeKernelMs: summary(nodeMs), routerFibMs: summary(routerMs), anchor: 'flock: up to 2000 ms (2 s tick, design bound; not measured here)' };
    if (args.includes('--json')) console.log(JSON.stringify(result, null, 2));
    else {
      console.log(`readiness lost → route gone, ${TRIALS} trials (ms)`);
      console.log(`  node kernel (herald)   p50 ${result.nodeKernelMs.p50}  p99 ${result.nodeKernelMs.p99}  max ${result.nodeKernelMs.max}`);
      console.log(`  router FIB (end to end) p50 ${result.routerFibMs.p50}  p99 ${result.routerFibMs.p99}  max ${result.routerFibMs.max}`);
      console.log(`  anchor: ${result.anchor}; herald p99 / 2000 ms = ${(result.routerFibMs.p99 / 2000).toFixed(3)}`);
    }
  });
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

try {
  if (CASE === 'crash') await crashCase();
  else if (CASE === 'readiness') await readinessCase();
  else throw new Error(`--case ${CASE}: readiness or crash`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

function spawnSyncQuiet(cmd: string, a: string[]): void {
  try {
    execFileSync(cmd, a, { stdio: 'ignore' });
  } catch {
    /* already gone */
  }
}
