/**
 * LB-IPAM coordination against a real etcd (loopback), with several
 * coordinators (each on its own session and state dir): allocations are never
 * lost or reassigned when the store is wiped, rolled back or holds garbage,
 * and an allocator key without a live lease carries no authority (issue 9).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import { Etcd3 } from 'etcd3';
import type { AllocationState } from '../../src/controlplane/ipam/state.js';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { waitFor } from '../../lab/lab.js';
import { EtcdIpamCoordinator, IPAM_COPY_FILE } from '../../src/store/etcd/ipam.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';

interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
  obj: Record<string, unknown>;
}

function recordingLogger(entries: LogEntry[]): Logger {
  const at = (level: LogEntry['level']) => (obj: object, msg = '') => void entries.push({ level, msg, obj: obj as Record<string, unknown> });
  const log: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => log };
  return log;
}

const S1: AllocationState = { version: 1, allocations: { 'default/a': ['198.51.100.10'] } };
const S2: AllocationState = { version: 1, allocations: { 'default/a': ['198.51.100.10'], 'default/b': ['198.51.100.11'] } };
const allocs = (s: AllocationState | undefined) => JSON.stringify(Object.entries(s?.allocations ?? {}).sort());

describe('etcd LB-IPAM coordination: allocations are never lost or reassigned', () => {
  let etcd: EtcdServer;
  let raw: Etcd3;
  let scratch: string;
  let prefixN = 0;
  let members: Member[] = [];

  interface Member {
    node: string;
    stateDir: string;
    session: EtcdSession;
    ipam: EtcdIpamCoordinator;
    logs: LogEntry[];
    /** Stops the member; with `revoke`, its lease (and keys) go at once. */
    stop(revoke?: boolean): Promise<void>;
  }

  before(async () => {
    etcd = await startEtcd();
    raw = new Etcd3({ hosts: etcd.endpoint });
    scratch = mkdtempSync(join(tmpdir(), 'herald-ipam-test-'));
  });
  afterEach(async () => {
    for (const m of members) await m.stop();
    members = [];
  });
  after(async () => {
    raw?.close();
    await etcd?.stop();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
    // Node 20 with tsx's loader thread sometimes keeps this file's process
    // alive after its last test (2 of 14 runs alone: nothing of ours open, only
    // the loader thread's port), and the file then fails on its timeout. Such
    // a process is ended 5 s after this hook, long after its report went out
    // (stdout is a pipe: written synchronously), with the exit code the run
    // set. Unref'd: a process that exits on its own is not held back by it.
    setTimeout(() => process.exit(), 5000).unref();
  });

  const freshPrefix = () => `/herald-ipam-${process.pid}-${prefixN++}/`;

  async function member(node: string, prefix: string, opts: { stateDir?: string; restoreWaitMs?: number } = {}): Promise<Member> {
    const stateDir = opts.stateDir ?? mkdtempSync(join(scratch, `${node}-`));
    const logs: LogEntry[] = [];
    const session = new EtcdSession(
      { endpoints: [etcd.endpoint], prefix, ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 },
      { clock: systemClock, log: silentLogger },
    );
    await session.start();
    const ipam = new EtcdIpamCoordinator(session, node, recordingLogger(logs), { stateDir, restoreWaitMs: opts.restoreWaitMs ?? 1500 });
    await ipam.start(() => {});
    let stopped = false;
    const m: Member = {
      node,
      stateDir,
      session,
      ipam,
      logs,
      async stop(revoke = false) {
        if (stopped) return;
        stopped = true;
        ipam.dispose();
        if (revoke) await session.revoke();
        session.dispose();
      },
    };
    members.push(m);
    return m;
  }

  const stored = async (prefix: string) => raw.get(`${prefix}ipam/state`).string();
  const storedState = async (prefix: string): Promise<AllocationState | undefined> => {
    const text = await stored(prefix);
    try {
      return text === null ? undefined : (JSON.parse(text) as AllocationState);
    } catch {
      return undefined;
    }
  };
  const copyOf = (m: Member) => JSON.parse(readFileSync(join(m.stateDir, IPAM_COPY_FILE), 'utf8')) as AllocationState;
  const logged = (m: Member, level: LogEntry['level'], pattern: RegExp) => m.logs.some((e) => e.level === level && pattern.test(e.msg));
  const describeLogs = (m: Member) => () => m.logs.filter((e) => e.level !== 'debug').map((e) => `${e.level} ${e.msg} ${JSON.stringify(e.obj)}`).join('\n');

  test('every save bumps the generation; every agent keeps a copy of the state in its state dir', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to be the allocator' });
    const b = await member('node-b', prefix);
    assert.equal(b.ipam.isAllocator(), false);
    assert.equal(await a.ipam.save(S1), true);
    assert.equal(a.ipam.current().generation, 1);
    assert.equal(await a.ipam.save(S1), true);
    assert.equal(a.ipam.current().generation, 1, 'an unchanged state is not written again');
    assert.equal(await a.ipam.save(S2), true);
    assert.equal(a.ipam.current().generation, 2);
    await waitFor(() => b.ipam.current().generation === 2, { what: 'node-b to see generation 2' });
    await waitFor(() => copyOf(b).generation === 2, { what: "node-b's copy to reach generation 2" });
    assert.equal(allocs(copyOf(b)), allocs(S2));
    assert.equal(allocs(copyOf(a)), allocs(S2));
    assert.deepEqual(b.ipam.status(), { allocator: 'node-a', generation: 2, source: 'store' });
  });

  test('a store wiped under running agents: nothing empty is persisted, the same allocations come back (issue 9)', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to be the allocator' });
    const b = await member('node-b', prefix);
    const c = await member('node-c', prefix);
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => [b, c].every((m) => m.ipam.current().generation === 1), { what: 'every agent to see generation 1' });

    await etcd.wipe();
    await waitFor(async () => allocs(await storedState(prefix)) === allocs(S2), {
      timeoutMs: 20_000,
      what: 'the allocation state to be restored in the wiped store',
      onTimeout: () => [a, b, c].map((m) => `${m.node}:\n${describeLogs(m)()}`).join('\n'),
    });
    const restored = (await storedState(prefix))!;
    assert.equal(restored.generation, 1, 'the restored state keeps its generation');
    for (const m of [a, b, c]) {
      assert.equal(allocs(m.ipam.current()), allocs(S2), `${m.node} kept the allocations`);
      assert.ok(logged(m, 'error', /wiped or rolled back/), `${m.node} logged the wipe as an error`);
    }
    const restorer = () => [a, b, c].find((m) => logged(m, 'warn', /^store wiped or rolled back: restored allocation generation 1 from node node-.$/));
    await waitFor(() => restorer() !== undefined, { what: 'the new allocator to log what it restored' });
    const allocator = restorer()!;
    await waitFor(() => allocator.ipam.isAllocator(), { what: 'the allocator to allocate again' });
    // With the intent wiped too, the allocator sees no Services: the restored
    // allocations are held for them, not given up.
    assert.equal(await allocator.ipam.save({ version: 1, allocations: {} }), true);
    assert.equal(allocs(await storedState(prefix)), allocs(S2), 'an empty intent after the wipe does not empty the state');
  });

  test("after a wipe, the allocator restores the newest copy any live agent holds, even when its own is older", async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to be the allocator' });
    const b = await member('node-b', prefix);
    const c = await member('node-c', prefix);
    assert.equal(await a.ipam.save(S1), true);
    await waitFor(() => [b, c].every((m) => m.ipam.current().generation === 1), { what: 'generation 1 everywhere' });
    await b.stop(true); // node-b's copy stays at generation 1
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => copyOf(c).generation === 2, { what: "node-c's copy at generation 2" });
    await a.stop(true);
    await c.stop(true);

    await etcd.wipe();
    const b2 = await member('node-b', prefix, { stateDir: b.stateDir, restoreWaitMs: 3000 });
    assert.equal(allocs(b2.ipam.current()), allocs(S1), "node-b starts from its own (older) copy");
    await waitFor(() => b2.ipam.allocator() === 'node-b', { what: 'node-b to be elected' });
    assert.equal(b2.ipam.isAllocator(), false, 'it does not allocate while the store is behind');
    assert.match(b2.ipam.status().waiting ?? '', /missing from the store/);
    assert.equal(await b2.ipam.save(S1), false);
    await member('node-c', prefix, { stateDir: c.stateDir });

    await waitFor(() => b2.ipam.isAllocator(), { timeoutMs: 15_000, what: 'node-b to restore and allocate', onTimeout: describeLogs(b2) });
    assert.equal(allocs(await storedState(prefix)), allocs(S2));
    assert.equal((await storedState(prefix))!.generation, 2);
    assert.ok(logged(b2, 'warn', /^store wiped or rolled back: restored allocation generation 2 from node node-c$/), describeLogs(b2)());
    assert.equal(b2.ipam.status().source, 'restored');
    assert.equal(b2.ipam.status().restoredFrom, 'node-c');
    assert.equal(allocs(copyOf(b2)), allocs(S2), "node-b's copy follows");

    // Held for their Services: an IP of a Service not applied again is not given to another one…
    assert.equal(await b2.ipam.save({ version: 1, allocations: { 'default/new': ['198.51.100.11'] } }), false);
    // …an intent without them keeps them…
    assert.equal(await b2.ipam.save({ version: 1, allocations: { 'default/new': ['198.51.100.12'] } }), true);
    assert.equal(allocs(await storedState(prefix)), allocs({ version: 1, allocations: { ...S2.allocations, 'default/new': ['198.51.100.12'] } }));
    // …and once applied again they are ordinary allocations: deleting a Service releases its IP.
    assert.equal(await b2.ipam.save(S2), true);
    assert.equal((await storedState(prefix))!.held, undefined);
    assert.equal(await b2.ipam.save(S1), true);
    assert.equal(allocs(await storedState(prefix)), allocs(S1));
  });

  test('an unreadable state is an error; the last good state stays in force and nothing is allocated from it', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix, { restoreWaitMs: 2000 });
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to be the allocator' });
    const b = await member('node-b', prefix);
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => b.ipam.current().generation === 1, { what: 'node-b at generation 1' });

    const garbage = `${'x'.repeat(10_000)} not json`;
    await raw.put(`${prefix}ipam/state`).value(garbage);
    await waitFor(() => logged(b, 'error', /cannot be parsed/), { what: 'node-b to log an error', onTimeout: describeLogs(b) });
    const entry = b.logs.find((e) => e.level === 'error' && /cannot be parsed/.test(e.msg))!;
    assert.ok(String(entry.obj.error).length < 400, 'the bad value is quoted only up to a bound');
    assert.match(String(entry.obj.error), /^not JSON .*"xxxx.*… \(10009 characters\)$/);
    assert.equal(allocs(b.ipam.current()), allocs(S2), 'node-b keeps the last good state');
    assert.match(b.ipam.status().lastStateError?.message ?? '', /not JSON/);
    await waitFor(() => a.ipam.status().waiting !== undefined, { what: 'the allocator to stop allocating' });
    assert.equal(await a.ipam.save(S1), false, 'nothing is allocated while the stored state is unreadable');

    // The allocator overwrites the garbage with its own good copy, not with anything derived from empty.
    await waitFor(async () => allocs(await storedState(prefix)) === allocs(S2), { what: 'the good state to be written back', onTimeout: describeLogs(a) });
    await waitFor(() => logged(a, 'warn', /restored allocation generation 1 from node node-a/), { what: 'the restore to be logged', timeoutMs: 5000, onTimeout: describeLogs(a) });
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to allocate again' });

    // An agent (re)starting while the store holds garbage starts from its local copy.
    await b.stop(true);
    await raw.put(`${prefix}ipam/state`).value('{"version": 1, "allocations": {"default/a": ["not an ip"]}}');
    const b2 = await member('node-b', prefix, { stateDir: b.stateDir });
    assert.equal(allocs(b2.ipam.current()), allocs(S2));
    assert.match(b2.ipam.status().lastStateError?.message ?? '', /invalid .*not an IP address/);
    await waitFor(async () => allocs(await storedState(prefix)) === allocs(S2), { what: 'the good state to be written back again' });
  });

  test('an unreadable state and no good copy anywhere: the allocator writes nothing', async () => {
    const prefix = freshPrefix();
    await raw.put(`${prefix}ipam/state`).value('garbage');
    const a = await member('node-a', prefix, { restoreWaitMs: 500 });
    await waitFor(() => logged(a, 'error', /no live agent holds a good allocation state/), { what: 'the allocator to give up restoring', onTimeout: describeLogs(a) });
    assert.equal(a.ipam.allocator(), 'node-a');
    assert.equal(a.ipam.isAllocator(), false);
    assert.equal(await a.ipam.save(S1), false);
    assert.equal(await stored(prefix), 'garbage', 'the unreadable state is left for an operator, not replaced by one derived from nothing');
    assert.match(a.ipam.status().waiting ?? '', /unreadable/);
  });

  test('an older or empty state written by someone else is ignored, and the newer one is written back', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to be the allocator' });
    const b = await member('node-b', prefix);
    assert.equal(await a.ipam.save(S1), true);
    assert.equal(await a.ipam.save(S2), true);
    await waitFor(() => b.ipam.current().generation === 2, { what: 'node-b at generation 2' });

    for (const older of [{ ...S1, generation: 1 }, { version: 1, allocations: {} }]) {
      b.logs.length = 0;
      await raw.put(`${prefix}ipam/state`).value(JSON.stringify(older));
      await waitFor(() => logged(b, 'warn', /ignored/), { what: 'node-b to ignore the older state', onTimeout: describeLogs(b) });
      assert.equal(b.ipam.current().generation, 2);
      assert.equal(allocs(b.ipam.current()), allocs(S2));
      await waitFor(async () => (await storedState(prefix))?.generation === 2, { what: 'generation 2 written back', onTimeout: () => `node-a:\n${describeLogs(a)()}\nnode-b:\n${describeLogs(b)()}` });
      assert.equal(allocs(await storedState(prefix)), allocs(S2));
      assert.equal(copyOf(b).generation, 2, "node-b's copy never went back");
    }
  });

  test('an allocator key without a live lease is ignored and removed, and a real allocator is elected', async () => {
    const prefix = freshPrefix();
    const key = `${prefix}ipam/allocator`;
    await raw.put(key).value('ghost'); // lease 0
    const a = await member('node-a', prefix);
    await waitFor(() => a.ipam.isAllocator(), { what: 'node-a to be elected despite the lease-less key', onTimeout: describeLogs(a) });
    const warning = a.logs.find((e) => e.level === 'warn' && e.msg.includes(key));
    assert.ok(warning, 'the warning names the key');
    assert.equal(warning.obj.value, '"ghost"');

    // Overwritten while node-a holds it: ignored and removed again.
    await raw.put(key).value('ghost-2');
    await waitFor(async () => (await raw.get(key).string()) === 'node-a', { what: 'node-a to hold the key again' });
    assert.equal(String((await raw.get(key).exec()).kvs[0]!.lease), a.session.leaseId);
    assert.ok(a.logs.some((e) => e.level === 'warn' && e.msg.includes(key) && e.obj.value === '"ghost-2"'));

    // A key on a live lease is honoured, whoever holds it; when that lease ends, a real agent takes over.
    await a.stop(true);
    const outsider = raw.lease(10);
    await outsider.put(key).value('outsider');
    const b = await member('node-b', prefix);
    await waitFor(() => b.ipam.allocator() === 'outsider', { what: 'node-b to see the outsider' });
    assert.equal(b.ipam.isAllocator(), false);
    assert.equal(await raw.get(key).string(), 'outsider', 'a key with a live lease is not removed');
    await outsider.revoke();
    await waitFor(() => b.ipam.isAllocator(), { what: 'node-b to be elected once the lease is gone' });
  });
});
