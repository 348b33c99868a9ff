/**
 * The L2 responder reconciler with its edges in memory: the generic reconciler,
 * the real L2 ops, a fake responder map, fake links, a recording frame sender
 * and a manual clock. The real map and kernel are covered by the lab tests.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import { Reconciler, reconcilerDefaults, type ReconcilerConfig } from '../../src/core/reconciler/reconciler.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { HeraldError } from '../../src/core/errors.js';
import { GarpAnnouncer, type FrameSender } from '../../src/datapath/garp.js';
import { L2ResponderOps, type InterfacePreparer } from '../../src/datapath/l2-responder/reconcile-ops.js';
import { FakeResponderMap } from '../../src/datapath/l2-responder/responder-map.js';
import { l2AnnounceKey, l2AnnounceTable, withOrigin, withoutOrigin, type L2AnnounceRow } from '../../src/datapath/tables/l2-announce.js';
import { parseArpFrame } from '../../src/net/arp.js';
import { parseNdFrame, solicitedNodeMac } from '../../src/net/ndp.js';
import { FakeMulticastGroups } from '../../src/os/fake/multicast-groups.js';
import type { LinkInfo } from '../../src/os/links.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { ManualClock } from '../helpers/manual-clock.js';

class RecordingSender implements FrameSender {
  frames: Array<{ ifindex: number; ip: string }> = [];
  fail = false;
  send(ifindex: number, frame: Buffer): void {
    if (this.fail) throw new Error('ENETDOWN');
    this.frames.push({ ifindex, ip: parseArpFrame(frame)?.spa ?? parseNdFrame(frame)!.target });
  }
}

class RecordingPreparer implements InterfacePreparer {
  prepared: LinkInfo[] = [];
  forgotten: number[][] = [];
  prepare(link: LinkInfo): void {
    this.prepared.push(link);
  }
  forgetAllBut(current: ReadonlySet<number>): void {
    this.forgotten.push([...current]);
  }
}

const disposers: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

function setup(opts: { map?: FakeResponderMap; config?: Partial<ReconcilerConfig>; initialized?: boolean } = {}) {
  const clock = new ManualClock();
  const db = new StateDB([l2AnnounceTable]);
  const map = opts.map ?? new FakeResponderMap();
  const links = new FakeLinks();
  const eth0 = links.add('eth0');
  const eth1 = links.add('eth1');
  const sender = new RecordingSender();
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 1, intervalMs: 1000 });
  const preparer = new RecordingPreparer();
  const groups = new FakeMulticastGroups();
  const ops = new L2ResponderOps({ map, interfaces: preparer, links, garp, groups, log: silentLogger });
  const init = db.registerInitializer(l2AnnounceTable, 'test-source');
  if (opts.initialized !== false) init.done();
  const reconciler = new Reconciler<L2AnnounceRow>(
    { name: 'l2-responder', db, table: l2AnnounceTable, ops, clock, log: silentLogger },
    { ...reconcilerDefaults, ...opts.config },
  );
  reconciler.start();
  disposers.push(() => reconciler.dispose());
  const put = (ip: string, iface: string, origin = 'svc:a') =>
    db.update([l2AnnounceTable], (t) => t.insert(l2AnnounceTable, withOrigin(t.get(l2AnnounceTable, l2AnnounceKey(ip, iface)), ip, iface, origin)));
  const drop = (ip: string, iface: string, origin = 'svc:a') =>
    db.update([l2AnnounceTable], (t) => {
      const row = t.get(l2AnnounceTable, l2AnnounceKey(ip, iface));
      if (!row) return;
      const rest = withoutOrigin(row, origin);
      if (rest) t.insert(l2AnnounceTable, rest);
      else t.delete(l2AnnounceTable, row);
    });
  const keys = () => map.keys().map((k) => `${k.ip}@${k.ifindex}`).sort();
  const settle = async () => {
    for (let i = 0; i < 5; i++) {
      await reconciler.settled();
      await new Promise((r) => setImmediate(r));
    }
  };
  return { clock, db, map, links, eth0, eth1, sender, garp, preparer, groups, ops, init, reconciler, put, drop, keys, settle };
}

test('partial reconciliation: an inserted row becomes a map entry with a gratuitous burst; a deleted row is withdrawn', async () => {
  const s = setup();
  s.put('198.51.100.1', 'eth0');
  await s.settle();
  assert.deepEqual(s.keys(), [`198.51.100.1@${s.eth0.ifindex}`]);
  assert.deepEqual(s.sender.frames, [{ ifindex: s.eth0.ifindex, ip: '198.51.100.1' }, { ifindex: s.eth0.ifindex, ip: '198.51.100.1' }]);
  assert.equal(s.preparer.prepared[0]?.name, 'eth0', 'the interface was prepared before its first entry');
  s.drop('198.51.100.1', 'eth0');
  await s.settle();
  assert.deepEqual(s.keys(), []);
  assert.ok(s.reconciler.health().partialRounds >= 2);
});

test('the same IP on two interfaces gets two entries; origins merge into one row and one entry', async () => {
  const s = setup();
  s.put('198.51.100.2', 'eth0', 'svc:a');
  s.put('198.51.100.2', 'eth0', 'svc:b'); // shared IP: one row, two origins
  s.put('198.51.100.2', 'eth1', 'svc:a');
  await s.settle();
  assert.deepEqual(s.keys(), [`198.51.100.2@${s.eth0.ifindex}`, `198.51.100.2@${s.eth1.ifindex}`].sort());
  assert.deepEqual(s.db.readTxn().get(l2AnnounceTable, l2AnnounceKey('198.51.100.2', 'eth0'))?.origins, ['svc:a', 'svc:b']);
  s.drop('198.51.100.2', 'eth0', 'svc:a'); // svc:b still wants it
  await s.settle();
  assert.equal(s.keys().length, 2);
  s.drop('198.51.100.2', 'eth0', 'svc:b');
  await s.settle();
  assert.deepEqual(s.keys(), [`198.51.100.2@${s.eth1.ifindex}`]);
});

test('full reconciliation at start removes entries nobody wants and adds the missing ones', async () => {
  const map = new FakeResponderMap();
  map.create({ ip: '198.51.100.50', ifindex: 2 }); // stale, from a previous agent
  map.create({ ip: '198.51.100.3', ifindex: 2 }); // still wanted (eth0 is ifindex 2)
  const s = setup({ map });
  s.put('198.51.100.3', 'eth0');
  s.put('198.51.100.4', 'eth0');
  await s.settle();
  assert.deepEqual(s.keys(), ['198.51.100.3@2', '198.51.100.4@2']);
  const garpIps = new Set(s.sender.frames.map((f) => f.ip));
  assert.deepEqual(garpIps, new Set(['198.51.100.4']), 'only the new entry is announced; a kept one keeps quiet');
  assert.equal(s.reconciler.health().lastFull?.ok, true);
});

test('restart with a pre-populated map: nothing is pruned until the table is initialized', async () => {
  const map = new FakeResponderMap();
  map.create({ ip: '198.51.100.5', ifindex: 2 });
  map.create({ ip: '198.51.100.6', ifindex: 2 });
  const s = setup({ map, initialized: false });
  await s.settle();
  s.clock.advance(30_000);
  await s.settle();
  assert.equal(s.keys().length, 2, 'the pinned entries survive while the control plane loads');
  s.put('198.51.100.5', 'eth0');
  await s.settle();
  assert.equal(s.keys().length, 2, 'a partial update does not prune');
  s.init.done();
  await s.settle();
  assert.deepEqual(s.keys(), ['198.51.100.5@2'], 'once initialized, the full reconciliation prunes');
});

test('restart grace: a table that never initializes is pruned after the grace period', async () => {
  const map = new FakeResponderMap();
  map.create({ ip: '198.51.100.7', ifindex: 2 });
  const s = setup({ map, initialized: false, config: { initGraceMs: 10_000 } });
  await s.settle();
  s.clock.advance(9_000);
  await s.settle();
  assert.equal(s.keys().length, 1);
  s.clock.advance(2_000);
  await s.settle();
  assert.deepEqual(s.keys(), []);
  assert.equal(s.reconciler.health().initialized, true);
});

test('an interface deleted and recreated gets a new ifindex, and its entries move with it', async () => {
  const s = setup();
  s.put('198.51.100.8', 'eth0');
  await s.settle();
  const old = s.eth0.ifindex;
  s.links.subscribe(() => {
    s.ops.invalidateLinks();
    s.reconciler.triggerFull();
  });
  s.links.remove('eth0');
  const eth0 = s.links.add('eth0');
  await s.settle();
  assert.notEqual(eth0.ifindex, old);
  assert.deepEqual(s.keys(), [`198.51.100.8@${eth0.ifindex}`]);
  assert.equal(s.preparer.prepared.at(-1)?.ifindex, eth0.ifindex, 'the new interface is served');
  assert.ok(s.sender.frames.some((f) => f.ifindex === eth0.ifindex), 'clients hear about it on the new interface');
});

test('interface names are resolved once and cached', async () => {
  const s = setup();
  for (let i = 10; i < 20; i++) s.put(`198.51.100.${i}`, 'eth0');
  await s.settle();
  assert.ok(s.links.lookups <= 2, `looked up ${s.links.lookups} times`);
});

test('a full map is retried with backoff, surfaced as health, and recovers without stopping other rows', async () => {
  const map = new FakeResponderMap(2);
  const s = setup({ map });
  s.put('198.51.100.21', 'eth0');
  s.put('198.51.100.22', 'eth0');
  s.put('198.51.100.23', 'eth0');
  await s.settle();
  assert.equal(s.keys().length, 2);
  const status = s.reconciler.status(l2AnnounceKey('198.51.100.23', 'eth0'));
  assert.equal(status?.kind, 'error');
  assert.match(status?.error ?? '', /full/);
  assert.equal(s.reconciler.health().retrying, 1);
  assert.ok(s.reconciler.health().errorCount >= 1);
  s.drop('198.51.100.21', 'eth0'); // room again
  await s.settle();
  s.clock.advance(200); // the retry's backoff
  await s.settle();
  assert.deepEqual(s.keys(), ['198.51.100.22@2', '198.51.100.23@2']);
  assert.equal(s.reconciler.status(l2AnnounceKey('198.51.100.23', 'eth0'))?.kind, 'done');
  assert.equal(s.reconciler.health().retrying, 0);
});

test('map write errors back off exponentially and the loop never dies', async () => {
  const map = new FakeResponderMap();
  map.failWrites = { count: 4, error: new HeraldError('HERALD_BPF_MAP', 'update in responder_v4: EPERM') };
  const s = setup({ map });
  s.put('198.51.100.24', 'eth0');
  await s.settle();
  const attempts = () => {
    const st = s.reconciler.status(l2AnnounceKey('198.51.100.24', 'eth0'));
    return st?.kind === 'error' ? st.attempts : 0;
  };
  // The start-up full pass retried once already; then 100 ms, 200 ms, 400 ms …
  let total = 0;
  while (s.keys().length === 0 && total < 10_000) {
    s.clock.advance(100);
    total += 100;
    await s.settle();
  }
  assert.deepEqual(s.keys(), ['198.51.100.24@2']);
  assert.ok(total >= 300, `recovered after ${total} ms: backoff grows`);
  assert.equal(attempts(), 0);
  s.put('198.51.100.25', 'eth0');
  await s.settle();
  assert.equal(s.keys().length, 2, 'the loop still runs');
});

test('a failed gratuitous ARP never keeps the entry out of the map (Cilium #48626)', async () => {
  const s = setup();
  s.sender.fail = true;
  s.put('198.51.100.26', 'eth0');
  await s.settle();
  assert.deepEqual(s.keys(), ['198.51.100.26@2']);
  assert.equal(s.garp.stats.failed, 2);
  assert.equal(s.reconciler.status(l2AnnounceKey('198.51.100.26', 'eth0'))?.kind, 'done');
});

test('an IPv6 row becomes a responder_v6 entry, joins its solicited-node group and gets its NA burst; withdrawing leaves the group', async () => {
  const s = setup();
  s.put('2001:db8::10', 'eth0');
  s.put('2001:db8:1::10', 'eth0'); // same low 24 bits: the same group, counted twice
  await s.settle();
  assert.deepEqual(s.keys(), ['2001:db8:1::10@2', '2001:db8::10@2']);
  assert.equal(s.reconciler.health().errorCount, 0);
  const group = `2|${solicitedNodeMac('2001:db8::10')}`;
  assert.equal(group, '2|33:33:ff:00:00:10');
  assert.equal(s.groups.held().get(group), 2);
  assert.deepEqual(s.sender.frames.map((f) => f.ip).sort(), ['2001:db8:1::10', '2001:db8::10'], 'one unsolicited NA each');
  s.drop('2001:db8::10', 'eth0');
  await s.settle();
  assert.equal(s.groups.held().get(group), 1);
  s.drop('2001:db8:1::10', 'eth0');
  await s.settle();
  assert.deepEqual(s.keys(), []);
  assert.equal(s.groups.held().size, 0, 'no membership outlives its entries');
});

test('a missing interface is an error status that resolves when the interface appears', async () => {
  const s = setup();
  s.links.subscribe(() => {
    s.ops.invalidateLinks();
    s.reconciler.triggerFull();
  });
  s.put('198.51.100.27', 'eth9');
  await s.settle();
  const st = s.reconciler.status(l2AnnounceKey('198.51.100.27', 'eth9'));
  assert.equal(st?.kind === 'error' && st.error, 'interface eth9 does not exist');
  const eth9 = s.links.add('eth9');
  await s.settle();
  assert.deepEqual(s.keys(), [`198.51.100.27@${eth9.ifindex}`]);
});

test('periodic full reconciliation repairs entries removed behind the agent\'s back', async () => {
  const s = setup({ config: { fullIntervalMs: 60_000 } });
  s.put('198.51.100.28', 'eth0');
  await s.settle();
  s.map.delete({ ip: '198.51.100.28', ifindex: 2 }); // e.g. an operator's bpftool
  s.map.create({ ip: '198.51.100.99', ifindex: 2 });
  s.clock.advance(60_000);
  await s.settle();
  assert.deepEqual(s.keys(), ['198.51.100.28@2']);
  assert.ok(s.reconciler.health().fullRounds >= 2);
});

test('a bulk transaction goes through the batch path: one entry and one burst per row, a row on a missing interface gets its own error, IPv6 rows join their groups', async () => {
  const s = setup();
  const v4 = Array.from({ length: 40 }, (_, i) => `198.51.100.${i + 1}`);
  s.db.update([l2AnnounceTable], (t) => {
    for (const ip of v4) t.insert(l2AnnounceTable, withOrigin(undefined, ip, 'eth0', 'svc:a'));
    t.insert(l2AnnounceTable, withOrigin(undefined, '2001:db8::7', 'eth1', 'svc:a'));
    t.insert(l2AnnounceTable, withOrigin(undefined, '198.51.100.200', 'nosuch0', 'svc:a'));
  });
  await s.settle();
  assert.equal(s.keys().length, 41);
  assert.equal(s.reconciler.status(l2AnnounceKey('198.51.100.200', 'nosuch0'))?.kind, 'error');
  assert.match(s.reconciler.status(l2AnnounceKey('198.51.100.200', 'nosuch0'))?.error ?? '', /HERALD_LINK_NOT_FOUND|does not exist/);
  assert.equal(s.reconciler.status(l2AnnounceKey('198.51.100.1', 'eth0'))?.kind, 'done');
  assert.equal(s.reconciler.status(l2AnnounceKey('2001:db8::7', 'eth1'))?.kind, 'done');
  assert.equal(s.groups.held().get(`${s.eth1.ifindex}|${solicitedNodeMac('2001:db8::7')}`), 1, 'the IPv6 entry joined its solicited-node group');
  const bursts = new Map<string, number>();
  for (const f of s.sender.frames) bursts.set(f.ip, (bursts.get(f.ip) ?? 0) + 1);
  assert.equal(bursts.size, 41, 'every new entry is announced');
  assert.ok(v4.every((ip) => bursts.get(ip) === bursts.get('198.51.100.1')), 'each once (the same burst length)');

  // A full pass over an in-sync map announces nothing and changes nothing.
  s.sender.frames = [];
  const rounds = s.reconciler.health().fullRounds;
  s.reconciler.triggerFull();
  while (s.reconciler.health().fullRounds === rounds) await new Promise((r) => setImmediate(r));
  assert.equal(s.keys().length, 41);
  assert.deepEqual(s.sender.frames, []);
  assert.equal(s.reconciler.health().lastFull?.errors, 1, 'only the row on the missing interface');

  // A bulk delete withdraws every entry in one batch; the IPv6 group is left.
  s.db.update([l2AnnounceTable], (t) => t.deleteAll(l2AnnounceTable));
  await s.settle();
  assert.deepEqual(s.keys(), []);
  assert.equal(s.groups.held().size, 0);
  assert.equal(s.reconciler.errors().length, 0);
});
