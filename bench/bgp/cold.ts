/**
 * bench/bgp/cold.ts — the agent's share of a cold first pass at 10,000 IPs,
 * without a kernel: control plane (desired state + bgp-routes rows) and the
 * host-route reconciler against a target that only counts (statuses
 * included). CPU per phase, median of --runs fresh runs. (The kernel's own
 * share is bench/bgp --case scale's.)
 *
 * `--agent-start`: the agent's own start instead (the table not yet
 * initialized: the first update is followed by the first full round).
 *
 *   node --import tsx bench/bgp/cold.ts [--ips 10000] [--runs 5] [--agent-start]
 */
import { writeFileSync } from 'node:fs';
import { anycastServiceManifests, bgpPeeringManifests } from '../../test/helpers/bgp-manifests.js';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../../src/core/reconciler/reconciler.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { BgpControlPlane } from '../../src/controlplane/bgp/controller.js';
import { HostRoutesOps } from '../../src/datapath/routes/host-routes-ops.js';
import { birdConfigTable } from '../../src/datapath/tables/bird-config.js';
import { bgpRoutesTable, type BgpRouteRow } from '../../src/datapath/tables/bgp-routes.js';
import { parseManifests } from '../../src/intent/index.js';
import { manifestLimitDefaults } from '../../src/intent/limits.js';
import type { HostRoute, HostRoutes } from '../../src/os/host-routes.js';

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const IPS = Number(opt('ips', '10000'));
const RUNS = Number(opt('runs', '5'));

const docs = [bgpPeeringManifests({ peer: { name: 'router', address: '2001:db8:2::1', asn: 65100 }, family: 'ipv6', labTimers: false })];
for (let i = 0; i < IPS; i++) docs.push(anycastServiceManifests({ name: `web-${i}`, family: 'ipv6', endpoints: [{ address: '2001:db8:1::10', node: 'node-1', ready: true }] }));
const load = parseManifests(docs.join('\n---\n'), 'cold.yaml', { ...manifestLimitDefaults, maxBytes: 64 * 1024 * 1024, maxDocuments: 100_000 });
if (!load.snapshot) throw new Error(JSON.stringify(load.errors.slice(0, 3)));
const snapshot = load.snapshot;
const ingress = new Map<string, string[]>();
for (let i = 0; i < IPS; i++) ingress.set(`default/web-${i}`, [`2001:db8:100::${(i + 1).toString(16)}`]);

/** A kernel that only counts. */
class CountingRoutes implements HostRoutes {
  n = 0;
  async replace(): Promise<void> {
    this.n++;
  }
  async del(): Promise<void> {}
  async replaceMany(routes: readonly HostRoute[]): Promise<(Error | undefined)[]> {
    this.n += routes.length;
    return routes.map(() => undefined);
  }
  async delMany(prefixes: readonly string[]): Promise<(Error | undefined)[]> {
    return prefixes.map(() => undefined);
  }
  async list(): Promise<HostRoute[]> {
    return [];
  }
}

const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const writes: number[] = [];
const rows: Record<string, number[]> = { control: [], reconcile: [], total: [], wall: [] };
for (let r = 0; r < RUNS; r++) {
  const db = new StateDB([bgpRoutesTable, birdConfigTable]);
  const control = new BgpControlPlane({ db, bird: { routerId: '192.0.2.2' }, log: silentLogger });
  const target = new CountingRoutes();
  const routes = new Reconciler<BgpRouteRow>({ db, clock: systemClock, log: silentLogger, name: 'host-routes', table: bgpRoutesTable, ops: new HostRoutesOps(target) }, reconcilerDefaults);
  routes.start();
  if (!args.includes('--agent-start')) {
    // As bench/bgp --case scale: the node is up with nothing to advertise (the table initialized, its first full round done).
    control.update({ snapshot: { ...snapshot, services: new Map(), endpointSlices: new Map() }, ingress, node: { name: 'node-1', labels: {} } });
  }
  await routes.settled();
  await new Promise((r) => setTimeout(r, 20));
  // New objects every run, as a fresh agent has (the control plane memoizes per intent object).
  const fresh = { ...snapshot, services: new Map([...snapshot.services].map(([k, v]) => [k, { ...v }])), endpointSlices: new Map([...snapshot.endpointSlices].map(([k, v]) => [k, { ...v }])) };
  const session = r === 0 && process.env.BENCH_PROF ? new Session() : undefined; // BENCH_PROF=<file>: the first run's CPU profile
  if (session) {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.start');
  }
  const [c0, t0] = [cpu(), performance.now()];
  control.update({ snapshot: fresh, ingress, node: { name: 'node-1', labels: {} } });
  const c1 = cpu();
  await routes.settled();
  while (routes.health().fullRounds === 0) await new Promise((r) => setImmediate(r));
  const [c2, t2] = [cpu(), performance.now()];
  writes.push(target.n);
  if (session) {
    writeFileSync(process.env.BENCH_PROF!, JSON.stringify((await session.post('Profiler.stop')).profile));
    session.disconnect();
  }
  rows.control!.push(c1 - c0);
  rows.reconcile!.push(c2 - c1);
  rows.total!.push(c2 - c0);
  rows.wall!.push(t2 - t0);
  await routes.dispose();
}
if (args.includes('--each')) console.log(JSON.stringify(rows));
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(`${IPS} IPs, cold first pass without a kernel, median of ${RUNS} (CPU ms): control plane ${med(rows.control!).toFixed(0)}, host-route reconciler ${med(rows.reconcile!).toFixed(0)}, total ${med(rows.total!).toFixed(0)} (wall ${med(rows.wall!).toFixed(0)}); routes written per run ${med(writes)}`);
