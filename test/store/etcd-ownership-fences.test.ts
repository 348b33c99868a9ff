/**
 * The fences of per-IP ownership on a real etcd (loopback), each checked by
 * what ends up in etcd and what the agent reports, not by its internals:
 *
 * - candidacy keys live on the agent's lease (a dead agent's candidacy vanishes);
 * - giving an IP up deletes the owner key only if it is still ours;
 * - an IP counts as owned only while its owner key carries our current lease;
 * - the rendezvous-preferred candidate contends at once, the others only
 *   after `contendDelayMs` (on an injected clock).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { systemClock, type Clock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import type { OwnershipView } from '../../src/controlplane/ownership/backend.js';
import { EtcdOwnership } from '../../src/store/etcd/ownership.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { waitFor } from '../../lab/lab.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';
import { ManualClock } from '../helpers/manual-clock.js';

const IP = '198.51.100.61';
/** A second IP the agent is the only candidate for: once it owns it, its decision about IP is made. */
const BARRIER_IP = '198.51.100.62';
/** A barrier added later: once the agent owns it, every pass before it (and its claims) has run. */
const LATE_BARRIER_IP = '198.51.100.63';
const CONTEND_DELAY_MS = 300;

describe('etcd ownership fences', () => {
  let etcd: EtcdServer;
  let admin: Etcd3;
  const cleanups: Array<() => void | Promise<void>> = [];
  let prefixN = 0;

  before(async () => {
    etcd = await startEtcd();
    admin = new Etcd3({ hosts: [etcd.endpoint] });
  });
  after(async () => {
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch {
        // cleanup goes on
      }
    }
    admin?.close();
    await etcd?.stop();
  });

  const freshPrefix = () => `/herald-fences-${process.pid}-${prefixN++}/`;

  async function member(
    node: string,
    prefix: string,
    opts: { clock?: Clock; onChange?: (v: OwnershipView) => void | Promise<void> } = {},
  ) {
    const session = new EtcdSession({ endpoints: [etcd.endpoint], prefix, ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 }, { clock: systemClock, log: silentLogger });
    await session.start();
    const own = new EtcdOwnership(session, node, { clock: opts.clock ?? systemClock, log: silentLogger }, {
      onStoreLoss: 'withdraw',
      contendDelayMs: CONTEND_DELAY_MS,
      handoverHoldMs: 60_000,
    });
    const owned = { current: new Set<string>() };
    await own.start(async (v) => {
      owned.current = new Set(v.owned);
      await opts.onChange?.(v);
    });
    cleanups.push(() => {
      own.dispose();
      session.dispose();
    });
    return { session, own, owned };
  }

  /** A live lease held by the test itself (another node's, or an old one of ours). */
  async function foreignLease(): Promise<string> {
    const lease = admin.lease(30, { autoKeepAlive: true });
    const id = await lease.grant();
    cleanups.push(() => lease.revoke().catch(() => {}));
    return id;
  }

  async function keysUnder(prefix: string): Promise<Array<{ key: string; value: string; lease: string }>> {
    const res = await admin.getAll().prefix(prefix).exec();
    return res.kvs.map((kv) => ({ key: kv.key.toString(), value: kv.value.toString(), lease: String(kv.lease) }));
  }

  async function ownerKey(prefix: string, ip: string): Promise<{ value: string; lease: string } | undefined> {
    const res = await admin.get(`${prefix}owners/${ip}`).exec();
    const kv = res.kvs[0];
    return kv ? { value: kv.value.toString(), lease: String(kv.lease) } : undefined;
  }

  test('candidacy keys carry the session\'s lease and vanish when it is revoked', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    const lease = a.session.leaseId;
    assert.ok(lease);
    a.own.setCandidates(new Map([[IP, ['eth0']], [BARRIER_IP, ['eth0']]]));
    const candidacy = () => keysUnder(`${prefix}candidates/`);
    await waitFor(async () => (await candidacy()).length === 2, { timeoutMs: 15_000, what: 'both candidacy keys' });
    for (const kv of await candidacy()) {
      assert.match(kv.key, /\/node-a$/);
      assert.equal(kv.lease, lease, `${kv.key} is attached to lease ${kv.lease}, not the session's ${lease}`);
    }
    // Stop publishing, then let the lease go: nothing of ours may survive it.
    a.own.dispose();
    await a.session.revoke();
    await waitFor(async () => (await candidacy()).length === 0, {
      timeoutMs: 15_000,
      what: 'the candidacy keys to vanish with the lease',
      onTimeout: () => 'still present',
    });
  });

  test('giving an IP up never deletes an owner key that another node holds by then', async () => {
    const prefix = freshPrefix();
    const otherLease = await foreignLease();
    const key = `${prefix}owners/${IP}`;
    let hadIt = false;
    let takenOver = false;
    let a!: Awaited<ReturnType<typeof member>>;
    a = await member('node-a', prefix, {
      onChange: async (v) => {
        if (v.owned.has(IP)) hadIt = true;
        else if (hadIt && !takenOver) {
          // a has withdrawn and is about to delete its key: meanwhile the key
          // changed hands (a's view is stale by the time its delete arrives).
          takenOver = true;
          await admin.put(key).value('node-b').lease(otherLease);
          a.own.setCandidates(new Map([[BARRIER_IP, ['eth0']]]));
        }
      },
    });
    a.own.setCandidates(new Map([[IP, ['eth0']]]));
    await waitFor(() => a.owned.current.has(IP), { timeoutMs: 15_000, what: 'a owns the IP' });
    assert.equal((await ownerKey(prefix, IP))?.lease, a.session.leaseId);

    a.own.setCandidates(new Map()); // a gives the IP up
    // a's passes run in order: once it owns the barrier IP, its delete of IP has been sent.
    await waitFor(() => a.owned.current.has(BARRIER_IP), { timeoutMs: 15_000, what: 'a owns the barrier IP' });
    assert.ok(takenOver);
    assert.deepEqual(await ownerKey(prefix, IP), { value: 'node-b', lease: otherLease }, "a deleted node-b's owner key");
  });

  test('an owner key with our node name but another lease is not ours; one with our current lease is', async () => {
    const prefix = freshPrefix();
    const staleLease = await foreignLease();
    await admin.put(`${prefix}owners/${IP}`).value('node-a').lease(staleLease);
    // Every time a reports IP as owned, the owner key must carry a's current lease.
    const checks: Array<Promise<string | undefined>> = [];
    let a!: Awaited<ReturnType<typeof member>>;
    a = await member('node-a', prefix, {
      onChange: (v) => {
        if (!v.owned.has(IP)) return;
        const mine = a.session.leaseId;
        checks.push(
          ownerKey(prefix, IP).then((k) => (k?.value === 'node-a' && k.lease === mine ? undefined : `owned IP while its key was ${JSON.stringify(k)} (our lease ${mine})`)),
        );
      },
    });
    a.own.setCandidates(new Map([[IP, ['eth0']], [BARRIER_IP, ['eth0']]]));
    await waitFor(() => a.owned.current.has(BARRIER_IP), { timeoutMs: 15_000, what: 'a owns the barrier IP' });
    assert.equal(a.own.view().owners.get(IP), 'node-a', 'a has seen the key with its name');
    assert.deepEqual((await Promise.all(checks)).filter(Boolean), []);

    // The stale lease goes: the key goes with it, and a takes the IP on its own lease.
    await admin.leaseClient.leaseRevoke({ ID: staleLease });
    await waitFor(() => a.owned.current.has(IP), { timeoutMs: 15_000, what: 'a owns the IP on its own lease' });
    assert.equal((await ownerKey(prefix, IP))?.lease, a.session.leaseId);
    assert.ok(checks.length > 0);
    assert.deepEqual((await Promise.all(checks)).filter(Boolean), []);
  });

  describe('rendezvous preference on first contention (injected clock)', () => {
    const [preferred, other] = rendezvousScore('node-a', IP) > rendezvousScore('node-b', IP) ? ['node-a', 'node-b'] : ['node-b', 'node-a'];

    /** Runs the ownership's zero-delay timers (never advancing time) until `cond` holds. */
    async function pumpUntil(clock: ManualClock, cond: () => boolean | Promise<boolean>, what: string): Promise<void> {
      await waitFor(
        async () => {
          clock.advance(0);
          return await cond();
        },
        { timeoutMs: 15_000, intervalMs: 10, what },
      );
    }

    /** Publishes `node`'s candidacy for IP as a live agent would (the agent itself is not running). */
    async function candidacyOf(prefix: string, node: string): Promise<void> {
      await admin.put(`${prefix}candidates/${IP}/${node}`).value('').lease(await foreignLease());
    }

    test('the preferred candidate contends at once, before any delay has passed', async () => {
      const prefix = freshPrefix();
      await candidacyOf(prefix, other);
      const clock = new ManualClock();
      const p = await member(preferred, prefix, { clock });
      p.own.setCandidates(new Map([[IP, ['eth0']]]));
      await pumpUntil(clock, async () => (await ownerKey(prefix, IP))?.value === preferred, `${preferred} (preferred) owns the IP at time 0`);
      assert.equal(clock.now(), 0);
    });

    test('a less preferred candidate waits contendDelayMs before contending', async () => {
      const prefix = freshPrefix();
      await candidacyOf(prefix, preferred);
      const clock = new ManualClock();
      const o = await member(other, prefix, { clock });
      o.own.setCandidates(new Map([[IP, ['eth0']], [BARRIER_IP, ['eth0']]]));
      await pumpUntil(clock, () => o.owned.current.has(BARRIER_IP), `${other} owns the barrier IP`);
      assert.equal(await ownerKey(prefix, IP), undefined, `${other} contended at once although ${preferred} is preferred`);
      clock.advance(CONTEND_DELAY_MS - 1);
      // Not "one more pump and look": a claim sent by then may not have landed. A new barrier IP
      // is claimed by a pass that runs after any pass of this instant, so its ownership proves it.
      o.own.setCandidates(new Map([[IP, ['eth0']], [BARRIER_IP, ['eth0']], [LATE_BARRIER_IP, ['eth0']]]));
      await pumpUntil(clock, () => o.owned.current.has(LATE_BARRIER_IP), `${other} owns the late barrier IP`);
      assert.equal(clock.now(), CONTEND_DELAY_MS - 1);
      assert.equal(await ownerKey(prefix, IP), undefined, 'contended before the delay');
      clock.advance(1);
      // The preferred node never claims: the other takes the IP after the delay.
      await pumpUntil(clock, async () => (await ownerKey(prefix, IP))?.value === other, `${other} owns the IP after the delay`);
    });
  });
});
