/**
 * Per-IP ownership (src/store/etcd/ownership.ts) against a real etcd, with
 * every session and ownership of a test on one manual clock: the contention
 * delay, the hand-over hold, the release grace and the session's own
 * step-down move only when the test says so, and the leases (60 s) outlive a
 * test, so a pass takes seconds (the real-time cases stay in
 * etcd-ownership.test.ts and etcd-ownership-fences.test.ts). Kept apart from
 * them so that a mutation run of ownership.ts can run this file once per
 * mutant. Other nodes are either members (a session and an ownership) or
 * plain keys written with the test's own client on a lease of its own
 * (test/helpers/etcd-ownership-harness.ts).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { etcdOwnershipDefaults } from '../../src/store/etcd/ownership.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { encodeHandoverRecord, parseHandoverRecord } from '../../src/store/etcd/handover-record.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { IP, IP2, OPTS, START, byPref, harness } from '../helpers/etcd-ownership-harness.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';

describe('etcd ownership on a manual clock', () => {
  const real = useRealEtcd('own-fast');
  const h = harness(real);
  const { member, owning, seeingX, ownerWithPreferred, ownerAndSuccessor, until, barrier, lines, lease, key, ownerKey, clockAt, candidacy, ownerPut } = h;

  test('the defaults; the rendezvous score is sha256 of node#ip, hex', () => {
    assert.deepEqual(etcdOwnershipDefaults, { onStoreLoss: 'withdraw', contendDelayMs: 300, handoverHoldMs: 5000, skipPreferredMs: 60_000, fullRefreshMs: 30_000, releaseGraceMs: 3000 });
    assert.equal(rendezvousScore('node-a', IP), createHash('sha256').update(`node-a#${IP}`).digest('hex'));
  });

  test('a lone candidate claims a free IP at once: the owner key and its candidacy on its lease, the owned set emitted, a took event, status clean', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    assert.equal(a.own.kind, 'etcd');
    assert.deepEqual(a.own.status(), { staleKeysIgnored: 0, staleKeysRemoved: 0, fencesIssued: 0, keysMovedToNewLease: 0, notOwningReason: 'not a candidate for any IP (no allocation, policy, node or interface match)' });
    a.cands([IP]);
    await until(clock, () => a.owned().has(IP), 'node-a owns IP', a);
    assert.equal(clock.now(), START, 'at once');
    assert.deepEqual(await ownerKey(prefix), { value: 'node-a', lease: a.session.leaseId });
    assert.deepEqual(await key(`${prefix}candidates/${IP}/node-a`), { value: '', lease: a.session.leaseId });
    assert.deepEqual([...a.own.view().owned], [IP]);
    assert.deepEqual([...a.own.view().owners], [[IP, 'node-a']]);
    assert.deepEqual(a.own.status(), { staleKeysIgnored: 0, staleKeysRemoved: 0, fencesIssued: 0, keysMovedToNewLease: 0 });
    assert.deepEqual(a.events, [{ kind: 'owner-took', ip: IP, hint: 'free' }]);
    await until(clock, () => lines(a, 'info', 'took ownership').length === 1, 'the took line');
    assert.deepEqual(lines(a, 'info', 'took ownership')[0]!.obj, { ip: IP });
    assert.deepEqual([...lines(a, 'warn', /./), ...lines(a, 'error', /./)], []);
    // The live gate: valid as long as the session says.
    assert.equal(a.own.livenessGate().answerUntilMs(), a.session.validUntilMs());
    assert.ok(a.session.validUntilMs() > START);
  });

  test('contention: the preferred candidate claims at once; the other waits contendDelayMs, then claims late and says so', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const l = await lease();
    await candidacy(prefix, IP, hi, l.id);
    const m = await member(lo, prefix, clock);
    m.cands([IP]);
    await barrier(m, clock);
    assert.equal(await ownerKey(prefix), undefined, 'not at once');
    assert.equal(m.own.status().notOwningReason, undefined, 'it owns the barrier');
    clock.advance(OPTS.contendDelayMs - 1);
    await barrier(m, clock);
    assert.equal(await ownerKey(prefix), undefined, 'not before the delay');
    clock.advance(1);
    await until(clock, () => m.owned().has(IP), `${lo} claims late`, m);
    assert.deepEqual(await ownerKey(prefix), { value: lo, lease: m.session.leaseId });
    await until(clock, () => lines(m, 'info', 'took ownership').some((x) => x.obj.ip === IP), 'the took line');
    assert.deepEqual(lines(m, 'info', 'took ownership').find((x) => x.obj.ip === IP)!.obj, { ip: IP, late: true });
    // A late claim with no hand-over of ours before it skips nobody.
    assert.deepEqual(lines(m, 'warn', /left the IP unclaimed/), []);
  });

  test('two members: one owner, the preferred; the other sees it, watches it on the wire and reports why it owns nothing', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const p = await member(hi, prefix, clock);
    const o = await member(lo, prefix, clock);
    p.cands([IP]);
    await until(clock, () => p.owned().has(IP), `${hi} owns IP`, p);
    o.cands([IP]);
    await until(clock, () => o.own.view().owners.get(IP) === hi, `${lo} sees the owner`, o);
    await until(clock, () => o.watch.targets.length === 1, `${lo} watches ${hi}`, o);
    assert.deepEqual(o.watch.targets, [{ node: hi, ip: IP, iface: 'eth0' }]);
    assert.deepEqual(p.watch.targets, [], 'nobody else owns anything');
    assert.equal(o.owned().size, 0);
    assert.equal(o.own.status().notOwningReason, 'every candidate IP is owned by another node');
    // The late timer of the other fires: the IP is owned, so it does not contend.
    clock.advance(OPTS.contendDelayMs);
    await barrier(o, clock);
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: p.session.leaseId });
  });

  test('an owner hands the IP over to a more preferred candidate present handoverHoldMs: marker first, withdrawn, deleted; the preferred claims', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const o = await owning(lo, prefix, clock);
    // The preferred joins: its candidacy is seen by the owner at this instant.
    const p = await member(hi, prefix, clock);
    p.cands([IP]);
    await until(clock, () => o.own.view().owners.get(IP) === lo && p.own.view().owners.get(IP) === lo, 'both see the owner');
    await until(clock, async () => (await key(`${prefix}candidates/${IP}/${hi}`)) !== undefined, 'the candidacy');
    await barrier(o, clock);
    let markerAtDelete: { value: string; lease: string } | undefined;
    let ownedAtDelete: boolean | undefined;
    beforeNextTxn(o.session, 'Lease', {
      before: async () => {
        markerAtDelete = await key(`${prefix}releasing/${IP}`);
        ownedAtDelete = o.owned().has(IP);
      },
    });
    clock.advance(OPTS.handoverHoldMs - 1);
    await barrier(o, clock);
    assert.equal(o.owned().has(IP), true, 'not before the hold');
    clock.advance(1);
    await barrier(o, clock);
    await until(clock, () => p.owned().has(IP), `${hi} owns IP`, p);
    assert.deepEqual(markerAtDelete, { value: lo, lease: o.session.leaseId }, 'the releasing marker stood, on the owner key lease, when the key was deleted');
    assert.equal(ownedAtDelete, false, 'withdrawn before the delete');
    assert.equal(await key(`${prefix}releasing/${IP}`), undefined, 'the marker went with the key');
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: p.session.leaseId });
    await until(clock, () => lines(o, 'info', 'released ownership').length === 1, 'the released line');
    assert.deepEqual(lines(o, 'info', 'released ownership')[0]!.obj, { ip: IP, why: 'handing over to the preferred node' });
    assert.deepEqual(o.events.filter((e) => e.kind === 'owner-released'), [{ kind: 'owner-released', ip: IP, why: 'handing over to the preferred node', cause: 'spread-rebalance' }]);
    // The new owner took it from a node whose key it saw vanish: a lease-ended take with its gap.
    const took = p.events.find((e) => e.kind === 'owner-took')!;
    assert.deepEqual(took, { kind: 'owner-took', ip: IP, from: lo, gapMs: 0, hint: 'lease-ended' });
  });

  test('a preferred node that never claims what was handed to it: the owner takes it back late and skips it for skipPreferredMs', async () => {
    const prefix = real.freshPrefix();
    const { hi, lo, clock, o, preferredLease: l } = await ownerWithPreferred(prefix);
    await until(clock, () => (o.own as unknown as { others: Map<string, Map<string, number>> }).others.get(IP)?.has(hi) === true, 'the candidacy seen');
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(o, 'info', 'released ownership').length === 1, 'handed over (deleted)', o);
    assert.equal(o.owned().has(IP), false);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.owned().has(IP), 'taken back late', o);
    const warn = lines(o, 'warn', 'the preferred node left the IP unclaimed: skipping it for this IP');
    assert.deepEqual(warn.map((x) => x.obj), [{ ip: IP, node: hi, skipForMs: OPTS.skipPreferredMs }]);
    // Skipped: no hand-over again within the skip, though the hold has long passed.
    clock.advance(OPTS.handoverHoldMs);
    await barrier(o, clock);
    assert.equal(o.owned().has(IP), true);
    assert.equal(lines(o, 'info', 'released ownership').length, 1);
    // Past the skip, the preferred node counts again: handed over once more.
    clock.advance(OPTS.skipPreferredMs! - OPTS.handoverHoldMs + 10);
    await barrier(o, clock);
    await until(clock, async () => (await ownerKey(prefix)) === undefined, 'handed over again', o);
  });

  test('no longer a candidate: the IP is released (link-or-policy) and the candidacy retracted', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    a.cands([IP2]);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && (await key(`${prefix}candidates/${IP}/node-a`)) === undefined, 'released and retracted', a);
    assert.equal(a.owned().has(IP), false);
    assert.deepEqual(await ownerKey(prefix, IP2), { value: 'node-a', lease: a.session.leaseId });
    assert.deepEqual(a.events.filter((e) => e.kind === 'owner-released'), [{ kind: 'owner-released', ip: IP, why: 'no longer a candidate', cause: 'link-or-policy' }]);
    a.cands([]);
    await until(clock, () => a.owned().size === 0 && a.own.status().notOwningReason !== undefined, 'owns nothing', a);
    assert.equal(a.own.status().notOwningReason, 'not a candidate for any IP (no allocation, policy, node or interface match)');
  });

  test('a datapath that does not confirm the withdrawal: the key and ownership are kept, the marker removed, retried a second later (not as fast as the store answers)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    const watcher = await real.raw.watch().prefix(prefix).create();
    const seen: string[] = [];
    watcher.on('put', (kv) => void seen.push(`put ${kv.key.toString().slice(prefix.length)}`));
    watcher.on('delete', (kv) => void seen.push(`delete ${kv.key.toString().slice(prefix.length)}`));
    real.own({ dispose: () => void watcher.cancel() });
    a.apply.fn = () => Promise.reject(new Error('datapath broken'));
    a.cands([]);
    await until(clock, () => lines(a, 'error', /did not confirm the withdrawal/).length >= 1, 'the error line', a);
    assert.deepEqual(lines(a, 'error', /did not confirm/)[0]!.obj, { ips: 1, first: IP, why: 'no longer a candidate' });
    await until(clock, () => seen.includes(`delete releasing/${IP}`), 'the marker removed', a);
    // The marker's put and delete wake passes at once; with the clock standing still none of them tries again.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(lines(a, 'error', /did not confirm/).length, 1, `one attempt while the clock stands still (store writes seen: ${seen.join(', ')})`);
    assert.deepEqual(seen.filter((e) => e === `put releasing/${IP}`), [`put releasing/${IP}`], 'one marker written, not one per pass');
    clock.advance(1010);
    await until(clock, () => lines(a, 'error', /did not confirm the withdrawal/).length === 2, 'retried a second later', a);
    assert.ok(lines(a, 'warn', 'applying the owned set failed').length >= 2);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-a', lease: a.session.leaseId }, 'the key kept');
    assert.equal(seen.includes(`delete owners/${IP}`), false);
    assert.deepEqual(seen.slice(0, 2), [`delete candidates/${IP}/node-a`, `put releasing/${IP}`]);
    a.apply.fn = () => {};
    clock.advance(1010);
    await until(clock, async () => (await ownerKey(prefix)) === undefined, 'released once the datapath confirms', a);
    assert.equal(a.owned().has(IP), false);
  });

  test('a stalled datapath: the withdrawal is not confirmed within 2 s, so the key is kept', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    a.apply.fn = () => new Promise(() => {});
    a.cands([]);
    await until(clock, () => a.owned().size === 0, 'withdrawn locally', a);
    clock.advance(1999);
    await until(clock, async () => (await key(`${prefix}releasing/${IP}`)) !== undefined, 'marked');
    assert.equal(lines(a, 'error', /did not confirm/).length, 0, 'not before 2 s');
    clock.advance(1);
    await until(clock, () => lines(a, 'error', /did not confirm/).length === 1, 'given up waiting at 2 s', a);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-a', lease: a.session.leaseId });
  });

  test('a silent owner is fenced: its IPs handed to their successors first (a record on its lease, then the keys moved), then its lease revoked; the fence counted and recorded (cause wire-silence)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    await candidacy(prefix, IP, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    b.cands([IP]);
    await until(clock, () => b.own.view().owners.get(IP) === 'node-x', 'node-b sees node-x', b);
    b.watch.silence('node-x');
    // Answered at the record, the key still node-x's: IP2 has no candidate, so no successor.
    await until(clock, () => b.owned().has(IP), 'node-b answers IP at the record', b);
    const record = await key(`${prefix}handover/node-x`);
    assert.deepEqual(record && { ...record, value: JSON.parse(record.value) }, { value: { v: 2, node: 'node-x', cause: 'wire-silence', to: [['node-b', b.session.leaseId, IP]] }, lease: x.id });
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id });
    assert.deepEqual(lines(b, 'warn', 'fencing a silent owner: its IPs handed to their successors first').map((l) => l.obj), [{ node: 'node-x', lease: x.id, ips: 1, of: 2 }]);
    assert.equal(b.own.status().fencesIssued, 0, 'not revoked before the moves');
    clock.advance(99);
    await barrier(b, clock);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id }, 'the moves wait 100 ms');
    clock.advance(1);
    await until(clock, () => b.own.status().fencesIssued === 1, 'moved, then revoked', b);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-b', lease: b.session.leaseId });
    assert.equal((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1', 'revoked');
    assert.deepEqual(lines(b, 'warn', 'fenced out a silent owner: revoked its lease').map((l) => l.obj), [{ node: 'node-x', lease: x.id }]);
    assert.deepEqual(b.events.find((e) => e.kind === 'owner-fenced'), { kind: 'owner-fenced', fenced: 'node-x', ips: [IP, IP2] });
    const tookIp = () => b.events.find((e) => e.kind === 'owner-took' && e.ip === IP);
    await until(clock, () => tookIp() !== undefined, 'the took event', b);
    const took = tookIp();
    assert.deepEqual(took, { kind: 'owner-took', ip: IP, from: 'node-x', hint: 'fenced', cause: 'wire-silence', causeText: 'the previous owner went silent on the wire (fenced)' });
    assert.ok(b.owned().has(IP));
    assert.equal(b.own.view().owners.get(IP2), undefined, 'every key left on the lease gone from the view');
  });

  test("another fencer's hand-over of the same silent node under way: ours is not written and nothing is revoked under it (its writer revokes)", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    const otherRecord = encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-c', lease: x.id }], 'wire-silence')!;
    // node-c's record lands between b's verdict and b's own record.
    const client = b.session.client;
    const realIf = client.if.bind(client);
    (client as { if: typeof client.if }).if = ((...args: Parameters<typeof client.if>) => {
      const tx = realIf(...args);
      if (args[0] === `${prefix}handover/node-x`) {
        const commit = tx.commit.bind(tx);
        tx.commit = async () => {
          await real.raw.put(`${prefix}handover/node-x`).value(otherRecord).lease(x.id).exec();
          return commit();
        };
      }
      return tx;
    }) as typeof client.if;
    b.watch.silence('node-x');
    await until(clock, async () => parseHandoverRecord((await key(`${prefix}handover/node-x`))?.value ?? '')?.moves.get(IP)?.node === 'node-c', "node-c's record stands", b);
    await barrier(b, clock);
    clock.advance(100);
    await barrier(b, clock);
    assert.equal(b.own.status().fencesIssued, 0);
    assert.notEqual((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1', 'not revoked');
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id });
    assert.deepEqual(lines(b, 'warn', 'fencing a silent owner: its IPs handed to their successors first'), []);
  });

  test("a stop while a fencer's record of ours stands: ours is not written and no key is moved (the fencer's successors answer by its record); the revoke frees the rest", async () => {
    const prefix = real.freshPrefix();
    const { p: a, clock } = await ownerAndSuccessor(prefix);
    const hi = a.node;
    const fencers = encodeHandoverRecord(hi, [{ ip: IP, node: 'node-c', lease: a.session.leaseId! }], 'wire-silence')!;
    await real.raw.put(`${prefix}handover/${hi}`).value(fencers).lease(a.session.leaseId!).exec();
    await until(clock, () => !a.owned().has(IP), 'a withdraws at the record', a);
    await a.own.release({ silenced: true });
    assert.deepEqual(lines(a, 'warn', 'a fencer is handing our IPs over already: leaving the hand-over to it').map((l) => l.obj), [{ ips: 1 }]);
    assert.equal((await key(`${prefix}handover/${hi}`))?.value, fencers);
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: a.session.leaseId });
  });

  test("an owner fenced on silence while alive after all (a false verdict) falls silent at the fencer's record, before its key moves or its lease goes", async () => {
    const prefix = real.freshPrefix();
    const { p: a, s: b, clock } = await ownerAndSuccessor(prefix);
    const hi = a.node;
    await until(clock, () => b.watch.targets.some((t) => t.node === hi), 'b watches a', b);
    b.watch.silence(hi);
    await until(clock, () => b.owned().has(IP), 'b answers at its record', b);
    await until(clock, () => !a.owned().has(IP), 'a withdraws at the record', a);
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: a.session.leaseId }, 'before the move (the clock has not reached it)');
    assert.equal(a.session.state, 'live');
    assert.deepEqual(lines(a, 'warn', 'another node fenced us on silence and is handing our IPs over: withdrawing them').map((l) => l.obj), [{ lease: a.session.leaseId, ips: 1 }]);
  });

  test('silence is no evidence against a node that no longer holds the IP, nor while a marker on its key lease stands within the grace; past the grace it is fenced', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    // Another node's name: it holds nothing.
    b.watch.silence('node-y');
    await until(clock, () => lines(b, 'info', /no longer holds/).length === 1, 'not fenced', b);
    assert.equal(b.own.status().fencesIssued, 0);
    // A marker on the key's lease: within the grace, nothing.
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').lease(x.id).exec();
    b.watch.silence('node-x');
    await until(clock, () => lines(b, 'info', /it is releasing: not fenced/).length === 1, 'graced', b);
    await until(clock, () => b.watch.targets.length === 1, 'watched');
    clock.advance(OPTS.releaseGraceMs! - 1);
    await barrier(b, clock);
    assert.equal(b.own.status().fencesIssued, 0);
    assert.notEqual((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1');
    clock.advance(1);
    await until(clock, () => b.owned().has(IP), 'fenced past the grace: handed to b', b);
    clock.advance(100);
    await until(clock, () => b.own.status().fencesIssued === 1, 'and revoked after the moves', b);
  });

  test('a marker on another lease than the owner key, or by another node, counts for nothing: fenced at once', async () => {
    for (const [what, markNode, markOnKeyLease] of [['another lease', 'node-x', false], ['another node', 'node-z', true]] as const) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      const y = await lease();
      await ownerPut(prefix, IP, 'node-x', x.id);
      await real.raw.put(`${prefix}releasing/${IP}`).value(markNode).lease(markOnKeyLease ? x.id : y.id).exec();
      const b = await seeingX('node-b', prefix, clock);
      b.watch.silence('node-x');
      await until(clock, () => b.owned().has(IP), `fenced at once (${what})`, b);
      assert.equal(clock.now(), START);
    }
  });

  test('keys without a lease carry no authority: ignored, warned about once, removed; the IP is claimed', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    // The lease-less candidacy is of a node preferred over ours: were it counted, we would wait.
    const [y, me] = byPref(IP, ['node-b', 'node-y']) as [string, string];
    await real.raw.put(`${prefix}owners/${IP}`).value('node-x').exec();
    await real.raw.put(`${prefix}candidates/${IP}/${y}`).value('').exec();
    await real.raw.put(`${prefix}releasing/${IP2}`).value('node-x').exec();
    const b = await owning(me, prefix, clock);
    await until(clock, () => b.own.status().staleKeysRemoved === 2, 'both removed', b);
    assert.equal(b.own.status().staleKeysIgnored, 2);
    assert.deepEqual(lines(b, 'warn', /without a live lease/).map((l) => l.obj).sort((p, q) => String(p.key).localeCompare(String(q.key))), [
      { key: `${prefix}candidates/${IP}/${y}`, lease: '0' },
      { key: `${prefix}owners/${IP}`, lease: '0' },
    ]);
    assert.equal(await key(`${prefix}candidates/${IP}/${y}`), undefined);
    assert.equal(b.watch.targets.length, 0);
    assert.equal(clock.now(), START, 'claimed at once: the lease-less candidacy counted for nothing');
    // A lease-less key put while we run: ignored on the watch too, warned about once per key.
    await real.raw.put(`${prefix}owners/${IP2}`).value('node-x').exec();
    await until(clock, () => b.own.status().staleKeysRemoved === 3, 'the watched one removed', b);
    assert.equal(b.own.view().owners.has(IP2), false);
  });

  test("a stop with a silenced datapath: a hand-over record first (the successor answers at once), then the key moves onto the successor's lease; nobody hands it back", async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const p = await owning(hi, prefix, clock);
    const o = await member(lo, prefix, clock);
    o.cands([IP]);
    await until(clock, () => p.own.view().owners.get(IP) === hi && (p.own as unknown as { candidateLeases: Map<string, string> }).candidateLeases.get(`${IP}/${lo}`) === o.session.leaseId, 'the candidacy seen by the owner', p);
    const released = p.own.release({ silenced: true });
    await until(clock, () => o.owned().has(IP), `${lo} answers at the record`, o);
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record written', p);
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: p.session.leaseId }, 'the key not moved yet');
    const rec = await key(`${prefix}handover/${hi}`);
    assert.deepEqual(rec, { value: encodeHandoverRecord(hi, [{ ip: IP, node: lo, lease: o.session.leaseId! }]), lease: p.session.leaseId });
    clock.advance(99);
    await barrier(o, clock);
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: p.session.leaseId }, 'the moves wait 100 ms');
    clock.advance(1);
    await released;
    assert.equal(p.owned().size, 0, 'withdrawn at the end of the release');
    assert.deepEqual(await ownerKey(prefix), { value: lo, lease: o.session.leaseId });
    await until(clock, () => lines(p, 'info', 'handed ownership over to the successors').length === 1, 'the handed line', p);
    assert.deepEqual(lines(p, 'info', 'handed ownership over to the successors')[0]!.obj, { ips: 1, of: 1 });
    assert.deepEqual(p.events.filter((e) => e.kind === 'owner-released'), [{ kind: 'owner-released', ip: IP, why: `handed over to ${lo} (stopping)`, cause: 'clean-stop' }]);
    await until(clock, () => lines(o, 'info', 'took ownership: handed over by the stopping owner').length === 1, 'the took line', o);
    assert.deepEqual(lines(o, 'info', 'took ownership: handed over by the stopping owner')[0]!.obj, { ip: IP, from: hi });
    assert.deepEqual(o.events.filter((e) => e.kind === 'owner-took' && e.ip === IP), [{ kind: 'owner-took', ip: IP, from: hi, hint: 'released', cause: 'clean-stop', causeText: 'clean stop of the previous owner' }]);
    assert.equal(p.own.status().notOwningReason, 'released (agent stopping)');
    assert.equal(p.own.livenessGate().answerUntilMs(), 0);
    // The stopping node's candidacy still stands (until its revoke), but it is departed: past the hold, no hand-back.
    assert.notEqual(await key(`${prefix}candidates/${IP}/${hi}`), undefined);
    clock.advance(OPTS.handoverHoldMs + 10);
    await barrier(o, clock);
    assert.deepEqual(await ownerKey(prefix), { value: lo, lease: o.session.leaseId });
    await p.session.revoke();
    await until(clock, async () => (await key(`${prefix}handover/${hi}`)) === undefined, 'the record goes with the lease');
    await barrier(o, clock);
    assert.equal(o.owned().has(IP), true);
  });

  test('a release without a silenced datapath hands nothing over: withdrawn, the key stays the fence', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const p = await owning(hi, prefix, clock);
    const o = await member(lo, prefix, clock);
    o.cands([IP]);
    await until(clock, () => (p.own as unknown as { candidateLeases: Map<string, string> }).candidateLeases.has(`${IP}/${lo}`), 'candidacy seen', p);
    await p.own.release();
    assert.equal(p.owned().size, 0);
    assert.deepEqual(p.own.view().owners, new Map());
    assert.deepEqual(await ownerKey(prefix), { value: hi, lease: p.session.leaseId });
    assert.equal(await key(`${prefix}handover/${hi}`), undefined);
    // Released: no pass claims anything again.
    p.cands([IP, IP2]);
    clock.advance(OPTS.contendDelayMs);
    await barrier(o, clock);
    assert.equal(await ownerKey(prefix, IP2), undefined);
    assert.equal(p.own.status().notOwningReason, 'released (agent stopping)');
  });

  test('a hand-over record names us: we answer while the owner key stands on the record lease, for the lease named, for IPs we are a candidate for; not once it is gone', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const ip3 = '198.51.100.9';
    const ip4 = '198.51.100.10';
    const y = await lease();
    for (const ip of [IP, IP2, ip3, ip4]) await ownerPut(prefix, ip, 'node-x', ip === ip3 ? y.id : x.id);
    const c = await member('node-c', prefix, clock);
    c.cands([IP, IP2, ip3]);
    await until(clock, () => c.own.view().owners.size === 4, 'sees the owners', c);
    await real.raw
      .put(`${prefix}handover/node-x`)
      .value(
        encodeHandoverRecord('node-x', [
          { ip: IP, node: 'node-c', lease: c.session.leaseId! }, // answered
          { ip: IP2, node: 'node-c', lease: y.id }, // another lease than ours: no
          { ip: ip3, node: 'node-c', lease: c.session.leaseId! }, // the key on another lease than the record's: no
          { ip: ip4, node: 'node-c', lease: c.session.leaseId! }, // not a candidate: no
        ])!,
      )
      .lease(x.id)
      .exec();
    await until(clock, () => c.owned().has(IP), 'answers IP at the record', c);
    await barrier(c, clock);
    assert.deepEqual([...c.owned()].filter((ip) => ip.startsWith('198.')), [IP]);
    assert.equal(c.own.status().notOwningReason, undefined);
    // The record deleted (not its lease): nothing any more.
    await real.raw.delete().key(`${prefix}handover/node-x`).exec();
    await until(clock, () => !c.owned().has(IP), 'no longer answered', c);
  });

  test('an owner key vanishing while a hand-over record named another node for it: even the preferred waits the contention delay', async () => {
    const prefix = real.freshPrefix();
    // The member (c) is the preferred of the two; the record names the other (y).
    const [c, y] = byPref(IP, ['node-c', 'node-y']) as [string, string];
    const clock = clockAt();
    const lx = await lease();
    const ly = await lease();
    await ownerPut(prefix, IP, 'node-x', lx.id);
    await ownerPut(prefix, IP2, 'node-x', lx.id);
    await candidacy(prefix, IP, y, ly.id);
    await real.raw.put(`${prefix}handover/node-x`).value(encodeHandoverRecord('node-x', [{ ip: IP, node: y, lease: ly.id }])!).lease(lx.id).exec();
    const m = await member(c, prefix, clock);
    m.cands([IP, IP2]);
    await until(clock, () => m.own.view().owners.size === 2, 'sees the owners', m);
    await lx.revoke();
    // IP2 was named for nobody: claimed at once. IP waits.
    await until(clock, () => m.owned().has(IP2), 'IP2 at once', m);
    await barrier(m, clock);
    assert.equal(m.owned().has(IP), false, 'IP not at once');
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => m.owned().has(IP), 'IP after the delay', m);
  });

  test('the store gone (our lease revoked): withdrawn at the re-check; status says why; keep does not hold through it', async () => {
    for (const onStoreLoss of ['withdraw', 'keep'] as const) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const a = await owning('node-a', prefix, clock, { onStoreLoss });
      await real.raw.leaseClient.leaseRevoke({ ID: a.session.leaseId! });
      await a.own.livenessGate().recheck('test');
      assert.equal(a.session.state, 'lost');
      await until(clock, () => a.owned().size === 0, `withdrawn (${onStoreLoss})`, a);
      assert.equal(a.own.status().notOwningReason, 'our etcd lease was revoked or expired; re-joining');
      assert.equal(a.own.livenessGate().answerUntilMs(), 0);
      assert.deepEqual(lines(a, 'warn', 'lease re-checked with the store').map((l) => l.obj), [{ why: 'test', lease: 'lease-gone' }]);
    }
  });

  test('the store unreachable (our own clock steps down) with withdraw: withdrawn; back on a new lease, our key moves onto it without an owner change', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    const old = a.session.leaseId!;
    clock.advance(55_000);
    assert.equal(a.session.state, 'lost');
    await until(clock, () => a.owned().size === 0, 'withdrawn', a);
    assert.equal(a.own.status().notOwningReason, 'etcd unreachable: withdrawn (--on-store-loss withdraw)');
    assert.equal(a.own.livenessGate().answerUntilMs(), 0);
    await waitFor(
      () => {
        clock.advance(1000);
        return a.session.state === 'live';
      },
      { what: 'a new lease', intervalMs: 5 },
    );
    assert.notEqual(a.session.leaseId, old);
    await until(clock, () => lines(a, 'info', 'moved our ownership keys onto the new lease after the store outage').length === 1, 'moved', a);
    assert.equal((await ownerKey(prefix))?.lease, a.session.leaseId);
    await until(clock, () => a.owned().has(IP), 'answers again', a);
    assert.equal(a.own.status().keysMovedToNewLease, 1);
    assert.deepEqual(lines(a, 'info', 'moved our ownership keys onto the new lease after the store outage').map((l) => l.obj), [{ moved: 1, lease: a.session.leaseId }]);
    await until(clock, async () => (await real.raw.leaseClient.leaseTimeToLive({ ID: old })).TTL === '-1', 'the old lease revoked');
    assert.equal(a.events.filter((e) => e.kind === 'owner-took').length, 1, 'no second take');
  });

  test('--on-store-loss keep: unreachable, the owner keeps announcing and the gate stays open', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock, { onStoreLoss: 'keep' });
    const n = a.sets.length;
    clock.advance(55_000);
    assert.equal(a.session.state, 'lost');
    assert.deepEqual(lines(a, 'warn', 'etcd unreachable: keeping announcements (--on-store-loss keep)').map((l) => l.obj), [{ owned: 1 }]);
    assert.equal(a.own.livenessGate().answerUntilMs(), Infinity);
    clock.advance(0);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(a.sets.length, n, 'nothing emitted');
    assert.equal(a.owned().has(IP), true);
    assert.equal(a.own.status().notOwningReason, undefined);
    // A release ends the holding.
    await a.own.release();
    assert.equal(a.own.livenessGate().answerUntilMs(), 0);
    assert.equal(a.owned().size, 0);
  });

  test('status before the session is up: waiting for an etcd session', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, { start: false });
    assert.equal(a.own.status().notOwningReason, 'waiting for an etcd session');
  });

  test('dispose: no pass runs after it, nothing is claimed', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    a.own.dispose();
    a.cands([IP]);
    clock.advance(OPTS.contendDelayMs + 1000);
    await new Promise((r) => setTimeout(r, 100));
    clock.advance(0);
    assert.equal(await ownerKey(prefix), undefined);
    assert.equal(await key(`${prefix}candidates/${IP}/node-a`), undefined);
  });

  test('a dual-stack pair shares an affinity key: one node owns both; the wire watch targets the IPv4 one', async () => {
    const prefix = real.freshPrefix();
    const v4 = IP;
    const v6 = '2001:db8::7';
    const aff = new Map([[v4, 'svc/x'], [v6, 'svc/x']]);
    const [hi, lo] = byPref('svc/x', ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const o = await member(lo, prefix, clock);
    const p = await member(hi, prefix, clock);
    p.cands([v6, v4], aff);
    await until(clock, () => p.owned().has(v4) && p.owned().has(v6), `${hi} owns both`, p);
    o.cands([v6, v4], aff);
    await until(clock, () => o.watch.targets.length === 1, 'watched', o);
    assert.deepEqual(o.watch.targets, [{ node: hi, ip: v4, iface: 'eth0' }]);
    clock.advance(OPTS.contendDelayMs + OPTS.handoverHoldMs);
    await barrier(o, clock);
    assert.equal(o.owned().has(v4) || o.owned().has(v6), false);
  });
});
