/**
 * One agent per node name on a store, against a real etcd (loopback): the
 * name is claimed on the agent's lease, a second agent with the same --node
 * is refused with a coded error, a dead predecessor's key is waited out, a
 * revoked one is taken at once, and after a store outage the name moves onto
 * the new lease.
 */
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { systemClock, type Clock } from '../../src/core/clock.js';
import { HeraldError } from '../../src/core/errors.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { NodeClaim, nodeClaimWait } from '../../src/store/etcd/node-claim.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

describe('etcd node-name claim: one agent per --node', () => {
  const real = useRealEtcd('claim');
  const freshPrefix = real.freshPrefix;
  const session = (prefix: string, log: Logger = silentLogger): Promise<EtcdSession> => real.session(prefix, { log });

  function claim(s: EtcdSession, node: string, opts = { waitMs: 0, pollMs: 50 }, log: Logger = silentLogger, clock: Clock = systemClock): NodeClaim {
    const c = new NodeClaim(s, node, { clock, log }, opts);
    real.own(c);
    return c;
  }

  /**
   * Runs `before(column)` ahead of every transaction the session's client
   * commits (`column`: the first compare's target, 'Create' for a claim,
   * 'Lease' for a move); it may throw to fail that store call. Counts them.
   */
  function interceptCommits(s: EtcdSession, before: (column: string) => void | Promise<void>): { calls: number } {
    const seen = { calls: 0 };
    const client = s.client;
    const wrapped = new Proxy(client, {
      get(target, p, r) {
        if (p !== 'if') return Reflect.get(target, p, r);
        return (...args: Parameters<typeof client.if>) => {
          const builder = target.if(...args);
          const commit = builder.commit.bind(builder);
          builder.commit = async () => {
            seen.calls++;
            await before(args[1]);
            return await commit();
          };
          return builder;
        };
      },
    });
    Object.defineProperty(s, 'client', { value: wrapped });
    return seen;
  }

  /** Revokes the session's lease behind its back (as a fencing peer would) and waits for the next one. */
  async function replaceLease(s: EtcdSession): Promise<string> {
    const old = s.leaseId!;
    await real.raw.leaseClient.leaseRevoke({ ID: old });
    await waitFor(() => s.state === 'live' && s.leaseId !== old, { timeoutMs: 15_000, what: 'a new lease' });
    return s.leaseId!;
  }

  const turn = () => new Promise((r) => setImmediate(r));

  const keyOf = async (prefix: string, node: string) => (await real.raw.get(`${prefix}nodes/${node}`).exec()).kvs[0];

  test('the name is created on the agent lease, with who holds it', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    await claim(s, 'n1').claim();
    const kv = await keyOf(prefix, 'n1');
    assert.ok(kv);
    assert.equal(String(kv.lease), s.leaseId);
    const value = JSON.parse(kv.value.toString()) as { host: string; pid: number; startedAt: string };
    assert.equal(value.host, hostname());
    assert.equal(value.pid, process.pid);
    assert.ok(!Number.isNaN(Date.parse(value.startedAt)));
  });

  test('a second agent with the same name waits, then is refused with HERALD_NODE_NAME_TAKEN naming the key and the holder', async () => {
    const prefix = freshPrefix();
    const first = await session(prefix);
    await claim(first, 'n1').claim();
    const holder = (await keyOf(prefix, 'n1'))!.value.toString();
    const second = await session(prefix);
    let attempts = 0;
    const client = second.client;
    const counted = new Proxy(client, {
      get(target, p, r) {
        if (p === 'if') attempts++;
        return Reflect.get(target, p, r);
      },
    });
    Object.defineProperty(second, 'client', { value: counted });
    await assert.rejects(claim(second, 'n1', { waitMs: 400, pollMs: 50 }).claim(), (e: unknown) => {
      assert.ok(e instanceof HeraldError);
      assert.equal(e.code, 'HERALD_NODE_NAME_TAKEN');
      assert.match(e.message, new RegExp(`node name n1 is held by another agent on this store \\(${prefix}nodes/n1 = `));
      assert.ok(e.message.includes(holder), 'the holder is named');
      assert.match(e.message, /give each agent its own --node \(waited 400ms/);
      return true;
    });
    assert.ok(attempts > 1, `it kept trying while it waited (${attempts} attempts)`);
    assert.equal(String((await keyOf(prefix, 'n1'))!.lease), first.leaseId, 'the holder keeps its name');
    // Another name on the same store is free.
    await claim(second, 'n2').claim();
  });

  test('a gracefully stopped predecessor (lease revoked) leaves the name free at once', async () => {
    const prefix = freshPrefix();
    const old = await session(prefix);
    await claim(old, 'n1').claim();
    await old.revoke();
    const next = await session(prefix);
    await claim(next, 'n1', { waitMs: 0, pollMs: 50 }).claim();
    assert.equal(String((await keyOf(prefix, 'n1'))!.lease), next.leaseId);
  });

  test("a dead predecessor's key is waited out until its lease expires, then taken", async () => {
    const prefix = freshPrefix();
    const dead = real.raw.lease(1, { autoKeepAlive: false });
    await dead.put(`${prefix}nodes/n1`).value('{"pid":1}');
    const s = await session(prefix);
    await claim(s, 'n1', nodeClaimWait(3)).claim();
    assert.equal(String((await keyOf(prefix, 'n1'))!.lease), s.leaseId);
  });

  test('the wait is one TTL plus a second of slack, polled every 200 ms', () => {
    assert.deepEqual(nodeClaimWait(3), { waitMs: 4000, pollMs: 200 });
  });

  test('a name taken by another agent while our lease was lost is an error in the log, and the other keeps it', async () => {
    const prefix = freshPrefix();
    const log = recordingLogger();
    const a = await session(prefix);
    await claim(a, 'n1', { waitMs: 0, pollMs: 50 }, log).claim();
    const b = await session(prefix);
    const bClaim = claim(b, 'n1', { waitMs: 20_000, pollMs: 20 }).claim();
    await real.raw.leaseClient.leaseRevoke({ ID: a.leaseId! }); // as an operator (or a fencing peer) would: node-a's key goes with it
    await bClaim;
    await waitFor(() => log.lines.some((l) => l.level === 'error'), { timeoutMs: 10_000, what: "node-a's error" });
    const kv = (await keyOf(prefix, 'n1'))!;
    assert.equal(String(kv.lease), b.leaseId);
    assert.deepEqual(
      log.lines.filter((l) => l.level === 'error'),
      [{ level: 'error', msg: 'node name taken by another agent while our lease was lost', obj: { node: 'n1', holder: kv.value.toString() } }],
    );
  });

  test('claiming again on the lease that holds the name keeps it (the key is moved onto the same lease)', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    await claim(s, 'n1').claim();
    const seen = interceptCommits(s, () => {});
    await claim(s, 'n1').claim();
    assert.equal(seen.calls, 2, 'the create that finds the key, then the move');
    assert.equal(String((await keyOf(prefix, 'n1'))!.lease), s.leaseId);
  });

  test('a key that changes hands between the read and the move is not taken for ours', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    await claim(s, 'n1').claim();
    const rival = real.raw.lease(30);
    real.own({ dispose: () => void rival.revoke().catch(() => {}) });
    interceptCommits(s, async (column) => {
      if (column === 'Lease') await rival.put(`${prefix}nodes/n1`).value('{"pid":2}');
    });
    await assert.rejects(claim(s, 'n1').claim(), { code: 'HERALD_NODE_NAME_TAKEN' });
    assert.equal(String((await keyOf(prefix, 'n1'))!.lease), await rival.grant());
  });

  test('waitMs 0 refuses at the first answer, without waiting a poll', async () => {
    const prefix = freshPrefix();
    await claim(await session(prefix), 'n1').claim();
    const clock = new ManualClock();
    let settled: unknown;
    void claim(await session(prefix), 'n1', { waitMs: 0, pollMs: 50 }, silentLogger, clock)
      .claim()
      .then(() => (settled = 'claimed'), (e: unknown) => (settled = e));
    await waitFor(() => settled !== undefined || clock.pending > 0, { what: 'the claim to settle or wait' });
    assert.ok(settled instanceof HeraldError && settled.code === 'HERALD_NODE_NAME_TAKEN', `refused at once (${String(settled)}, ${clock.pending} timers pending)`);
  });

  test('a re-claim that fails is retried on the new lease every poll until it succeeds; each failure is a warning with its attempt and lease', async () => {
    const prefix = freshPrefix();
    const log = recordingLogger();
    const clock = new ManualClock();
    const s = await session(prefix);
    await claim(s, 'n1', { waitMs: 0, pollMs: 20 }, log, clock).claim();
    let failures = 3;
    interceptCommits(s, () => {
      if (failures > 0) {
        failures--;
        throw new Error('injected store failure');
      }
    });
    const lease = await replaceLease(s);
    const warns = () => log.lines.filter((l) => l.level === 'warn');
    await waitFor(() => warns().length === 1 && clock.pending === 1, { what: 'the first failed re-claim' });
    for (let n = 2; n <= 3; n++) {
      clock.advance(19);
      await turn();
      assert.equal(warns().length, n - 1, 'not before its poll');
      clock.advance(1);
      await waitFor(() => warns().length === n && clock.pending === 1, { what: `failed re-claim ${n}` });
    }
    clock.advance(20);
    await waitFor(async () => String((await keyOf(prefix, 'n1'))?.lease) === lease, { what: 'the name on the new lease' });
    assert.deepEqual(
      warns(),
      [1, 2, 3].map((attempt) => ({ level: 'warn', msg: 'could not re-claim the node name; retrying', obj: { err: 'injected store failure', attempt, lease } })),
    );
    assert.deepEqual(log.lines.filter((l) => l.level === 'error'), [], 'our own name is not "taken by another agent"');
    assert.equal(clock.pending, 0, 'no retry after success');
  });

  test('a re-claim stops retrying once its lease is replaced (the new lease retries on its own) and once the claim is disposed', async () => {
    const prefix = freshPrefix();
    const log = recordingLogger();
    const clock = new ManualClock();
    const s = await session(prefix);
    const c = claim(s, 'n1', { waitMs: 0, pollMs: 20 }, log, clock);
    await c.claim();
    const seen = interceptCommits(s, () => {
      throw new Error('injected store failure');
    });
    const warnsOn = (lease: string) => log.lines.filter((l) => l.level === 'warn' && l.obj.lease === lease).length;
    const lease2 = await replaceLease(s);
    await waitFor(() => warnsOn(lease2) === 1 && clock.pending === 1, { what: 'a failed re-claim on the second lease' });
    const lease3 = await replaceLease(s);
    await waitFor(() => warnsOn(lease3) === 1 && clock.pending === 2, { what: 'a failed re-claim on the third lease' });
    const calls = seen.calls;
    clock.advance(20); // both loops wake: only the third lease's tries again
    await waitFor(() => warnsOn(lease3) === 2 && clock.pending === 1, { what: 'the second try on the third lease' });
    await turn();
    assert.equal(seen.calls, calls + 1, 'one store call: the loop of the replaced lease stopped');
    assert.equal(warnsOn(lease2), 1);
    c.dispose();
    clock.advance(20);
    await turn();
    await turn();
    assert.equal(seen.calls, calls + 1, 'no store call after dispose');
    assert.equal(clock.pending, 0);
    assert.equal(log.lines.length, 3);
  });

  test('while the session is lost nothing is tried (the re-claim starts when it is live again)', async () => {
    const prefix = freshPrefix();
    const log = recordingLogger();
    const clock = new ManualClock();
    const s = await session(prefix);
    await claim(s, 'n1', { waitMs: 0, pollMs: 20 }, log, clock).claim();
    const seen = interceptCommits(s, () => {});
    const states: string[] = [];
    real.own(s.onState((st) => void states.push(st)));
    const lease = await replaceLease(s);
    await waitFor(async () => String((await keyOf(prefix, 'n1'))?.lease) === lease, { what: 'the name on the new lease' });
    assert.deepEqual(states, ['lost', 'live']);
    assert.deepEqual(log.lines, [], 'no failed attempt while lost');
    assert.equal(seen.calls, 1, 'one claim, on the new lease');
    assert.equal(clock.pending, 0);
  });

  test('without a lease there is nothing to claim on: HERALD_STORE', async () => {
    const prefix = freshPrefix();
    const s = await real.session(prefix, { start: false });
    await assert.rejects(claim(s, 'n1').claim(), (e: unknown) => e instanceof HeraldError && e.code === 'HERALD_STORE' && /no etcd lease/.test(e.message));
  });

  test('after a store outage the session gets a new lease and the name moves onto it', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    await claim(s, 'n1').claim();
    const before = s.leaseId;
    await real.etcd.kill();
    try {
      await waitFor(() => s.state === 'lost', { timeoutMs: 10_000, what: 'the session to step down' });
    } finally {
      await real.etcd.restart();
    }
    await waitFor(() => s.state === 'live' && s.leaseId !== before, { timeoutMs: 15_000, what: 'a new lease' });
    await waitFor(async () => String((await keyOf(prefix, 'n1'))?.lease) === s.leaseId, { timeoutMs: 10_000, what: 'the name on the new lease' });
    assert.ok(s.formerLeases.has(before!));
  });
});
