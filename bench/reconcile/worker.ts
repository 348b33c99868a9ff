/**
 * Runs inside a lab node (real BPF map, real interface): measures the time
 * from a committed l2-announce row to its responder-map entry, and full
 * reconciliations of large tables. Prints one JSON line.
 */
import { systemClock } from '../../src/core/clock.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { L2Stack } from '../../src/datapath/l2-responder/stack.js';
import { PacketFrameSender } from '../../src/datapath/packet-sender.js';
import { NetlinkLinks } from '../../src/os/links.js';
import { reconcilerDefaults } from '../../src/core/reconciler/reconciler.js';
import { silentLogger } from '../../src/core/logger.js';
import { l2AnnounceTable } from '../../src/datapath/tables/l2-announce.js';

const pinDir = process.argv[2]!;
const latencySamples = Number(process.argv[3] ?? 1000);
const sizes = (process.argv[4] ?? '10000,60000').split(',').map(Number);
/** --prof DIR: a CPU profile of the bulk phase (started after the program loaded: the profiler's signals make the verifier give up with EAGAIN). */
const profDir = process.argv[5] ?? '';

const db = new StateDB([l2AnnounceTable]);
const stackLinks = new NetlinkLinks();
const agent = new L2Stack(
  { db, links: stackLinks, sender: new PacketFrameSender(), clock: systemClock, log: silentLogger },
  {
    datapath: { pinDir, responderMapSize: 65536, liveness: { intervalMs: 1000, maxAgeMs: 3000 } },
    garp: { count: 0, intervalMs: 1000 }, // measure the map path alone
    reconciler: reconcilerDefaults,
  },
);
db.registerInitializer(l2AnnounceTable, 'driver').done();
stackLinks.subscribe(() => agent.linksChanged());
agent.start();
if (process.argv[6] === 'per-row') {
  // The row-by-row path for comparison: the reconciler falls back to update()/delete() when the ops have no batch calls.
  Object.assign(agent.ops, { updateBatch: undefined, deleteBatch: undefined });
}
const links = new NetlinkLinks();
const idx = (await links.byName('eth0'))!.ifindex;
links.dispose();

// 60k keys do not fit the documentation ranges; these are map keys only (gratuitous
// ARP is off and no client asks), from the RFC 2544 benchmarking range 198.18.0.0/15.
const ip = (i: number) => `198.${18 + Math.floor(i / 65536)}.${Math.floor(i / 256) % 256}.${i % 256}`;

const tick = () => new Promise((r) => setImmediate(r));
const waitUntil = async (cond: () => boolean) => {
  while (!cond()) await tick();
};

// 1. Commit → map entry, one row at a time.
const lat: number[] = [];
for (let i = 0; i < latencySamples; i++) {
  const row = { ip: ip(i), iface: 'eth0', origins: ['bench'] };
  const t0 = process.hrtime.bigint();
  db.update([l2AnnounceTable], (t) => t.insert(l2AnnounceTable, row));
  await waitUntil(() => agent.datapath.map.has({ ip: row.ip, ifindex: idx }));
  lat.push(Number(process.hrtime.bigint() - t0) / 1000);
}
lat.sort((a, b) => a - b);
const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]!;
db.update([l2AnnounceTable], (t) => t.deleteAll(l2AnnounceTable));
await waitUntil(() => agent.datapath.map.keys().length === 0);

// One profile per measured phase (rows-phase.cpuprofile).
const { Session } = await import('node:inspector/promises');
const { writeFileSync } = await import('node:fs');
const session = profDir ? new Session() : undefined;
if (session) {
  session.connect();
  await session.post('Profiler.enable');
}
const startProfile = async () => {
  if (session) await session.post('Profiler.start');
};
const stopProfile = async (name: string) => {
  if (!session) return;
  const { profile } = await session.post('Profiler.stop');
  writeFileSync(`${profDir}/${name}.cpuprofile`, JSON.stringify(profile));
};

// 2. Bulk: N rows in one transaction until all are in the map, then a full pass over them.
const bulk: Array<{ rows: number; applyMs: number; fullMs: number; pruneOnlyMs: number; applyCpuMs: number; fullCpuMs: number; repairCpuMs: number }> = [];
/** CPU time of this process (user + system) since `from`: unlike wall time, not inflated by other load on the machine. */
const cpuMs = (from: NodeJS.CpuUsage) => {
  const d = process.cpuUsage(from);
  return (d.user + d.system) / 1000;
};
for (const n of sizes) {
  await startProfile();
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  db.update([l2AnnounceTable], (t) => {
    for (let i = 0; i < n; i++) t.insert(l2AnnounceTable, { ip: ip(i), iface: 'eth0', origins: ['bench'] });
  });
  await waitUntil(() => agent.reconciler.health()!.lastPartial?.rows === n && agent.datapath.map.has({ ip: ip(n - 1), ifindex: idx }));
  const applyMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const applyCpuMs = cpuMs(c0);
  await stopProfile(`${n}-apply`);
  const before = agent.reconciler.health()!.fullRounds;
  await startProfile();
  const c1 = process.cpuUsage();
  agent.reconciler.triggerFull();
  await waitUntil(() => agent.reconciler.health()!.fullRounds > before);
  const fullCpuMs = cpuMs(c1);
  await stopProfile(`${n}-full`);
  const fullMs = agent.reconciler.health()!.lastFull!.durationMs;
  // A full pass that finds 10% of the entries missing (e.g. removed behind our back) and repairs them.
  for (let i = 0; i < n; i += 10) agent.datapath.map.delete({ ip: ip(i), ifindex: idx });
  const before2 = agent.reconciler.health()!.fullRounds;
  await startProfile();
  const c2 = process.cpuUsage();
  agent.reconciler.triggerFull();
  await waitUntil(() => agent.reconciler.health()!.fullRounds > before2);
  const repairCpuMs = cpuMs(c2);
  await stopProfile(`${n}-repair`);
  const repairMs = agent.reconciler.health()!.lastFull!.durationMs;
  if (agent.datapath.map.keys().length !== n) throw new Error('full reconciliation did not repair the map');
  bulk.push({ rows: n, applyMs, fullMs, pruneOnlyMs: repairMs, applyCpuMs, fullCpuMs, repairCpuMs });
  db.update([l2AnnounceTable], (t) => t.deleteAll(l2AnnounceTable));
  await waitUntil(() => agent.datapath.map.keys().length === 0);
}

process.stdout.write(
  JSON.stringify({ latency: { samples: lat.length, medianUs: q(0.5), p99Us: q(0.99), maxUs: lat[lat.length - 1] }, bulk }) + '\n',
);
agent.dispose();
process.exit(0);
