/**
 * The agent's etcd session against a real etcd (loopback), on a manual
 * clock: keep-alives and the local step-down deadline fire only when the test
 * moves time, so every step (grant, renew, step down, re-grant) is checked
 * where it happens, with no sleeps.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import type { TimerHandle } from '../../src/core/clock.js';
import { HeraldError } from '../../src/core/errors.js';
import { EtcdSession, etcdSessionDefaults, type EtcdSessionOptions } from '../../src/store/etcd/session.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

/** A manual clock that remembers every delay asked for. */
class DelayClock extends ManualClock {
  delays: number[] = [];
  override setTimeout(fn: () => void, ms: number): TimerHandle {
    this.delays.push(ms);
    return super.setTimeout(fn, ms);
  }
}

describe('etcd session: one lease, kept alive by our own clock', () => {
  const real = useRealEtcd('session');
  const opts = (o: Partial<EtcdSessionOptions> = {}): EtcdSessionOptions => ({ ...real.sessionOptions(real.freshPrefix()), ...etcdSessionDefaults, ...o });

  async function live(): Promise<{ s: EtcdSession; clock: DelayClock; log: ReturnType<typeof recordingLogger>; states: string[]; prefix: string }> {
    const clock = new DelayClock();
    clock.advance(10_000); // monotonic time well above 0
    const log = recordingLogger();
    const o = opts();
    const s = new EtcdSession(o, { clock, log });
    real.own(s);
    const states: string[] = [];
    s.onState((st) => void states.push(st));
    await s.start();
    return { s, clock, log, states, prefix: o.prefix };
  }

  const leaseTtl = async (id: string) => Number((await real.raw.leaseClient.leaseTimeToLive({ ID: id })).TTL);

  test('the keep-alive period must leave room for two attempts within TTL − margin: HERALD_BAD_ARGUMENT', () => {
    const clock = new ManualClock();
    const make = (keepaliveMs: number) => new EtcdSession(opts({ ttlSeconds: 3, marginMs: 500, keepaliveMs }), { clock, log: recordingLogger() });
    make(1250).dispose(); // 2 × 1,250 = 3,000 − 500
    assert.throws(() => make(1251), (e: unknown) => e instanceof HeraldError && e.code === 'HERALD_BAD_ARGUMENT' && /two attempts within TTL − margin/.test(e.message));
  });

  test('start grants a lease of the TTL: live, told to listeners and the log, valid until its grant was sent + TTL − margin', async () => {
    const { s, clock, log, states, prefix } = await live();
    assert.equal(s.state, 'live');
    assert.deepEqual(states, ['live']);
    assert.ok(s.leaseId && /^\d+$/.test(s.leaseId));
    const ttl = await leaseTtl(s.leaseId);
    assert.ok(ttl > 0 && ttl <= 3, `TTL ${ttl}`);
    assert.equal(s.prefix, prefix);
    assert.equal(s.lostReason, undefined);
    assert.equal(s.validUntilMs(), 10_000 + 3000 - 500);
    clock.advance(400);
    assert.deepEqual(s.status(), { state: 'live', lease: s.leaseId, lastKeepaliveAgeMs: 400, validForMs: 2100, leasesGranted: 1, keepaliveFailures: 0 });
    assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj]), [['info', 'etcd session live', { session: 'live', lease: s.leaseId }]]);
    assert.equal(s.requests, 1);
    assert.equal(s.formerLeases.size, 0);
  });

  test('a keep-alive every keepaliveMs renews the lease: valid again from when it was sent', async () => {
    const { s, clock } = await live();
    clock.advance(499);
    assert.equal(s.requests, 1, 'not before its period');
    clock.advance(1);
    await waitFor(() => s.requests === 2 && s.status().lastKeepaliveAgeMs === 0, { what: 'the keep-alive to succeed' });
    assert.equal(s.validUntilMs(), 10_500 + 2500);
    await waitFor(() => clock.pending === 2, { what: 'the next keep-alive and the deadline armed' });
    clock.advance(500);
    await waitFor(() => s.requests === 3 && s.status().lastKeepaliveAgeMs === 0, { what: 'the second keep-alive' });
    assert.equal(s.validUntilMs(), 11_000 + 2500);
    assert.equal(s.state, 'live');
  });

  test('with the store unreachable it steps down at TTL − margin by its own clock, then re-grants with backoff once the store answers', async () => {
    const { s, clock, log, states } = await live();
    const first = s.leaseId!;
    await real.etcd.kill();
    try {
      for (let n = 1; n <= 4; n++) {
        clock.advance(500); // 10,500 … 12,000: each keep-alive fails
        await waitFor(() => s.status().keepaliveFailures === n && clock.pending === 2, { timeoutMs: 15_000, what: `failed keep-alive ${n}` });
      }
      assert.equal(s.state, 'live', 'failed keep-alives alone are not a step-down');
      clock.advance(499);
      assert.equal(s.state, 'live', 'one ms before TTL − margin');
      clock.delays.length = 0;
      clock.advance(1); // 12,500 = the grant's send time + TTL − margin (and the next tick: a grant attempt)
      assert.equal(s.state, 'lost');
      assert.equal(s.lostReason, 'unreachable');
      assert.equal(s.leaseId, undefined);
      assert.equal(s.validUntilMs(), 0);
      assert.equal(s.status().validForMs, 0);
      assert.deepEqual(states, ['live', 'lost']);
      assert.ok(log.lines.some((l) => l.level === 'warn' && l.msg === 'etcd keep-alives failing: stepping down before the lease can expire' && l.obj.lastKeepaliveAgoMs === 2500));
      assert.ok(log.lines.some((l) => l.level === 'info' && l.msg === 'etcd session lost' && l.obj.reason === 'unreachable' && l.obj.lease === first));
      assert.equal(await s.verify(), 'unreachable');
      // Grants fail and back off 100, 200, 400, 800 ms, then every 1,000 ms; a warning for the first failure and every 20th.
      const grantWarnings = () => log.lines.filter((l) => l.level === 'warn' && l.msg === 'etcd lease grant failed; retrying').length;
      for (const [i, d] of [100, 200, 400, 800, ...Array<number>(17).fill(1000)].entries()) {
        await waitFor(() => clock.delays.includes(d) && clock.pending === 1, { timeoutMs: 15_000, what: `grant retry ${i + 1} in ${d} ms` });
        assert.equal(grantWarnings(), i < 20 ? 1 : 2, `after ${i + 1} failed grants`);
        clock.delays.length = 0;
        clock.advance(d);
      }
    } finally {
      await real.etcd.restart();
    }
    for (let i = 0; s.state !== 'live'; i++) {
      await waitFor(() => s.state === 'live' || clock.pending > 0, { timeoutMs: 15_000, what: 'a grant attempt' });
      clock.advance(1000);
      await new Promise((r) => setTimeout(r, 20));
      assert.ok(i < 500, 'a new lease once the store is back');
    }
    assert.notEqual(s.leaseId, first);
    assert.ok(s.formerLeases.has(first));
    assert.equal(s.status().leasesGranted, 2);
    assert.deepEqual(states, ['live', 'lost', 'live']);
  });

  test('a revoked lease is seen at the next keep-alive: lost (lease-gone), we own nothing, and a fresh lease after', async () => {
    const { s, clock, log, states } = await live();
    const first = s.leaseId!;
    await real.raw.leaseClient.leaseRevoke({ ID: first });
    clock.advance(500);
    await waitFor(() => s.state === 'lost', { what: 'the session to see its lease gone' });
    assert.equal(s.lostReason, 'lease-gone');
    assert.equal(await s.verify(), 'lease-gone');
    assert.ok(log.lines.some((l) => l.level === 'warn' && l.msg === 'etcd lease is gone (revoked or expired): we own nothing' && l.obj.lease === first));
    assert.ok(log.lines.some((l) => l.msg === 'etcd session lost' && l.obj.reason === 'lease-gone'));
    assert.equal(s.status().keepaliveFailures, 1);
    assert.equal(s.status().lease, first, 'status still names the lease it lost');
    await waitFor(() => clock.pending === 1, { what: 'the next tick armed' });
    clock.advance(500);
    await waitFor(() => s.state === 'live', { what: 'a fresh lease' });
    assert.notEqual(s.leaseId, first);
    assert.deepEqual([...s.formerLeases], [first]);
    assert.deepEqual(states, ['live', 'lost', 'live']);
    assert.equal(s.lostReason, undefined);
  });

  test('a keep-alive answered after the local step-down proves nothing: still lost, its validity not extended', async () => {
    const { s, clock, states } = await live();
    real.etcd.pause();
    try {
      clock.advance(500); // 10,500: the keep-alive goes out and waits on the stalled store
      clock.advance(2000); // 12,500: stepped down by our own clock meanwhile
      assert.equal(s.state, 'lost');
    } finally {
      real.etcd.resume();
    }
    await waitFor(() => clock.pending > 0, { what: 'the keep-alive answered and the next tick armed' });
    assert.equal(clock.pending, 1, 'only the next tick: no deadline re-armed');
    assert.equal(s.state, 'lost');
    assert.equal(s.status().lastKeepaliveAgeMs, 2500, 'the last keep-alive that counts is still the grant');
    assert.equal(s.status().keepaliveFailures, 0);
    assert.deepEqual(states, ['live', 'lost']);
  });

  test('verify() renews now (concurrent callers share one keep-alive) and moves the validity to when it was sent', async () => {
    const { s, clock } = await live();
    clock.advance(300);
    const [a, b] = await Promise.all([s.verify(), s.verify()]);
    assert.deepEqual([a, b], ['ok', 'ok']);
    assert.equal(s.requests, 2, 'one keep-alive for both');
    assert.equal(s.validUntilMs(), 10_300 + 2500);
  });

  test('revoke() gives the lease up: lost (released), its keys gone at once; a second revoke does nothing', async () => {
    const { s, log } = await live();
    const key = `${s.prefix}k`;
    await s.client.put(key).value('v').lease(s.leaseId!);
    await s.revoke();
    assert.equal(s.state, 'lost');
    assert.equal(s.lostReason, 'released');
    assert.equal(await real.raw.get(key).string(), null);
    const requests = s.requests;
    await s.revoke();
    assert.equal(s.requests, requests);
    assert.equal(await s.verify(), 'unreachable', 'released is not lease-gone');
    assert.ok(!log.lines.some((l) => l.level === 'warn'));
  });

  test('dispose cancels the keep-alive and the deadline; listeners are dropped', async () => {
    const { s, clock, states } = await live();
    const sub = s.onState(() => assert.fail('no state after dispose'));
    real.own(sub);
    s.dispose();
    assert.equal(clock.pending, 0);
    clock.advance(10_000);
    assert.deepEqual(states, ['live']);
  });
});
