/**
 * Cases aimed at mutants of src/store/etcd/ownership.ts that the three other
 * fast files let through — found by reading the code past the partial
 * mutation run of 2026-11-27 and main's code since, each checked by hand
 * against its mutant (README, "Mutation testing") — in a file of their own so
 * that an incremental rerun retests only what they add. Same harness: a real
 * etcd, one manual clock per test.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { IP, IP2, OPTS, START, byPref, harness, interceptWatchCreate, type Member } from '../helpers/etcd-ownership-harness.js';
import type { ManualClock } from '../helpers/manual-clock.js';
import type { EtcdSession } from '../../src/store/etcd/session.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';

/** The ownership's private state the cases read (white-box, as the other fast files do). */
const inner = (m: Member) =>
  m.own as unknown as {
    others: Map<string, Map<string, number>>;
    candidateLeases: Map<string, string>;
    timers: Map<string, unknown>;
    passes: { atTimer?: { at: number }; idle(): Promise<void> };
    refreshes: { idle(): Promise<void> };
  };

/**
 * Wraps every transaction of `session` whose first compare is on `target`:
 * `around(commit)` decides when, and whether, it commits.
 */
function aroundTxns(session: EtcdSession, target: string, around: (commit: () => Promise<unknown>) => Promise<unknown>): void {
  const client = session.client;
  const realIf = client.if.bind(client);
  (client as { if: typeof client.if }).if = ((...args: Parameters<typeof client.if>) => {
    const tx = realIf(...args);
    if (args[1] === target) {
      const commit = tx.commit.bind(tx);
      tx.commit = (() => around(commit)) as typeof tx.commit;
    }
    return tx;
  }) as typeof client.if;
}

/** Resolves true once `cond` holds, false after `ms` (real time: for a wait inside a transaction hook). */
async function within(cond: () => boolean, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 5))) if (cond()) return true;
  return cond();
}

/** Makes the watches `session`'s client creates from now on lose their delete events while `ctl.dropping`. */
function losingDeletes(session: EtcdSession) {
  const ctl = { dropping: false, dropped: 0 };
  const client = session.client;
  interceptWatchCreate(client, client.watch.bind(client), async (create) => {
    const watcher = await create();
    const emit = watcher.emit.bind(watcher);
    watcher.emit = ((ev: string, ...args: unknown[]) => (ctl.dropping && ev === 'delete' ? (ctl.dropped++, true) : emit(ev, ...args))) as typeof watcher.emit;
    return watcher;
  });
  return ctl;
}

/** Documentation addresses (RFC 5737), n ≤ 254. */
const ips = (n: number) => Array.from({ length: n }, (_, i) => `192.0.2.${i + 1}`);

describe('etcd ownership on a manual clock: survivors, continued', () => {
  const real = useRealEtcd('own-surv2');
  const h = harness(real);
  const { member, owning, seeingX, ownerWithPreferred, until, barrier, lines, lease, key, ownerKey, clockAt, candidacy, ownerPut } = h;
  const took = (m: Member) => m.events.filter((e) => e.kind === 'owner-took');

  /**
   * Moves the clock `ms` forward in steps of 5 s, each once every member's
   * session has renewed its lease within the last 15 s (the keep-alive runs
   * every 10 s of the clock; the step-down comes 55 s after the last renewal).
   */
  async function advanceLive(clock: ManualClock, ms: number, members: Member[]): Promise<void> {
    for (let left = ms; left > 0; left -= 5000) {
      await until(clock, () => members.every((m) => m.session.validUntilMs() - clock.now() > 40_000), 'the leases renewed');
      clock.advance(Math.min(5000, left));
    }
    await until(clock, () => members.every((m) => m.session.state === 'live'), 'live');
  }

  test('a take 60 s after the previous owner key vanished names it (gap 60,000 ms); one a millisecond later is a free take', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    // Not a candidate yet: the keys' deletes are seen, nothing is claimed.
    const b = await member('node-b', prefix, clock);
    await until(clock, () => b.own.view().owners.size === 2, 'sees both', b);
    await real.raw.delete().key(`${prefix}owners/${IP2}`).exec();
    await until(clock, () => !b.own.view().owners.has(IP2), 'IP2 gone', b);
    clock.advance(1);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => !b.own.view().owners.has(IP), 'IP gone', b);
    await advanceLive(clock, 60_000, [b]);
    b.cands([IP, IP2]);
    await until(clock, () => b.owned().has(IP) && b.owned().has(IP2), 'both claimed', b);
    assert.deepEqual(
      took(b).sort((p, q) => String(p.ip).localeCompare(String(q.ip))),
      [
        { kind: 'owner-took', ip: IP, from: 'node-x', gapMs: 60_000, hint: 'lease-ended' },
        { kind: 'owner-took', ip: IP2, hint: 'free' },
      ],
    );
  });

  test('a take from a node fenced less than 10 s before is hinted fenced; 10 s after the fence, lease-ended', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const x2 = await lease();
    const [ip3, ip4] = ['198.51.100.9', '198.51.100.10'];
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    b.watch.silence('node-x');
    // Fenced at START: IP handed to us by our own record, moved 100 ms later, then the lease revoked and re-read.
    await until(clock, () => b.owned().has(IP), 'answers at its record', b);
    // The record's put has returned too (the watch can bring the record, and
    // with it the IP, before the put's reply): only then is the 100 ms until
    // the move on the clock.
    await until(clock, () => lines(b, 'warn', /^fencing a silent owner/).length === 1, 'the record written', b);
    clock.advance(100);
    await until(clock, () => b.own.status().fencesIssued === 1, 'revoked', b);
    await inner(b).refreshes.idle();
    // node-x back on a new lease, owning two more IPs we are a candidate for.
    await ownerPut(prefix, ip3, 'node-x', x2.id);
    await ownerPut(prefix, ip4, 'node-x', x2.id);
    b.cands([IP, ip3, ip4]);
    await until(clock, () => b.own.view().owners.get(ip3) === 'node-x' && b.own.view().owners.get(ip4) === 'node-x', 'sees node-x again', b);
    clock.advance(9_899);
    await real.raw.delete().key(`${prefix}owners/${ip3}`).exec();
    await until(clock, () => b.owned().has(ip3), 'ip3 taken', b);
    clock.advance(1);
    await real.raw.delete().key(`${prefix}owners/${ip4}`).exec();
    await until(clock, () => b.owned().has(ip4), 'ip4 taken', b);
    assert.deepEqual(
      took(b).filter((e) => e.ip !== IP),
      [
        { kind: 'owner-took', ip: ip3, from: 'node-x', gapMs: 0, hint: 'fenced' },
        { kind: 'owner-took', ip: ip4, from: 'node-x', gapMs: 0, hint: 'lease-ended' },
      ],
    );
  });

  test('an IP taken from another node, released and taken again is a free take the second time', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => b.owned().has(IP), 'taken', b);
    b.cands([]);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && lines(b, 'info', 'released ownership').length === 1, 'released', b);
    b.cands([IP]);
    await until(clock, () => took(b).length === 2, 'taken again', b);
    assert.deepEqual(took(b), [
      { kind: 'owner-took', ip: IP, from: 'node-x', gapMs: 0, hint: 'lease-ended' },
      { kind: 'owner-took', ip: IP, hint: 'free' },
    ]);
  });

  test('a late contender contends late again the next time the IP is free', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const l = await lease();
    await candidacy(prefix, IP, hi, l.id);
    const m = await member(lo, prefix, clock);
    m.cands([IP]);
    await until(clock, () => inner(m).timers.has(IP), 'waits', m);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => m.owned().has(IP), 'claimed late', m);
    // Our key deleted behind our back: free again, and we are still not the preferred.
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => !m.owned().has(IP) && inner(m).timers.has(IP), 'waits again', m);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => m.owned().has(IP), 'claimed late again', m);
  });

  test('a withdrawal not confirmed: the next pass is due 1,010 ms later; a pass at exactly 1,000 ms tries again', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    a.apply.fn = () => Promise.reject(new Error('datapath broken'));
    a.cands([]);
    await until(clock, () => lines(a, 'error', /did not confirm the withdrawal/).length === 1, 'the error line', a);
    assert.equal(inner(a).passes.atTimer?.at, START + 1010);
    clock.advance(1000);
    // Any pass at 1,000 ms (here: a new candidate IP's) retries the withdrawal.
    await barrier(a, clock);
    assert.equal(lines(a, 'error', /did not confirm the withdrawal/).length, 2);
  });

  test('a release of two IPs whose second key moved meanwhile deletes neither (every key compared), then the first', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    const [first, second] = [...a.own.view().owners.keys()] as [string, string];
    beforeNextTxn(a.session, 'Lease', { before: () => ownerPut(prefix, second, 'node-x', x.id) });
    a.cands([]);
    await until(clock, async () => (await ownerKey(prefix, first)) === undefined && a.own.view().owners.get(second) === 'node-x', 'first deleted, second learnt', a);
    assert.deepEqual(await ownerKey(prefix, second), { value: 'node-x', lease: x.id });
    // Our marker of the key that moved is removed (the first one went with its key).
    await until(clock, async () => (await key(`${prefix}releasing/${second}`)) === undefined, 'our marker removed', a);
  });

  test('a withdrawal not confirmed for two IPs removes our markers only while both stand on our lease', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    const [, second] = [...a.own.view().owners.keys()] as [string, string];
    let unmarking = false;
    // Between the failed withdrawal and the removal, another node's marker replaces our second one.
    beforeNextTxn(a.session, 'Lease', {
      before: async () => {
        await real.raw.put(`${prefix}releasing/${second}`).value('node-x').lease(x.id).exec();
        unmarking = true;
      },
    });
    a.apply.fn = () => Promise.reject(new Error('datapath broken'));
    a.cands([]);
    await until(clock, () => unmarking && lines(a, 'error', /did not confirm the withdrawal/).length === 1, 'the removal tried', a);
    await barrier(a, clock);
    assert.deepEqual(await key(`${prefix}releasing/${second}`), { value: 'node-x', lease: x.id });
  });

  test('a stop of two IPs whose second key moved before the hand-over moves neither', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const z = await lease();
    const p = await member('node-p', prefix, clock);
    p.cands([IP, IP2]);
    await until(clock, () => p.owned().has(IP) && p.owned().has(IP2), 'owns both', p);
    const o = await member('node-o', prefix, clock);
    o.cands([IP, IP2]);
    await until(clock, () => inner(p).candidateLeases.get(`${IP}/node-o`) === o.session.leaseId && inner(p).candidateLeases.get(`${IP2}/node-o`) === o.session.leaseId, 'the candidacies seen', p);
    const [first, second] = [...p.own.view().owners.keys()] as [string, string];
    beforeNextTxn(p.session, 'Lease', { before: () => ownerPut(prefix, second, 'node-z', z.id) });
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    clock.advance(100);
    await released;
    assert.deepEqual(await ownerKey(prefix, second), { value: 'node-z', lease: z.id });
    assert.deepEqual(await ownerKey(prefix, first), { value: 'node-p', lease: p.session.leaseId });
    assert.deepEqual(lines(p, 'debug', 'trace: hand-over transaction').map((l) => l.obj), [{ ips: 2, done: false, ms: 0 }]);
    const record = h.encodeHandoverRecord('node-p', [first, second].map((ip) => ({ ip, node: 'node-o', lease: o.session.leaseId! })))!;
    assert.deepEqual(lines(p, 'debug', 'trace: hand-over record written').map((l) => l.obj), [{ ips: 2, bytes: record.length, ms: 0 }]);
  });

  test('a stop names no successor that is skipped for the IP', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o } = await ownerWithPreferred(prefix);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && inner(o).timers.has(IP), 'handed over, its late timer armed', o);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.owned().has(IP), 'taken back late', o);
    assert.equal(lines(o, 'warn', /left the IP unclaimed/).length, 1, 'hi skipped');
    let done = false;
    const released = o.own.release({ silenced: true }).then(() => void (done = true));
    await until(clock, () => done || lines(o, 'debug', 'trace: hand-over record written').length > 0, 'released or a record written', o);
    clock.advance(100);
    await released;
    assert.equal(await key(`${prefix}handover/${o.node}`), undefined, 'no record');
    assert.deepEqual(await ownerKey(prefix), { value: o.node, lease: o.session.leaseId });
  });

  test('a late timer that fired while the IP was owned leaves no late claim behind: freed later, the IP waits the delay again', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const l = await lease();
    await candidacy(prefix, IP, hi, l.id);
    const m = await member(lo, prefix, clock);
    m.cands([IP]);
    await until(clock, () => inner(m).timers.has(IP), 'waits', m);
    // The preferred (simulated) claims within the delay; our timer fires on an owned IP.
    await ownerPut(prefix, IP, hi, l.id);
    await until(clock, () => m.own.view().owners.get(IP) === hi, 'sees the owner', m);
    clock.advance(OPTS.contendDelayMs);
    await barrier(m, clock);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => !m.own.view().owners.has(IP) && inner(m).timers.has(IP), 'waits again', m);
    assert.equal(m.owned().has(IP), false, 'not at once');
    assert.equal(await ownerKey(prefix), undefined);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => m.owned().has(IP), 'claimed late', m);
    assert.deepEqual(lines(m, 'debug', 'trace: contending').filter((x) => x.obj.late === 1).map((x) => x.obj), [{ ips: 1, late: 1 }]);
  });

  test('a failed pass is retried 510 ms later; a hand-over is due hold + 10 ms after the candidacy was first seen', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o } = await ownerWithPreferred(prefix);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    await barrier(o, clock);
    assert.equal(inner(o).passes.atTimer?.at, START + OPTS.handoverHoldMs + 10);
    clock.advance(100);
    beforeNextTxn(o.session, 'Version', { fail: new Error('store hiccup') });
    o.cands([IP, IP2]);
    await until(clock, () => lines(o, 'debug', 'etcd ownership sync failed; retrying').length === 1, 'the failure', o);
    assert.equal(inner(o).passes.atTimer?.at, START + 100 + 510);
  });

  test('a skipped node counts again at exactly the end of its skip', async () => {
    const prefix = real.freshPrefix();
    const { hi, clock, o } = await ownerWithPreferred(prefix);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && inner(o).timers.has(IP), 'handed over, its late timer armed', o);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => o.owned().has(IP), 'taken back late', o);
    const skippedAt = clock.now();
    clock.advance(OPTS.skipPreferredMs! - 1);
    await barrier(o, clock);
    assert.equal(o.owned().has(IP), true, 'skipped until then');
    clock.advance(1);
    assert.equal(clock.now(), skippedAt + OPTS.skipPreferredMs!);
    await barrier(o, clock);
    await until(clock, async () => (await ownerKey(prefix)) === undefined, 'handed over again at the end of the skip', o);
  });

  test('a voided IP is claimed when the void ends, by the preferred as a claim of its own (not a late one)', async () => {
    const prefix = real.freshPrefix();
    const [c, y] = byPref(IP, ['node-c', 'node-y']) as [string, string];
    const clock = clockAt();
    const lx = await lease();
    const ly = await lease();
    await ownerPut(prefix, IP, 'node-x', lx.id);
    await candidacy(prefix, IP, y, ly.id);
    await real.raw.put(`${prefix}handover/node-x`).value(h.encodeHandoverRecord('node-x', [{ ip: IP, node: y, lease: ly.id }])!).lease(lx.id).exec();
    const m = await member(c, prefix, clock);
    m.cands([IP]);
    await until(clock, () => m.own.view().owners.get(IP) === 'node-x', 'sees the owner', m);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => inner(m).timers.has(IP), 'voided: waits', m);
    clock.advance(OPTS.contendDelayMs);
    await until(clock, () => m.owned().has(IP), 'claimed', m);
    await until(clock, () => lines(m, 'info', 'took ownership').some((x) => x.obj.ip === IP), 'the took line', m);
    assert.deepEqual(lines(m, 'info', 'took ownership').find((x) => x.obj.ip === IP)!.obj, { ip: IP });
  });

  test('a claim whose every key was taken meanwhile learns them and ends without a failure', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await member('node-a', prefix, clock);
    beforeNextTxn(a.session, 'Create', { before: () => ownerPut(prefix, IP, 'node-x', x.id) });
    a.cands([IP]);
    await until(clock, () => a.own.view().owners.get(IP) === 'node-x', 'learnt node-x', a);
    await barrier(a, clock);
    assert.deepEqual(lines(a, 'debug', /sync failed/), []);
    assert.deepEqual(lines(a, 'debug', 'trace: contention transaction').filter((l) => l.obj.first === IP).map((l) => l.obj), [{ ips: 1, won: false, first: IP, ms: 0 }]);
  });

  test('a pass answers what the view grants before its store writes (a record naming us, while the candidacy write waits)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    await real.raw.put(`${prefix}handover/node-x`).value(h.encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-b', lease: b.session.leaseId! }])!).lease(x.id).exec();
    await until(clock, () => (b.own as unknown as { handovers: Map<string, unknown> }).handovers.size === 1 && b.own.view().owners.has(IP), 'the record and the key seen', b);
    // No pass running: the candidacy's pass is the next one.
    clock.advance(0);
    await inner(b).passes.idle();
    let grantedFirst: boolean | undefined;
    beforeNextTxn(b.session, 'Version', {
      before: async () => {
        grantedFirst = await within(() => b.owned().has(IP), 2000);
      },
    });
    b.cands([IP]);
    await until(clock, () => grantedFirst !== undefined, 'the candidacy write', b);
    assert.equal(grantedFirst, true);
  });

  test('a release or a dispose between two rounds of a claim ends it: nothing more claimed', async () => {
    for (const how of ['release', 'dispose'] as const) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      const a = await member('node-a', prefix, clock);
      beforeNextTxn(a.session, 'Create', {
        before: async () => {
          if (how === 'release') void a.own.release();
          else a.own.dispose();
          await ownerPut(prefix, IP2, 'node-x', x.id);
        },
      });
      a.cands([IP, IP2]);
      await until(clock, () => lines(a, 'debug', 'trace: contention transaction').length === 1, 'the first round', a);
      await inner(a).passes.idle();
      assert.equal(await ownerKey(prefix, IP), undefined, `no second round (${how})`);
      assert.equal(lines(a, 'debug', 'trace: contention transaction').length, 1);
    }
  });

  test('a silence check that finds us released or disposed once the store has answered fences nothing', async () => {
    for (const how of ['release', 'dispose'] as const) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      await ownerPut(prefix, IP, 'node-x', x.id);
      const b = await seeingX('node-b', prefix, clock);
      const lc = b.session.client.leaseClient;
      const realRevoke = lc.leaseRevoke.bind(lc);
      let revokes = 0;
      (lc as { leaseRevoke: typeof lc.leaseRevoke }).leaseRevoke = (...args: Parameters<typeof lc.leaseRevoke>) => {
        revokes++;
        return realRevoke(...args);
      };
      let answered = false;
      aroundTxns(b.session, 'Version', async (commit) => {
        const r = await commit();
        if (how === 'release') void b.own.release();
        else b.own.dispose();
        // After every continuation of the answer (the fence's next step runs in them).
        setImmediate(() => (answered = true));
        return r;
      });
      b.watch.silence('node-x');
      await until(clock, () => answered, 'the store answered', b);
      assert.equal(revokes, 0, `no revoke (${how})`);
      assert.notEqual((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1');
    }
  });

  test('a fence records at most 100 of the fenced node IPs', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    for (const ip of ips(100)) await ownerPut(prefix, ip, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    await until(clock, () => b.own.view().owners.size === 101, 'sees 101', b);
    b.watch.silence('node-x');
    await until(clock, () => b.events.some((e) => e.kind === 'owner-fenced'), 'fenced', b);
    const fenced = b.events.find((e) => e.kind === 'owner-fenced') as { ips: string[] };
    assert.equal(fenced.ips.length, 100);
  });

  test('a lease-less owner key with a lease-less marker is no release in progress: fenced at once (nothing on a lease to revoke: re-read)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    await real.raw.put(`${prefix}owners/${IP}`).value('node-x').exec();
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').exec();
    const b = await member('node-b', prefix, clock, { start: false });
    await b.session.start();
    // The lease-less owner key stays (its removal fails).
    aroundTxns(b.session, 'Mod', () => Promise.reject(new Error('not removed')));
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    await until(clock, () => b.own.status().staleKeysIgnored >= 1, 'the stale key seen', b);
    const reads = h.countReads(b);
    b.watch.silence('node-x');
    await until(clock, () => reads.n >= 1, 'the fence re-reads', b);
    assert.deepEqual(lines(b, 'info', /it is releasing/), []);
    assert.deepEqual(b.events.filter((e) => e.kind === 'owner-fenced'), [], 'nothing of node-x in the view: no fence recorded');
  });

  test('a stop of 60 IPs records 50 released events', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const all = ips(60);
    const p = await member('node-p', prefix, clock);
    p.cands(all);
    await until(clock, () => all.every((ip) => p.owned().has(ip)), 'owns 60', p);
    const o = await member('node-o', prefix, clock);
    o.cands(all);
    await until(clock, () => all.every((ip) => inner(p).candidateLeases.get(`${ip}/node-o`) === o.session.leaseId), 'the candidacies seen', p);
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    clock.advance(100);
    await released;
    assert.deepEqual(lines(p, 'info', 'handed ownership over to the successors').map((l) => l.obj), [{ ips: 60, of: 60 }]);
    assert.equal(p.events.filter((e) => e.kind === 'owner-released').length, 50);
  });

  test('130 free IPs: the first chunk is answered as its transaction returns, before the second chunk commits', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const all = ips(130);
    const a = await member('node-a', prefix, clock);
    let creates = 0;
    let firstAnswered: boolean | undefined;
    aroundTxns(a.session, 'Create', async (commit) => {
      if (++creates === 2) firstAnswered = await within(() => all.slice(0, 125).every((ip) => a.owned().has(ip)), 2000);
      return commit();
    });
    a.cands(all);
    await until(clock, () => all.every((ip) => a.owned().has(ip)), 'owns all 130', a);
    assert.equal(firstAnswered, true);
  });

  test('a marked owner whose key goes within the grace is no longer waited out (no re-check at the grace end)', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}releasing/${IP}`).value('node-x').lease(x.id).exec();
    const b = await seeingX('node-b', prefix, clock);
    b.watch.silence('node-x');
    await until(clock, () => lines(b, 'info', /it is releasing: not fenced/).length === 1, 'graced', b);
    const waiting = () => (b.own as unknown as { verdicts: { verdicts: Map<string, unknown> } }).verdicts.verdicts;
    assert.equal(waiting().size, 1);
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => waiting().size === 0, 'the release seen: nothing waited out', b);
  });

  test('a claim of ours while a re-read is in flight stays in the view when the older snapshot lands', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const client = a.session.client;
    const realGetAll = client.getAll.bind(client);
    let hold = true;
    let read = false;
    (client as { getAll: typeof client.getAll }).getAll = () => {
      (client as { getAll: typeof client.getAll }).getAll = realGetAll;
      const b = realGetAll();
      const prefixOf = b.prefix.bind(b);
      return Object.assign(b, {
        prefix: (p: string) => {
          const q = prefixOf(p);
          const exec = q.exec.bind(q);
          return Object.assign(q, {
            exec: async () => {
              const r = await exec();
              read = true;
              await within(() => !hold, 3000);
              return r;
            },
          });
        },
      });
    };
    const reread = a.own.livenessGate().recheck('test');
    // The store has answered the read (its revision is before the claim); the answer is held back.
    await until(clock, () => read, 'the read answered', a);
    a.cands([IP]);
    await until(clock, () => a.owned().has(IP), 'claimed while the read is held', a);
    hold = false;
    await reread;
    await barrier(a, clock);
    assert.equal(a.own.view().owners.get(IP), 'node-a');
    assert.equal(a.owned().has(IP), true);
  });

  test('deletes seen on the watch are traced once per batch, with their count', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    for (const ip of [IP, IP2, '198.51.100.9']) await ownerPut(prefix, ip, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    await until(clock, () => b.own.view().owners.size === 3, 'sees three', b);
    const traced = () => lines(b, 'debug', 'trace: watch deletes applied');
    // Two deletes in one transaction: one watch message.
    await real.raw.if(`${prefix}owners/${IP}`, 'Version', '>', 0).then(real.raw.delete().key(`${prefix}owners/${IP}`), real.raw.delete().key(`${prefix}owners/${IP2}`)).commit();
    await until(clock, () => traced().length === 1, 'traced', b);
    assert.equal(traced()[0]!.obj.deletes, 2);
    const ms = traced()[0]!.obj.sinceFirstMs as number;
    assert.ok(ms >= 0 && ms < 1000, `sinceFirstMs ${ms}`);
    await real.raw.delete().key(`${prefix}owners/198.51.100.9`).exec();
    await until(clock, () => traced().length === 2, 'traced again', b);
    assert.equal(traced()[1]!.obj.deletes, 1);
  });

  test('hand-overs to us are traced per watch batch: a second batch counts from zero', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    b.cands([IP, IP2]);
    await until(clock, () => b.own.view().owners.size === 2, 'sees both', b);
    const ours = b.session.leaseId!;
    await ownerPut(prefix, IP, 'node-b', ours);
    await until(clock, () => b.owned().has(IP), 'the first', b);
    await ownerPut(prefix, IP2, 'node-b', ours);
    await until(clock, () => b.owned().has(IP2), 'the second', b);
    await until(clock, () => lines(b, 'debug', 'trace: handed over to us (watch batch)').length === 2, 'two traces', b);
    assert.deepEqual(lines(b, 'debug', 'trace: handed over to us (watch batch)').map((l) => l.obj), [{ ips: 1 }, { ips: 1 }]);
  });

  test("the wire watch takes an IP a standing record of its owner hands over (by that node, on the key's lease, naming it) for one it is giving up", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    // IP sorts before IP2: the target unless IP is given up.
    await ownerPut(prefix, IP, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    b.cands([IP, IP2]);
    await until(clock, () => b.watch.targets.length === 1, 'a target', b);
    const records = () => (b.own as unknown as { handovers: Map<string, { goneAtMs?: number; lease: string }> }).handovers;
    const put = async (by: string, at: string, onLease: string, ip: string) => {
      await real.raw.put(`${prefix}handover/${at}`).value(h.encodeHandoverRecord(by, [{ ip, node: 'node-z', lease: y.id }])!).lease(onLease).exec();
      await until(clock, () => records().get(`${prefix}handover/${at}`)?.lease === onLease, `the record at ${at} seen`, b);
      await barrier(b, clock);
    };
    // By another node on the key's lease; by node-x on another lease; by node-x on the key's lease for IP2: IP stays the target.
    await put('node-w', 'node-w', x.id, IP);
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: IP, iface: 'eth0' }], 'by another node');
    await put('node-x', 'node-x', y.id, IP);
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: IP, iface: 'eth0' }], 'on another lease');
    await put('node-x', 'node-x', x.id, IP2);
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: IP, iface: 'eth0' }], 'naming IP2');
    // Naming IP: IP2 is the target.
    await put('node-x', 'node-x', x.id, IP);
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: IP2, iface: 'eth0' }], 'naming IP');
    // The record deleted (kept as gone for the void rule): IP again.
    await real.raw.delete().key(`${prefix}handover/node-x`).exec();
    await until(clock, () => b.watch.targets[0]?.ip === IP, 'back to IP', b);
  });

  test('silence about an IP a standing record of its owner hands over is graced; a record on another lease, by another node or for another IP is no grace', async () => {
    const cases = [
      { what: 'the record', by: 'node-x', onKeyLease: true, ip: IP, graced: true },
      { what: 'another lease', by: 'node-x', onKeyLease: false, ip: IP, graced: false },
      { what: 'another node', by: 'node-w', onKeyLease: true, ip: IP, graced: false },
      { what: 'another IP', by: 'node-x', onKeyLease: true, ip: IP2, graced: false },
    ];
    for (const c of cases) {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const x = await lease();
      const y = await lease();
      await ownerPut(prefix, IP, 'node-x', x.id);
      // At node-x's record key whatever it says.
      await real.raw.put(`${prefix}handover/node-x`).value(h.encodeHandoverRecord(c.by, [{ ip: c.ip, node: 'node-z', lease: y.id }])!).lease(c.onKeyLease ? x.id : y.id).exec();
      const b = await seeingX('node-b', prefix, clock);
      const reads = h.countReads(b);
      b.watch.silence('node-x');
      if (c.graced) {
        await until(clock, () => lines(b, 'info', /it is releasing: not fenced/).length === 1, `graced (${c.what})`, b);
        assert.equal(b.own.status().fencesIssued, 0);
      } else {
        // Judged a fence (the record standing at node-x's key leaves the hand-over to its writer: no revoke, a re-read).
        await until(clock, () => reads.n >= 1, `a fence, not graced (${c.what})`, b);
        assert.deepEqual(lines(b, 'info', /it is releasing/), []);
        // A record stands at node-x's key, seen within the grace: the hand-over is left to its writer, nothing revoked.
        assert.equal(b.own.status().fencesIssued, 0, `not revoked (${c.what})`);
      }
    }
  });

  test('the crash hand-over plan: the record a stop would write for the keys on our lease; none without a successor, a lease, or after a release', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const idle = await member('node-q', prefix, clock, { start: false });
    assert.equal(idle.own.crashHandoverPlan(), undefined, 'no lease');
    await idle.own.release();
    assert.deepEqual(lines(idle, 'debug', 'trace: release').map((l) => l.obj), [{ ips: 0, silenced: false }], 'no lease: nothing of ours to release');
    const p = await member('node-p', prefix, clock);
    p.cands([IP, IP2]);
    await until(clock, () => p.owned().has(IP) && p.owned().has(IP2), 'owns both', p);
    assert.equal(p.own.crashHandoverPlan(), undefined, 'no successor');
    const o = await member('node-o', prefix, clock);
    o.cands([IP]);
    await until(clock, () => inner(p).candidateLeases.get(`${IP}/node-o`) === o.session.leaseId, 'the candidacy seen', p);
    // Keys no stop of ours would move: another node's on our lease, ours on another lease (both with node-o a candidate).
    const x = await lease();
    const [ip3, ip4] = ['198.51.100.9', '198.51.100.10'];
    await ownerPut(prefix, ip3, 'node-x', p.session.leaseId!);
    await ownerPut(prefix, ip4, 'node-p', x.id);
    p.cands([IP, IP2, ip3, ip4]);
    o.cands([IP, ip3, ip4]);
    await until(clock, () => [ip3, ip4].every((ip) => p.own.view().owners.has(ip) && inner(p).candidateLeases.has(`${ip}/node-o`)), 'sees them', p);
    await barrier(p, clock);
    assert.deepEqual([p.owned().has(ip3), p.owned().has(ip4)], [false, false], "neither is ours to answer");
    assert.deepEqual(p.own.crashHandoverPlan(), {
      lease: p.session.leaseId,
      recordKey: `${prefix}handover/node-p`,
      ownersPrefix: `${prefix}owners/`,
      record: h.encodeHandoverRecord('node-p', [{ ip: IP, node: 'node-o', lease: o.session.leaseId! }], 'crash'),
    });
    // Released (here while the stop's hand-over is still under way): no plan.
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    assert.equal(p.own.crashHandoverPlan(), undefined, 'released');
    clock.advance(100);
    await released;
  });

  test('a hand-over that does not return within a second of the stop: the release ends anyway, withdrawn', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock);
    const o = await member('node-o', prefix, clock);
    o.cands([IP]);
    await until(clock, () => inner(p).candidateLeases.get(`${IP}/node-o`) === o.session.leaseId, 'the candidacy seen', p);
    // The move's transaction never returns.
    aroundTxns(p.session, 'Lease', () => new Promise(() => {}));
    let done = false;
    const released = p.own.release({ silenced: true }).then(() => void (done = true));
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    clock.advance(100);
    await barrier(o, clock);
    assert.equal(done, false, 'the moves are under way');
    clock.advance(899);
    await barrier(o, clock);
    assert.equal(done, false, 'not before a second');
    clock.advance(1);
    await until(clock, () => done, 'released at a second', p);
    await released;
    assert.equal(p.owned().size, 0);
    assert.deepEqual(lines(p, 'info', 'handed ownership over to the successors'), []);
  });

  test('after an outage, keys still on the former lease are answered before they are moved onto the new one', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    const old = a.session.leaseId!;
    clock.advance(55_000);
    await until(clock, () => a.owned().size === 0, 'withdrawn', a);
    let answeredFirst: boolean | undefined;
    beforeNextTxn(a.session, 'Lease', {
      before: async () => {
        answeredFirst = await within(() => a.owned().has(IP), 2000);
      },
    });
    await waitFor(
      () => {
        clock.advance(1000);
        return a.session.state === 'live';
      },
      { what: 'a new lease', intervalMs: 5 },
    );
    assert.notEqual(a.session.leaseId, old);
    await until(clock, () => answeredFirst !== undefined, 'the move', a);
    assert.equal(answeredFirst, true);
    await until(clock, async () => (await ownerKey(prefix))?.lease === a.session.leaseId, 'moved', a);
  });

  test('dispose stops the passes and cancels the watch', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    await until(clock, () => b.watch.targets.length === 1, 'watches node-x', b);
    const watcher = (b.own as unknown as { watcher: { once(ev: string, f: () => void): void; cancel(): Promise<void> } }).watcher;
    let ended = false;
    watcher.once('end', () => void (ended = true));
    clock.advance(0);
    await inner(b).passes.idle();
    b.own.dispose();
    // No pass after it: a candidacy change retargets nothing (a pass's first steps would, within this advance).
    b.cands([]);
    clock.advance(0);
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: IP, iface: 'eth0' }], 'no pass after dispose');
    try {
      await until(clock, () => ended, 'the watch ended', b);
    } finally {
      // Failing, leave no watch open behind the test.
      if (!ended) void watcher.cancel();
    }
  });

  test("a hand-over onto a successor lease that is gone fails with the store's error, logged; nothing handed", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock);
    const ly = await lease();
    await candidacy(prefix, IP, 'node-y', ly.id);
    await until(clock, () => inner(p).candidateLeases.get(`${IP}/node-y`) === ly.id, 'the candidacy seen', p);
    beforeNextTxn(p.session, 'Lease', { before: () => ly.revoke() });
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    clock.advance(100);
    await released;
    assert.match(String(lines(p, 'debug', 'handing ownership over failed; the lease revoke frees the IPs')[0]?.obj.err), /lease/i);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-p', lease: p.session.leaseId });
  });

  test('an IP handed over and taken back late exactly 10 s later skips nobody (the skip is for a take back within 10 s)', async () => {
    const prefix = real.freshPrefix();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const o = await owning(lo, prefix, clock, { contendDelayMs: 10_000 });
    const l = await lease();
    await candidacy(prefix, IP, hi, l.id);
    await until(clock, () => inner(o).others.get(IP)?.has(hi) === true, 'the candidacy seen', o);
    clock.advance(OPTS.handoverHoldMs + 10);
    await until(clock, async () => (await ownerKey(prefix)) === undefined && inner(o).timers.has(IP), 'handed over, waiting', o);
    clock.advance(10_000);
    // Taken back late (and, the preferred not skipped, handed over again at once: the line, not the owned set, stays).
    await until(clock, () => lines(o, 'info', 'took ownership').some((l) => l.obj.late === true), 'taken back late', o);
    assert.deepEqual(lines(o, 'warn', /left the IP unclaimed/), []);
  });

  test('a key that moves to another node while our withdrawal is applied is not deleted', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const a = await owning('node-a', prefix, clock);
    a.apply.fn = async () => {
      if (a.owned().has(IP)) return;
      a.apply.fn = () => {};
      await ownerPut(prefix, IP, 'node-x', x.id);
      await waitFor(() => a.own.view().owners.get(IP) === 'node-x', { what: 'the move seen', timeoutMs: 5000, intervalMs: 5 });
    };
    a.cands([]);
    await until(clock, async () => a.own.view().owners.get(IP) === 'node-x' && (await key(`${prefix}releasing/${IP}`)) === undefined, 'learnt, our marker removed', a);
    await barrier(a, clock);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id });
  });

  test('a re-read that learns what the watch missed (a delete) is acted on at once: the freed IP is claimed', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await member('node-b', prefix, clock, { start: false });
    await b.session.start();
    const lossy = losingDeletes(b.session);
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    b.cands([IP]);
    await until(clock, () => b.own.view().owners.get(IP) === 'node-x', 'sees node-x', b);
    lossy.dropping = true;
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => lossy.dropped === 1, 'the delete lost', b);
    await b.own.livenessGate().recheck('test');
    await until(clock, () => b.owned().has(IP), 'claimed after the re-read', b);
  });

  test("a stalled fencer's record: graced within the grace; past the grace from its first sighting (a re-read does not restart it), the owner is revoked", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const z = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    await real.raw.put(`${prefix}handover/node-x`).value(h.encodeHandoverRecord('node-x', [{ ip: IP, node: 'node-z', lease: z.id }], 'wire-silence')!).lease(x.id).exec();
    const b = await seeingX('node-b', prefix, clock, { releaseGraceMs: 1000 });
    await until(clock, () => (b.own as unknown as { handovers: Map<string, unknown> }).handovers.size === 1, 'the record seen', b);
    b.watch.silence('node-x');
    await until(clock, () => lines(b, 'info', /it is releasing: not fenced/).length === 1, 'graced', b);
    clock.advance(500);
    await b.own.livenessGate().recheck('test');
    clock.advance(499);
    await barrier(b, clock);
    assert.equal(b.own.status().fencesIssued, 0, 'within the grace');
    clock.advance(1);
    await until(clock, () => b.own.status().fencesIssued === 1, 'revoked at the grace end', b);
    assert.equal((await real.raw.leaseClient.leaseTimeToLive({ ID: x.id })).TTL, '-1');
  });

  test('a silent owner whose IPs have no successor is revoked at once: no record written', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await member('node-b', prefix, clock);
    b.cands([IP2]);
    await until(clock, () => b.own.view().owners.get(IP) === 'node-x', 'sees node-x', b);
    b.watch.silence('node-x', IP);
    await until(clock, () => b.own.status().fencesIssued === 1, 'revoked', b);
    assert.equal(await key(`${prefix}handover/node-x`), undefined);
    assert.deepEqual(lines(b, 'debug', /hand-over record failed/), [], 'nothing tried');
  });

  test("a key moved onto our lease is a clean stop's unless a record of its node on its lease says otherwise (another node's record on that lease, or its record on another lease, do not)", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const y = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    await real.raw.put(`${prefix}handover/node-w`).value(h.encodeHandoverRecord('node-w', [{ ip: IP2, node: 'node-z', lease: y.id }], 'crash')!).lease(x.id).exec();
    await real.raw.put(`${prefix}handover/node-x`).value(h.encodeHandoverRecord('node-x', [{ ip: IP2, node: 'node-z', lease: y.id }], 'crash')!).lease(y.id).exec();
    await until(clock, () => (b.own as unknown as { handovers: Map<string, unknown> }).handovers.size === 2, 'both records seen', b);
    await ownerPut(prefix, IP, 'node-b', b.session.leaseId!);
    await until(clock, () => took(b).length === 1, 'the take', b);
    assert.deepEqual(took(b), [{ kind: 'owner-took', ip: IP, from: 'node-x', hint: 'released', cause: 'clean-stop', causeText: 'clean stop of the previous owner' }]);
  });

  test("a fencer that hands the silent owner's IP to itself answers at its own record, before any watch event or the moves, and keeps the moved key through the revoke", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await member('node-b', prefix, clock, { start: false });
    await b.session.start();
    // The watch's events are held back while `held` (a lagging watch).
    const client = b.session.client;
    let held = false;
    const late: Array<() => void> = [];
    interceptWatchCreate(client, client.watch.bind(client), async (create) => {
      const watcher = await create();
      const emit = watcher.emit.bind(watcher);
      watcher.emit = ((ev: string, ...args: unknown[]) => {
        if (held && (ev === 'put' || ev === 'delete')) return void late.push(() => emit(ev, ...args)), true;
        return emit(ev, ...args);
      }) as typeof watcher.emit;
      return watcher;
    });
    await b.own.start(async (v) => void b.sets.push(new Set(v.owned)));
    b.cands([IP]);
    await until(clock, () => b.own.view().owners.get(IP) === 'node-x', 'sees node-x', b);
    held = true;
    b.watch.silence('node-x');
    await until(clock, () => b.owned().has(IP), 'answers at its record', b);
    assert.deepEqual(await ownerKey(prefix), { value: 'node-x', lease: x.id }, 'not moved yet');
    // The watch still held and every re-read failing: the view is what the fence itself applied —
    // the key it moved onto our lease stays ours through the revoke.
    const realGetAll = client.getAll.bind(client);
    (client as { getAll: typeof client.getAll }).getAll = () => ({ prefix: () => ({ exec: () => Promise.reject(new Error('no re-read')) }) }) as unknown as ReturnType<typeof client.getAll>;
    try {
      clock.advance(100);
      await until(clock, () => b.own.status().fencesIssued === 1, 'moved and revoked', b);
      await barrier(b, clock);
      assert.deepEqual([b.own.view().owners.get(IP), b.owned().has(IP)], ['node-b', true]);
      await until(clock, () => lines(b, 'info', 'took ownership: handed over by the stopping owner').length === 1, 'the took line', b);
      assert.deepEqual(lines(b, 'info', 'took ownership: handed over by the stopping owner')[0]!.obj, { ip: IP, from: 'node-x', cause: 'wire-silence' });
    } finally {
      (client as { getAll: typeof client.getAll }).getAll = realGetAll;
      held = false;
      for (const f of late.splice(0)) f();
    }
  });

  test("a fencer's record on the silent node's lease names that node's IPs on it only, never the node itself", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    const x2 = await lease();
    const [ipA, ip3] = ['198.51.100.21', '198.51.100.9'];
    // Our name, one node-x is preferred over for ipA (its own candidacy must not make it its successor).
    const me = Array.from('bcdefghijklmnopqrstuvwyz', (c) => `node-${c}`).find((n) => byPref(ipA, [n, 'node-x'])[0] === 'node-x');
    assert.ok(me);
    await ownerPut(prefix, ipA, 'node-x', x.id);
    await ownerPut(prefix, IP2, 'node-x', x2.id);
    await ownerPut(prefix, ip3, 'node-w', x.id);
    await candidacy(prefix, ipA, 'node-x', x.id);
    const b = await member(me, prefix, clock);
    b.cands([ipA, IP2, ip3]);
    await until(clock, () => b.own.view().owners.size === 3 && inner(b).candidateLeases.has(`${ipA}/node-x`), 'sees the keys', b);
    b.watch.silence('node-x', ipA);
    await until(clock, () => lines(b, 'warn', 'fencing a silent owner: its IPs handed to their successors first').length === 1, 'the first record', b);
    const rec = await key(`${prefix}handover/node-x`);
    assert.deepEqual(rec && { ...rec, value: JSON.parse(rec.value) }, { value: JSON.parse(h.encodeHandoverRecord('node-x', [{ ip: ipA, node: me, lease: b.session.leaseId! }], 'wire-silence')!), lease: x.id });
    assert.deepEqual(lines(b, 'warn', 'fencing a silent owner: its IPs handed to their successors first')[0]!.obj, { node: 'node-x', lease: x.id, ips: 1, of: 1 });
    clock.advance(100);
    await until(clock, () => lines(b, 'warn', 'fencing a silent owner: its IPs handed to their successors first').length === 2, 'the second lease', b);
    clock.advance(100);
    await until(clock, () => b.own.status().fencesIssued === 2, 'both revoked', b);
  });

  test("a silent node's record that cannot be written (its lease gone meanwhile) is logged with the store's error; the fence goes on", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const x = await lease();
    await ownerPut(prefix, IP, 'node-x', x.id);
    const b = await seeingX('node-b', prefix, clock);
    let versions = 0;
    aroundTxns(b.session, 'Version', async (commit) => {
      // The first is the silence check's read, the second the record.
      if (++versions === 2) await x.revoke();
      return commit();
    });
    b.watch.silence('node-x');
    await until(clock, () => lines(b, 'debug', "writing a silent owner's hand-over record failed").length === 1, 'the failure', b);
    const l = lines(b, 'debug', "writing a silent owner's hand-over record failed")[0]!;
    assert.equal(l.obj.node, 'node-x');
    assert.match(String(l.obj.err), /lease/i);
    await until(clock, () => b.owned().has(IP), 'free: claimed', b);
  });

  test("a fencer's record of ours on a lease that is not ours withdraws nothing; neither does our own stop's record", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const y = await lease();
    const x = await lease();
    const a = await owning('node-a', prefix, clock);
    const calls = a.ownersCalls.n;
    await real.raw.put(`${prefix}handover/node-a`).value(h.encodeHandoverRecord('node-a', [{ ip: IP, node: 'node-z', lease: y.id }], 'wire-silence')!).lease(y.id).exec();
    // An owner key put after it: seen after it on the ordered watch.
    await ownerPut(prefix, IP2, 'node-x', x.id);
    await until(clock, () => a.ownersCalls.n > calls, 'the later event seen', a);
    await barrier(a, clock);
    assert.equal(a.owned().has(IP), true);
    assert.deepEqual(lines(a, 'warn', /another node fenced us/), []);
    await real.raw.delete().key(`${prefix}handover/node-a`).exec();
    // Our own stop: its record names node-o; the moves that follow it are seen after it.
    const o = await member('node-o', prefix, clock);
    o.cands([IP]);
    await until(clock, () => inner(a).candidateLeases.get(`${IP}/node-o`) === o.session.leaseId, 'the candidacy seen', a);
    const before = a.ownersCalls.n;
    const released = a.own.release({ silenced: true });
    await until(clock, () => lines(a, 'debug', 'trace: hand-over record written').length === 1, 'the record', a);
    clock.advance(100);
    await released;
    await until(clock, () => a.ownersCalls.n > before, 'the move seen', a);
    assert.deepEqual(lines(a, 'warn', /another node fenced us/), []);
  });

  test('the watch reconnected: everything is re-read; a watch error is warned about with the error', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const b = await member('node-b', prefix, clock);
    const watcher = (b.own as unknown as { watcher: { emit(ev: string, ...args: unknown[]): boolean } }).watcher;
    const reads = h.countReads(b);
    // What etcd3 emits on its watcher after a reconnect, and on a stream error.
    watcher.emit('connected', { header: { revision: '1' } });
    await until(clock, () => reads.n === 1, 'a re-read', b);
    watcher.emit('error', new Error('stream broke'));
    assert.deepEqual(lines(b, 'warn', 'etcd ownership watch error').map((l) => String(l.obj.err)).filter((e) => /stream broke/.test(e)).length, 1);
  });

  test('a record that vanished unseen is kept as gone by the re-read that misses it: a vanished key it named another node for is still voided', async () => {
    const prefix = real.freshPrefix();
    const [c, y] = byPref(IP, ['node-c', 'node-y']) as [string, string];
    const clock = clockAt();
    const lx = await lease();
    const ly = await lease();
    await ownerPut(prefix, IP, 'node-x', lx.id);
    await candidacy(prefix, IP, y, ly.id);
    await real.raw.put(`${prefix}handover/node-x`).value(h.encodeHandoverRecord('node-x', [{ ip: IP, node: y, lease: ly.id }])!).lease(lx.id).exec();
    const m = await member(c, prefix, clock, { start: false });
    await m.session.start();
    const lossy = losingDeletes(m.session);
    await m.own.start(async (v) => void m.sets.push(new Set(v.owned)));
    m.cands([IP]);
    const records = () => (m.own as unknown as { handovers: Map<string, { goneAtMs?: number }> }).handovers;
    await until(clock, () => m.own.view().owners.get(IP) === 'node-x' && records().size === 1, 'sees the key and the record', m);
    lossy.dropping = true;
    await real.raw.delete().key(`${prefix}handover/node-x`).exec();
    await until(clock, () => lossy.dropped === 1, 'the delete lost', m);
    lossy.dropping = false;
    await m.own.livenessGate().recheck('test');
    assert.deepEqual([...records().values()].map((r) => r.goneAtMs), [START], 'kept as gone, from the re-read');
    await real.raw.delete().key(`${prefix}owners/${IP}`).exec();
    await until(clock, () => inner(m).timers.has(IP) || m.owned().has(IP), 'decided', m);
    assert.equal(m.owned().has(IP), false, 'voided: not at once');
  });

  test("a fencer's record of ours on our lease withdraws the IPs it names, not the others", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const z = await lease();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    await real.raw.put(`${prefix}handover/node-a`).value(h.encodeHandoverRecord('node-a', [{ ip: IP, node: 'node-z', lease: z.id }], 'wire-silence')!).lease(a.session.leaseId!).exec();
    await until(clock, () => !a.owned().has(IP), 'IP withdrawn', a);
    await barrier(a, clock);
    assert.equal(a.owned().has(IP2), true);
  });

  test('a stop without an events sink hands over all the same', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const p = await owning('node-p', prefix, clock, { events: false });
    const o = await member('node-o', prefix, clock);
    o.cands([IP]);
    await until(clock, () => inner(p).candidateLeases.get(`${IP}/node-o`) === o.session.leaseId, 'the candidacy seen', p);
    const released = p.own.release({ silenced: true });
    await until(clock, () => lines(p, 'debug', 'trace: hand-over record written').length === 1, 'the record', p);
    clock.advance(100);
    await released;
    assert.deepEqual(await ownerKey(prefix), { value: 'node-o', lease: o.session.leaseId });
    assert.deepEqual(lines(p, 'info', 'handed ownership over to the successors').map((l) => l.obj), [{ ips: 1, of: 1 }]);
  });

  test("at most 64 records' first sightings are remembered: the 65th forgets the oldest", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const b = await member('node-b', prefix, clock);
    const nodes = Array.from({ length: 65 }, (_, i) => `stop-${i}`);
    const leases: string[] = [];
    for (const n of nodes) leases.push((await lease()).id);
    const seen = (b.own as unknown as { recordsFirstSeen: Map<string, number> }).recordsFirstSeen;
    for (let i = 0; i < 65; i++) {
      await real.raw.put(`${prefix}handover/${nodes[i]}`).value(h.encodeHandoverRecord(nodes[i]!, [{ ip: IP, node: 'node-z', lease: leases[i]! }])!).lease(leases[i]!).exec();
      if (i === 63) await until(clock, () => seen.size === 64, '64 seen', b);
    }
    await until(clock, () => seen.has(`stop-64|${leases[64]}`), 'the 65th seen', b);
    assert.equal(seen.size, 64);
    assert.equal(seen.has(`stop-0|${leases[0]}`), false, 'the oldest forgotten');
    assert.equal(seen.has(`stop-1|${leases[1]}`), true);
  });

  test('a claim traces its pass and transaction, the owned set its emission and application, a stop its release', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    a.cands([IP, IP2]);
    await until(clock, () => a.owned().has(IP) && a.owned().has(IP2), 'owns both', a);
    await until(clock, () => lines(a, 'debug', 'trace: owned set applied').length === 1, 'applied', a);
    assert.deepEqual(lines(a, 'debug', 'trace: contending').map((l) => l.obj), [{ ips: 2, late: 0 }]);
    assert.deepEqual(lines(a, 'debug', 'trace: contention transaction').map((l) => l.obj), [{ ips: 2, won: true, first: IP, ms: 0 }]);
    assert.deepEqual(lines(a, 'debug', 'trace: owned set emitted').map((l) => l.obj), [{ owned: 2, added: 2, removed: 0 }]);
    assert.deepEqual(lines(a, 'debug', 'trace: owned set applied').map((l) => l.obj), [{ owned: 2, added: 2, ms: 0 }]);
    a.cands([IP]);
    await until(clock, async () => (await ownerKey(prefix, IP2)) === undefined && !a.own.view().owners.has(IP2), 'IP2 released', a);
    await until(clock, () => lines(a, 'debug', 'trace: owned set emitted').length === 2, 'emitted again', a);
    assert.deepEqual(lines(a, 'debug', 'trace: owned set emitted')[1]!.obj, { owned: 1, added: 0, removed: 1 });
    await a.own.release({ silenced: true });
    assert.deepEqual(lines(a, 'debug', 'trace: release').map((l) => l.obj), [{ ips: 1, silenced: true }]);
  });
});
