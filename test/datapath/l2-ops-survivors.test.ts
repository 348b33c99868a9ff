/**
 * The L2 responder's reconcile ops called directly (no reconciler): interface
 * errors, when an interface is prepared again, what each path announces,
 * cancels, logs and leaves, per-row errors of the batch paths, the prune's
 * batch threshold, its refusal after a failed lookup, and what it forgets
 * about interfaces that are gone. Written against the mutation run's
 * survivors; edges in memory (fake map, links, groups; a recording gARP).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import type { GarpAnnouncer, GarpTarget } from '../../src/datapath/garp.js';
import { L2ResponderOps, type InterfacePreparer } from '../../src/datapath/l2-responder/reconcile-ops.js';
import { FakeResponderMap } from '../../src/datapath/l2-responder/responder-map.js';
import type { L2AnnounceRow } from '../../src/datapath/tables/l2-announce.js';
import { solicitedNodeMac } from '../../src/net/ndp.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { FakeMulticastGroups } from '../../src/os/fake/multicast-groups.js';
import type { LinkInfo, Links } from '../../src/os/links.js';
import { recordingLogger } from '../helpers/recording-logger.js';

class RecordingPreparer implements InterfacePreparer {
  prepared: string[] = [];
  forgotten: number[][] = [];
  failFor = new Set<string>();
  prepare(link: LinkInfo): void {
    if (this.failFor.has(link.name)) throw new Error(`attach on ${link.name}: EPERM`);
    this.prepared.push(`${link.name}#${link.ifindex}/${link.mac}`);
  }
  forgetAllBut(current: ReadonlySet<number>): void {
    this.forgotten.push([...current].sort((a, b) => a - b));
  }
}

/** FakeLinks whose lookups can be made to throw (a netlink error, not "no such link"). */
class FlakyLinks extends FakeLinks {
  failLookups = false;
  override async byName(name: string): Promise<LinkInfo | undefined> {
    if (this.failLookups) throw new Error('netlink: ENOBUFS');
    return super.byName(name);
  }
}

function harness(opts: { map?: FakeResponderMap } = {}) {
  const links = new FlakyLinks();
  const eth0 = links.add('eth0');
  const eth1 = links.add('eth1');
  const map = opts.map ?? new FakeResponderMap();
  const announced: string[] = [];
  const cancelled: string[] = [];
  const garp = {
    announce: (t: GarpTarget) => void announced.push(`${t.ip}@${t.ifindex}/${t.mac}`),
    cancel: (ip: string, ifindex: number) => void cancelled.push(`${ip}@${ifindex}`),
    prepare: () => {},
    unprepare: () => {},
  } as unknown as GarpAnnouncer;
  const preparer = new RecordingPreparer();
  const groups = new FakeMulticastGroups();
  const log = recordingLogger();
  const ops = new L2ResponderOps({ map, interfaces: preparer, links: links as Links, garp, groups, log });
  const keys = () => map.keys().map((k) => `${k.ip}@${k.ifindex}`).sort();
  return { links, eth0, eth1, map, announced, cancelled, preparer, groups, log, ops, keys };
}

const row = (ip: string, iface = 'eth0', origins: readonly string[] = ['svc:a']): L2AnnounceRow => ({ ip, iface, origins });
const nextTurn = () => new Promise((r) => setImmediate(r));

test('update: a missing or non-Ethernet interface is a coded error with the interface named', async () => {
  const h = harness();
  h.links.add('wg0', { ethernet: false });
  await assert.rejects(h.ops.update(row('198.51.100.1', 'eth9')), (e) => isHeraldError(e, 'HERALD_LINK_NOT_FOUND') && (e as Error).message === 'interface eth9 does not exist');
  await assert.rejects(
    h.ops.update(row('198.51.100.1', 'wg0')),
    (e) => isHeraldError(e, 'HERALD_LINK_NOT_ETHERNET') && (e as Error).message === 'interface wg0 has no Ethernet header; ARP and NDP cannot be answered there',
  );
  assert.deepEqual(h.keys(), []);
  assert.deepEqual(h.preparer.prepared, []);
});

test('update: a new entry is announced with the link MAC and logged; an entry already there is neither', async () => {
  const h = harness();
  await h.ops.update(row('198.51.100.1', 'eth0', ['svc:a', 'svc:b']));
  assert.deepEqual(h.announced, [`198.51.100.1@${h.eth0.ifindex}/${h.eth0.mac}`]);
  assert.deepEqual(h.log.lines, [{ level: 'info', msg: 'announcing', obj: { ip: '198.51.100.1', iface: 'eth0', ifindex: h.eth0.ifindex, origins: ['svc:a', 'svc:b'] } }]);
  await h.ops.update(row('198.51.100.1'));
  assert.equal(h.announced.length, 1);
  assert.equal(h.log.lines.length, 1);
});

test('an interface is prepared once per ifindex and MAC: again only when its MAC changes', async () => {
  const h = harness();
  await h.ops.update(row('198.51.100.1'));
  await h.ops.update(row('198.51.100.2'));
  await h.ops.updateBatch([row('198.51.100.3'), row('198.51.100.4')]);
  assert.deepEqual(h.preparer.prepared, [`eth0#${h.eth0.ifindex}/${h.eth0.mac}`]);
  assert.equal(h.links.lookups, 1, 'resolved once, then cached');
  h.links.add('eth0', { ifindex: h.eth0.ifindex, mac: '02:00:5e:00:53:99' }); // same ifindex, new MAC
  await h.ops.update(row('198.51.100.5'));
  assert.equal(h.preparer.prepared.length, 1, 'the cache still holds the old link until links change');
  h.ops.invalidateLinks();
  await h.ops.update(row('198.51.100.5'));
  assert.deepEqual(h.preparer.prepared.at(-1), `eth0#${h.eth0.ifindex}/02:00:5e:00:53:99`);
  assert.equal(h.links.lookups, 2);
});

test('a failed lookup (not "no such link") makes the next prune refuse, once', async () => {
  const h = harness();
  h.map.create({ ip: '198.51.100.50', ifindex: h.eth0.ifindex });
  h.links.failLookups = true;
  await assert.rejects(h.ops.update(row('198.51.100.1')), /ENOBUFS/);
  h.links.failLookups = false;
  await assert.rejects(h.ops.prune([]), (e) => isHeraldError(e, 'HERALD_LINK_LOOKUP') && (e as Error).message === 'interfaces could not be read; not pruning on partial knowledge');
  assert.deepEqual(h.keys(), [`198.51.100.50@${h.eth0.ifindex}`], 'nothing pruned');
  await h.ops.prune([]);
  assert.deepEqual(h.keys(), [], 'the next prune runs');
  // A missing interface is knowledge, not a failed lookup: the prune runs.
  await assert.rejects(h.ops.update(row('198.51.100.1', 'eth9')));
  await h.ops.prune([]);
});

test('updateBatch: per-row errors (prepare, map), one announcement per new entry, its log lines on the next turn, a trace line', async () => {
  const h = harness({ map: new FakeResponderMap(2) });
  h.preparer.failFor.add('eth1');
  h.map.create({ ip: '198.51.100.1', ifindex: h.eth0.ifindex });
  const out = await h.ops.updateBatch([row('198.51.100.1'), row('198.51.100.2'), row('198.51.100.3', 'eth1'), row('198.51.100.4'), row('198.51.100.5', 'eth9')]);
  assert.equal(out[0], undefined, 'already there');
  assert.equal(out[1], undefined);
  assert.equal((out[2] as Error).message, 'attach on eth1: EPERM');
  assert.ok(isHeraldError(out[3], 'HERALD_BPF_MAP_FULL'), 'the map is full: that row alone');
  assert.ok(isHeraldError(out[4], 'HERALD_LINK_NOT_FOUND'));
  assert.deepEqual(h.announced, [`198.51.100.2@${h.eth0.ifindex}/${h.eth0.mac}`]);
  assert.deepEqual(h.keys(), [`198.51.100.1@${h.eth0.ifindex}`, `198.51.100.2@${h.eth0.ifindex}`]);
  const trace = h.log.lines.find((l) => l.msg === 'trace: responder entries created, first rounds queued');
  assert.equal(trace?.level, 'debug');
  assert.equal(trace?.obj.rows, 5);
  assert.equal(trace?.obj.created, 1);
  for (const f of ['ms', 'groupsMs', 'mapMs', 'garpMs']) assert.equal(typeof trace?.obj[f], 'number', f);
  const [ms, parts] = [trace!.obj.ms as number, (trace!.obj.groupsMs as number) + (trace!.obj.mapMs as number) + (trace!.obj.garpMs as number)];
  assert.ok(ms >= 0 && Math.abs(ms - parts) <= 2, `the phases add up to the whole (${ms} ms, parts ${parts} ms)`);
  assert.equal(h.log.lines.filter((l) => l.msg === 'announcing').length, 0, 'the log lines wait for the next turn');
  await nextTurn();
  assert.deepEqual(h.log.lines.filter((l) => l.msg === 'announcing'), [{ level: 'info', msg: 'announcing', obj: { ip: '198.51.100.2', iface: 'eth0', ifindex: h.eth0.ifindex, origins: ['svc:a'] } }]);
  // Nothing new: no announcement, no log line.
  const lines = h.log.lines.length;
  assert.deepEqual(await h.ops.updateBatch([row('198.51.100.2'), row('198.51.100.1')]), [undefined, undefined], 'one outcome per row');
  await nextTurn();
  assert.deepEqual(h.log.lines.slice(lines).map((l) => l.msg), ['trace: responder entries created, first rounds queued']);
});

test('updateBatch: IPv6 rows join their group before the map write; a row whose group join throws fails alone', async () => {
  const h = harness();
  const joins: string[] = [];
  const join = h.groups.join.bind(h.groups);
  h.groups.join = (ifindex, mac) => {
    if (ifindex === h.eth1.ifindex) throw new Error('PACKET_ADD_MEMBERSHIP: ENODEV');
    joins.push(`${ifindex}|${mac}|map has ${h.map.keys().length}`);
    join(ifindex, mac);
  };
  const out = await h.ops.updateBatch([row('2001:db8::1'), row('2001:db8::2', 'eth1')]);
  assert.equal(out[0], undefined);
  assert.equal((out[1] as Error).message, 'PACKET_ADD_MEMBERSHIP: ENODEV');
  assert.deepEqual(joins, [`${h.eth0.ifindex}|${solicitedNodeMac('2001:db8::1')}|map has 0`]);
  assert.deepEqual(h.keys(), [`2001:db8::1@${h.eth0.ifindex}`]);
});

test('deleteBatch: a gone interface is no error, a failed lookup and a failed delete are the row\'s; cancels, logs and leaves per key', async () => {
  const h = harness();
  await h.ops.updateBatch([row('2001:db8::1'), row('198.51.100.2'), row('198.51.100.3', 'eth1')]);
  await nextTurn();
  h.links.remove('eth1');
  h.ops.invalidateLinks();
  h.log.lines.length = 0;
  let out = await h.ops.deleteBatch([row('198.51.100.3', 'eth1'), row('198.51.100.9'), row('2001:db8::1')]);
  assert.deepEqual(out, [undefined, undefined, undefined]);
  assert.deepEqual(h.cancelled, [`198.51.100.9@${h.eth0.ifindex}`, `2001:db8::1@${h.eth0.ifindex}`], 'the gone interface\'s key is left to the prune');
  assert.deepEqual(h.log.lines, [{ level: 'info', msg: 'withdrawn', obj: { ip: '2001:db8::1', ifindex: h.eth0.ifindex, iface: 'eth0' } }], 'only what was there is logged');
  assert.equal(h.groups.held().size, 0, 'the IPv6 entry left its group');
  assert.deepEqual(h.keys(), [`198.51.100.2@${h.eth0.ifindex}`, `198.51.100.3@${h.eth1.ifindex}`]);

  await h.ops.update(row('2001:db8::5'));
  const boom = new Error('delete in responder_v6: EPERM');
  h.map.failWrites = { count: 1, error: boom };
  out = await h.ops.deleteBatch([row('2001:db8::5'), row('198.51.100.2')]);
  assert.deepEqual(out, [boom, undefined]);
  assert.equal(h.groups.held().get(`${h.eth0.ifindex}|${solicitedNodeMac('2001:db8::5')}`), 1, 'a failed delete keeps its group');
  h.links.failLookups = true;
  out = await h.ops.deleteBatch([row('2001:db8::5', 'eth7')]);
  assert.match(String(out[0]), /ENOBUFS/);
});

test('delete: the cached link or a fresh lookup; a gone interface is nothing to do; the log names the interface', async () => {
  const h = harness();
  await h.ops.update(row('198.51.100.1'));
  const lookups = h.links.lookups;
  h.log.lines.length = 0;
  await h.ops.delete(row('198.51.100.1'));
  assert.equal(h.links.lookups, lookups, 'from the cache');
  assert.deepEqual(h.cancelled, [`198.51.100.1@${h.eth0.ifindex}`]);
  assert.deepEqual(h.log.lines, [{ level: 'info', msg: 'withdrawn', obj: { ip: '198.51.100.1', ifindex: h.eth0.ifindex, iface: 'eth0' } }]);
  await h.ops.delete(row('198.51.100.1'));
  assert.equal(h.log.lines.length, 1, 'not there: nothing logged');
  await h.ops.delete(row('198.51.100.1', 'eth1'));
  assert.equal(h.links.lookups, lookups + 1, 'an uncached interface is looked up');
  await h.ops.delete(row('198.51.100.1', 'eth9'));
  assert.equal(h.cancelled.length, 3, 'a gone interface: nothing cancelled');
});

test('prune: 16 unwanted entries go in one batch — a failed key is thrown after the others are withdrawn, and keeps its group', async () => {
  const h = harness();
  const ips = Array.from({ length: 15 }, (_, i) => `198.51.100.${i + 1}`);
  await h.ops.updateBatch([row('2001:db8::1'), ...ips.map((ip) => row(ip))]); // the IPv6 key first: the one that fails
  await nextTurn();
  h.log.lines.length = 0;
  const boom = new Error('delete: EPERM');
  h.map.failWrites = { count: 1, error: boom };
  await assert.rejects(h.ops.prune([]), (e) => e === boom);
  assert.equal(h.cancelled.length, 16, 'every burst cancelled first');
  assert.equal(h.keys().length, 1, 'the 15 others are withdrawn');
  assert.equal(h.log.lines.filter((l) => l.msg === 'withdrawn').length, 15);
  assert.deepEqual(h.log.lines[0]?.obj, { ip: h.log.lines[0]?.obj.ip, ifindex: h.eth0.ifindex }, 'no interface name in a prune');
  assert.deepEqual(h.keys(), [`2001:db8::1@${h.eth0.ifindex}`]);
  assert.equal(h.groups.held().size, 1, 'the failed IPv6 key keeps its group');
  await h.ops.prune([]);
  assert.deepEqual(h.keys(), []);
  assert.equal(h.groups.held().size, 0);
});

test('prune: below 16 key by key; wanted rows stay; groups of unwanted keys are left even when the entry vanished behind our back', async () => {
  const h = harness();
  await h.ops.updateBatch([row('198.51.100.1'), row('2001:db8::1'), row('2001:db8::2')]);
  await nextTurn();
  h.map.delete({ ip: '2001:db8::2', ifindex: h.eth0.ifindex }); // an operator's bpftool
  h.log.lines.length = 0;
  await h.ops.prune([row('198.51.100.1'), row('2001:db8::7', 'eth9')]);
  assert.deepEqual(h.keys(), [`198.51.100.1@${h.eth0.ifindex}`]);
  assert.equal(h.groups.held().size, 0, 'both IPv6 groups left');
  assert.deepEqual(h.log.lines, [{ level: 'info', msg: 'withdrawn', obj: { ip: '2001:db8::1', ifindex: h.eth0.ifindex } }]);
});

test('prune: forgets interfaces that are gone or no longer Ethernet — prepared again when back, groups and the program told', async () => {
  const h = harness();
  await h.ops.updateBatch([row('198.51.100.1', 'eth1'), row('2001:db8::1', 'eth1')]);
  await nextTurn();
  h.links.add('wg0', { ethernet: false });
  h.links.remove('eth1');
  await h.ops.prune([]);
  assert.deepEqual(h.preparer.forgotten, [[h.eth0.ifindex]]);
  h.links.add('eth1', { ifindex: h.eth1.ifindex, mac: h.eth1.mac }); // back, same ifindex and MAC
  h.ops.invalidateLinks();
  const before = h.preparer.prepared.length;
  await h.ops.update(row('198.51.100.1', 'eth1'));
  assert.equal(h.preparer.prepared.length, before + 1, 'prepared again: the program was told to forget it');
  await h.ops.update(row('2001:db8::1', 'eth1'));
  assert.equal(h.groups.held().get(`${h.eth1.ifindex}|${solicitedNodeMac('2001:db8::1')}`), 1, 'joined again, once');
});

test('prune while a wanted entry\'s interface has vanished (links not re-read yet): its group and preparation are forgotten, and made again when it is back', async () => {
  const h = harness();
  await h.ops.update(row('2001:db8::1', 'eth1'));
  const group = `${h.eth1.ifindex}|${solicitedNodeMac('2001:db8::1')}`;
  assert.equal(h.groups.held().get(group), 1);
  h.links.remove('eth1'); // the cache still resolves eth1: the entry is still wanted
  await h.ops.prune([row('2001:db8::1', 'eth1')]);
  assert.deepEqual(h.keys(), [`2001:db8::1@${h.eth1.ifindex}`]);
  assert.equal(h.groups.held().size, 0, 'the membership went with the interface');
  h.links.add('eth1', { ifindex: h.eth1.ifindex, mac: h.eth1.mac });
  h.ops.invalidateLinks();
  const prepared = h.preparer.prepared.length;
  await h.ops.update(row('2001:db8::1', 'eth1'));
  assert.equal(h.preparer.prepared.length, prepared + 1, 'the program serves it again');
  assert.equal(h.groups.held().get(group), 1, 'the group joined again');
});

test('prune keeps what is wanted: a wanted IPv6 entry keeps its group, a live interface is not prepared again, and a batch prune that succeeds resolves', async () => {
  const h = harness();
  const ips = Array.from({ length: 20 }, (_, i) => `198.51.100.${i + 1}`);
  await h.ops.updateBatch([row('2001:db8::1'), ...ips.map((ip) => row(ip))]);
  await nextTurn();
  const prepared = h.preparer.prepared.length;
  await h.ops.prune([row('2001:db8::1')]); // 20 unwanted: one batch, every delete succeeds
  assert.deepEqual(h.keys(), [`2001:db8::1@${h.eth0.ifindex}`]);
  assert.equal(h.groups.held().get(`${h.eth0.ifindex}|${solicitedNodeMac('2001:db8::1')}`), 1, 'the wanted entry keeps its group');
  await h.ops.update(row('198.51.100.1'));
  assert.equal(h.preparer.prepared.length, prepared, 'eth0 is still there: not prepared again');
});

test('deleteBatch looks each uncached interface up once', async () => {
  const h = harness();
  const lookups = h.links.lookups;
  await h.ops.deleteBatch([row('198.51.100.1', 'eth1'), row('198.51.100.2', 'eth1'), row('198.51.100.3', 'eth1')]);
  assert.equal(h.links.lookups, lookups + 1);
});
