/**
 * Standby for candidate addresses (src/datapath/l2-responder/standby.ts):
 * before this node owns an address it may take over, the interface is served,
 * the IPv6 solicited-node group is joined and the first round's frames are
 * built, so that a hand-over costs a map write and a send. The real L2 ops and
 * reconciler with in-memory edges; the lab's many-IP failover bench measures
 * the effect on the wire.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../../src/core/reconciler/reconciler.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { GarpAnnouncer, type FrameSender } from '../../src/datapath/garp.js';
import { L2ResponderOps, type InterfacePreparer } from '../../src/datapath/l2-responder/reconcile-ops.js';
import { FakeResponderMap } from '../../src/datapath/l2-responder/responder-map.js';
import { l2AnnounceKey, l2AnnounceTable, type L2AnnounceRow } from '../../src/datapath/tables/l2-announce.js';
import { parseArpFrame } from '../../src/net/arp.js';
import { parseNdFrame, solicitedNodeMac } from '../../src/net/ndp.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { FakeMulticastGroups } from '../../src/os/fake/multicast-groups.js';
import type { LinkInfo } from '../../src/os/links.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

class RecordingSender implements FrameSender {
  frames: Array<{ ip: string; frame: Buffer }> = [];
  send(_ifindex: number, frame: Buffer): void {
    this.frames.push({ ip: parseArpFrame(frame)?.spa ?? parseNdFrame(frame)!.target, frame });
  }
}

class RecordingPreparer implements InterfacePreparer {
  prepared: string[] = [];
  prepare(link: LinkInfo): void {
    this.prepared.push(link.name);
  }
  forgetAllBut(): void {}
}

/** Counts the joins the ops ask for (the syscalls a real join costs); `failNext` makes the next join throw. */
class CountingGroups extends FakeMulticastGroups {
  joins = 0;
  failNext = false;
  override join(ifindex: number, mac: string): void {
    this.joins++;
    if (this.failNext) {
      this.failNext = false;
      throw new Error('ENOBUFS: injected');
    }
    super.join(ifindex, mac);
  }
}

const disposers: Array<() => void> = [];
afterEach(() => {
  for (const d of disposers.splice(0)) d();
});

function setup(log: Logger = silentLogger) {
  const clock = new ManualClock();
  const db = new StateDB([l2AnnounceTable]);
  const map = new FakeResponderMap();
  const links = new FakeLinks();
  const eth0 = links.add('eth0');
  const sender = new RecordingSender();
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 1, intervalMs: 1000 });
  const preparer = new RecordingPreparer();
  const groups = new CountingGroups();
  const ops = new L2ResponderOps({ map, interfaces: preparer, links, garp, groups, log });
  const prepared: string[] = [];
  const prepare = garp.prepare.bind(garp);
  garp.prepare = (t) => {
    prepared.push(`${t.ip}@${t.ifindex} ${t.mac}`);
    prepare(t);
  };
  db.registerInitializer(l2AnnounceTable, 'test').done();
  const reconciler = new Reconciler<L2AnnounceRow>({ name: 'l2-responder', db, table: l2AnnounceTable, ops, clock, log: silentLogger }, reconcilerDefaults);
  reconciler.start();
  disposers.push(() => {
    reconciler.dispose();
    garp.dispose();
  });
  const own = (ip: string) => db.update([l2AnnounceTable], (t) => t.insert(l2AnnounceTable, { ip, iface: 'eth0', origins: ['svc:a'] }));
  const disown = (ip: string) =>
    db.update([l2AnnounceTable], (t) => {
      const row = t.get(l2AnnounceTable, l2AnnounceKey(ip, 'eth0'));
      if (row) t.delete(l2AnnounceTable, row);
    });
  const settle = async () => {
    for (let i = 0; i < 5; i++) {
      await reconciler.settled();
      await new Promise((r) => setImmediate(r));
    }
  };
  const group = (ip: string, ifindex = eth0.ifindex) => groups.held().get(`${ifindex}|${solicitedNodeMac(ip)}`) ?? 0;
  return { db, map, links, eth0, sender, garp, preparer, groups, ops, own, disown, settle, group, prepared };
}

const candidates = (entries: Array<[string, string[]]>) => new Map(entries);

test('candidates are prepared before they are owned: interface served, IPv6 group joined, frames built; nothing is answered or sent', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::10', ['eth0']], ['198.51.100.10', ['eth0']]]));
  assert.deepEqual(s.preparer.prepared, ['eth0'], 'the program serves the interface ahead of any entry');
  assert.equal(s.group('2001:db8::10'), 1, "the IPv6 candidate's solicited-node group is joined");
  assert.equal(s.groups.held().size, 1, 'IPv4 needs no group');
  assert.equal(s.garp.preparedTargets, 2);
  assert.equal(s.ops.standby.size, 2);
  assert.equal(s.map.keys().length, 0, 'a candidate is not answered');
  assert.equal(s.sender.frames.length, 0, 'and nothing is announced for it');
});

test('taking a prepared candidate over joins nothing new and sends the frames built ahead; giving it back keeps the standby group', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::11', ['eth0']]]));
  const joinsBefore = s.groups.joins;
  s.own('2001:db8::11');
  await s.settle();
  assert.deepEqual(s.map.keys().map((k) => k.ip), ['2001:db8::11']);
  assert.equal(s.group('2001:db8::11'), 2, "the entry's own membership nests inside the standby one");
  // The first round is the frame built by the standby, not a new one.
  assert.equal(s.sender.frames.length, 1);
  const built = s.sender.frames[0]!.frame;
  s.disown('2001:db8::11');
  await s.settle();
  assert.equal(s.group('2001:db8::11'), 1, 'still a candidate: the group stays joined');
  s.own('2001:db8::11');
  await s.settle();
  assert.equal(s.sender.frames.length, 2);
  assert.equal(s.sender.frames[1]!.frame, built, 'the same prepared frame object went out again: built once, ahead');
  assert.ok(s.groups.joins - joinsBefore <= 2, 'owned-entry joins are counted only (no new standby joins)');
});

test('a candidate that is not prepared builds its frames on the spot (a fresh buffer per burst)', async () => {
  const s = setup();
  s.own('2001:db8::12');
  await s.settle();
  s.disown('2001:db8::12');
  await s.settle();
  s.own('2001:db8::12');
  await s.settle();
  assert.equal(s.sender.frames.length, 2);
  assert.notEqual(s.sender.frames[0]!.frame, s.sender.frames[1]!.frame);
  assert.deepEqual(s.sender.frames[0]!.frame, s.sender.frames[1]!.frame, 'the same bytes either way');
});

test('a prepared frame is byte for byte the frame built on the spot (IPv4: both ARP forms; IPv6: the unsolicited NA)', async () => {
  const s = setup();
  for (const ip of ['198.51.100.13', '2001:db8::13']) {
    s.own(ip);
    await s.settle();
  }
  const onTheSpot = s.sender.frames.map((f) => f.frame);
  s.disown('198.51.100.13');
  s.disown('2001:db8::13');
  await s.settle();
  await s.ops.standby.set(candidates([['198.51.100.13', ['eth0']], ['2001:db8::13', ['eth0']]]));
  s.sender.frames = [];
  for (const ip of ['198.51.100.13', '2001:db8::13']) {
    s.own(ip);
    await s.settle();
  }
  assert.deepEqual(s.sender.frames.map((f) => f.frame), onTheSpot);
});

test('a candidate dropped from the set is let go: its group left, its frames forgotten', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::14', ['eth0']], ['2001:db8::15', ['eth0']]]));
  await s.ops.standby.set(candidates([['2001:db8::15', ['eth0']]]));
  assert.equal(s.group('2001:db8::14'), 0);
  assert.equal(s.group('2001:db8::15'), 1);
  assert.equal(s.garp.preparedTargets, 1);
  await s.ops.standby.set(new Map());
  assert.equal(s.groups.held().size, 0, 'no membership outlives its candidacy');
  assert.equal(s.garp.preparedTargets, 0);
  assert.equal(s.ops.standby.size, 0);
});

test('an owned entry whose candidacy ends keeps its own membership until it is withdrawn', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::16', ['eth0']]]));
  s.own('2001:db8::16');
  await s.settle();
  await s.ops.standby.set(new Map());
  assert.equal(s.group('2001:db8::16'), 1, 'the entry still answers: its group stays');
  s.disown('2001:db8::16');
  await s.settle();
  assert.equal(s.group('2001:db8::16'), 0);
});

test('a recreated interface (new ifindex and MAC) is prepared again: the old membership and frames go, new ones come', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::17', ['eth0']]]));
  const old = s.eth0;
  const eth0 = s.links.add('eth0'); // recreated: new ifindex, new MAC
  s.ops.invalidateLinks();
  await s.ops.standby.set(candidates([['2001:db8::17', ['eth0']]]));
  assert.equal(s.group('2001:db8::17', old.ifindex), 0);
  assert.equal(s.group('2001:db8::17', eth0.ifindex), 1);
  assert.equal(s.garp.preparedTargets, 1);
});

test('a missing interface prepares nothing for its candidates and fails nothing else', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::18', ['eth9']], ['2001:db8::19', ['eth0']]]));
  assert.equal(s.ops.standby.size, 1);
  assert.equal(s.group('2001:db8::19'), 1);
});

test('sets given while a pass runs coalesce: the latest set is what ends up prepared', async () => {
  const s = setup();
  const first = s.ops.standby.set(candidates([['2001:db8::20', ['eth0']]]));
  const second = s.ops.standby.set(candidates([['2001:db8::21', ['eth0']]]));
  const third = s.ops.standby.set(candidates([['2001:db8::22', ['eth0']]]));
  await Promise.all([first, second, third]);
  assert.equal(s.group('2001:db8::20'), 0);
  assert.equal(s.group('2001:db8::21'), 0);
  assert.equal(s.group('2001:db8::22'), 1);
  assert.equal(s.ops.standby.size, 1);
  assert.ok(!s.prepared.some((p) => p.startsWith('2001:db8::21@')), 'a set overtaken before its pass began is never prepared');
});

test('thousands of new candidates are prepared in slices: the event loop runs in between', async () => {
  const s = setup();
  const many = candidates(Array.from({ length: 2000 }, (_, i) => [`2001:db8:1::${(i + 1).toString(16)}`, ['eth0']] as [string, string[]]));
  const immediates: number[] = [];
  const spin = () => {
    immediates.push(s.ops.standby.size);
    if (immediates.length < 100) setImmediate(spin);
  };
  setImmediate(spin);
  await s.ops.standby.set(many);
  assert.equal(s.ops.standby.size, 2000);
  assert.equal(s.groups.held().size, 2000);
  const partial = immediates.filter((n) => n > 0 && n < 2000);
  assert.ok(partial.length >= 3, `other work ran while the set was half prepared (sizes seen: ${[...new Set(immediates)].join(', ')})`);
  assert.ok(partial.every((n) => n % 256 === 0), `in slices of 256 (sizes seen: ${[...new Set(partial)].join(', ')})`);
});

test('the same candidates given again change nothing: no new join, no frame built again', async () => {
  const s = setup();
  const set = candidates([['2001:db8::30', ['eth0']], ['198.51.100.30', ['eth0']]]);
  await s.ops.standby.set(set);
  const joins = s.groups.joins;
  const built = s.prepared.length;
  await s.ops.standby.set(candidates([['2001:db8::30', ['eth0']], ['198.51.100.30', ['eth0']]]));
  assert.equal(s.groups.joins, joins);
  assert.equal(s.prepared.length, built);
  assert.equal(s.group('2001:db8::30'), 1);
});

test('a new MAC on the same interface index: the frames are built again with it, and a take-over sends them', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['198.51.100.31', ['eth0']]]));
  s.links.add('eth0', { ifindex: s.eth0.ifindex, mac: '02:00:5e:00:53:fe' });
  s.ops.invalidateLinks();
  await s.ops.standby.set(candidates([['198.51.100.31', ['eth0']]]));
  assert.equal(s.prepared.at(-1), `198.51.100.31@${s.eth0.ifindex} 02:00:5e:00:53:fe`);
  assert.equal(s.garp.preparedTargets, 1, 'the frames of the old MAC are forgotten');
  s.own('198.51.100.31');
  await s.settle();
  assert.equal(parseArpFrame(s.sender.frames[0]!.frame)?.sha, '02:00:5e:00:53:fe');
});

test('a failed join costs only the head start: logged at debug, nothing else prepared wrong, the owned entry joins on its own', async () => {
  const log = recordingLogger();
  const s = setup(log);
  s.groups.failNext = true;
  await s.ops.standby.set(candidates([['2001:db8::32', ['eth0']]]));
  assert.equal(s.group('2001:db8::32'), 0);
  assert.deepEqual(
    log.lines.filter((l) => l.msg === 'standby preparation failed').map((l) => [l.level, l.obj.ip, l.obj.iface, String(l.obj.err)]),
    [['debug', '2001:db8::32', 'eth0', 'ENOBUFS: injected']],
  );
  s.own('2001:db8::32');
  await s.settle();
  assert.deepEqual(s.map.keys().map((k) => k.ip), ['2001:db8::32']);
  assert.equal(s.group('2001:db8::32'), 1, "the entry's own join");
  await s.ops.standby.set(new Map());
  assert.equal(s.group('2001:db8::32'), 1, 'letting the candidacy go leaves no membership it never got');
});

test('a recreated interface that kept its MAC (a new ifindex only) is prepared again on the new index', async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::33', ['eth0']]]));
  const old = s.eth0;
  const eth0 = s.links.add('eth0', { mac: old.mac });
  assert.notEqual(eth0.ifindex, old.ifindex);
  s.ops.invalidateLinks();
  await s.ops.standby.set(candidates([['2001:db8::33', ['eth0']]]));
  assert.equal(s.group('2001:db8::33', old.ifindex), 0);
  assert.equal(s.group('2001:db8::33', eth0.ifindex), 1);
  assert.equal(s.prepared.at(-1), `2001:db8::33@${eth0.ifindex} ${old.mac}`);
});

test('preparing a target twice keeps the frames built the first time (one build per candidacy)', async () => {
  const s = setup();
  const target = { ip: '198.51.100.34', ifindex: s.eth0.ifindex, mac: s.eth0.mac };
  s.garp.prepare(target);
  s.garp.announce(target);
  const first = s.sender.frames.map((f) => f.frame);
  s.garp.prepare(target);
  s.garp.cancel(target.ip, target.ifindex);
  s.garp.announce(target);
  const again = s.sender.frames.slice(first.length).map((f) => f.frame);
  assert.equal(again.length, 2);
  assert.ok(again.every((f, i) => f === first[i]), 'the very buffers of the first build');
});

test("a prepared candidate's group is known to the ops (the hand-over joins by it): per interface and index, IPv6 only", async () => {
  const s = setup();
  await s.ops.standby.set(candidates([['2001:db8::35', ['eth0']], ['198.51.100.35', ['eth0']]]));
  assert.equal(s.ops.standby.preparedGroup('2001:db8::35', 'eth0', s.eth0.ifindex), solicitedNodeMac('2001:db8::35'));
  assert.equal(s.ops.standby.preparedGroup('2001:db8::35', 'eth0', s.eth0.ifindex + 1), undefined, 'another index of that name (a recreated interface): not that group');
  assert.equal(s.ops.standby.preparedGroup('2001:db8::35', 'eth1', s.eth0.ifindex), undefined, 'another interface');
  assert.equal(s.ops.standby.preparedGroup('2001:db8::36', 'eth0', s.eth0.ifindex), undefined, 'not a candidate');
  assert.equal(s.ops.standby.preparedGroup('198.51.100.35', 'eth0', s.eth0.ifindex), undefined, 'IPv4 has no group');
});

test('a hand-over of many prepared candidates (one batch) joins each group by the standby and answers every one', async () => {
  const s = setup();
  const ips = Array.from({ length: 40 }, (_, i) => `2001:db8::1:${(i + 1).toString(16)}`);
  await s.ops.standby.set(candidates(ips.map((ip) => [ip, ['eth0']])));
  s.db.update([l2AnnounceTable], (t) => {
    for (const ip of ips) t.insert(l2AnnounceTable, { ip, iface: 'eth0', origins: ['svc:a'] });
  });
  await s.settle();
  assert.equal(s.map.keys().length, ips.length);
  for (const ip of ips) assert.equal(s.group(ip), 2, `${ip}: the entry's membership on the standby's group`);
  assert.equal(s.sender.frames.length, ips.length, 'one unsolicited NA each');
});
