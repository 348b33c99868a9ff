/**
 * Cases aimed at the conditional mutants (conditions, comparisons, logical
 * operators, boolean literals) of src/store/etcd/ownership.ts's sync, claim,
 * release and stop that the four other fast files let through — a Stryker run
 * of those mutators over those methods alone (2026-11-27), each case checked
 * by hand against its mutant (README, "Mutation testing") — in a file of its
 * own so that an incremental rerun retests only what it adds. Same harness: a
 * real etcd, one manual clock per test.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { IP, IP2, OPTS, byPref, harness, interceptWatchCreate, type Member } from '../helpers/etcd-ownership-harness.js';
import type { EtcdSession } from '../../src/store/etcd/session.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';

/** The ownership's private state the cases read (white-box, as the other fast files do). */
const inner = (m: Member) =>
  m.own as unknown as {
    others: Map<string, Map<string, number>>;
    candidateLeases: Map<string, string>;
    timers: Map<string, unknown>;
    keyRevisions: Map<string, number>;
    passes: { atTimer?: { at: number }; idle(): Promise<void> };
  };

/**
 * Holds back the watch events of a session's client while `paused` (a lagging
 * watch), delivering them in order on resume() (as in etcd-ownership-fast-survivors.test.ts). Install before start().
 */
function laggingWatch(session: EtcdSession) {
  const client = session.client;
  const realWatch = client.watch.bind(client);
  const held: Array<[string, unknown[]]> = [];
  const watchers: Array<(ev: string, ...args: unknown[]) => boolean> = [];
  const ctl = {
    paused: false,
    resume() {
      ctl.paused = false;
      for (const emit of watchers) for (const [ev, args] of held.splice(0)) emit(ev, ...args);
    },
  };
  interceptWatchCreate(client, realWatch, async (create) => {
    const watcher = await create();
    const realEmit = watcher.emit.bind(watcher);
    watchers.push(realEmit);
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

describe('etcd ownership on a manual clock: survivors of sync, claim, release and stop', () => {
  const real = useRealEtcd('own-surv3');
  const h = harness(real);
  const { member, owning, ownerWithPreferred, until, barrier, lines, lease, ownerKey, clockAt, candidacy, ownerPut } = h;

  test("a stop forgets only our own keys: the view it leaves still names the other nodes' owners", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const p = await owning('node-p', prefix, clock);
    await until(clock, () => p.own.view().owners.get(IP2) === 'node-x', 'sees node-x own IP2', p);
    await p.own.release();
    assert.equal(p.owned().size, 0, 'withdrawn');
    assert.deepEqual([...p.own.view().owners], [[IP2, 'node-x']]);
  });

  test("a silenced stop withdraws locally only once its hand-over is through: a pass woken by its own record's watch event emits nothing", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock);
    const o = await member('node-o', prefix, clock);
    o.cands([IP]);
    await until(clock, () => inner(p).candidateLeases.get(`${IP}/node-o`) === o.session.leaseId, 'the candidacy seen', p);
    const emitted = p.sets.length;
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    // Our own record comes back on the watch and wakes a pass (the moves wait 100 ms).
    await until(clock, () => inner(p).keyRevisions.has(`${prefix}handover/node-p`), 'the record seen on the watch', p);
    await barrier(o, clock);
    await inner(p).passes.idle();
    assert.equal(p.sets.length, emitted, 'nothing emitted during the hand-over');
    clock.advance(100);
    await released;
    assert.deepEqual(await ownerKey(prefix), { value: 'node-o', lease: o.session.leaseId });
    assert.equal(p.sets.length, emitted + 1, 'the withdrawal, once, at the end');
    assert.equal(p.owned().size, 0);
  });

  test('a pass during the contention delay starts no second delay: freed again later, the IP waits the whole delay from then', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const l = await lease();
    await candidacy(prefix, IP, hi, l.id);
    const m = await member(lo, prefix, clock);
    m.cands([IP]);
    await until(clock, () => inner(m).timers.has(IP), 'waits', m);
    // Another pass 100 ms into the delay (a new IP only we are a candidate for).
    clock.advance(100);
    await barrier(m, clock);
    clock.advance(OPTS.contendDelayMs - 100);
    await until(clock, () => m.owned().has(IP), 'claimed late, at the delay', m);
    // Freed 50 ms later: a delay of its own, counted from the delete.
    clock.advance(50);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => !m.own.view().owners.has(IP) && inner(m).timers.has(IP), 'waits again', m);
    clock.advance(OPTS.contendDelayMs - 1);
    await barrier(m, clock);
    assert.equal(m.owned().has(IP), false, 'not before the delay');
    assert.equal(await ownerKey(prefix), undefined);
    clock.advance(1);
    await until(clock, () => m.owned().has(IP), 'claimed late again', m);
  });

  test('a claim that learns every key taken is over: no retry pass is scheduled (that is for a claim that hit its round bound)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await member('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Create', { before: () => ownerPut(prefix, IP, 'node-x', x.id) });
    a.cands([IP]);
    await until(clock, () => a.own.view().owners.get(IP) === 'node-x', 'learnt node-x', a);
    await inner(a).passes.idle();
    assert.equal(inner(a).passes.atTimer, undefined);
  });

  test('a hand-over whose take-back another node wins is over: a later late take within 10 s skips nobody', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o, preferredLease: l } = await ownerWithPreferred(prefix);
    const z = await lease();
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(o, 'info', 'released ownership').length === 1, 'handed over (deleted)', o);
    // The preferred goes before our delay ends: we are the preferred now and claim at once, but node-z is first.
    beforeNextTxn(o.session, 'Create', { before: () => ownerPut(prefix, IP, 'node-z', z.id) });
    await real.raw.delete().key(`${prefix}candidates/${IP}/${hi}`).exec();
    await until(clock, () => o.own.view().owners.get(IP) === 'node-z', 'node-z learnt', o);
    // The preferred back, node-z's key gone, 5 s after our hand-over: an ordinary late take.
    await candidacy(prefix, IP, hi, l.id);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen again', o);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => !o.own.view().owners.has(IP) && inner(o).timers.has(IP), 'waits', o);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.owned().has(IP), 'taken late', o);
    assert.deepEqual(lines(o, 'warn', 'the preferred node left the IP unclaimed: skipping it for this IP'), []);
  });

  test('a late take-back another node wins keeps the hand-over: taken back late within 10 s, the preferred that never claimed is skipped', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o } = await ownerWithPreferred(prefix);
    const z = await lease();
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(o, 'info', 'released ownership').length === 1, 'handed over (deleted)', o);
    // The preferred never claims; our late take-back loses to node-z.
    beforeNextTxn(o.session, 'Create', { before: () => ownerPut(prefix, IP, 'node-z', z.id) });
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.own.view().owners.get(IP) === 'node-z', 'node-z learnt', o);
    // node-z's key gone 1 s later: taken back late, and now the preferred is skipped.
    clock.advance(1000);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => !o.own.view().owners.has(IP) && inner(o).timers.has(IP), 'waits', o);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.owned().has(IP), 'taken late', o);
    assert.deepEqual(lines(o, 'warn', 'the preferred node left the IP unclaimed: skipping it for this IP').map((x) => x.obj), [{ ip: IP, node: hi, skipForMs: OPTS.skipPreferredMs }]);
  });

  test('a claim as the preferred is no take-back: a more preferred candidacy that turns up during its transaction is not skipped', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o, preferredLease: l } = await ownerWithPreferred(prefix);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(o, 'info', 'released ownership').length === 1, 'handed over (deleted)', o);
    // The preferred goes: we are the preferred and claim at once; it comes back while our claim is in flight.
    beforeNextTxn(o.session, 'Create', {
      before: async () => {
        await candidacy(prefix, IP, hi, l.id);
        await waitFor(() => inner(o).others.get(IP)?.has(hi) === true, { timeoutMs: 5000, intervalMs: 5, what: 'the candidacy seen again' });
      },
    });
    await real.raw.delete().key(`${prefix}candidates/${IP}/${hi}`).exec();
    await until(clock, () => o.owned().has(IP), 'claimed', o);
    assert.deepEqual(lines(o, 'warn', 'the preferred node left the IP unclaimed: skipping it for this IP'), []);
  });

  test('only a more preferred candidate is handed over to and skipped: a less preferred one present for the hold counts for neither', async () => {
    const prefix = real.freshPrefix();
    const [n1, n2, n3] = byPref(IP, ['node-a', 'node-b', 'node-c']) as [string, string, string];
    const clock = clockAt();
    const o = await owning(n2, prefix, clock);
    const l3 = await lease();
    await candidacy(prefix, IP, n3, l3.id);
    await until(clock, () => inner(o).others.get(IP)?.has(n3) === true, 'the less preferred seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await barrier(o, clock);
    assert.equal(o.owned().has(IP), true, 'no hand-over to a less preferred node');
    assert.deepEqual(lines(o, 'info', 'released ownership'), []);
    const l1 = await lease();
    await candidacy(prefix, IP, n1, l1.id);
    await until(clock, () => inner(o).others.get(IP)?.has(n1) === true, 'the more preferred seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(o, 'info', 'released ownership').length === 1, 'handed over (deleted)', o);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.owned().has(IP), 'taken back late', o);
    assert.deepEqual(lines(o, 'warn', 'the preferred node left the IP unclaimed: skipping it for this IP').map((x) => x.obj), [{ ip: IP, node: n1, skipForMs: OPTS.skipPreferredMs }]);
  });

  test('a pass exactly handoverHoldMs after the preferred candidacy was first seen hands over', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o } = await ownerWithPreferred(prefix);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    const since = inner(o).others.get(IP)!.get(hi)!;
    clock.advance(since + OPTS.handoverHoldMs - 1 - clock.now());
    await barrier(o, clock);
    assert.deepEqual(lines(o, 'info', 'released ownership'), [], 'not a millisecond before');
    clock.advance(1);
    // Any pass now (a new IP only we are a candidate for) hands over, before the pass the hold scheduled.
    await barrier(o, clock);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(o, 'info', 'released ownership').length === 1, 'handed over (deleted)', o);
  });

  test("a marker removal that fails forgets nothing: another node's marker that replaced ours, seen late on the watch, still steers the wire watch off that IP", async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const o = await member(lo, prefix, clock, { start: false });
    await o.session.start();
    const lag = laggingWatch(o.session);
    await o.own.start(async (v) => {
      o.sets.push(new Set(v.owned));
      await o.apply.fn();
    });
    o.cands([IP, IP2]);
    await until(clock, () => o.owned().has(IP) && o.own.view().owners.get(IP2) === 'node-x', 'owns IP, sees node-x own IP2', o);
    const l = await lease();
    await candidacy(prefix, IP, hi, l.id);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the preferred seen', o);
    // The hand-over's withdrawal is not confirmed; before our marker's removal, the key has moved to node-x,
    // which is releasing it — and our watch delivers all that only after the removal has failed.
    lag.paused = true;
    const removal = { done: false };
    beforeNextTxn(o.session, 'Lease', {
      before: async () => {
        await ownerPut(prefix, IP, 'node-x', x.id);
        await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').lease(x.id).exec();
        // The refused commit follows at once; 200 ms of real time covers its answer.
        setTimeout(() => void (removal.done = true), 200);
      },
    });
    o.apply.fn = () => Promise.reject(new Error('datapath broken'));
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, () => lines(o, 'error', /did not confirm the withdrawal/).length === 1 && removal.done, 'the removal refused', o);
    await inner(o).passes.idle();
    o.apply.fn = () => {};
    lag.resume();
    await until(clock, () => o.own.view().owners.get(IP) === 'node-x', 'node-x learnt', o);
    await barrier(o, clock);
    // node-x owns both; it is releasing IP, so IP2 is the one to watch.
    assert.deepEqual(o.watch.targets, [{ node: 'node-x', ip: IP2, iface: 'eth0' }]);
  });

  test('a release whose key is still ours on another lease than compared is retried on that lease at once: deleted, released once', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const y = await lease();
    const a = await owning('node-a', prefix, clock);
    // Between the marker and the delete, our key is rewritten under our name on another lease.
    beforeNextTxn(a.session, 'Lease', { before: () => ownerPut(prefix, IP, 'node-a', y.id) });
    a.cands([]);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(a, 'info', 'released ownership').length === 1, 'deleted', a);
    await barrier(a, clock);
    assert.deepEqual(lines(a, 'info', 'released ownership').map((l) => l.obj), [{ ip: IP, why: 'no longer a candidate' }]);
    assert.equal(a.events.filter((e) => e.kind === 'owner-released').length, 1);
  });

  test('a pass with nothing to release does not wait for the datapath: with the datapath stalled on a new owned set, it still claims', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    a.apply.fn = () => new Promise(() => {});
    // While the pass publishes our candidacies, a key of ours turns up (its owned set changes mid-pass).
    beforeNextTxn(a.session, 'Version', {
      before: async () => {
        await ownerPut(prefix, IP2, 'node-a', a.session.leaseId!);
        await waitFor(() => a.own.view().owners.get(IP2) === 'node-a', { timeoutMs: 5000, intervalMs: 5, what: 'our key seen' });
      },
    });
    a.cands([IP, IP2]);
    await until(clock, async () => (await ownerKey(prefix))?.value === 'node-a', 'IP claimed, no clock step', a);
  });

  test('a claim over a key taken meanwhile learns the others as free from the same read: no failure, the rest claimed in the next round', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await member('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Create', { before: () => ownerPut(prefix, IP2, 'node-x', x.id) });
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.own.view().owners.get(IP2) === 'node-x', 'IP ours, IP2 node-x', a);
    assert.deepEqual(lines(a, 'debug', /sync failed/), []);
    assert.deepEqual(
      lines(a, 'debug', 'trace: contention transaction').map((l) => [l.obj.ips, l.obj.won]),
      [
        [2, false],
        [1, true],
      ],
    );
  });
});
