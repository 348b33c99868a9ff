/**
 * The etcd LB-IPAM coordinator at its edges, on a manual clock against a real
 * etcd of its own: what a read tells its listener, lease checks that fail or
 * are cached, and last the store itself wiped under running agents
 * (revisions going back; the wipe takes every key of the server with it).
 * Kept apart from etcd-ipam-fast.test.ts so that a mutation rerun of ipam.ts
 * keeps what that file killed and only retests the rest with this one.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { AllocationState } from '../../src/controlplane/ipam/state.js';
import { waitFor } from '../../lab/lab.js';
import { silentLogger } from '../../src/core/logger.js';
import { EtcdIpamCoordinator, IPAM_COPY_FILE } from '../../src/store/etcd/ipam.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { recordingLogger } from '../helpers/recording-logger.js';

const S1 = (): AllocationState => ({ version: 1, allocations: { 'default/a': ['198.51.100.10'] }, fingerprints: {} });
const S2: AllocationState = { version: 1, allocations: { 'default/a': ['198.51.100.10'], 'default/b': ['198.51.100.11'] }, fingerprints: {} };
const WAIT = 1000;
const WIPED = 'etcd store wiped or rolled back: keeping the allocation state in force; the store is not trusted to remember it';

describe('etcd LB-IPAM coordinator at its edges (manual clock)', () => {
  const real = useRealEtcd('ipam-wipe');
  const scratch = mkdtempSync(join(tmpdir(), 'herald-ipam-wipe-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  let dirN = 0;

  async function member(node: string, prefix: string, clock: ManualClock, stateDir: string | undefined = join(scratch, `dir-${dirN++}`), restoreHoldMs?: number) {
    const log = recordingLogger();
    const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: silentLogger }));
    await session.start();
    const ipam = real.own(new EtcdIpamCoordinator(session, node, log, { ...(stateDir !== undefined ? { stateDir } : {}), restoreWaitMs: WAIT, ...(restoreHoldMs !== undefined ? { restoreHoldMs } : {}), clock }));
    let changes = 0;
    /** Counts the coordinator's reads of the prefix. */
    let reads = 0;
    /** Set: the next read's answer waits for this promise (a read that overlaps something). */
    let holdNext: { gate: Promise<void>; held: () => void } | undefined;
    const client = session.client;
    const getAll = client.getAll.bind(client);
    (client as { getAll: typeof client.getAll }).getAll = (() => {
      reads++;
      const builder = getAll();
      const exec = builder.exec.bind(builder);
      builder.exec = async () => {
        const res = await exec();
        const hold = holdNext;
        holdNext = undefined;
        if (hold) {
          hold.held();
          await hold.gate;
        }
        return res;
      };
      return builder;
    }) as typeof client.getAll;
    await ipam.start(() => void changes++);
    return {
      node,
      log,
      session,
      ipam,
      changes: () => changes,
      reads: () => reads,
      /** The next read's answer is held until `release()`; `held` resolves once it is. */
      holdNextRead() {
        let release!: () => void;
        let held!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const isHeld = new Promise<void>((r) => (held = r));
        holdNext = { gate, held };
        return { release, held: isHeld };
      },
    };
  }
  const copyDir = (state: AllocationState) => {
    const d = join(scratch, `dir-${dirN++}`);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, IPAM_COPY_FILE), JSON.stringify(state));
    return d;
  };
  const clockAt = () => {
    const c = new ManualClock();
    c.advance(10_000);
    return c;
  };

  test('a read that changes nothing tells nobody; a state-like value outside copies/ is no offer', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const b = await member('node-b', prefix, clock);
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => b.ipam.current().generation === 1, { what: 'node-b at generation 1' });
    await new Promise((r) => setTimeout(r, 100));
    const [changesA, changesB, readsB] = [a.changes(), b.changes(), b.reads()];
    await real.raw.put(`${prefix}ipam/unrelated`).value(JSON.stringify({ ...S2, generation: 9 }));
    await waitFor(() => b.reads() > readsB, { what: 'node-b to read again' });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(b.changes(), changesB, 'node-b: nothing changed');
    assert.equal(a.changes(), changesA, 'node-a: nothing changed');
    assert.equal(a.ipam.isAllocator(), true, 'no offer of generation 9 made the store behind');
    assert.equal(a.log.lines.filter((l) => l.level === 'warn').length, 0);
  });

  test('a read answered before our own write but seen after it is not taken for the store going back: it is read again', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    await new Promise((r) => setTimeout(r, 100));
    const h = a.holdNextRead();
    await real.raw.put(`${prefix}ipam/unrelated`).value('x');
    await h.held; // the read saw no state key
    assert.equal(await a.ipam.save(S2), true);
    h.release();
    const reads = a.reads();
    await waitFor(() => a.reads() > reads, { what: 'the read made again' });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(a.ipam.isAllocator(), true);
    assert.deepEqual(a.log.lines.filter((l) => l.level === 'warn').map((l) => l.msg), [], 'the store was never taken as behind');
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 1, source: 'store' });
  });

  test('a lease that cannot be checked is taken as live (a debug line); a live lease is checked once', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const key = `${prefix}ipam/allocator`;
    const outsider = real.raw.lease(60);
    const outsiderId = await outsider.grant();
    real.own({ dispose: () => void outsider.revoke().catch(() => undefined) });
    await outsider.put(key).value('outsider');
    const log = recordingLogger();
    const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: silentLogger }));
    await session.start();
    const lc = session.client.leaseClient;
    const ttl = lc.leaseTimeToLive.bind(lc);
    let checks = 0;
    let failing = true;
    (lc as { leaseTimeToLive: typeof lc.leaseTimeToLive }).leaseTimeToLive = ((...args: Parameters<typeof lc.leaseTimeToLive>) => {
      checks++;
      if (failing) return Promise.reject(new Error('injected lease check failure'));
      return ttl(...args);
    }) as typeof lc.leaseTimeToLive;
    const ipam = real.own(new EtcdIpamCoordinator(session, 'node-b', log, { restoreWaitMs: WAIT, clock }));
    await ipam.start(() => {});
    assert.equal(ipam.allocator(), 'outsider');
    assert.equal(ipam.isAllocator(), false);
    const cannot = log.lines.filter((l) => l.msg === 'cannot check a lease');
    assert.ok(cannot.length >= 1);
    for (const l of cannot) assert.deepEqual([l.level, l.obj.lease, typeof l.obj.err], ['debug', outsiderId, 'string']);
    assert.equal(await real.raw.get(key).string(), 'outsider', 'not removed');
    failing = false;
    const before = checks;
    for (let i = 0; i < 3; i++) {
      await real.raw.put(`${prefix}ipam/unrelated`).value(String(i));
      await new Promise((r) => setTimeout(r, 50));
    }
    await waitFor(() => checks > before, { what: 'a successful check' });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(checks, before + 1, 'checked once, then known live');
    assert.equal(ipam.allocator(), 'outsider');
  });


  const RESTORED = 'store wiped or rolled back: restored allocation generation 1 from node node-a';
  const stored = async (prefix: string) => {
    const t = await real.raw.get(`${prefix}ipam/state`).string();
    return t === null ? undefined : (JSON.parse(t) as AllocationState);
  };

  test('a restore fenced off (the state key changed during it) is retried after another wait', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, copyDir({ ...S2, generation: 1 }));
    await waitFor(() => a.ipam.status().waiting?.startsWith('restoring') === true, { what: 'the restore to start' });
    beforeNextTxn(a.session, 'Value', { before: async () => void (await real.raw.put(`${prefix}ipam/state`).value('garbage')) });
    clock.advance(WAIT);
    await waitFor(() => a.log.lines.some((l) => l.msg === 'restoring the allocation state was fenced off; re-reading'), { what: 'the fenced restore' });
    await waitFor(() => a.ipam.status().waiting === 'restoring the allocation state (the allocation state in the store is unreadable)', { what: 'a new restore' });
    assert.equal(a.log.lines.filter((l) => l.msg === RESTORED).length, 0);
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the retried restore' });
    assert.deepEqual(await stored(prefix), { ...S2, generation: 1, held: ['default/a', 'default/b'] });
  });

  test('a restore that fails is retried after another wait', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, copyDir({ ...S2, generation: 1 }));
    beforeNextTxn(a.session, 'Value', { fail: new Error('injected write failure') });
    clock.advance(WAIT);
    await waitFor(() => a.log.lines.some((l) => l.msg === 'restoring the allocation state failed; retrying'), { what: 'the failed restore' });
    const failed = a.log.lines.find((l) => l.msg === 'restoring the allocation state failed; retrying')!;
    assert.equal(failed.level, 'warn');
    assert.match(String(failed.obj.err), /injected write failure/);
    await waitFor(() => a.ipam.status().waiting?.startsWith('restoring') === true, { what: 'a new restore' });
    assert.equal(a.ipam.isAllocator(), false);
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the retried restore' });
    assert.equal(a.log.lines.filter((l) => l.msg === RESTORED).length, 1);
  });

  test('a store repaired during the wait: nothing restored, the repaired state is taken', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, copyDir({ ...S2, generation: 1 }));
    await waitFor(() => a.ipam.status().waiting?.startsWith('restoring') === true, { what: 'the restore to start' });
    await real.raw.put(`${prefix}ipam/state`).value(JSON.stringify({ ...S2, generation: 3 }));
    await waitFor(() => a.ipam.current().generation === 3, { what: 'the repaired state taken' });
    assert.equal(a.ipam.isAllocator(), false, 'still restoring');
    assert.equal(a.ipam.status().waiting, 'restoring the allocation state (store behind)');
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the restore to end' });
    assert.equal(a.log.lines.filter((l) => l.msg.startsWith('store wiped or rolled back: restored')).length, 0);
    assert.deepEqual(await stored(prefix), { ...S2, generation: 3 });
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 3, source: 'store' });
  });

  test('a stale allocator key that cannot be removed is warned about once per revision and stays ignored', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const key = `${prefix}ipam/allocator`;
    await real.raw.put(key).value('ghost');
    const log = recordingLogger();
    const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: silentLogger }));
    await session.start();
    const client = session.client;
    const realIf = client.if.bind(client);
    let failing = true;
    (client as { if: typeof client.if }).if = ((...args: Parameters<typeof client.if>) => {
      const tx = realIf(...args);
      if (failing && args[1] === 'Mod') tx.commit = () => Promise.reject(new Error('injected delete failure'));
      return tx;
    }) as typeof client.if;
    const ipam = real.own(new EtcdIpamCoordinator(session, 'node-a', log, { restoreWaitMs: WAIT, clock }));
    await ipam.start(() => {});
    for (let i = 0; i < 2; i++) {
      const n = log.lines.filter((l) => l.msg === 'cannot remove a stale key').length;
      await real.raw.put(`${prefix}ipam/unrelated`).value(String(i));
      await waitFor(() => log.lines.filter((l) => l.msg === 'cannot remove a stale key').length > n, { what: 'another failed removal' });
    }
    const warned = log.lines.filter((l) => l.msg === `ignoring allocator key ${key}: its lease is not live; removing it`);
    assert.deepEqual(warned.map((l) => l.level), ['warn']);
    const cannot = log.lines.find((l) => l.msg === 'cannot remove a stale key')!;
    assert.deepEqual([cannot.level, cannot.obj.key, typeof cannot.obj.err], ['debug', key, 'string']);
    assert.equal(ipam.allocator(), undefined, 'ignored');
    assert.equal(ipam.isAllocator(), false);
    assert.equal(await real.raw.get(key).string(), 'ghost');
    // A new revision of the stale key is warned about again; once removal works, an allocator is elected.
    failing = false;
    await real.raw.put(key).value('ghost-2');
    await waitFor(() => ipam.isAllocator(), { what: 'node-a elected' });
    assert.equal(log.lines.filter((l) => l.msg === `ignoring allocator key ${key}: its lease is not live; removing it`).length, 2);
  });

  const liveLease = async () => {
    const l = real.raw.lease(60);
    const id = await l.grant();
    real.own({ dispose: () => void l.revoke().catch(() => undefined) });
    return { l, id };
  };

  test('a fresh store turned unreadable, nothing known anywhere: no restore from empty, and no allocating', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, undefined);
    assert.equal(a.ipam.isAllocator(), true);
    await real.raw.put(`${prefix}ipam/state`).value('garbage');
    await waitFor(() => a.ipam.status().waiting?.startsWith('restoring') === true, { what: 'the restore to start' });
    clock.advance(WAIT);
    await waitFor(() => a.log.lines.some((l) => l.msg.startsWith('no live agent holds a good allocation state')), { what: 'the restore to give up' });
    await waitFor(() => a.ipam.status().waiting === 'the allocation state in the store is unreadable', { what: 'the restore to end' });
    assert.equal(a.ipam.isAllocator(), false);
    assert.equal(await a.ipam.save(S2), false);
    assert.equal(await real.raw.get(`${prefix}ipam/state`).string(), 'garbage', 'the empty state is no candidate');
    assert.deepEqual(a.log.lines.filter((l) => l.level === 'error' && l.msg.startsWith('cannot write')), [], 'no copy to write without a state dir');
  });

  test('of several offers the first of the newest decides; the allocator restores it', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    assert.equal(await a.ipam.save(S2), true);
    assert.equal(await a.ipam.save({ ...S2, allocations: { 'default/a': ['198.51.100.10'] } }), true);
    const { l } = await liveLease();
    const three = { ...S2, allocations: { 'default/p': ['198.51.100.20'] }, generation: 3 };
    await l.put(`${prefix}ipam/copies/node-m`).value(JSON.stringify({ ...S2, generation: 1 }));
    await l.put(`${prefix}ipam/copies/node-p`).value(JSON.stringify(three));
    await l.put(`${prefix}ipam/copies/node-q`).value(JSON.stringify({ ...three, allocations: { 'default/q': ['198.51.100.21'] } }));
    await waitFor(() => a.ipam.status().waiting !== undefined, { what: 'the store behind' });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(a.ipam.status().waiting, 'restoring the allocation state (node node-p offers generation 3, newer than generation 2 in force)');
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the restore' });
    assert.equal(a.ipam.status().restoredFrom, 'node-p');
  });

  test('an allocator key is ours only with our name on our lease', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const b = await member('node-b', prefix, clock);
    assert.equal(b.ipam.isAllocator(), true);
    const key = `${prefix}ipam/allocator`;
    await real.raw.put(key).value('node-x').lease(b.session.leaseId!);
    await waitFor(() => b.ipam.allocator() === 'node-x', { what: 'node-x on our lease' });
    assert.equal(b.ipam.isAllocator(), false);
    assert.equal(await b.ipam.save(S2), false);
    const { id } = await liveLease();
    await real.raw.put(key).value('node-b').lease(id);
    await waitFor(async () => b.ipam.allocator() === 'node-b' && (await real.raw.get(key).string()) === 'node-b', { what: 'our name on another lease' });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(b.ipam.isAllocator(), false);
    assert.equal(await b.ipam.save(S2), false);
    assert.equal(b.log.lines.filter((l) => l.msg === 'elected LB-IPAM allocator').length, 1);
  });

  test('an election lost to another agent at the last moment claims nothing', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const { id } = await liveLease();
    const log = recordingLogger();
    const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: silentLogger }));
    await session.start();
    beforeNextTxn(session, 'Create', { before: async () => void (await real.raw.put(`${prefix}ipam/allocator`).value('node-o').lease(id)) });
    const ipam = real.own(new EtcdIpamCoordinator(session, 'node-b', log, { restoreWaitMs: WAIT, clock }));
    await ipam.start(() => {});
    assert.equal(log.lines.filter((l) => l.msg === 'elected LB-IPAM allocator').length, 0);
    assert.equal(ipam.isAllocator(), false);
    await waitFor(() => ipam.allocator() === 'node-o', { what: 'the winner seen' });
  });

  test('back-to-back saves while a read is held: each write knows the revision it made; a read overlapping a write is made again', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    await new Promise((r) => setTimeout(r, 100));
    const h = a.holdNextRead();
    await real.raw.put(`${prefix}ipam/unrelated`).value('x');
    await h.held;
    assert.equal(await a.ipam.save(S1()), true);
    assert.equal(a.ipam.status().source, 'store');
    assert.equal(await a.ipam.save(S2), true, 'the second write is not fenced off by the first');
    h.release();
    await new Promise((r) => setTimeout(r, 100));
    // A read made while the write is on its way, answered before it lands.
    let h2: ReturnType<typeof a.holdNextRead> | undefined;
    beforeNextTxn(a.session, 'Value', {
      before: async () => {
        h2 = a.holdNextRead();
        await real.raw.put(`${prefix}ipam/unrelated`).value('y');
        await h2.held;
      },
    });
    assert.equal(await a.ipam.save({ ...S2, allocations: { ...S2.allocations, 'default/c': ['198.51.100.12'] } }), true);
    h2!.release();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(a.ipam.isAllocator(), true);
    assert.deepEqual(a.log.lines.filter((l) => l.level === 'warn').map((l) => l.msg), []);
    assert.equal(a.ipam.current().generation, 3);
  });

  test('a restored state with no allocations holds nothing', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, copyDir({ version: 1, allocations: {}, generation: 2 }));
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the restore' });
    assert.deepEqual(await stored(prefix), { version: 1, allocations: {}, generation: 2 });
    assert.equal(a.log.lines.find((l) => l.msg.startsWith('store wiped or rolled back: restored'))!.obj.held, 0);
  });

  test('after a hold ended, the next restore holds again', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, copyDir({ ...S2, generation: 1 }), 5000);
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the restore' });
    clock.advance(5000);
    assert.equal(await a.ipam.save(S1()), true, 'default/b released');
    await real.raw.delete().key(`${prefix}ipam/state`);
    await waitFor(() => a.ipam.status().waiting?.startsWith('restoring') === true, { what: 'the second restore' });
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'the second restore done' });
    assert.equal(await a.ipam.save({ version: 1, allocations: {} }), true);
    assert.deepEqual((await stored(prefix))!.allocations, S1().allocations, 'held again');
  });

  test('dispose before start is harmless', () => {
    const clock = clockAt();
    const session = real.own(new EtcdSession(real.sessionOptions(real.freshPrefix()), { clock, log: silentLogger }));
    new EtcdIpamCoordinator(session, 'node-a', recordingLogger(), { clock }).dispose();
  });

  test("an offer under our own name (a former run's, its lease still live) is not an offer to us", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const { l } = await liveLease();
    await l.put(`${prefix}ipam/copies/node-a`).value(JSON.stringify({ ...S2, generation: 5 }));
    const a = await member('node-a', prefix, clock, undefined);
    assert.equal(a.ipam.isAllocator(), true);
    assert.equal(a.ipam.status().waiting, undefined);
    assert.equal(await a.ipam.save(S2), true);
    assert.deepEqual(a.log.lines.filter((l) => l.level === 'error'), [], 'no copy to write without a state dir');
  });

  test('an offer is made again on a new lease', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const { id } = await liveLease();
    await real.raw.put(`${prefix}ipam/allocator`).value('outsider').lease(id);
    const b = await member('node-b', prefix, clock, copyDir({ ...S2, generation: 2 }));
    const key = `${prefix}ipam/copies/node-b`;
    await waitFor(async () => (await real.raw.get(key).string()) !== null, { what: 'the offer' });
    const old = b.session.leaseId;
    await b.session.revoke();
    assert.equal(await real.raw.get(key).string(), null);
    clock.advance(10_000); // the next tick grants a new lease
    await waitFor(() => b.session.state === 'live', { what: 'a new lease' });
    assert.notEqual(b.session.leaseId, old);
    await waitFor(async () => String((await real.raw.get(key).exec()).kvs[0]?.lease) === b.session.leaseId, { what: 'the offer on the new lease' });
  });

  // Last: the wipe takes every key of the server with it.
  test('every agent logs the wipe once and keeps its state; the new allocator restores it; the watches see the new store', async () => {
    const prefix = real.freshPrefix();
    const clock = new ManualClock();
    clock.advance(10_000);
    const members = await Promise.all(
      ['node-a', 'node-b'].map(async (node) => {
        const log = recordingLogger();
        const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: silentLogger }));
        await session.start();
        const stateDir = join(scratch, node);
        const ipam = real.own(new EtcdIpamCoordinator(session, node, log, { stateDir, restoreWaitMs: WAIT, clock }));
        return { node, log, session, ipam, stateDir };
      }),
    );
    const [a, b] = members as [(typeof members)[number], (typeof members)[number]];
    await a.ipam.start(() => {});
    await b.ipam.start(() => {});
    assert.equal(a.ipam.isAllocator(), true);
    // Revisions well past what the wiped store will reach soon (read by both: under the ipam prefix).
    for (let i = 0; i < 40; i++) await real.raw.put(`${prefix}ipam/unrelated`).value(String(i));
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => b.ipam.current().generation === 1, { what: 'node-b at generation 1' });
    const oldLeases = [a.session.leaseId, b.session.leaseId];
    for (const m of members) assert.equal(m.log.lines.filter((l) => l.msg === WIPED).length, 0, 'no wipe at start');

    await real.etcd.wipe();
    for (const m of members) {
      await waitFor(() => m.log.lines.some((l) => l.msg === WIPED), { timeoutMs: 15_000, what: `${m.node} to see the wipe` });
      const e = m.log.lines.find((l) => l.msg === WIPED)!;
      assert.equal(e.level, 'error');
      const { clusterId, revision } = e.obj as { clusterId: { was: string; now: string }; revision: { was: number; now: number } };
      // The same configuration gives the wiped server the same cluster ID: the revision going back tells.
      assert.equal(typeof clusterId.was, 'string');
      assert.equal(clusterId.now, clusterId.was);
      assert.ok(revision.now < revision.was && revision.was > 40, JSON.stringify(revision));
      assert.deepEqual(m.ipam.current(), { ...S2, generation: 1 }, `${m.node} keeps the state in force`);
    }
    // The old leases are gone with the store: the sessions find out, and re-grant on the next tick.
    for (const m of members) await waitFor(async () => (await m.session.verify()) === 'lease-gone', { timeoutMs: 15_000, what: `${m.node}'s lease gone` });
    clock.advance(10_000);
    for (const m of members) await waitFor(() => m.session.state === 'live', { what: `${m.node} live again` });
    assert.notDeepEqual([a.session.leaseId, b.session.leaseId], oldLeases);
    await waitFor(() => a.ipam.allocator() !== undefined && a.ipam.allocator() === b.ipam.allocator(), { what: 'a new allocator' });
    const allocator = members.find((m) => m.node === a.ipam.allocator())!;
    const follower = members.find((m) => m !== allocator)!;
    await waitFor(async () => (await real.raw.get(`${prefix}ipam/copies/${follower.node}`).string()) !== null, { what: "the follower's offer" });
    assert.equal(allocator.ipam.isAllocator(), false);
    clock.advance(WAIT);
    await waitFor(() => allocator.ipam.isAllocator(), { what: 'the restore', onTimeout: () => allocator.log.lines.map((l) => `${l.level} ${l.msg}`).join('\n') });
    const restored = { ...S2, generation: 1, held: ['default/a', 'default/b'] };
    assert.deepEqual(JSON.parse((await real.raw.get(`${prefix}ipam/state`).string())!), restored);

    // The watches were made anew on the new store: a save is seen by the follower at once.
    assert.equal(await allocator.ipam.save({ ...S2, allocations: { ...S2.allocations, 'default/c': ['198.51.100.12'] } }), true);
    await waitFor(() => follower.ipam.current().generation === 2, { what: 'the follower to see generation 2', timeoutMs: 3000 });
    assert.equal(JSON.parse(readFileSync(join(allocator.stateDir, IPAM_COPY_FILE), 'utf8')).generation, 2);
    for (const m of members) assert.equal(m.log.lines.filter((l) => l.msg === WIPED).length, 1, `${m.node} logged the wipe once`);
  });
});
