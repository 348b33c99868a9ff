/**
 * Cases aimed at the survivors of the mutation run of src/store/etcd/ownership.ts
 * (2026-11-27) that the two fast files left, in a file of their own so that an
 * incremental rerun retests only what they add. Same harness: a real etcd, one
 * manual clock per test.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { EtcdOwnership } from '../../src/store/etcd/ownership.js';
import { encodeHandoverRecord } from '../../src/store/etcd/handover-record.js';
import type { EtcdSession } from '../../src/store/etcd/session.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { IP, IP2, OPTS, START, byPref, harness, interceptWatchCreate } from '../helpers/etcd-ownership-harness.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';

/**
 * Holds back the watch events of `m`'s ownership while `paused` (a lagging
 * watch), replaying them in order on resume(). Install before start().
 */
function laggingWatch(session: EtcdSession) {
  const client = session.client;
  const realWatch = client.watch.bind(client);
  const held: Array<[string, unknown[]]> = [];
  const ctl = {
    paused: false,
    resume() {
      ctl.paused = false;
      for (const w of watchers) for (const [ev, args] of held.splice(0)) w.realEmit(ev, ...args);
    },
    /** Delivers the held events `pick` selects (in order), keeping the rest held. */
    replay(pick: (ev: string, key: string) => boolean) {
      const chosen = held.filter(([ev, args]) => pick(ev, String((args[0] as { key: Buffer }).key)));
      for (const e of chosen) held.splice(held.indexOf(e), 1);
      for (const w of watchers) for (const [ev, args] of chosen) w.realEmit(ev, ...args);
    },
  };
  const watchers: Array<{ realEmit: (ev: string, ...args: unknown[]) => boolean }> = [];
  interceptWatchCreate(client, realWatch, async (create) => {
    const watcher = await create();
    const realEmit = watcher.emit.bind(watcher);
    watchers.push({ realEmit });
    watcher.emit = ((ev: string, ...args: unknown[]) => {
      if (ctl.paused && (ev === 'put' || ev === 'delete')) {
        held.push([ev, args]);
        return true;
      }
      return realEmit(ev, ...args);
    }) as typeof watcher.emit;
    return watcher;
  });
  return ctl;
}


/** Documentation addresses (RFC 5737), n ≤ 99 per block. */
const block = (n: number, third: number) => Array.from({ length: n }, (_, i) => `192.0.2.${(third - 1) * 100 + i + 1}`);

describe('etcd ownership on a manual clock: survivors of the mutation run', () => {
  const real = useRealEtcd('own-surv');
  const { member, owning, seeingX, countReads, until, barrier, lines, lease, key, ownerKey, clockAt, ownerPut } = harness(real);

  test('hand-overs to us record at most 50 events a second: 60 IPs handed over record 50; a stop exactly a second later records again', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = block(60, 1);
    const b = block(5, 2);
    const p = await member('node-p', prefix, clock);
    const q = await member('node-q', prefix, clock);
    p.cands(a);
    q.cands(b);
    await until(clock, () => a.every((ip) => p.owned().has(ip)) && b.every((ip) => q.owned().has(ip)), 'p and q own their IPs', p);
    const o = await member('node-o', prefix, clock);
    o.cands([...a, ...b]);
    const seesAll = (m: typeof p, list: string[]) => () => {
      const cl = (m.own as unknown as { candidateLeases: Map<string, string> }).candidateLeases;
      return list.every((ip) => cl.get(`${ip}/node-o`) === o.session.leaseId);
    };
    await until(clock, () => seesAll(p, a)() && seesAll(q, b)(), 'the candidacies seen');
    const handedEvents = () => o.events.filter((e) => e.kind === 'owner-took' && e.cause === 'clean-stop').length;
    const stop = async (m: typeof p) => {
      const done = m.own.release({ silenced: true });
      await until(clock, () => lines(m, 'debug', 'trace: hand-over record written').length === 1, `${m.node}'s record`, m);
      clock.advance(100);
      await done;
    };
    await stop(p);
    await until(clock, () => a.every((ip) => o.owned().has(ip)), 'o owns the 60', o);
    await until(clock, () => lines(o, 'info', 'took ownership: handed over by the stopping owner').length === 60, '60 lines', o);
    assert.equal(handedEvents(), 50);
    // One watch message carried the 60 moves: one answer for all of them.
    assert.deepEqual(lines(o, 'debug', 'trace: handed over to us (watch batch)').map((l) => l.obj), [{ ips: 60 }]);
    // p's moves landed 100 ms after its record: q's land exactly 1,000 ms after them.
    clock.advance(900);
    await stop(q);
    await until(clock, () => lines(o, 'info', 'took ownership: handed over by the stopping owner').length === 65, '65 lines', o);
    assert.equal(handedEvents(), 55, 'a new second, a new budget');
  });

  test('a key moved onto our lease is answered without waiting for a pass (no clock step), each time; no events sink needed', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const b = await member('node-b', prefix, clock, { events: false });
    b.cands([IP, IP2]);
    await until(clock, () => b.own.view().owners.get(IP2) === 'node-x', 'sees node-x', b);
    // Not `until`: the clock does not move, so no pass (a zero-delay timer) runs.
    await ownerPut(prefix, IP, 'node-b', b.session.leaseId!);
    await waitFor(() => b.owned().has(IP), { timeoutMs: 5000, intervalMs: 5, what: 'answered at the watch event' });
    await ownerPut(prefix, IP2, 'node-b', b.session.leaseId!);
    await waitFor(() => b.owned().has(IP2), { timeoutMs: 5000, intervalMs: 5, what: 'the second answered at its watch event' });
    await waitFor(() => lines(b, 'info', 'took ownership: handed over by the stopping owner').length === 2, { timeoutMs: 5000, intervalMs: 5, what: 'the lines' });
  });

  test('an interrupted release is finished by a later pass, recorded with cause unknown', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Lease', { fail: new Error('store hiccup') });
    a.cands([]);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(a, 'info', 'released ownership').length === 1, 'finished', a);
    assert.deepEqual(
      a.events.filter((e) => e.kind === 'owner-released'),
      [
        { kind: 'owner-released', ip: IP, why: 'no longer a candidate', cause: 'link-or-policy' },
        { kind: 'owner-released', ip: IP, why: 'finishing an interrupted release', cause: 'unknown' },
      ],
    );
  });

  test('past the grace a marked owner heard answering since is not fenced (the wire watch is asked); the grace is the option given', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').lease(x.id).exec();
    const b = await seeingX('node-b', prefix, clock, { releaseGraceMs: 1000 });
    b.watch.silentStill = false;
    b.watch.silence('node-x');
    await until(clock, () => lines(b, 'info', /it is releasing: not fenced/).length === 1, 'graced', b);
    assert.equal(lines(b, 'info', /it is releasing: not fenced/)[0]!.obj.graceMs, 1000);
    clock.advance(1000);
    // The grace's re-check reads the store, then asks the watch: heard since, so nothing (no fence within 100 ms).
    await new Promise((r) => setTimeout(r, 100));
    clock.advance(0);
    assert.equal(b.own.status().fencesIssued, 0);
    assert.notEqual((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1');
    // Silent still, the next report past the grace fences.
    b.watch.silentStill = true;
    b.watch.silence('node-x');
    await until(clock, () => lines(b, 'info', /it is releasing: not fenced/).length === 2, 'a new grace', b);
    clock.advance(1000);
    await until(clock, () => b.owned().has(IP), 'fenced at the new grace end', b);
  });

  test('the periodic re-read runs every fullRefreshMs', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock, { fullRefreshMs: 7000 });
    const reads = countReads(a);
    // The first re-read (at start) ended at the clock's start: the next one is due 7 s later.
    clock.advance(6999);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(reads.n, 0, 'not before');
    clock.advance(1);
    await waitFor(() => reads.n === 1, { timeoutMs: 5000, intervalMs: 5, what: 'a re-read at 7 s' });
  });

  test('the store unreachable with withdraw: our keys leave the view at once (others stay), no re-read until the session is back', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const a = await member('node-a', prefix, clock, { fullRefreshMs: 120_000 });
    a.cands([IP]);
    await until(clock, () => a.owned().has(IP) && a.own.view().owners.get(IP2) === 'node-x', 'owns IP, sees IP2', a);
    const reads = countReads(a);
    clock.advance(55_000);
    assert.equal(a.session.state, 'lost');
    assert.equal(a.owned().size, 0, 'withdrawn at the step-down, synchronously');
    assert.deepEqual([...a.own.view().owners], [[IP2, 'node-x']]);
    assert.deepEqual(lines(a, 'warn', /keeping announcements/), []);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(reads.n, 0, 'no re-read while lost');
    assert.deepEqual([...a.own.view().owners], [[IP2, 'node-x']]);
  });

  test('an ownership without a wire watch starts and claims', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock, { watch: false });
  });

  test('a watch that cannot be created is warned about with the error; one disposed while being created is cancelled (nothing seen after)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const b = await member('node-b', prefix, clock, { start: false });
    await b.session.start();
    const client = b.session.client;
    const realWatch = client.watch.bind(client);
    (client as { watch: typeof client.watch }).watch = () => ({ prefix: () => ({ create: () => Promise.reject(new Error('no watch here')) }) }) as unknown as ReturnType<typeof client.watch>;
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    assert.match(String(lines(b, 'warn', 'etcd ownership watch could not be created; retrying')[0]?.obj.err), /no watch here/);
    // The retry's watch: the ownership is disposed while it is being created.
    interceptWatchCreate(client, realWatch, (create) => {
      b.own.dispose();
      return create();
    });
    clock.advance(1000);
    await waitFor(() => b.ownersCalls.n === 0 && (b.own as unknown as { disposed: boolean }).disposed, { what: 'disposed during the create', timeoutMs: 5000, intervalMs: 5 });
    await new Promise((r) => setTimeout(r, 100));
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(b.ownersCalls.n, 0, 'no watch events after dispose');
  });

  test("another node's key moved onto our lease without a record departs that node: its candidacies no longer delay a claim", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    // A name node-x is preferred over for IP2.
    const me = ['node-b', 'node-c', 'node-d', 'node-e', 'node-f'].find((n) => byPref(IP2, [n, 'node-x'])[0] === 'node-x')!;
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(x.id).exec();
    const b = await seeingX(me, prefix, clock);
    await ownerPut(prefix, IP, me, b.session.leaseId!);
    await until(clock, () => b.owned().has(IP), 'handed over by a move', b);
    b.cands([IP, IP2]);
    await until(clock, () => b.owned().has(IP2), 'claims IP2 at once', b);
    assert.equal(clock.now(), START);
  });

  test('preference is scored on the affinity key when the IP has one, else on the IP itself', async () => {
    const names = Array.from('bcdefghijklmnopqrstuvwxyz', (c) => `node-${c}`);
    const pair = (want: (m: string, y: string) => boolean) => {
      for (const m of names) for (const y of names) if (m !== y && want(m, y)) return [m, y] as const;
      throw new Error('no such pair');
    };
    // Preferred by the affinity key, not by the IP; then preferred by the IP, not by the node alone.
    const cases = [
      { aff: new Map([[IP, 'svc/z']]), pair: pair((m, y) => byPref('svc/z', [m, y])[0] === m && byPref(IP, [m, y])[0] === y) },
      { aff: new Map<string, string>(), pair: pair((m, y) => byPref(IP, [m, y])[0] === m && byPref('undefined', [m, y])[0] === y) },
    ];
    for (const { aff, pair: [m, y] } of cases) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const l = await lease();
      await real.raw.put(`${prefix}candidates/${IP}/${y}`).value('').lease(l.id).exec();
      const a = await member(m, prefix, clock);
      a.cands([IP], aff);
      await until(clock, () => a.owned().has(IP), `${m} claims at once`, a);
      assert.equal(clock.now(), START);
    }
  });

  test('a lease-less key changed before its removal is seen again: counted again, warned about once, removed then', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Mod', { before: () => real.raw.put(`${prefix}owners/${IP}`).value('node-y').exec() });
    await real.raw.put(`${prefix}owners/${IP}`).value('node-x').exec();
    await until(clock, async () => a.own.status().staleKeysIgnored === 2 && (await ownerKey(prefix)) === undefined, 'removed at the second sighting', a);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(a.own.status().staleKeysRemoved, 1, 'the failed removal not counted');
    assert.equal(a.own.status().staleKeysIgnored, 2);
    assert.equal(lines(a, 'warn', /without a live lease/).length, 1);
  });

  test('a watch lagging behind our own writes: its older events never resurrect a key we deleted', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, { start: false });
    await a.session.start();
    const lag = laggingWatch(a.session);
    await a.own.start(async (v) => void a.sets.push(new Set(v.owned)));
    lag.paused = true;
    a.cands([IP]);
    await until(clock, () => a.owned().has(IP), 'claimed (our own write, no watch)', a);
    a.cands([]);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(a, 'info', 'released ownership').length === 1, 'released', a);
    const n = a.sets.length;
    // The claim's put arrives now, after our own delete (its delete event still held).
    lag.replay((ev, key) => ev === 'put' && key === `${prefix}owners/${IP}`);
    assert.equal(a.own.view().owners.has(IP), false, 'the claim, replayed late, is older than the delete');
    await barrier(a, clock);
    assert.ok(a.sets.slice(n).every((set) => !set.has(IP)), 'never answered again');
    lag.resume();
  });

  test("a put learnt from a read (not the watch) over another node's key departs nobody", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    const me = ['node-b', 'node-c', 'node-d', 'node-e', 'node-f'].find((n) => byPref(IP2, [n, 'node-x'])[0] === 'node-x')!;
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(x.id).exec();
    const b = await member(me, prefix, clock, { start: false });
    await b.session.start();
    const lag = laggingWatch(b.session);
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    b.cands([IP]);
    await until(clock, () => b.own.view().owners.get(IP) === 'node-x', 'sees node-x', b);
    lag.paused = true;
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await ownerPut(prefix, IP, 'node-y', y.id);
    // Learnt by the silence check's read: node-y on its lease, a release and a claim (the delete between not seen).
    b.watch.silence('node-x');
    await until(clock, () => b.own.view().owners.get(IP) === 'node-y', 'learnt node-y', b);
    b.cands([IP, IP2]);
    await until(clock, () => (b.own as unknown as { timers: Map<string, unknown> }).timers.has(IP2) || b.owned().has(IP2), 'decided about IP2', b);
    assert.equal(b.owned().has(IP2), false, 'node-x still a candidate: no claim at once');
    lag.resume();
  });

  test('an ownership without an owners callback applies owner keys', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const session = real.own(await real.session(prefix, { clock }));
    const own = real.own(new EtcdOwnership(session, 'node-a', { clock, log: recordingLogger() }, OPTS));
    await own.start(() => {});
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await waitFor(() => own.view().owners.get(IP) === 'node-x', { what: 'seen', timeoutMs: 5000, intervalMs: 5 });
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await waitFor(() => !own.view().owners.has(IP), { what: 'gone', timeoutMs: 5000, intervalMs: 5 });
  });

  test("watched changes of another node's key that are no hand-over (its own move to a new lease, another node on that lease) depart nobody and are no take of ours", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const IP3 = '198.51.100.9';
    const lx = await lease();
    const lx2 = await lease();
    const me = ['node-b', 'node-c', 'node-d', 'node-e', 'node-f', 'node-g', 'node-h'].find((n) => byPref(IP2, [n, 'node-x'])[0] === 'node-x' && byPref(IP3, [n, 'node-x'])[0] === 'node-x')!;
    await ownerPut(prefix, IP, 'node-x', lx.id);
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(lx.id).exec();
    await real.raw.put(`${prefix}candidates/${IP3}/node-x`).value('').lease(lx2.id).exec();
    const b = await seeingX(me, prefix, clock);
    await ownerPut(prefix, IP, 'node-x', lx2.id);
    await ownerPut(prefix, IP, 'node-y', lx2.id);
    await until(clock, () => b.own.view().owners.get(IP) === 'node-y', 'sees node-y', b);
    b.cands([IP, IP2, IP3]);
    const timers = (b.own as unknown as { timers: Map<string, unknown> }).timers;
    await until(clock, () => [IP2, IP3].every((ip) => timers.has(ip)) || b.owned().has(IP2) || b.owned().has(IP3), 'decided', b);
    assert.equal(b.owned().has(IP2) || b.owned().has(IP3), false, "node-x's candidacies still count");
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(lines(b, 'info', 'took ownership: handed over by the stopping owner'), []);
    assert.deepEqual(b.events.filter((e) => e.kind === 'owner-took'), []);
  });

  test('no candidacy on the watch: a lease-less one (its removal failing), one without a node, a key of another kind under the prefix', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const names = Array.from('bcdefghijklmnopqrstuvwxyz', (c) => `node-${c}`);
    // Our name, and a name preferred over it for IP; 'undefined' (a missing node part) preferred over ours too.
    const me = names.find((n) => byPref(IP, [n, 'undefined'])[0] === 'undefined' && names.some((y) => y !== n && byPref(IP, [n, y])[0] === y))!;
    const y = names.find((n) => n !== me && byPref(IP, [me, n])[0] === n)!;
    const l = await lease();
    const a = await member(me, prefix, clock);
    beforeNextTxn(a.session, 'Mod', { fail: new Error('not removed') });
    await real.raw.put(`${prefix}candidates/${IP}/${y}`).value('').exec();
    await real.raw.put(`${prefix}candidates/${IP}`).value('').lease(l.id).exec();
    // 'elsewhere!/' is as long as 'candidates/'.
    await real.raw.put(`${prefix}elsewhere!/${IP}/${y}`).value('').lease(l.id).exec();
    await until(clock, () => a.own.status().staleKeysIgnored === 1, 'the lease-less one seen', a);
    await barrier(a, clock);
    a.cands([IP]);
    await until(clock, () => a.owned().has(IP), 'claimed', a);
    assert.equal(clock.now(), START, 'at once');
  });

  test("a departed node's candidacy arriving later is no candidacy", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const me = ['node-b', 'node-c', 'node-d', 'node-e', 'node-f'].find((n) => byPref(IP2, [n, 'node-x'])[0] === 'node-x')!;
    const b = await member(me, prefix, clock);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-z', lease: x.id }])!).lease(x.id).exec();
    await until(clock, () => (b.own as unknown as { departed: Map<string, unknown> }).departed.has(x.id), 'node-x departed', b);
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(x.id).exec();
    await barrier(b, clock);
    b.cands([IP2]);
    await until(clock, () => b.owned().has(IP2), 'claimed', b);
    assert.equal(clock.now(), START, 'at once');
  });

  /** A name `node` is preferred over for each of `ips`. */
  const below = (node: string, ips: string[]) =>
    Array.from('bcdefghijklmnopqrstuvwxyz', (c) => `node-${c}`).find((n) => n !== node && ips.every((ip) => byPref(ip, [n, node])[0] === node))!;

  test('a departure lasts 10 s from its first sighting (a record seen again does not extend it)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const me = below('node-x', [IP2]);
    const b = await member(me, prefix, clock);
    const rec = encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-z', lease: x.id }])!;
    const departed = (b.own as unknown as { departed: Map<string, { untilMs: number }> }).departed;
    await real.raw.put(`${prefix}handover/node-x`).value(rec).lease(x.id).exec();
    await until(clock, () => departed.has(x.id), 'node-x departed', b);
    clock.advance(5000);
    await real.raw.put(`${prefix}handover/node-x`).value(`${rec} `).lease(x.id).exec();
    await barrier(b, clock);
    clock.advance(5000);
    // 10 s after the first sighting: node-x's candidacy counts again.
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(x.id).exec();
    await until(clock, () => (b.own as unknown as { others: Map<string, Map<string, number>> }).others.get(IP2)?.has('node-x') === true, 'the candidacy counts', b);
  });

  test('at most 64 departures are remembered: the 65th forgets the oldest', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const nodes = Array.from({ length: 65 }, (_, i) => `stop-${i}`);
    const ipA = '198.51.100.20';
    const me = below(nodes[0]!, [ipA]);
    const b = await member(me, prefix, clock);
    const leases: string[] = [];
    for (const n of nodes) leases.push((await lease()).id);
    const counts = () => (b.own as unknown as { others: Map<string, Map<string, number>> }).others.get(ipA)?.has(nodes[0]!) === true;
    for (let i = 0; i < 64; i++) await real.raw.put(`${prefix}handover/${nodes[i]}`).value(encodeHandoverRecord(nodes[i]!, [{ ip: IP, node: 'node-z', lease: leases[i]! }])!).lease(leases[i]!).exec();
    await until(clock, () => (b.own as unknown as { departed: Map<string, unknown> }).departed.size === 64, '64 departed', b);
    // The oldest is still departed: its candidacy is no candidacy.
    await real.raw.put(`${prefix}candidates/${ipA}/${nodes[0]}`).value('').lease(leases[0]!).exec();
    await barrier(b, clock);
    assert.equal(counts(), false);
    await real.raw.put(`${prefix}handover/${nodes[64]}`).value(encodeHandoverRecord(nodes[64]!, [{ ip: IP, node: 'node-z', lease: leases[64]! }])!).lease(leases[64]!).exec();
    await barrier(b, clock);
    await real.raw.put(`${prefix}candidates/${ipA}/${nodes[0]}`).value(' ').lease(leases[0]!).exec();
    await until(clock, counts, 'the oldest forgotten: its candidacy counts', b);
  });

  test("a departing node's candidacies go, another node's for the same IP stay", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    const me = below('node-y', [IP2]);
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(x.id).exec();
    await real.raw.put(`${prefix}candidates/${IP2}/node-y`).value('').lease(y.id).exec();
    const b = await member(me, prefix, clock);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-z', lease: x.id }])!).lease(x.id).exec();
    await until(clock, () => (b.own as unknown as { departed: Map<string, unknown> }).departed.has(x.id), 'node-x departed', b);
    b.cands([IP2]);
    const timers = (b.own as unknown as { timers: Map<string, unknown> }).timers;
    await until(clock, () => timers.has(IP2) || b.owned().has(IP2), 'decided', b);
    assert.equal(b.owned().has(IP2), false, 'node-y, preferred, still a candidate');
  });

  test('a record that names us is traced with how many IPs it names us for; one that does not is not', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const w = await lease();
    const b = await member('node-b', prefix, clock);
    await real.raw.put(`${prefix}handover/node-w`).value(encodeHandoverRecord('node-w', [{ ip: IP, node: 'node-z', lease: w.id }])!).lease(w.id).exec();
    await real.raw
      .put(`${prefix}handover/node-x`)
      .value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-b', lease: b.session.leaseId! }, { ip: IP2, node: 'node-z', lease: x.id }, { ip: '198.51.100.9', node: 'node-b', lease: b.session.leaseId! }])!)
      .lease(x.id)
      .exec();
    await until(clock, () => lines(b, 'debug', 'trace: hand-over record names us').length === 1, 'traced', b);
    await barrier(b, clock);
    assert.deepEqual(lines(b, 'debug', 'trace: hand-over record names us').map((l) => l.obj), [{ from: 'node-x', ips: 2 }]);
  });

  test('a record deleted 10 s before the owner key no longer voids anything: the preferred claims at once', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    const successor = Array.from('bcdefghijklmnopqrstuvwxyz', (c) => `node-${c}`).find((n) => byPref(IP, [n, 'node-m'])[0] === 'node-m')!;
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}candidates/${IP}/${successor}`).value('').lease(y.id).exec();
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: successor, lease: y.id }])!).lease(x.id).exec();
    const m = await seeingX('node-m', prefix, clock);
    await real.raw.delete().key(`${prefix}handover/node-x`).exec();
    await until(clock, () => [...(m.own as unknown as { handovers: Map<string, { goneAtMs?: number }> }).handovers.values()].every((r) => r.goneAtMs !== undefined), 'the record gone', m);
    clock.advance(10_000);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => m.owned().has(IP), 'claimed', m);
    assert.equal(clock.now(), START + 10_000, 'at once');
  });

  test('only a record by the owner key node, on its lease, voids a vanished key', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const lx = await lease();
    const lx2 = await lease();
    await ownerPut(prefix, IP, 'node-x', lx.id);
    await ownerPut(prefix, IP2, 'node-x', lx2.id);
    // On IP's lease but by another node; by IP2's node but on another lease.
    await real.raw.put(`${prefix}handover/node-w`).value(encodeHandoverRecord('node-w', [{ ip: IP, node: 'node-y', lease: lx.id }])!).lease(lx.id).exec();
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP2, node: 'node-y', lease: lx.id }])!).lease(lx.id).exec();
    const m = await member('node-m', prefix, clock);
    m.cands([IP, IP2]);
    await until(clock, () => m.own.view().owners.size === 2, 'sees both', m);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await real.raw.delete().key(`${prefix}owners/${IP2}`).exec();
    await until(clock, () => m.owned().has(IP) && m.owned().has(IP2), 'claimed', m);
    assert.equal(clock.now(), START, 'at once');
  });

  test('a re-read that fails is a debug line; the next one repairs the view', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const client = a.session.client;
    const realGetAll = client.getAll.bind(client);
    (client as { getAll: typeof client.getAll }).getAll = () => {
      (client as { getAll: typeof client.getAll }).getAll = realGetAll;
      return { prefix: () => ({ exec: () => Promise.reject(new Error('read refused')) }) } as unknown as ReturnType<typeof client.getAll>;
    };
    await a.own.livenessGate().recheck('test');
    assert.match(String(lines(a, 'debug', 'etcd ownership refresh failed')[0]?.obj.err), /read refused/);
  });

  test('a fence whose revoke fails: nothing counted, re-read; the hand-over before it stands (the key moved to the successor)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    const lc = b.session.client.leaseClient;
    const realRevoke = lc.leaseRevoke.bind(lc);
    (lc as { leaseRevoke: typeof lc.leaseRevoke }).leaseRevoke = (...args: Parameters<typeof lc.leaseRevoke>) => {
      (lc as { leaseRevoke: typeof lc.leaseRevoke }).leaseRevoke = realRevoke;
      void args;
      return Promise.reject(new Error('revoke refused'));
    };
    b.watch.silence('node-x');
    await until(clock, () => b.owned().has(IP), 'handed to b at the record', b);
    clock.advance(100);
    await until(clock, () => lines(b, 'debug', 'revoking a silent owner failed (already gone?)').length === 1, 'the failure', b);
    assert.deepEqual(lines(b, 'debug', 'revoking a silent owner failed (already gone?)')[0]!.obj.node, 'node-x');
    await barrier(b, clock);
    assert.equal(b.own.status().fencesIssued, 0);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-b', lease: b.session.leaseId });
    assert.equal(b.owned().has(IP), true);
  });

  test('a withdrawal not confirmed for two IPs removes both markers', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    const watcher = await real.raw.watch().prefix(`${prefix}releasing/`).create();
    real.own({ dispose: () => void watcher.cancel() });
    const deleted = new Set<string>();
    watcher.on('delete', (kv) => void deleted.add(kv.key.toString().slice(`${prefix}releasing/`.length)));
    a.apply.fn = () => Promise.reject(new Error('datapath broken'));
    a.cands([]);
    await until(clock, () => deleted.has(IP) && deleted.has(IP2), 'both markers removed', a);
    a.apply.fn = () => {};
  });

  test('a stop hands two IPs over in one transaction; a record that cannot be written leaves the moves alone, at once', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await member('node-p', prefix, clock);
    p.cands([IP, IP2]);
    await until(clock, () => p.owned().has(IP) && p.owned().has(IP2), 'owns both', p);
    const o = await member('node-o', prefix, clock);
    o.cands([IP, IP2]);
    const cl = (p.own as unknown as { candidateLeases: Map<string, string> }).candidateLeases;
    await until(clock, () => cl.get(`${IP}/node-o`) === o.session.leaseId && cl.get(`${IP2}/node-o`) === o.session.leaseId, 'the candidacies seen', p);
    const client = p.session.client;
    const realPut = client.put.bind(client);
    (client as { put: typeof client.put }).put = (key: Parameters<typeof client.put>[0]) => {
      (client as { put: typeof client.put }).put = realPut;
      const b = realPut(key);
      return Object.assign(b, { value: () => ({ lease: () => Promise.reject(new Error('record refused')) }) }) as unknown as ReturnType<typeof client.put>;
    };
    // No clock step: the moves do not wait for a record that is not there.
    await p.own.release({ silenced: true });
    assert.match(String(lines(p, 'debug', 'writing the hand-over record failed; the moves hand over alone')[0]?.obj.err), /record refused/);
    assert.deepEqual(await ownerKey(prefix, IP), { value: 'node-o', lease: o.session.leaseId });
    assert.deepEqual(await ownerKey(prefix, IP2), { value: 'node-o', lease: o.session.leaseId });
    assert.deepEqual(lines(p, 'info', 'handed ownership over to the successors').map((l) => l.obj), [{ ips: 2, of: 2 }]);
  });

  test('a record gone before a re-read still voids its key for 10 s', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-y', lease: x.id }])!).lease(x.id).exec();
    const m = await seeingX('node-m', prefix, clock);
    await real.raw.delete().key(`${prefix}handover/node-x`).exec();
    const handovers = () => (m.own as unknown as { handovers: Map<string, { goneAtMs?: number }> }).handovers;
    await until(clock, () => [...handovers().values()].every((r) => r.goneAtMs !== undefined), 'the record gone', m);
    clock.advance(5000);
    await m.own.livenessGate().recheck('test');
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => (m.own as unknown as { timers: Map<string, unknown> }).timers.has(IP) || m.owned().has(IP), 'decided', m);
    assert.equal(m.owned().has(IP), false, 'voided: not at once');
  });

  test('a record grants only IPs named for us, whose owner key stands under its node on its lease', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const ips = ['198.51.100.31', '198.51.100.32', '198.51.100.33', '198.51.100.34'];
    const b = await member('node-b', prefix, clock);
    await ownerPut(prefix, ips[0]!, 'node-x', x.id); // granted
    await ownerPut(prefix, ips[1]!, 'node-w', x.id); // another node on the record's lease
    // ips[2]: no owner key at all; ips[3]: named for another node, with our lease.
    await ownerPut(prefix, ips[3]!, 'node-x', x.id);
    b.cands(ips);
    const owners = () => b.own.view().owners;
    await until(clock, () => owners().get(ips[0]!) === 'node-x' && owners().get(ips[1]!) === 'node-w' && owners().get(ips[3]!) === 'node-x', 'sees the keys', b);
    const ours = b.session.leaseId!;
    await real.raw
      .put(`${prefix}handover/node-x`)
      .value(encodeHandoverRecord('node-x', [{ ip: ips[0]!, node: 'node-b', lease: ours }, { ip: ips[1]!, node: 'node-b', lease: ours }, { ip: ips[2]!, node: 'node-b', lease: ours }, { ip: ips[3]!, node: 'node-z', lease: ours }])!)
      .lease(x.id)
      .exec();
    await until(clock, () => b.owned().has(ips[0]!), 'granted', b);
    await barrier(b, clock);
    assert.equal(b.owned().has(ips[1]!), false);
    assert.equal(b.owned().has(ips[3]!), false);
    // ips[2] had no key: claimed as free, not granted by the record.
    assert.deepEqual(await ownerKey(prefix, ips[2]!), { value: 'node-b', lease: ours });
  });

  test("a departure is of a node on a lease: another node's candidacy on that lease still counts", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const me = below('node-w', [IP2]);
    const b = await member(me, prefix, clock);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-z', lease: x.id }])!).lease(x.id).exec();
    await until(clock, () => (b.own as unknown as { departed: Map<string, unknown> }).departed.has(x.id), 'node-x departed', b);
    await real.raw.put(`${prefix}candidates/${IP2}/node-w`).value('').lease(x.id).exec();
    await until(clock, () => (b.own as unknown as { others: Map<string, Map<string, number>> }).others.get(IP2)?.has('node-w') === true, 'node-w counts', b);
  });

  test('an IP we released and take again is a free take (our own key going is no previous owner)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    a.cands([]);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(a, 'info', 'released ownership').length === 1, 'released', a);
    a.cands([IP]);
    await until(clock, () => a.events.filter((e) => e.kind === 'owner-took').length === 2, 'taken again', a);
    assert.deepEqual(a.events.filter((e) => e.kind === 'owner-took')[1], { kind: 'owner-took', ip: IP, hint: 'free' });
  });

  test('with a record standing, the delete of an owner key we never held in the view is harmless; a deleted candidacy no longer counts', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    const me = below('node-y', [IP2]);
    await real.raw.put(`${prefix}candidates/${IP2}/node-y`).value('').lease(y.id).exec();
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-z', lease: x.id }])!).lease(x.id).exec();
    const b = await member(me, prefix, clock);
    await until(clock, () => (b.own as unknown as { handovers: Map<string, unknown> }).handovers.size === 1, 'the record seen', b);
    // A lease-less owner key: never in the view, removed, its delete seen.
    await real.raw.put(`${prefix}owners/${IP}`).value('node-q').exec();
    await until(clock, () => b.own.status().staleKeysRemoved === 1, 'removed', b);
    await real.raw.delete().key(`${prefix}candidates/${IP2}/node-y`).exec();
    await until(clock, () => !(b.own as unknown as { others: Map<string, Map<string, number>> }).others.has(IP2), 'the candidacy gone', b);
    b.cands([IP2]);
    await until(clock, () => b.owned().has(IP2), 'claimed', b);
    assert.equal(clock.now(), START);
  });

  test("a candidacy deleted leaves the IP's other candidacies; a delete of another kind of key touches none", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const y = await lease();
    const w = await lease();
    const me = below('node-w', [IP2]);
    await real.raw.put(`${prefix}candidates/${IP2}/node-y`).value('').lease(y.id).exec();
    await real.raw.put(`${prefix}candidates/${IP2}/node-w`).value('').lease(w.id).exec();
    await real.raw.put(`${prefix}elsewhere!/${IP2}/node-w`).value('').lease(w.id).exec();
    const b = await member(me, prefix, clock);
    const others = () => (b.own as unknown as { others: Map<string, Map<string, number>> }).others.get(IP2);
    await until(clock, () => others()?.size === 2, 'both seen', b);
    await real.raw.delete().key(`${prefix}elsewhere!/${IP2}/node-w`).exec();
    await real.raw.delete().key(`${prefix}candidates/${IP2}/node-y`).exec();
    await until(clock, () => others()?.has('node-y') === false, 'node-y gone', b);
    assert.equal(others()?.has('node-w'), true, 'node-w stays');
  });

  test('read at start: markers on the key lease (lease-less ones not), a broken record, keys of other kinds and candidacies without a node are no candidacies', async () => {
    const names = Array.from('bcdefghijklmnopqrstuvwxyz', (c) => `node-${c}`);
    const me = names.find((n) => byPref(IP, [n, 'undefined'])[0] === 'undefined' && names.some((y) => y !== n && byPref(IP, [n, y])[0] === y))!;
    const y = names.find((n) => n !== me && byPref(IP, [me, n])[0] === n)!;
    for (const leaseLess of [false, true]) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      const l = await lease();
      const [ipA, ipB] = ['198.51.100.41', '198.51.100.42'];
      await ownerPut(prefix, ipA, 'node-x', x.id);
      await ownerPut(prefix, ipB, 'node-x', x.id);
      if (leaseLess) await real.raw.put(`${prefix}releasing/${ipA}`).value('node-x').exec();
      else await real.raw.put(`${prefix}releasing/${ipA}`).value('node-x').lease(x.id).exec();
      await real.raw.put(`${prefix}handover/node-q`).value('{broken').lease(l.id).exec();
      await real.raw.put(`${prefix}candidates/${IP}`).value('').lease(l.id).exec();
      await real.raw.put(`${prefix}elsewhere!/${IP}/${y}`).value('').lease(l.id).exec();
      const b = await member(me, prefix, clock);
      b.cands([ipA, ipB]);
      await until(clock, () => b.watch.targets.length === 1, 'a target', b);
      assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: leaseLess ? ipA : ipB, iface: 'eth0' }]);
      b.cands([ipA, ipB, IP]);
      await until(clock, () => b.owned().has(IP), 'claimed', b);
      assert.equal(clock.now(), START, 'at once');
    }
  });

  test('a re-read does not count our own candidacy as another node (a stop names no successor then); a node departed by a move stays departed over a re-read', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const me = below('node-x', [IP2]);
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}candidates/${IP2}/node-x`).value('').lease(x.id).exec();
    const b = await seeingX(me, prefix, clock);
    await ownerPut(prefix, IP, me, b.session.leaseId!);
    await until(clock, () => b.owned().has(IP), 'moved to us', b);
    await b.own.livenessGate().recheck('test');
    b.cands([IP, IP2]);
    await until(clock, () => b.owned().has(IP2), 'IP2 claimed', b);
    assert.equal(clock.now(), START, 'at once: node-x departed');
    await b.own.release({ silenced: true });
    assert.equal(await key(`${prefix}handover/${me}`), undefined, 'no successor: no record');
  });

  test('after a release no pass publishes or claims anything', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    await a.own.release();
    a.cands([IP, IP2]);
    clock.advance(OPTS.contendDelayMs + 10);
    await new Promise((r) => setTimeout(r, 100));
    clock.advance(0);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(await key(`${prefix}candidates/${IP2}/node-a`), undefined);
    assert.equal(await ownerKey(prefix, IP2), undefined);
  });

  test('an interrupted release whose key vanished meanwhile is over: the IP can be claimed and answered again, no release repeated', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, { start: false });
    await a.session.start();
    const lag = laggingWatch(a.session);
    await a.own.start(async (v) => void a.sets.push(new Set(v.owned)));
    a.cands([IP]);
    await until(clock, () => a.owned().has(IP), 'owns', a);
    await barrier(a, clock);
    // No watch event until resumed: the failed release is followed by no pass until then.
    lag.paused = true;
    beforeNextTxn(a.session, 'Lease', { before: () => real.raw.delete().key(`${prefix}owners/${IP}`).exec(), fail: new Error('store hiccup') });
    a.cands([]);
    await until(clock, () => lines(a, 'debug', 'etcd ownership sync failed; retrying').length === 1, 'failed', a);
    lag.resume();
    await until(clock, () => !a.own.view().owners.has(IP), 'the delete seen', a);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'both claimed and answered', a);
    await barrier(a, clock);
    assert.deepEqual(lines(a, 'info', 'released ownership'), []);
  });

  test('a standing record naming us still grants after a re-read', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-b', lease: b.session.leaseId! }])!).lease(x.id).exec();
    await until(clock, () => b.owned().has(IP), 'granted', b);
    await b.own.livenessGate().recheck('test');
    await barrier(b, clock);
    assert.equal(b.owned().has(IP), true);
  });
});
