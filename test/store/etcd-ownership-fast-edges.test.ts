/**
 * Edges of per-IP ownership (src/store/etcd/ownership.ts) on a manual clock
 * against a real etcd, beside etcd-ownership-fast.test.ts (kept apart so a
 * mutation run reruns only what these cases change): batches at the chunk
 * sizes, a store that differs from the view at a write (a claim, a release,
 * a move after an outage, a hand-over on a stop), failed writes, the wire
 * watch's targets, the hold's start across re-reads, hand-over records read
 * at start, and a watch that cannot be created.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { rendezvousMemoHas } from '../../src/controlplane/ownership/rendezvous.js';
import { encodeHandoverRecord } from '../../src/store/etcd/handover-record.js';
import { RANK_AHEAD_AFTER_MS } from '../../src/store/etcd/ownership.js';
import type { EtcdSession } from '../../src/store/etcd/session.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { IP, IP2, OPTS, START, byPref, harness, type Member } from '../helpers/etcd-ownership-harness.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';

/** Counts the session's transactions by their first compare's target ('Create', 'Lease', 'Version', 'Mod'). */
function countTxns(session: EtcdSession): Map<string, number> {
  const counts = new Map<string, number>();
  const client = session.client;
  const realIf = client.if.bind(client);
  (client as { if: typeof client.if }).if = ((...args: Parameters<typeof client.if>) => {
    counts.set(String(args[1]), (counts.get(String(args[1])) ?? 0) + 1);
    return realIf(...args);
  }) as typeof client.if;
  return counts;
}

/** Documentation addresses (RFC 5737), n ≤ 254. */
const ips = (n: number) => Array.from({ length: n }, (_, i) => `192.0.2.${i + 1}`);

describe('etcd ownership on a manual clock: edges', () => {
  const real = useRealEtcd('own-edges');
  const { member, owning, seeingX, ownerWithPreferred, until, barrier, lines, lease, key, ownerKey, clockAt, candidacy, ownerPut } = harness(real);
  const took = (m: Member) => m.events.filter((e) => e.kind === 'owner-took');

  test('130 free IPs: published in two transactions of ≤ 100, claimed in two of ≤ 125, 50 took events; released in three of ≤ 60, 50 released events', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const counts = countTxns(a.session);
    const all = ips(130);
    a.cands(all);
    await until(clock, () => all.every((ip) => a.owned().has(ip)), 'owns all 130', a);
    assert.equal(counts.get('Create'), 2);
    assert.equal(counts.get('Version'), 2, 'candidacies in two transactions');
    assert.equal(took(a).length, 50);
    assert.equal((await real.raw.getAll().prefix(`${prefix}owners/`).keys()).length, 130);
    assert.equal((await real.raw.getAll().prefix(`${prefix}candidates/`).keys()).length, 130);
    await until(clock, () => lines(a, 'info', 'took ownership').length === 130, '130 took lines');
    counts.clear();
    a.cands([]);
    await until(clock, async () => (await real.raw.getAll().prefix(`${prefix}owners/`).keys()).length === 0, 'all released', a);
    await until(clock, () => lines(a, 'info', 'released ownership').length === 130, '130 released lines', a);
    assert.equal(counts.get('Lease'), 3, 'deleted in three transactions');
    // Retracted (two) and marked (two, of ≤ 125).
    assert.equal(counts.get('Version'), 4);
    assert.equal(a.events.filter((e) => e.kind === 'owner-released').length, 50);
    assert.equal((await real.raw.getAll().prefix(`${prefix}releasing/`).keys()).length, 0);
    assert.equal((await real.raw.getAll().prefix(`${prefix}candidates/`).keys()).length, 0);
    assert.equal(a.owned().size, 0);
  });

  test('a claim over a key taken meanwhile: learnt from the else branch, the rest claimed in a second round', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await member('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Create', { before: () => ownerPut(prefix, IP2, 'node-x', x.id) });
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.own.view().owners.get(IP2) === 'node-x', 'IP ours, IP2 node-x', a);
    assert.equal(a.owned().has(IP2), false);
    assert.deepEqual(took(a).map((e) => e.ip), [IP]);
    assert.deepEqual(await ownerKey(prefix, IP2), { value: 'node-x', lease: x.id });
    assert.deepEqual(await ownerKey(prefix, IP), { value: 'node-a', lease: a.session.leaseId });
  });

  test('a release over a key that moved meanwhile: nothing deleted, the other owner learnt, our marker removed', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await owning('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Lease', { before: () => ownerPut(prefix, IP, 'node-x', x.id) });
    a.cands([]);
    await until(clock, async () => a.own.view().owners.get(IP) === 'node-x' && (await key(`${prefix}releasing/${IP}`)) === undefined, 'learnt, unmarked', a);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id });
    assert.equal(a.owned().has(IP), false);
  });

  test('a release whose delete fails: withdrawn, the key kept, the release finished by a later pass ("finishing an interrupted release")', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Lease', { fail: new Error('store hiccup') });
    a.cands([]);
    await until(clock, () => lines(a, 'debug', 'etcd ownership sync failed; retrying').length === 1, 'the failure', a);
    assert.equal(a.owned().has(IP), false, 'withdrawn');
    clock.advance(510);
    await until(clock, async () => (await ownerKey(prefix)) === undefined, 'deleted on the retry', a);
    await until(clock, () => lines(a, 'info', 'released ownership').length === 1, 'the line', a);
    assert.deepEqual(lines(a, 'info', 'released ownership')[0]!.obj, { ip: IP, why: 'finishing an interrupted release' });
  });

  test('a releasing marker that cannot be written: warned, the hand-over goes on', async () => {
    const prefix = real.freshPrefix();
    const { hi, lo, clock, o, preferredLease: y } = await ownerWithPreferred(prefix);
    await barrier(o, clock);
    await until(clock, async () => true, 'settle');
    beforeNextTxn(o.session, 'Version', { fail: new Error('no marker') });
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined, 'handed over', o);
    assert.deepEqual(lines(o, 'warn', 'could not mark IPs as releasing: a candidate may take our silence for death').map((l) => ({ ips: l.obj.ips, first: l.obj.first })), [{ ips: 1, first: IP }]);
  });

  test('silence reported while the store cannot be read: the fence decides (revoked)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    beforeNextTxn(b.session, 'Version', { fail: new Error('unreadable') });
    b.watch.silence('node-x');
    await until(clock, () => b.owned().has(IP), 'handed to b at the record', b);
    clock.advance(100);
    await until(clock, () => b.own.status().fencesIssued === 1, 'moved and revoked', b);
  });

  test('silence about an IP whose key moved or vanished by the time it is read: nothing fenced, the view learns it', async () => {
    for (const moved of [true, false]) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      const y = await lease();
      await ownerPut(prefix, IP, 'node-x', x.id);
      await ownerPut(prefix, IP2, 'node-x', x.id);
      const b = await seeingX('node-b', prefix, clock);
      beforeNextTxn(b.session, 'Version', { before: () => (moved ? ownerPut(prefix, IP, 'node-y', y.id) : real.raw.delete().key(`${prefix}owners/${IP}`).exec()) });
      b.watch.silence('node-x');
      await until(clock, () => lines(b, 'info', /no longer holds: not fenced/).length === 1, 'not fenced', b);
      assert.notEqual((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1', 'node-x keeps its lease');
      assert.equal(b.own.status().fencesIssued, 0);
      if (moved) await until(clock, () => b.own.view().owners.get(IP) === 'node-y', 'learnt node-y', b);
      else await until(clock, () => b.owned().has(IP), 'free: claimed', b);
    }
  });

  test('after a release, or a dispose, silence fences nothing', async () => {
    for (const how of ['release', 'dispose'] as const) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      await ownerPut(prefix, IP, 'node-x', x.id);
      const b = await seeingX('node-b', prefix, clock);
      const counts = countTxns(b.session);
      if (how === 'release') await b.own.release();
      else b.own.dispose();
      b.watch.silence('node-x');
      clock.advance(0);
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(counts.size, 0, `no read, no fence (${how})`);
      assert.notEqual((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1');
    }
  });

  test('the wire watch: one target per other owner, an IP it is releasing only when it owns nothing else; a lease-less marker counts for nothing', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    // IP sorts before IP2: the target unless IP is marked.
    await ownerPut(prefix, IP, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    b.cands([IP, IP2]);
    await until(clock, () => b.watch.targets.length === 1, 'a target', b);
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: IP, iface: 'eth0' }]);
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').lease(x.id).exec();
    await until(clock, () => b.watch.targets[0]?.ip === IP2, 'the unmarked one', b);
    // A lease-less marker (and a marker by another node) is no marker.
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').exec();
    await until(clock, () => b.watch.targets[0]?.ip === IP, 'back to IP', b);
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-z').lease(x.id).exec();
    await barrier(b, clock);
    assert.equal(b.watch.targets[0]?.ip, IP);
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').lease(x.id).exec();
    await until(clock, () => b.watch.targets[0]?.ip === IP2, 'marked again', b);
    await real.raw.delete().key(`${prefix}releasing/${IP}`).exec();
    await until(clock, () => b.watch.targets[0]?.ip === IP, 'the marker deleted', b);
    // The owners callback runs on every owner key change.
    const n = b.ownersCalls.n;
    await real.raw.delete().key(`${prefix}owners/${IP2}`).exec();
    await until(clock, () => b.ownersCalls.n > n, 'told of the delete', b);
  });

  test("the hand-over hold counts from a candidacy's first sighting, across a re-read and a re-put of the key", async () => {
    const prefix = real.freshPrefix();
    const { hi, lo, clock, o, preferredLease: y } = await ownerWithPreferred(prefix);
    await barrier(o, clock);
    clock.advance(3000);
    await candidacy(prefix, IP, hi, y.id);
    await o.own.livenessGate().recheck('test');
    await barrier(o, clock);
    assert.equal(o.owned().has(IP), true);
    clock.advance(OPTS.handoverHoldMs - 3000 + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined, 'handed over at the first sighting + hold', o);
  });

  test('a hand-over record read at start: the named successor answers; the stopping node is departed (its candidacy no longer delays a claim)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    // A node name node-x is preferred over for IP2: node-x's candidacy would delay our claim.
    const me = ['node-b', 'node-c', 'node-d', 'node-e', 'node-f'].find((n) => byPref(IP2, [n, 'node-x'])[0] === 'node-x')!;
    await ownerPut(prefix, IP, 'node-x', x.id);
    await candidacy(prefix, IP2, 'node-x', x.id);
    // The successor's lease is only known once the member's session is up: the record follows its start.
    const b = await member(me, prefix, clock, { start: false });
    await b.session.start();
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: me, lease: b.session.leaseId! }])!).lease(x.id).exec();
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    b.cands([IP, IP2]);
    await until(clock, () => b.owned().has(IP) && b.owned().has(IP2), 'answers IP at the record, claims IP2 at once', b);
    assert.equal(clock.now(), START);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id });
  });

  test('a record on no lease, a broken one, or our own grants nothing', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    const rec = encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-b', lease: b.session.leaseId! }])!;
    await real.raw.put(`${prefix}handover/node-x`).value(rec).exec();
    await real.raw.put(`${prefix}handover/node-y`).value('{broken').lease(x.id).exec();
    await barrier(b, clock);
    assert.equal(b.owned().has(IP), false, 'a lease-less record');
    // The same record on the lease: granted (the two cases above differ only by it).
    await real.raw.put(`${prefix}handover/node-x`).value(rec).lease(x.id).exec();
    await until(clock, () => b.owned().has(IP), 'granted on the lease', b);
    // Replaced by a broken one: nothing any more.
    await real.raw.put(`${prefix}handover/node-x`).value('{broken').lease(x.id).exec();
    await until(clock, () => !b.owned().has(IP), 'a broken record grants nothing', b);
  });

  test('a key vanishing while a record named us for it: we claim at once (not voided)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    b.cands([IP]);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-b', lease: b.session.leaseId! }])!).lease(x.id).exec();
    await until(clock, () => b.owned().has(IP), 'answers at the record', b);
    await x.revoke();
    await until(clock, async () => (await ownerKey(prefix))?.value === 'node-b', 'claimed at once', b);
    assert.equal(clock.now(), START);
  });

  test('a stop hands each IP to its most preferred other candidate; a successor lease gone at the move hands nothing (the revoke frees it)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock);
    const [best, second] = byPref(IP, ['node-y', 'node-z']) as [string, string];
    const lb = await lease();
    const l2 = await lease();
    await candidacy(prefix, IP, second, l2.id);
    await candidacy(prefix, IP, best, lb.id);
    await until(clock, () => (p.own as unknown as { others: Map<string, Map<string, number>> }).others.get(IP)?.size === 2, 'both candidacies seen', p);
    beforeNextTxn(p.session, 'Lease', { before: () => lb.revoke() });
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    assert.equal((await key(`${prefix}handover/node-p`))!.value, encodeHandoverRecord('node-p', [{ ip: IP, node: best, lease: lb.id }]));
    clock.advance(100);
    await released;
    assert.deepEqual(await ownerKey(prefix), { value: 'node-p', lease: p.session.leaseId }, 'not moved onto a lease that is gone');
    assert.equal(lines(p, 'info', 'handed ownership over to the successors').length, 0);
    assert.deepEqual(p.events.filter((e) => e.kind === 'owner-released'), []);
  });

  test('a stop whose key moved before the hand-over: the move is refused, nothing handed', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock);
    const ly = await lease();
    const lz = await lease();
    await candidacy(prefix, IP, 'node-y', ly.id);
    await until(clock, () => (p.own as unknown as { others: Map<string, Map<string, number>> }).others.get(IP)?.size === 1, 'candidacy seen', p);
    beforeNextTxn(p.session, 'Lease', { before: () => ownerPut(prefix, IP, 'node-z', lz.id) });
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    clock.advance(100);
    await released;
    assert.deepEqual(await ownerKey(prefix), { value: 'node-z', lease: lz.id });
    assert.equal(lines(p, 'info', 'handed ownership over to the successors').length, 0);
  });

  test('a stop with no other candidate writes no record and hands nothing', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock);
    await p.own.release({ silenced: true });
    assert.equal(await key(`${prefix}handover/node-p`), undefined);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-p', lease: p.session.leaseId });
    assert.equal(p.owned().size, 0);
  });

  test('a watch that cannot be created: warned, retried a second later; until then changes are not seen', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const b = await member('node-b', prefix, clock, { start: false });
    await b.session.start();
    const client = b.session.client;
    const realWatch = client.watch.bind(client);
    let failures = 1;
    (client as { watch: typeof client.watch }).watch = () => {
      if (failures-- > 0) return { prefix: () => ({ create: () => Promise.reject(new Error('no watch')) }) } as unknown as ReturnType<typeof client.watch>;
      return realWatch();
    };
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    assert.equal(lines(b, 'warn', 'etcd ownership watch could not be created; retrying').length, 1);
    b.cands([IP]);
    await until(clock, () => b.owned().has(IP), 'claims (its own writes need no watch)', b);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    await barrier(b, clock);
    assert.equal(b.own.view().owners.has(IP2), false, 'no watch yet');
    clock.advance(999);
    await barrier(b, clock);
    assert.equal(b.own.view().owners.has(IP2), false, 'not retried before a second');
    clock.advance(1);
    await until(clock, () => b.own.view().owners.get(IP2) === 'node-x', 'the retry re-reads', b);
    await real.raw.delete().key(`${prefix}owners/${IP2}`).exec();
    await until(clock, () => !b.own.view().owners.has(IP2), 'and watches', b);
  });

  test('after an outage: our candidacy is published again on the new lease; a key that changed meanwhile is not moved', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const z = await lease();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    const old = a.session.leaseId!;
    clock.advance(55_000);
    assert.equal(a.session.state, 'lost');
    await until(clock, () => a.owned().size === 0, 'withdrawn', a);
    beforeNextTxn(a.session, 'Lease', { before: () => ownerPut(prefix, IP2, 'node-z', z.id) });
    await waitFor(
      () => {
        clock.advance(1000);
        return a.session.state === 'live';
      },
      { what: 'a new lease', intervalMs: 5 },
    );
    await until(clock, () => lines(a, 'info', 'moved our ownership keys onto the new lease after the store outage').length === 1, 'moved', a);
    assert.equal(a.own.status().keysMovedToNewLease, 1);
    assert.deepEqual(await ownerKey(prefix, IP), { value: 'node-a', lease: a.session.leaseId });
    assert.deepEqual(await ownerKey(prefix, IP2), { value: 'node-z', lease: z.id });
    await until(clock, async () => (await key(`${prefix}candidates/${IP}/node-a`))?.lease === a.session.leaseId, 'candidacy on the new lease', a);
    await until(clock, () => a.owned().has(IP) && !a.owned().has(IP2), 'answers IP only', a);
    await until(clock, async () => (await real.raw.leaseClient.leaseTimeToLive({ ID: old })).TTL === '-1', 'the old lease revoked');
  });

  test('without an events sink a claim records nothing and goes through', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock, { events: false });
    await barrier(a, clock);
    assert.deepEqual(lines(a, 'debug', /sync failed/), []);
  });

  test('the successors of a silent node are ranked before it falls silent: the fence hashes nothing on its path', async () => {
    // Names and IPs no other case scores: the rendezvous memo is shared by the process.
    const tag = Math.random().toString(36).slice(2, 8);
    const [nx, ny, nb] = [`rank-x-${tag}`, `rank-y-${tag}`, `rank-b-${tag}`];
    const ips = ['203.0.113.231', '203.0.113.232', '203.0.113.233'];
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    for (const ip of ips) {
      await ownerPut(prefix, ip, nx, x.id);
      await candidacy(prefix, ip, ny, y.id);
    }
    const b = await member(nb, prefix, clock);
    b.cands(ips);
    await until(clock, () => ips.every((ip) => b.own.view().owners.get(ip) === nx), 'b sees x own every IP', b);
    assert.equal(ips.some((ip) => rendezvousMemoHas(ny, ip)), false, 'not while the candidacies are still changing');
    clock.advance(RANK_AHEAD_AFTER_MS);
    // Then in the background, a few turns of the event loop later: every candidate of every IP, b and y.
    await waitFor(() => ips.every((ip) => rendezvousMemoHas(nb, ip) && rendezvousMemoHas(ny, ip)), { timeoutMs: 5000, intervalMs: 5, what: 'the candidates ranked ahead' });
    b.watch.silence(nx, ips[0]);
    await until(clock, () => lines(b, 'debug', 'trace: fence: record built').length === 1, 'the record', b);
    assert.deepEqual(lines(b, 'debug', 'trace: fence: record built').map((l) => ({ ips: l.obj.ips, hashed: l.obj.hashed })), [{ ips: 3, hashed: 0 }]);
  });
});
