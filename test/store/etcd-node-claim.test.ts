/**
 * One agent per node name on a store, against a real etcd (loopback): the
 * name is claimed on the agent's lease, a second agent with the same --node
 * is refused with a coded error, a dead predecessor's key is waited out, a
 * revoked one is taken at once, and after a store outage the name moves onto
 * the new lease.
 */
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, afterEach, before, describe, test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { waitFor } from '../../lab/lab.js';
import { systemClock } from '../../src/core/clock.js';
import { HeraldError } from '../../src/core/errors.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { NodeClaim, nodeClaimWait } from '../../src/store/etcd/node-claim.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';

describe('etcd node-name claim: one agent per --node', () => {
  let etcd: EtcdServer;
  let raw: Etcd3;
  let prefixN = 0;
  const open: Array<{ dispose(): void }> = [];

  before(async () => {
    etcd = await startEtcd();
    raw = new Etcd3({ hosts: etcd.endpoint });
  });
  afterEach(() => {
    for (const d of open.splice(0).reverse()) d.dispose();
  });
  after(async () => {
    raw?.close();
    await etcd?.stop();
  });

  const freshPrefix = () => `/herald-claim-${process.pid}-${prefixN++}/`;

  async function session(prefix: string, log: Logger = silentLogger): Promise<EtcdSession> {
    const s = new EtcdSession({ endpoints: [etcd.endpoint], prefix, ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 }, { clock: systemClock, log });
    open.push(s);
    await s.start();
    return s;
  }

  function claim(s: EtcdSession, node: string, opts = { waitMs: 0, pollMs: 50 }, log: Logger = silentLogger): NodeClaim {
    const c = new NodeClaim(s, node, { clock: systemClock, log }, opts);
    open.push(c);
    return c;
  }

  const keyOf = async (prefix: string, node: string) => (await raw.get(`${prefix}nodes/${node}`).exec()).kvs[0];

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
    const dead = raw.lease(1, { autoKeepAlive: false });
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
    const logs: string[] = [];
    const log: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: (_o, m = '') => void logs.push(m), child: () => log };
    const a = await session(prefix);
    await claim(a, 'n1', { waitMs: 0, pollMs: 50 }, log).claim();
    const b = await session(prefix);
    const bClaim = claim(b, 'n1', { waitMs: 20_000, pollMs: 20 }).claim();
    await raw.leaseClient.leaseRevoke({ ID: a.leaseId! }); // as an operator (or a fencing peer) would: node-a's key goes with it
    await bClaim;
    await waitFor(() => logs.includes('node name taken by another agent while our lease was lost'), { timeoutMs: 10_000, what: "node-a's error" });
    assert.equal(String((await keyOf(prefix, 'n1'))!.lease), b.leaseId);
  });

  test('without a lease there is nothing to claim on: HERALD_STORE', async () => {
    const prefix = freshPrefix();
    const s = new EtcdSession({ endpoints: [etcd.endpoint], prefix, ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 }, { clock: systemClock, log: silentLogger });
    open.push(s);
    await assert.rejects(claim(s, 'n1').claim(), (e: unknown) => e instanceof HeraldError && e.code === 'HERALD_STORE' && /no etcd lease/.test(e.message));
  });

  test('after a store outage the session gets a new lease and the name moves onto it', async () => {
    const prefix = freshPrefix();
    const s = await session(prefix);
    await claim(s, 'n1').claim();
    const before = s.leaseId;
    await etcd.kill();
    try {
      await waitFor(() => s.state === 'lost', { timeoutMs: 10_000, what: 'the session to step down' });
    } finally {
      await etcd.restart();
    }
    await waitFor(() => s.state === 'live' && s.leaseId !== before, { timeoutMs: 15_000, what: 'a new lease' });
    await waitFor(async () => String((await keyOf(prefix, 'n1'))?.lease) === s.leaseId, { timeoutMs: 10_000, what: 'the name on the new lease' });
    assert.ok(s.formerLeases.has(before!));
  });
});
