/**
 * Wire-verified fencing, the store-independent rules (fencing.ts), tested
 * directly with a manual clock: which IP of each other owner is watched on the
 * wire (watchTargets), and what a silence report proves once the store has
 * been read again (SilenceVerdicts: no longer held → nothing; held and not
 * marked → fence; marked as releasing → nothing for the grace, then fence
 * unless heard answering since).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { OwnerWatch, WatchTarget } from '../../../src/controlplane/ownership/edges.js';
import { RELEASE_GRACE_MS, SilenceVerdicts, watchTargets, type HeldElsewhere } from '../../../src/controlplane/ownership/fencing.js';
import { ManualClock } from '../../helpers/manual-clock.js';
import { recordingLogger } from '../../helpers/recording-logger.js';

// ---- watchTargets ----

const held = (node: string, ip: string, marked = false): HeldElsewhere => ({ ip, node, marked });
/** We are a candidate for each IP on `eth0`, the ones listed in `other` on eth1 first. */
const candidatesFor = (rows: readonly HeldElsewhere[], other: readonly string[] = []): Map<string, readonly string[]> =>
  new Map(rows.map(({ ip }) => [ip, other.includes(ip) ? ['eth1', 'eth0'] : ['eth0']]));
const byNode = (ts: WatchTarget[]) => [...ts].sort((a, b) => a.node.localeCompare(b.node));
/** The target chosen for a node's IPs, in the order given and reversed: the choice must not depend on the order the store lists them in. */
function chosen(rows: HeldElsewhere[]): string[] {
  const c = candidatesFor(rows);
  return [rows, [...rows].reverse()].map((r) => {
    const ts = watchTargets(r, c);
    assert.equal(ts.length, 1, 'one target per node');
    return ts[0]!.ip;
  });
}

test('one target per other owner, probed from the first candidate interface of its IP', () => {
  const rows = [held('n1', '192.0.2.1'), held('n2', '192.0.2.2'), held('n1', '192.0.2.3'), held('n3', '2001:db8::3')];
  const ts = watchTargets(rows, candidatesFor(rows, ['192.0.2.2']));
  assert.deepEqual(byNode(ts), [
    { node: 'n1', ip: '192.0.2.1', iface: 'eth0' },
    { node: 'n2', ip: '192.0.2.2', iface: 'eth1' },
    { node: 'n3', ip: '2001:db8::3', iface: 'eth0' },
  ]);
  assert.deepEqual(watchTargets([], new Map()), []);
});

test('an IP we are no candidate for (or have no interface for) is never watched, and does not displace one we are', () => {
  const cands = new Map<string, readonly string[]>([['192.0.2.20', ['eth0']], ['192.0.2.5', []]]);
  // 192.0.2.10 and 192.0.2.5 would rank before 192.0.2.20 (v4, lower) but we cannot probe them.
  for (const rows of [
    [held('n1', '192.0.2.10'), held('n1', '192.0.2.20'), held('n1', '192.0.2.5')],
    [held('n1', '192.0.2.20'), held('n1', '192.0.2.10'), held('n1', '192.0.2.5')],
  ]) assert.deepEqual(watchTargets(rows, cands), [{ node: 'n1', ip: '192.0.2.20', iface: 'eth0' }]);
  assert.deepEqual(watchTargets([held('n2', '192.0.2.10'), held('n3', '192.0.2.5')], cands), [], 'a node with nothing we could probe has no target');
});

test('an IPv4 address is watched before an IPv6 one of the same node (one ARP socket serves them all)', () => {
  assert.deepEqual(chosen([held('n1', '2001:db8::1'), held('n1', '192.0.2.200')]), ['192.0.2.200', '192.0.2.200']);
  // Even when the IPv6 address sorts first as a string.
  assert.deepEqual(chosen([held('n1', '1::1'), held('n1', '9.9.9.9')]), ['9.9.9.9', '9.9.9.9']);
});

test('among addresses of the same family, the lowest is watched, whatever order the store lists them in', () => {
  assert.deepEqual(chosen([held('n1', '192.0.2.7'), held('n1', '192.0.2.3'), held('n1', '192.0.2.5')]), ['192.0.2.3', '192.0.2.3']);
  assert.deepEqual(chosen([held('n1', '2001:db8::b'), held('n1', '2001:db8::a')]), ['2001:db8::a', '2001:db8::a']);
});

test('an IP its owner is releasing is watched only when the node holds nothing else we could take', () => {
  // A marked IPv4 address loses to an unmarked IPv6 one, and a marked lower address to an unmarked higher one.
  assert.deepEqual(chosen([held('n1', '192.0.2.1', true), held('n1', '2001:db8::9')]), ['2001:db8::9', '2001:db8::9']);
  assert.deepEqual(chosen([held('n1', '192.0.2.1', true), held('n1', '192.0.2.9')]), ['192.0.2.9', '192.0.2.9']);
  // Only marked ones: still watched (the node may be dead), by the same v4-first, lowest rule.
  assert.deepEqual(chosen([held('n1', '2001:db8::1', true), held('n1', '192.0.2.9', true), held('n1', '192.0.2.4', true)]), ['192.0.2.4', '192.0.2.4']);
});

test('the per-node rules apply to each node separately', () => {
  const rows = [
    held('a', '192.0.2.9', true),
    held('b', '2001:db8::2'),
    held('a', '2001:db8::1'),
    held('b', '198.51.100.1'),
    held('c', '192.0.2.30'),
    held('b', '198.51.100.0'),
  ];
  const want = [
    { node: 'a', ip: '2001:db8::1', iface: 'eth0' },
    { node: 'b', ip: '198.51.100.0', iface: 'eth0' },
    { node: 'c', ip: '192.0.2.30', iface: 'eth0' },
  ];
  assert.deepEqual(byNode(watchTargets(rows, candidatesFor(rows))), want);
  assert.deepEqual(byNode(watchTargets([...rows].reverse(), candidatesFor(rows))), want);
});

// ---- SilenceVerdicts ----

function verdicts(opts: { graceMs?: number; stillSilent?: (node: string, ip: string) => boolean | undefined; noWatch?: boolean } = {}) {
  const clock = new ManualClock();
  clock.advance(10_000); // not at 0: a first verdict at time 0 must not look special
  const log = recordingLogger();
  const again: Array<[string, string]> = [];
  const asked: Array<[string, string]> = [];
  const watch: OwnerWatch = {
    setTargets: () => {},
    onSilent: () => {},
    ...(opts.stillSilent ? { stillSilent: (n: string, ip: string) => (asked.push([n, ip]), opts.stillSilent!(n, ip)) as boolean } : {}),
  };
  const deps = { clock, log, again: (n: string, ip: string) => void again.push([n, ip]), ...(opts.noWatch ? {} : { watch }) };
  const v = opts.graceMs === undefined ? new SilenceVerdicts(deps) : new SilenceVerdicts(deps, opts.graceMs);
  return { v, clock, log, again, asked };
}
const HELD = { holder: 'n1', releasing: false } as const;
const MARKED = { holder: 'n1', releasing: true } as const;

test('silence about an IP its node still holds, unmarked, is fenced at once', () => {
  const { v, clock, again } = verdicts();
  assert.equal(v.judge('n1', '192.0.2.1', HELD), true);
  assert.equal(clock.pending, 0, 'no re-check to schedule');
  assert.deepEqual(again, []);
});

test('silence about an IP its node no longer holds proves nothing, and the operator is told who holds it now', () => {
  const { v, log } = verdicts();
  assert.equal(v.judge('n1', '192.0.2.1', { holder: 'n2', releasing: false }), false);
  assert.equal(v.judge('n1', '192.0.2.2', { holder: undefined, releasing: false }), false);
  assert.equal(v.judge('n1', '192.0.2.3', { holder: 'n2', releasing: true }), false, 'a marker by someone else is not ours to judge');
  const infos = log.lines.filter((l) => l.level === 'info');
  assert.deepEqual(
    infos.map((l) => l.obj),
    [
      { node: 'n1', ip: '192.0.2.1', now: 'n2' },
      { node: 'n1', ip: '192.0.2.2', now: null },
      { node: 'n1', ip: '192.0.2.3', now: 'n2' },
    ],
  );
  assert.ok(infos.every((l) => /no longer holds/.test(l.msg) && /not fenced/.test(l.msg)));
});

test('an IP marked as releasing is not fenced within the grace, then the store is asked again once, and fenced if still marked', () => {
  const { v, clock, again, log } = verdicts();
  assert.equal(RELEASE_GRACE_MS, 3000);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false);
  assert.equal(clock.pending, 1, 'one re-check scheduled');
  const info = log.lines.find((l) => l.level === 'info')!;
  assert.deepEqual(info.obj, { node: 'n1', ip: '192.0.2.1', graceMs: 3000 });
  assert.match(info.msg, /releasing/);
  clock.advance(1000);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false, 'a repeated report within the grace proves nothing either');
  assert.equal(clock.pending, 1, 'and does not start the grace over');
  clock.advance(1999);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false, '1 ms before the grace runs out');
  assert.deepEqual(again, []);
  clock.advance(1);
  assert.deepEqual(again, [['n1', '192.0.2.1']], 'the grace (from the first verdict) ran out: the store decides afresh');
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), true, 'a marker still standing after the grace is fenced');
  const warn = log.lines.filter((l) => l.level === 'warn');
  assert.equal(warn.length, 1);
  assert.deepEqual(warn[0]!.obj, { node: 'n1', ip: '192.0.2.1', afterMs: 3000 });
  assert.match(warn[0]!.msg, /releasing/);
  assert.match(warn[0]!.msg, /fencing/);
});

test('after a fence the verdict is forgotten: a new marker starts a new grace', () => {
  const { v, clock, again } = verdicts({ graceMs: 500 });
  v.judge('n1', '192.0.2.1', MARKED);
  clock.advance(500);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), true);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false, 'a fresh grace');
  clock.advance(499);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false);
  clock.advance(1);
  assert.equal(again.length, 2);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), true);
});

test('the grace is measured on the monotonic clock from the first verdict, with a configurable length; a late judge reports how long it waited', () => {
  const { v, clock, log } = verdicts({ graceMs: 250 });
  v.judge('n1', '2001:db8::1', MARKED);
  clock.advance(249);
  assert.equal(v.judge('n1', '2001:db8::1', MARKED), false);
  clock.advance(1000);
  assert.equal(v.judge('n1', '2001:db8::1', MARKED), true);
  assert.deepEqual(log.lines.find((l) => l.level === 'warn')!.obj, { node: 'n1', ip: '2001:db8::1', afterMs: 1249 });
});

test('an owner heard answering since the silence report (a release called off) is not fenced after the grace', () => {
  const { v, clock, asked, log } = verdicts({ graceMs: 100, stillSilent: () => false });
  v.judge('n1', '192.0.2.1', MARKED);
  clock.advance(100);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false);
  assert.deepEqual(asked, [['n1', '192.0.2.1']]);
  assert.equal(log.lines.filter((l) => l.level === 'warn').length, 0);
  // The verdict is gone: the next report starts a new grace rather than fencing at once.
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false);
  assert.equal(clock.pending, 1);
});

test('after the grace, an owner still silent, or one the watch knows nothing about, or with no watch at all, is fenced', () => {
  for (const opts of [{ stillSilent: () => true }, { stillSilent: () => undefined }, {}, { noWatch: true }]) {
    const { v, clock } = verdicts({ graceMs: 100, ...opts });
    v.judge('n1', '192.0.2.1', MARKED);
    clock.advance(100);
    assert.equal(v.judge('n1', '192.0.2.1', MARKED), true, JSON.stringify(Object.keys(opts)));
  }
});

test('the stillSilent question is not asked within the grace nor for an unmarked IP', () => {
  const { v, clock, asked } = verdicts({ graceMs: 100, stillSilent: () => false });
  assert.equal(v.judge('n1', '192.0.2.9', HELD), true, 'unmarked: fenced without asking the watch');
  v.judge('n1', '192.0.2.1', MARKED);
  clock.advance(50);
  v.judge('n1', '192.0.2.1', MARKED);
  assert.deepEqual(asked, []);
});

test('verdicts are per node and IP: another IP of the same node, or the same IP of another node, has a grace of its own', () => {
  const { v, clock, again } = verdicts({ graceMs: 100 });
  v.judge('n1', '192.0.2.1', MARKED);
  clock.advance(60);
  v.judge('n1', '192.0.2.2', MARKED);
  v.judge('n2', '192.0.2.1', { holder: 'n2', releasing: true });
  clock.advance(40);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), true);
  assert.equal(v.judge('n1', '192.0.2.2', MARKED), false);
  assert.equal(v.judge('n2', '192.0.2.1', { holder: 'n2', releasing: true }), false);
  clock.advance(60);
  assert.deepEqual(again, [['n1', '192.0.2.1'], ['n1', '192.0.2.2'], ['n2', '192.0.2.1']]);
});

test('a marked IP that is then seen unmarked, or held by someone else, drops its grace and its re-check', () => {
  const { v, clock, again } = verdicts({ graceMs: 100 });
  v.judge('n1', '192.0.2.1', MARKED);
  v.judge('n1', '192.0.2.2', MARKED);
  assert.equal(clock.pending, 2);
  assert.equal(v.judge('n1', '192.0.2.1', HELD), true, 'marker withdrawn but still silent: fenced');
  assert.equal(v.judge('n1', '192.0.2.2', { holder: 'n3', releasing: false }), false, 'released and taken');
  assert.equal(clock.pending, 0);
  clock.advance(1000);
  assert.deepEqual(again, []);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false, 'a later marker starts a new grace');
});

test('released(ip) cancels the re-check of that IP only (for every node waiting it out), and the grace starts over', () => {
  const { v, clock, again } = verdicts({ graceMs: 100 });
  v.released('192.0.2.1'); // nothing waited out: a no-op
  v.judge('n1', '192.0.2.1', MARKED);
  v.judge('n2', '192.0.2.1', { holder: 'n2', releasing: true });
  v.judge('n1', '192.0.2.11', MARKED); // ends with "1" too: not the same IP
  v.judge('n1', 'fd00::1', MARKED);
  v.judge('n1', '2001:db8:fd00::1', MARKED); // ends with "fd00::1": not the same IP either
  clock.advance(50);
  v.released('192.0.2.1');
  v.released('fd00::1');
  clock.advance(50);
  assert.deepEqual(again, [['n1', '192.0.2.11'], ['n1', '2001:db8:fd00::1']]);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false, 'a marker seen again after the release is a new grace');
  assert.equal(v.judge('n1', '192.0.2.11', MARKED), true, 'the other IP kept its grace');
});

test('dispose cancels every pending re-check', () => {
  const { v, clock, again } = verdicts({ graceMs: 100 });
  v.judge('n1', '192.0.2.1', MARKED);
  v.judge('n2', '192.0.2.2', { holder: 'n2', releasing: true });
  v.dispose();
  assert.equal(clock.pending, 0);
  clock.advance(1000);
  assert.deepEqual(again, []);
  assert.equal(v.judge('n1', '192.0.2.1', MARKED), false, 'nothing remembered');
});
