/**
 * The control plane in process: real manifests through the real parser, real
 * LB-IPAM, candidacy and StateDB tables; fakes only at the edges (ownership
 * backend, links, allocation store). What it must never do: announce an IP
 * this node does not own, keep announcing one it lost, or let a give-up
 * complete before the datapath has applied the withdrawal.
 */
import { MemoryIpam } from '../helpers/memory-ipam.js';
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import { Reconciler, reconcilerDefaults, type ReconcilerOps } from '../../src/core/reconciler/reconciler.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { ControlPlane } from '../../src/controlplane/controller.js';
import type { StaticAnnouncement } from '../../src/controlplane/static-announcements.js';
import { l2AnnounceKey, l2AnnounceTable, type L2AnnounceRow } from '../../src/datapath/tables/l2-announce.js';
import { formatErrors, parseManifests, type IntentSnapshot } from '../../src/intent/index.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { ScriptedOwnership } from '../helpers/scripted-ownership.js';

const WEB = '198.51.100.20';
const DB = '198.51.100.21';
const STATIC = '198.51.100.30';

const MANIFESTS = `
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: pool }
spec:
  blocks: [{ cidr: 198.51.100.16/28 }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: all }
spec:
  loadBalancerIPs: true
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, annotations: { lbipam.cilium.io/ips: "${WEB}" } }
spec: { type: LoadBalancer, ports: [{ port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: db, namespace: default, annotations: { lbipam.cilium.io/ips: "${DB}" } }
spec: { type: LoadBalancer, ports: [{ port: 5432 }] }
`;

function snapshot(manifests = MANIFESTS): IntentSnapshot {
  const load = parseManifests(manifests, 'test.yaml');
  assert.equal(formatErrors(load.errors), '');
  return load.snapshot!;
}



const disposers: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

async function setup(
  opts: { db?: StateDB; applied?: () => Promise<void>; staticAnnouncements?: StaticAnnouncement[]; beforeStart?: () => void; manifests?: string } = {},
) {
  const told: Array<ReadonlyMap<string, readonly string[]>> = [];
  const db = opts.db ?? new StateDB([l2AnnounceTable]);
  const links = new FakeLinks();
  links.add('eth0');
  const ownership = new ScriptedOwnership();
  const ipam = new MemoryIpam();
  const cp = new ControlPlane({
    db,
    nodeName: 'node-a',
    links,
    ownership,
    ipam,
    staticAnnouncements: opts.staticAnnouncements ?? [],
    ...(opts.applied ? { applied: opts.applied } : {}),
    onCandidates: (wanted) => told.push(wanted),
    clock: new ManualClock(),
    log: silentLogger,
  });
  disposers.push(() => cp.dispose());
  opts.beforeStart?.(); // as in the agent: the datapath starts after the control plane registered its initializer
  await cp.start();
  await cp.setSnapshot(snapshot(opts.manifests));
  const announced = () => db.readTxn().list(l2AnnounceTable).map((r) => `${r.ip}@${r.iface} ${r.origins.join(',')}`);
  return { db, ownership, ipam, cp, announced, told };
}

test('the datapath is told every candidate IP with its interfaces (static announcements too), to prepare them ahead of ownership', async () => {
  const s = await setup({ staticAnnouncements: [{ ip: STATIC, interface: 'eth0' }] });
  const last = s.told.at(-1);
  assert.ok(last, 'told on the recompute');
  assert.deepEqual([...last].sort(), [
    [WEB, ['eth0']],
    [DB, ['eth0']],
    [STATIC, ['eth0']],
  ].sort());
  assert.deepEqual(s.announced(), [], 'told of candidates, not owning any');
});

test('only the IPs this node owns reach the l2-announce table, though it is a candidate for more', async () => {
  const s = await setup();
  assert.deepEqual([...s.ownership.candidates].sort(), [
    [WEB, ['eth0']],
    [DB, ['eth0']],
  ].sort(), 'the backend contends for every candidate IP');
  assert.deepEqual(s.announced(), [], 'nothing owned yet: nothing announced');
  await s.ownership.own(WEB);
  assert.deepEqual(s.announced(), [`${WEB}@eth0 service:default/web`]);
  assert.ok(s.ipam.state.allocations['default/db']?.includes(DB), 'db has its IP allocated, just not owned here');
});

test('a dual-stack service: both addresses are candidates with one affinity key, so they are owned and moved together', async () => {
  const dual = MANIFESTS.replace('blocks: [{ cidr: 198.51.100.16/28 }]', 'blocks: [{ cidr: 198.51.100.16/28 }, { cidr: "2001:db8:100::/124" }]') + `---
apiVersion: v1
kind: Service
metadata: { name: dual, namespace: default }
spec: { type: LoadBalancer, ipFamilyPolicy: RequireDualStack, ipFamilies: [IPv4, IPv6], ports: [{ port: 443 }] }
`;
  const s = await setup({ manifests: dual });
  const ips = s.ipam.state.allocations['default/dual'] ?? [];
  const v4 = ips.find((ip) => !ip.includes(':'));
  const v6 = ips.find((ip) => ip.includes(':'));
  assert.ok(v4 && v6, `one address per family: ${ips.join(', ')}`);
  assert.ok(s.ownership.candidates.has(v4) && s.ownership.candidates.has(v6), 'both families are contended for');
  assert.equal(s.ownership.affinity.get(v4), s.ownership.affinity.get(v6), 'one affinity key for both');
  assert.ok(s.ownership.affinity.get(v4) !== undefined);
  assert.equal(s.ownership.affinity.get(WEB), undefined, 'single-address services keep their own address as the key');
});

test('losing ownership of an IP removes its row; the others stay', async () => {
  const s = await setup();
  await s.ownership.own(WEB, DB);
  assert.deepEqual(s.announced().sort(), [`${WEB}@eth0 service:default/web`, `${DB}@eth0 service:default/db`].sort());
  await s.ownership.own(WEB);
  assert.deepEqual(s.announced(), [`${WEB}@eth0 service:default/web`]);
  await s.ownership.own();
  assert.deepEqual(s.announced(), []);
});

test('a Service deleted while its IP is owned keeps answering until ownership lets the IP go (its release marks it first: a candidate whose intent lags must not hear silence from a key-holding owner)', async () => {
  const s = await setup();
  await s.ownership.own(WEB, DB);
  // db is deleted: the intent no longer makes this node a candidate, but the backend still holds the IP.
  await s.cp.setSnapshot(snapshot(MANIFESTS.split('---').filter((doc) => !doc.includes('name: db,')).join('---')));
  assert.ok(!s.ownership.candidates.has(DB), 'no longer contended for');
  assert.deepEqual(s.announced().sort(), [`${WEB}@eth0 service:default/web`, `${DB}@eth0 service:default/db`].sort(), 'still answered while owned');
  // The backend's release (mark, then withdraw, then delete the key) drops it from the owned set: now the row goes.
  await s.ownership.own(WEB);
  assert.deepEqual(s.announced(), [`${WEB}@eth0 service:default/web`]);
});

test('a static announcement is announced only while owned', async () => {
  const s = await setup({ staticAnnouncements: [{ ip: STATIC, interface: 'eth0' }] });
  assert.ok(s.ownership.candidates.has(STATIC), 'a static announcement is a candidate');
  assert.deepEqual(s.announced(), []);
  await s.ownership.own(STATIC);
  assert.deepEqual(s.announced(), [`${STATIC}@eth0 static`]);
  await s.ownership.own();
  assert.deepEqual(s.announced(), []);
});

test('a give-up completes only after `applied` resolves, and `applied` runs after the row is gone', async () => {
  let openGate!: () => void;
  let gate: Promise<void> = Promise.resolve();
  const seenByApplied: string[][] = [];
  const s = await setup({
    applied: async () => {
      seenByApplied.push(s.announced());
      await gate;
    },
  });
  await s.ownership.own(WEB);
  assert.deepEqual(s.announced(), [`${WEB}@eth0 service:default/web`]);

  gate = new Promise<void>((r) => (openGate = r));
  let done = false;
  const giveUp = s.ownership.own().then(() => (done = true));
  await s.cp.idle();
  for (let i = 0; i < 100; i++) await new Promise((r) => setImmediate(r));
  assert.deepEqual(s.announced(), [], 'the row is withdrawn from the table');
  assert.deepEqual(seenByApplied.at(-1), [], '`applied` was asked after the withdrawal was written');
  assert.equal(done, false, 'the backend was told the give-up is applied before the datapath said so');
  openGate();
  await giveUp;
  assert.equal(done, true);
});

/** A datapath map whose deletes the test can hold, as a slow or stuck kernel update would. */
class HeldDeletes implements ReconcilerOps<L2AnnounceRow> {
  readonly entries = new Set<string>();
  private gate: Promise<void> | undefined;
  private openGate: () => void = () => {};
  hold(): void {
    this.gate = new Promise<void>((r) => (this.openGate = r));
  }
  open(): void {
    this.gate = undefined;
    this.openGate();
  }
  update(row: L2AnnounceRow): void {
    this.entries.add(l2AnnounceKey(row.ip, row.iface));
  }
  async delete(row: L2AnnounceRow): Promise<void> {
    await this.gate;
    this.entries.delete(l2AnnounceKey(row.ip, row.iface));
  }
  prune(): void {}
}

test('wired to the datapath reconciler as the agent does, a give-up completes only once the map entry is gone', async () => {
  const db = new StateDB([l2AnnounceTable]);
  const map = new HeldDeletes();
  const reconciler = new Reconciler<L2AnnounceRow>({ name: 'l2-responder', db, table: l2AnnounceTable, ops: map, clock: new ManualClock(), log: silentLogger }, reconcilerDefaults);
  disposers.push(async () => {
    map.open();
    await reconciler.dispose();
  });
  const s = await setup({
    db,
    beforeStart: () => reconciler.start(),
    applied: async () => {
      await reconciler.settled();
    },
  });
  await s.ownership.own(WEB);
  assert.deepEqual([...map.entries], [l2AnnounceKey(WEB, 'eth0')]);

  map.hold();
  let done = false;
  const giveUp = s.ownership.own().then(() => (done = true));
  // Far more event-loop turns than any "give up after N turns" wait would allow.
  for (let i = 0; i < 3000; i++) await new Promise((r) => setImmediate(r));
  assert.deepEqual(s.announced(), []);
  assert.equal(done, false, 'the give-up completed while the datapath still answered for the IP');
  map.open();
  await giveUp;
  assert.deepEqual([...map.entries], []);
});

test('snapshots arriving faster than a recompute are coalesced: one pass takes the latest, none is left queued per snapshot', async () => {
  const s = await setup();
  await s.ownership.own(WEB, DB);
  const before = s.cp.stats.recomputes;
  // Ten snapshots in one turn (an informer burst): the first queued pass takes the last one.
  const without = MANIFESTS.slice(0, MANIFESTS.lastIndexOf('---'));
  const pending = [];
  for (let i = 0; i < 10; i++) pending.push(s.cp.setSnapshot(snapshot(i % 2 === 0 ? MANIFESTS : without)));
  await Promise.all(pending);
  assert.equal(s.cp.stats.recomputes - before, 1, 'one recompute for the burst');
  assert.ok(!s.ownership.candidates.has(DB) && s.ownership.candidates.has(WEB), 'the latest snapshot (without db) is in force');
  await s.ownership.own(WEB); // the backend lets db's IP go
  assert.deepEqual(s.announced(), [`${WEB}@eth0 service:default/web`]);
  assert.deepEqual(s.cp.servicesFor(WEB), ['default/web']);
  assert.deepEqual(s.cp.servicesFor(DB), [], 'db is no candidate any more');
});

test('LB-IPAM per pass reconsiders only the Services a snapshot changed (incremental), with the same result', async () => {
  const s = await setup();
  const first = snapshot();
  await s.cp.setSnapshot(first); // the objects the next snapshots share, as the Kubernetes source keeps them
  await s.cp.setSnapshot(first); // once more: every Service is now imported from the persisted state
  const extra = snapshot(`${MANIFESTS}---
apiVersion: v1
kind: Service
metadata: { name: extra, namespace: default }
spec: { type: LoadBalancer, ports: [{ port: 443 }] }
`);
  const before = { ...s.cp.stats.ipam };
  const next: IntentSnapshot = { ...first, services: new Map([...first.services, ['default/extra', extra.services.get('default/extra')!]]) };
  await s.cp.setSnapshot(next);
  assert.equal(s.cp.stats.ipam.full, before.full, 'no full run');
  assert.equal(s.cp.stats.ipam.incremental, before.incremental + 1);
  assert.equal(s.cp.stats.ipam.reconsidered - before.reconsidered, 1, 'only the new Service');
  const ipam = s.cp.status().ipam!;
  assert.deepEqual([...ipam.services].map(([k, v]) => [k, v.ingress]), [
    ['default/db', [DB]],
    ['default/extra', ['198.51.100.16']],
    ['default/web', [WEB]],
  ]);
  assert.deepEqual(s.ipam.state.allocations, { 'default/db': [DB], 'default/extra': ['198.51.100.16'], 'default/web': [WEB] }, 'persisted before announced');
});
