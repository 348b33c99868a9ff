/**
 * The etcd LB-IPAM coordinator (src/store/etcd/ipam.ts) against a real etcd,
 * with every coordinator and session on one manual clock per test: the
 * restore wait, the hold and the read retries move only when the test says
 * so, and the leases (60 s) outlive a test, so a pass takes seconds (the
 * real-time cases stay in etcd-ipam.test.ts). Kept apart from it so that a
 * mutation run of ipam.ts can run this file once per mutant.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { AllocationState } from '../../src/controlplane/ipam/state.js';
import { waitFor } from '../../lab/lab.js';
import { silentLogger } from '../../src/core/logger.js';
import { EtcdIpamCoordinator, IPAM_COPY_FILE, etcdIpamDefaults } from '../../src/store/etcd/ipam.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { beforeNextTxn } from '../helpers/etcd-txn-hook.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';
import { recordingLogger, type LogLine } from '../helpers/recording-logger.js';

const S1: AllocationState = { version: 1, allocations: { 'default/a': ['198.51.100.10'] }, fingerprints: {} };
const S2: AllocationState = { version: 1, allocations: { 'default/a': ['198.51.100.10'], 'default/b': ['198.51.100.11'] }, fingerprints: {} };
const WAIT = 1000;
const START = 10_000;
/** The manual clock's time as the coordinator stamps it. */
const at = (ms: number) => new Date(ms).toISOString();

describe('etcd LB-IPAM coordinator on a manual clock', () => {
  const real = useRealEtcd('ipam-fast');
  const scratch = mkdtempSync(join(tmpdir(), 'herald-ipam-fast-'));
  let dirN = 0;
  after(() => rmSync(scratch, { recursive: true, force: true }));

  interface Member {
    node: string;
    stateDir: string;
    session: EtcdSession;
    ipam: EtcdIpamCoordinator;
    log: ReturnType<typeof recordingLogger>;
    changes: () => number;
    /** Disposes the coordinator and revokes the session's lease (its keys go at once). */
    stop(): Promise<void>;
  }

  /** A fresh state dir, holding `copy` as the local copy if given. */
  const newDir = (copy?: AllocationState) => {
    const d = join(scratch, `dir-${dirN++}`);
    if (copy) {
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, IPAM_COPY_FILE), JSON.stringify(copy));
    }
    return d;
  };

  async function member(
    node: string,
    prefix: string,
    clock: ManualClock,
    o: { stateDir?: string | null; restoreWaitMs?: number; restoreHoldMs?: number; start?: boolean } = {},
  ): Promise<Member> {
    const stateDir = o.stateDir === null ? undefined : (o.stateDir ?? newDir());
    const log = recordingLogger();
    const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: silentLogger }));
    await session.start();
    const ipam = real.own(
      new EtcdIpamCoordinator(session, node, log, {
        ...(stateDir !== undefined ? { stateDir } : {}),
        restoreWaitMs: o.restoreWaitMs ?? WAIT,
        ...(o.restoreHoldMs !== undefined ? { restoreHoldMs: o.restoreHoldMs } : {}),
        clock,
      }),
    );
    let changes = 0;
    if (o.start !== false) await ipam.start(() => void changes++);
    return {
      node,
      stateDir: stateDir ?? '',
      session,
      ipam,
      log,
      changes: () => changes,
      async stop() {
        ipam.dispose();
        await session.revoke();
      },
    };
  }

  const clockAt = () => {
    const c = new ManualClock();
    c.advance(START);
    return c;
  };
  const storedText = async (prefix: string) => real.raw.get(`${prefix}ipam/state`).string();
  const stored = async (prefix: string): Promise<AllocationState | undefined> => {
    const t = await storedText(prefix);
    return t === null ? undefined : (JSON.parse(t) as AllocationState);
  };
  const storedMod = async (key: string) => (await real.raw.get(key).exec()).kvs[0]?.mod_revision;
  const copyOf = (m: Member) => JSON.parse(readFileSync(join(m.stateDir, IPAM_COPY_FILE), 'utf8')) as AllocationState;
  /** The member's copy once it equals `want` (the copy is written after the state is taken). */
  const copyBecomes = async (m: Member, want: AllocationState) => {
    await waitFor(() => {
      try {
        return JSON.stringify(copyOf(m)) === JSON.stringify(want);
      } catch {
        return false;
      }
    }, { what: `${m.node}'s copy`, onTimeout: () => { try { return JSON.stringify(copyOf(m)); } catch (e) { return String(e); } } });
  };
  const lines = (m: Member, level: LogLine['level'], msg: string | RegExp) =>
    m.log.lines.filter((l) => l.level === level && (typeof msg === 'string' ? l.msg === msg : msg.test(l.msg)));
  /**
   * Until `m`'s restore has armed its wait on the manual clock: `waiting` says
   * "restoring" only then (a store seen behind is reported a store round trip
   * earlier, while the copy is offered; advancing before that fired nothing).
   */
  const restoreArmed = (m: Member) => waitFor(() => m.ipam.status().waiting?.startsWith('restoring') === true, { what: `${m.node}'s restore waiting for offers`, onTimeout: dump(m) });
  const dump = (m: Member) => () => m.log.lines.map((l) => `${l.level} ${l.msg} ${JSON.stringify(l.obj)}`).join('\n');

  test('the defaults: 3 s restore wait, 15 min hold; the copy file name', () => {
    assert.deepEqual(etcdIpamDefaults, { restoreWaitMs: 3000, restoreHoldMs: 900_000 });
    assert.equal(IPAM_COPY_FILE, 'ipam-etcd-copy.json');
  });

  test('election: the first agent takes the allocator key on its lease and allocates from an empty fresh store; the next one follows', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    assert.equal(a.ipam.kind, 'etcd');
    assert.equal(a.ipam.allocator(), 'node-a');
    assert.equal(a.ipam.isAllocator(), true);
    assert.deepEqual(a.ipam.current(), { version: 1, allocations: {} });
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 0, source: 'none' });
    const kv = (await real.raw.get(`${prefix}ipam/allocator`).exec()).kvs[0]!;
    assert.equal(kv.value.toString(), 'node-a');
    assert.equal(String(kv.lease), a.session.leaseId);
    assert.equal(lines(a, 'info', 'elected LB-IPAM allocator').length, 1);
    assert.ok(a.changes() >= 1, 'told of the election');
    assert.deepEqual(lines(a, 'warn', /./), []);

    const b = await member('node-b', prefix, clock);
    assert.equal(b.ipam.allocator(), 'node-a');
    assert.equal(b.ipam.isAllocator(), false);
    assert.deepEqual(b.ipam.status(), { allocator: 'node-a', generation: 0, source: 'none' });
    assert.equal(await b.ipam.save(S1), false, 'a follower does not write');
    assert.equal(await storedText(prefix), null);
    assert.equal(lines(b, 'info', 'elected LB-IPAM allocator').length, 0);

    // The allocator goes: the follower is elected on its own lease.
    await a.stop();
    await waitFor(() => b.ipam.isAllocator(), { what: 'node-b to be elected', onTimeout: dump(b) });
    assert.equal(b.ipam.allocator(), 'node-b');
    assert.equal(String((await real.raw.get(`${prefix}ipam/allocator`).exec()).kvs[0]!.lease), b.session.leaseId);
    assert.equal(await real.raw.get(`${prefix}ipam/copies/node-b`).string(), null, 'nothing to offer');
  });

  test('every save bumps the generation, writes the state key and every copy; an unchanged state is not written again', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const b = await member('node-b', prefix, clock);
    const bChanges = b.changes();
    assert.equal(await a.ipam.save(S1), true);
    assert.deepEqual(await stored(prefix), { ...S1, generation: 1 });
    assert.deepEqual(a.ipam.current(), { ...S1, generation: 1 });
    await copyBecomes(a, { ...S1, generation: 1 });
    const mod = await storedMod(`${prefix}ipam/state`);
    assert.equal(await a.ipam.save({ ...S1 }), true);
    assert.equal(await storedMod(`${prefix}ipam/state`), mod, 'not written again');
    assert.equal(await a.ipam.save(S2), true);
    assert.deepEqual(await stored(prefix), { ...S2, generation: 2 });
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 2, source: 'store' });
    await waitFor(() => b.ipam.current().generation === 2, { what: 'node-b at generation 2' });
    assert.deepEqual(b.ipam.current(), { ...S2, generation: 2 });
    await copyBecomes(b, { ...S2, generation: 2 });
    assert.deepEqual(b.ipam.status(), { allocator: 'node-a', generation: 2, source: 'store' });
    assert.ok(b.changes() > bChanges, 'node-b told of the new state');
    // Nothing was behind: no offers, no warnings.
    assert.equal((await real.raw.getAll().prefix(`${prefix}ipam/copies/`).keys()).length, 0);
    assert.deepEqual([...lines(a, 'warn', /./), ...lines(b, 'warn', /./), ...lines(a, 'error', /./), ...lines(b, 'error', /./)], []);
  });

  for (const [what, fence] of [
    ['the state key changed since it was read', (m: Member, p: string) => real.raw.put(`${p}ipam/state`).value(JSON.stringify({ ...S2, generation: 7 }))],
    ['the allocator key moved to another node on the same lease', (m: Member, p: string) => real.raw.put(`${p}ipam/allocator`).value('node-x').lease(m.session.leaseId!)],
    ['the allocator key is ours by name but on another lease', async (_m: Member, p: string) => {
      const other = real.raw.lease(60);
      await other.grant();
      real.own({ dispose: () => void other.revoke().catch(() => undefined) });
      return other.put(`${p}ipam/allocator`).value('node-a');
    }],
  ] as const) {
    test(`a save is fenced off when ${what}: nothing written, re-read`, async () => {
      const prefix = real.freshPrefix();
      const clock = clockAt();
      const a = await member('node-a', prefix, clock);
      assert.equal(await a.ipam.save(S1), true);
      let wrote = '';
      beforeNextTxn(a.session, 'Value', { before: async () => {
        await fence(a, prefix);
        wrote = (await storedText(prefix)) ?? '';
      } });
      assert.equal(await a.ipam.save(S2), false);
      assert.equal(await storedText(prefix), wrote, 'the fenced write changed nothing');
      assert.notEqual(a.ipam.current().generation, 2);
      assert.equal(lines(a, 'warn', 'allocation write fenced off: no longer the allocator, or the state changed under us').length, 1);
    });
  }

  test('a store missing the state an agent knows: offers, the allocator restores after the wait, holds, withdraws the offer', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const dir = newDir({ ...S2, generation: 4 });
    const a = await member('node-a', prefix, clock, { stateDir: dir });
    const loaded = lines(a, 'info', 'allocation state loaded from the local copy');
    assert.deepEqual(loaded.map((l) => l.obj), [{ generation: 4, services: 2 }]);
    assert.deepEqual(a.ipam.current(), { ...S2, generation: 4 });
    assert.equal(a.ipam.allocator(), 'node-a');
    assert.equal(a.ipam.isAllocator(), false, 'not while the store is behind');
    const reason = 'the allocation state is missing from the store while generation 4 is known';
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 4, source: 'local-copy', waiting: `restoring the allocation state (${reason})` });
    assert.deepEqual(lines(a, 'warn', 'allocation state in the store ignored; the state in force stays').map((l) => l.obj), [{ key: `${prefix}ipam/state`, reason }]);
    assert.deepEqual(lines(a, 'warn', "collecting live agents' copies of the allocation state before restoring").map((l) => l.obj), [{ reason, waitMs: WAIT }]);
    assert.equal(await a.ipam.save(S1), false);
    // Its own offer, on its own lease.
    const offer = (await real.raw.get(`${prefix}ipam/copies/node-a`).exec()).kvs[0]!;
    assert.deepEqual(JSON.parse(offer.value.toString()), { ...S2, generation: 4 });
    assert.equal(String(offer.lease), a.session.leaseId);
    assert.deepEqual(lines(a, 'info', 'offering the local copy of the allocation state').map((l) => l.obj), [{ key: `${prefix}ipam/copies/node-a`, generation: 4 }]);

    clock.advance(WAIT - 1);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(await storedText(prefix), null, 'nothing before the wait is over');
    clock.advance(1);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to restore', onTimeout: dump(a) });
    const restored = { ...S2, generation: 4, held: ['default/a', 'default/b'] };
    assert.deepEqual(await stored(prefix), restored);
    assert.deepEqual(a.ipam.current(), restored);
    await copyBecomes(a, restored);
    assert.deepEqual(lines(a, 'warn', 'store wiped or rolled back: restored allocation generation 4 from node node-a').map((l) => l.obj), [
      { generation: 4, node: 'node-a', reason, held: 2 },
    ]);
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 4, source: 'restored', restoredFrom: 'node-a', held: 2 });
    assert.equal(await real.raw.get(`${prefix}ipam/copies/node-a`).string(), null, 'the offer is withdrawn');
    // The store echoing the restored state keeps it "restored".
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(a.ipam.status().source, 'restored');

    // Held: an intent without the Services keeps them; giving a held IP away is refused (warned once).
    assert.equal(await a.ipam.save({ version: 1, allocations: {} }), true, 'nothing to change');
    assert.deepEqual(await stored(prefix), restored);
    const thief = { version: 1, allocations: { 'default/c': ['198.51.100.11'] } } as const;
    assert.equal(await a.ipam.save(thief), false);
    assert.equal(await a.ipam.save(thief), false);
    const conflict = '198.51.100.11 is held for default/b but was given to default/c';
    assert.deepEqual(lines(a, 'warn', 'not persisting an allocation that gives a held IP away').map((l) => l.obj), [{ conflict }]);
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 4, source: 'restored', restoredFrom: 'node-a', held: 2, waiting: `holding restored IPs: ${conflict}` });
    assert.equal(await a.ipam.save({ version: 1, allocations: { 'default/a': ['198.51.100.10'] } }), true);
    assert.deepEqual(await stored(prefix), { ...S2, generation: 5, held: ['default/b'] });
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 5, source: 'store', held: 1 });
    assert.equal(await a.ipam.save(thief), false);
    assert.equal(lines(a, 'warn', 'not persisting an allocation that gives a held IP away').length, 2, 'warned again after a good save');
  });

  test('the hold ends after restoreHoldMs: Services not applied again give their IPs back', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, { stateDir: newDir({ ...S2, generation: 1 }), restoreHoldMs: 5000 });
    const pending = clock.pending;
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to restore', onTimeout: dump(a) });
    assert.equal(clock.pending, pending, 'the hold timer replaces the wait timer');
    const changes = a.changes();
    clock.advance(4999);
    assert.equal(lines(a, 'info', 'releasing restored allocations of Services that were not applied again').length, 0);
    clock.advance(1);
    assert.deepEqual(lines(a, 'info', 'releasing restored allocations of Services that were not applied again').map((l) => l.obj), [{ services: ['default/a', 'default/b'] }]);
    assert.equal(a.changes(), changes + 1);
    assert.equal(await a.ipam.save({ version: 1, allocations: { 'default/c': ['198.51.100.11'] } }), true);
    assert.deepEqual(await stored(prefix), { version: 1, allocations: { 'default/c': ['198.51.100.11'] }, generation: 2 });
    assert.equal(a.ipam.status().held, undefined);
    assert.equal(clock.pending, pending - 1, 'no new hold');
  });

  test('a hold ended by applying every held Service cancels its timer', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, { stateDir: newDir({ ...S1, generation: 1 }), restoreHoldMs: 5000 });
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to restore', onTimeout: dump(a) });
    const pending = clock.pending;
    assert.equal(await a.ipam.save(S2), true);
    assert.equal(clock.pending, pending - 1, 'the hold timer is cancelled');
    assert.deepEqual(await stored(prefix), { ...S2, generation: 2 });
    clock.advance(5000);
    assert.equal(lines(a, 'info', 'releasing restored allocations of Services that were not applied again').length, 0);
  });

  test("the allocator restores the newest copy any live agent offers; a lease-less offer is ignored and removed; the offerer's copy follows", async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const b = await member('node-b', prefix, clock, { stateDir: newDir({ ...S1, generation: 1 }) });
    assert.equal(b.ipam.allocator(), 'node-b');
    const c = await member('node-c', prefix, clock, { stateDir: newDir({ ...S2, generation: 3 }) });
    assert.equal(c.ipam.allocator(), 'node-b');
    assert.equal(c.ipam.isAllocator(), false);
    assert.deepEqual(c.ipam.status(), { allocator: 'node-b', generation: 3, source: 'local-copy' }, 'a follower waits for nothing');
    await waitFor(async () => (await real.raw.get(`${prefix}ipam/copies/node-c`).string()) !== null, { what: "node-c's offer" });
    const ghostKey = `${prefix}ipam/copies/node-z`;
    await real.raw.put(ghostKey).value(JSON.stringify({ ...S1, generation: 9 })); // lease 0
    await real.raw.put(`${prefix}ipam/copies/node-y`).value('not json'); // unreadable: never an offer
    await waitFor(() => lines(b, 'warn', 'allocation state in the store ignored; the state in force stays').length === 1, { what: 'node-b behind' });
    await restoreArmed(b);
    clock.advance(WAIT);
    await waitFor(() => b.ipam.isAllocator(), { what: 'node-b to restore', onTimeout: dump(b) });
    assert.deepEqual(await stored(prefix), { ...S2, generation: 3, held: ['default/a', 'default/b'] });
    assert.equal(b.ipam.status().restoredFrom, 'node-c');
    assert.equal(lines(b, 'warn', 'store wiped or rolled back: restored allocation generation 3 from node node-c').length, 1);
    const ghost = lines(b, 'warn', `ignoring allocation copy key ${ghostKey}: its lease is not live; removing it`);
    assert.deepEqual(ghost.map((l) => l.obj), [{ key: ghostKey, lease: '0', value: JSON.stringify(JSON.stringify({ ...S1, generation: 9 })) }]);
    assert.equal(await real.raw.get(ghostKey).string(), null, 'removed');
    assert.notEqual(await real.raw.get(`${prefix}ipam/copies/node-y`).string(), null, 'an unreadable copy is not an offer: left alone');
    await waitFor(() => c.ipam.status().source === 'store' && copyOf(c).held !== undefined, { what: 'node-c to take the restored state' });
    assert.deepEqual(c.ipam.current(), { ...S2, generation: 3, held: ['default/a', 'default/b'] });
    await waitFor(async () => (await real.raw.get(`${prefix}ipam/copies/node-c`).string()) === null, { what: "node-c's offer withdrawn" });
    await copyBecomes(b, { ...S2, generation: 3, held: ['default/a', 'default/b'] });
  });

  test('on a tie the allocator restores its own copy; an offer on a live lease of anyone counts', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const other = real.raw.lease(60);
    await other.grant();
    real.own({ dispose: () => void other.revoke().catch(() => undefined) });
    await other.put(`${prefix}ipam/copies/node-o`).value(JSON.stringify({ ...S1, generation: 2 }));
    const b = await member('node-b', prefix, clock, { stateDir: newDir({ ...S2, generation: 2 }) });
    clock.advance(WAIT);
    await waitFor(() => b.ipam.isAllocator(), { what: 'node-b to restore', onTimeout: dump(b) });
    assert.equal(b.ipam.status().restoredFrom, 'node-b');
    assert.deepEqual(await stored(prefix), { ...S2, generation: 2, held: ['default/a', 'default/b'] });

    // Without a copy of its own, the live outsider's offer is restored.
    const p2 = real.freshPrefix();
    await other.put(`${p2}ipam/copies/node-o`).value(JSON.stringify({ ...S1, generation: 2 }));
    const d = await member('node-d', p2, clock, { stateDir: null });
    assert.equal(d.ipam.isAllocator(), false, 'an offer newer than nothing: the store is behind');
    assert.deepEqual(d.ipam.status(), {
      allocator: 'node-d',
      generation: 0,
      source: 'none',
      waiting: 'restoring the allocation state (node node-o offers generation 2, newer than generation 0 in force)',
    });
    assert.equal(await real.raw.get(`${p2}ipam/copies/node-d`).string(), null, 'nothing of its own to offer');
    clock.advance(WAIT);
    await waitFor(() => d.ipam.isAllocator(), { what: 'node-d to restore', onTimeout: dump(d) });
    assert.deepEqual(await stored(p2), { ...S1, generation: 2, held: ['default/a'] });
    assert.equal(d.ipam.status().restoredFrom, 'node-o');
  });

  test('a state without a generation is generation 0; restored into a missing store it stays 0', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    await real.raw.put(`${prefix}ipam/state`).value(JSON.stringify(S1));
    const dir = newDir();
    const a = await member('node-a', prefix, clock, { stateDir: dir });
    assert.equal(a.ipam.isAllocator(), true);
    assert.deepEqual(a.ipam.status(), { allocator: 'node-a', generation: 0, source: 'store' });
    await copyBecomes(a, S1);
    await a.stop();
    await real.raw.delete().prefix(prefix);
    const a2 = await member('node-a', prefix, clock, { stateDir: dir });
    assert.equal(a2.ipam.status().source, 'local-copy');
    assert.match(a2.ipam.status().waiting ?? '', /missing from the store while generation 0 is known/);
    await restoreArmed(a2);
    clock.advance(WAIT);
    await waitFor(() => a2.ipam.isAllocator(), { what: 'node-a to restore', onTimeout: dump(a2) });
    assert.deepEqual(await stored(prefix), { ...S1, generation: 0, held: ['default/a'] });
  });

  test('an older state in the store is ignored by every agent and the allocator writes the newer one back with its generation', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const b = await member('node-b', prefix, clock);
    assert.equal(await a.ipam.save(S1), true);
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => b.ipam.current().generation === 2, { what: 'node-b at generation 2' });
    await real.raw.put(`${prefix}ipam/state`).value(JSON.stringify({ ...S1, generation: 1 }));
    const reason = 'the store holds generation 1, older than generation 2 in force';
    await waitFor(() => a.ipam.status().waiting !== undefined && lines(b, 'warn', /ignored/).length === 1, { what: 'both to see the older state', onTimeout: dump(b) });
    assert.deepEqual(lines(b, 'warn', /ignored/).map((l) => l.obj), [{ key: `${prefix}ipam/state`, reason }]);
    assert.deepEqual(b.ipam.current(), { ...S2, generation: 2 });
    await copyBecomes(b, { ...S2, generation: 2 });
    assert.equal(b.ipam.status().waiting, undefined, 'a follower waits for nothing');
    assert.equal(await a.ipam.save(S1), false);
    await waitFor(async () => (await real.raw.get(`${prefix}ipam/copies/node-b`).string()) !== null, { what: "node-b's offer" });
    await restoreArmed(a);
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to write back', onTimeout: dump(a) });
    assert.deepEqual(await stored(prefix), { ...S2, generation: 2, held: ['default/a', 'default/b'] });
    await waitFor(() => lines(b, 'info', 'allocation state in the store is good again').length === 1, { what: 'node-b to take the store again', onTimeout: dump(b) });
    assert.deepEqual(lines(b, 'info', 'allocation state in the store is good again')[0]!.obj, { generation: 2 });
    await waitFor(async () => (await real.raw.get(`${prefix}ipam/copies/node-b`).string()) === null, { what: "node-b's offer withdrawn" });
  });

  test('an unreadable state: an error once per revision, the last good state stays, the allocator writes its copy back', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const b = await member('node-b', prefix, clock);
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => b.ipam.current().generation === 1, { what: 'node-b at generation 1' });
    clock.advance(5);
    await real.raw.put(`${prefix}ipam/state`).value('garbage');
    const msg = 'allocation state in etcd cannot be parsed: the last good state stays in force and nothing is allocated from it';
    await waitFor(() => lines(b, 'error', msg).length === 1, { what: 'node-b to log the error', onTimeout: dump(b) });
    const err = lines(b, 'error', msg)[0]!.obj;
    assert.equal(err.key, `${prefix}ipam/state`);
    assert.equal(err.generationInForce, 1);
    assert.match(String(err.error), /^not JSON/);
    assert.deepEqual(b.ipam.status().lastStateError, { message: err.error, at: at(START + 5) });
    assert.deepEqual(b.ipam.current(), { ...S2, generation: 1 });
    // Another read of the same revision (something else under the prefix changed) logs nothing new.
    await real.raw.put(`${prefix}ipam/unrelated`).value('x');
    await waitFor(async () => (await real.raw.get(`${prefix}ipam/copies/node-b`).string()) !== null, { what: "node-b's offer" });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(lines(b, 'error', msg).length, 1);
    assert.deepEqual(lines(b, 'warn', /ignored/).map((l) => l.obj.reason), ['the allocation state in the store is unreadable']);
    assert.equal(a.ipam.isAllocator(), false);
    assert.equal(a.ipam.status().waiting, 'restoring the allocation state (the allocation state in the store is unreadable)');
    clock.advance(WAIT);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to write back', onTimeout: dump(a) });
    assert.deepEqual(await stored(prefix), { ...S2, generation: 1, held: ['default/a', 'default/b'] });
    // Garbage again (a new revision): logged again.
    await real.raw.put(`${prefix}ipam/state`).value('garbage');
    await waitFor(() => lines(b, 'error', msg).length === 2, { what: 'node-b to log the new bad revision', onTimeout: dump(b) });
  });

  test('an unreadable state and no good copy anywhere: the allocator gives up and writes nothing until the state is repaired', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    await real.raw.put(`${prefix}ipam/state`).value('garbage');
    const a = await member('node-a', prefix, clock, { stateDir: null });
    assert.equal(a.ipam.allocator(), 'node-a');
    assert.equal(a.ipam.status().waiting, 'restoring the allocation state (the allocation state in the store is unreadable)');
    assert.equal(await real.raw.get(`${prefix}ipam/copies/node-a`).string(), null, 'nothing known: no offer');
    clock.advance(WAIT);
    const gaveUp = 'no live agent holds a good allocation state: not allocating until the state in etcd is repaired';
    await waitFor(() => lines(a, 'error', gaveUp).length === 1, { what: 'the allocator to give up', onTimeout: dump(a) });
    await waitFor(() => a.ipam.status().waiting === 'the allocation state in the store is unreadable', { what: 'the restore to end' });
    assert.deepEqual(lines(a, 'error', gaveUp)[0]!.obj, { key: `${prefix}ipam/state`, reason: 'the allocation state in the store is unreadable' });
    assert.equal(a.ipam.isAllocator(), false);
    assert.equal(await a.ipam.save(S1), false);
    assert.equal(await storedText(prefix), 'garbage');
    assert.equal(clock.pending, 2, 'not retried: only the session keep-alive and deadline');
    assert.deepEqual(a.ipam.status(), {
      allocator: 'node-a',
      generation: 0,
      source: 'none',
      waiting: 'the allocation state in the store is unreadable',
      lastStateError: { message: a.ipam.status().lastStateError!.message, at: at(START + WAIT) }, // stamped by every read
    });
    // An operator repairs it.
    await real.raw.put(`${prefix}ipam/state`).value(JSON.stringify({ ...S1, generation: 3 }));
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to allocate from the repaired state' });
    assert.deepEqual(lines(a, 'info', 'allocation state in the store is good again').map((l) => l.obj), [{ generation: 3 }]);
    assert.equal(await a.ipam.save(S2), true);
    assert.equal((await stored(prefix))!.generation, 4);
  });

  test('an unreadable local copy is an error and ignored; the store is taken', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    await real.raw.put(`${prefix}ipam/state`).value(JSON.stringify({ ...S1, generation: 2 }));
    const dir = newDir();
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, IPAM_COPY_FILE), 'not json');
    const a = await member('node-a', prefix, clock, { stateDir: dir });
    assert.equal(lines(a, 'error', 'the local copy of the allocation state is unreadable; ignoring it').length, 1);
    assert.match(a.ipam.status().lastStateError?.message ?? '', /^local copy: /);
    assert.equal(a.ipam.isAllocator(), true);
    assert.deepEqual(a.ipam.current(), { ...S1, generation: 2 });
    await copyBecomes(a, { ...S1, generation: 2 });
  });

  test('an allocator key without a live lease is ignored (warned once), removed, and a real allocator elected; one on a live lease is honoured', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const key = `${prefix}ipam/allocator`;
    await real.raw.put(key).value('ghost');
    const a = await member('node-a', prefix, clock);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a elected', onTimeout: dump(a) });
    const warned = lines(a, 'warn', `ignoring allocator key ${key}: its lease is not live; removing it`);
    assert.deepEqual(warned.map((l) => l.obj), [{ key, lease: '0', value: '"ghost"' }]);
    assert.equal(String((await real.raw.get(key).exec()).kvs[0]!.lease), a.session.leaseId);
    await a.stop();

    const outsider = real.raw.lease(60);
    await outsider.grant();
    real.own({ dispose: () => void outsider.revoke().catch(() => undefined) });
    await outsider.put(key).value('outsider');
    const b = await member('node-b', prefix, clock);
    assert.equal(b.ipam.allocator(), 'outsider');
    assert.deepEqual(b.ipam.status(), { allocator: 'outsider', generation: 0, source: 'none' });
    assert.equal(b.ipam.isAllocator(), false);
    assert.equal(await real.raw.get(key).string(), 'outsider', 'a key on a live lease stays');
    await outsider.revoke();
    await waitFor(() => b.ipam.isAllocator(), { what: 'node-b elected once the lease is gone' });
    assert.equal(lines(b, 'warn', /ignoring/).length, 0);
  });

  test('a failed read is a debug line and is retried 500 ms later by the clock', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const b0 = await member('node-a', prefix, clock);
    const b = await member('node-b', prefix, clock);
    const client = b.session.client;
    const realGetAll = client.getAll.bind(client);
    let fail = 1;
    (client as { getAll: typeof client.getAll }).getAll = (() => {
      if (fail > 0) {
        fail--;
        throw new Error('injected read failure');
      }
      return realGetAll();
    }) as typeof client.getAll;
    const pending = clock.pending;
    assert.equal(await b0.ipam.save(S1), true);
    await waitFor(() => lines(b, 'debug', 'etcd ipam refresh failed; reading again in 500 ms').length === 1, { what: 'the failed read' });
    assert.equal(clock.pending, pending + 1);
    assert.equal(b.ipam.current().generation, undefined);
    clock.advance(499);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(b.ipam.current().generation, undefined);
    clock.advance(1);
    await waitFor(() => b.ipam.current().generation === 1, { what: 'the retried read' });
  });

  test('dispose: no more reads, the restore wait ends without writing, the hold timer is cancelled', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock, { stateDir: newDir({ ...S1, generation: 1 }) });
    const b = await member('node-b', prefix, clock, { stateDir: null });
    assert.equal(a.ipam.status().waiting?.startsWith('restoring'), true);
    a.ipam.dispose();
    clock.advance(WAIT);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await storedText(prefix), null, 'a disposed allocator restores nothing');
    b.ipam.dispose();
    await real.raw.put(`${prefix}ipam/state`).value(JSON.stringify({ ...S2, generation: 5 }));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(b.ipam.current().generation, undefined, 'a disposed coordinator reads nothing');

    const p2 = real.freshPrefix();
    const c = await member('node-c', p2, clock, { stateDir: newDir({ ...S1, generation: 1 }), restoreHoldMs: 5000 });
    clock.advance(WAIT);
    await waitFor(() => c.ipam.isAllocator(), { what: 'node-c to restore' });
    const pending = clock.pending;
    c.ipam.dispose();
    assert.equal(clock.pending, pending - 1, 'the hold timer is cancelled');
  });

  test('the allocator losing its lease stops allocating; the other agent takes over with the state', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await member('node-a', prefix, clock);
    const b = await member('node-b', prefix, clock);
    assert.equal(await a.ipam.save(S1), true);
    await waitFor(() => b.ipam.current().generation === 1, { what: 'node-b at generation 1' });
    await a.session.revoke();
    assert.equal(a.ipam.isAllocator(), false, 'not on a lease it no longer holds');
    assert.equal(await a.ipam.save(S2), false);
    await waitFor(() => b.ipam.isAllocator(), { what: 'node-b elected' });
    assert.equal(await b.ipam.save(S2), true);
    assert.deepEqual(await stored(prefix), { ...S2, generation: 2 });
  });
});
