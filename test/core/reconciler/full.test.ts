/**
 * Full reconciliation of the generic reconciler: it prunes only once the
 * table is initialized (or the grace period has passed, with a warning),
 * repairs drift every fullIntervalMs and on triggerFull(), and a failing
 * prune or row is reported in health() and retried, never fatal. Also its
 * argument checks, log levels and what dispose() leaves behind.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import { silentLogger } from '../../../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../../../src/core/reconciler/reconciler.js';
import { reconcileProgressTable, reconcileStatusTable } from '../../../src/core/reconciler/status.js';
import { formatTable } from '../../../src/core/statedb/index.js';
import { recordingLogger } from '../../helpers/recording-logger.js';
import { setupReconciler, testRows, turns } from './fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

const HOUR = 3_600_000;

test('nothing is pruned before the table is initialized; then one full round applies every row and prunes the rest', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR, initGraceMs: HOUR }, { initialized: false });
  disposers.push(s.dispose);
  s.target.entries.set('stale', { key: 'stale', value: 0 }); // left in the kernel by the previous run
  s.put({ key: 'a', value: 1 }, { key: 'b', value: 2 });
  await s.reconciler.settled();
  await turns();
  assert.equal(s.target.prunes, 0);
  assert.ok(s.target.entries.has('stale'), 'a half-filled table never reads as "unwanted"');
  assert.equal(s.reconciler.health().initialized, false);
  assert.equal(s.reconciler.health().fullRounds, 0);
  const partial = s.reconciler.health().lastPartial;
  assert.deepEqual(partial && { ok: partial.ok, rows: partial.rows, errors: partial.errors }, { ok: true, rows: 2, errors: 0 });

  const writes = s.target.log.length;
  s.init.done();
  await turns();
  assert.equal(s.reconciler.health().initialized, true);
  assert.equal(s.target.prunes, 1);
  assert.deepEqual([...s.target.entries.keys()].sort(), ['a', 'b']);
  assert.equal(s.target.log.length - writes, 2, 'the full round re-applied both rows');
  const h = s.reconciler.health();
  assert.equal(h.fullRounds, 1);
  assert.deepEqual(h.lastFull && { ok: h.lastFull.ok, rows: h.lastFull.rows, errors: h.lastFull.errors, error: h.lastFull.error }, { ok: true, rows: 2, errors: 0, error: undefined });
});

test('firstFullRound() waits for the first full round: not for partial rounds before the table is initialized', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR, initGraceMs: HOUR }, { initialized: false });
  disposers.push(s.dispose);
  let done = false;
  void s.reconciler.firstFullRound().then(() => (done = true));
  s.target.entries.set('stale', { key: 'stale', value: 0 });
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  await turns();
  assert.equal(done, false, 'a partial round is not the first full one');
  s.init.done();
  await s.reconciler.firstFullRound();
  assert.equal(s.target.entries.has('stale'), false, 'pruned by the time it resolves');
  assert.deepEqual([...s.target.entries.keys()], ['a']);
  assert.equal(done, true);
  await s.reconciler.firstFullRound(); // and stays resolved
});

test('firstFullRound() rejects with HERALD_STOPPED when the reconciler is disposed before its first full round', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR, initGraceMs: HOUR }, { initialized: false });
  const first = s.reconciler.firstFullRound();
  await s.dispose();
  await assert.rejects(first, (e: unknown) => isHeraldError(e) && e.code === 'HERALD_STOPPED');
});

test('a table still not initialized after the grace period is pruned anyway, with a warning', async () => {
  const log = recordingLogger();
  const s = setupReconciler({ fullIntervalMs: HOUR, initGraceMs: 1000 }, { initialized: false, log });
  disposers.push(s.dispose);
  s.target.entries.set('stale', { key: 'stale', value: 0 });
  s.clock.advance(999);
  await turns();
  assert.equal(s.target.prunes, 0);
  s.clock.advance(1);
  await turns();
  assert.equal(s.target.prunes, 1);
  assert.equal(s.target.entries.has('stale'), false);
  assert.equal(s.reconciler.health().initialized, true);
  assert.deepEqual(
    log.lines.filter((l) => l.level === 'warn').map((l) => [l.msg, l.obj.reconciler]),
    [['table not initialized within the grace period: pruning anyway', 'test']],
  );
});

test('no warning when the table was initialized in time', async () => {
  const log = recordingLogger();
  const s = setupReconciler({ fullIntervalMs: HOUR }, { log });
  disposers.push(s.dispose);
  await s.reconciler.settled();
  await turns();
  assert.equal(s.target.prunes, 1);
  assert.deepEqual(log.lines.filter((l) => l.level === 'warn'), []);
});

test('a full round comes every fullIntervalMs and on triggerFull(), and repairs drift in the target', async () => {
  const s = setupReconciler({ fullIntervalMs: 10_000, initGraceMs: HOUR });
  disposers.push(s.dispose);
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 1);
  s.target.entries.delete('a'); // someone removed it behind our back
  s.target.entries.set('intruder', { key: 'intruder', value: 9 });
  s.clock.advance(9_999);
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 1, 'not before the interval');
  s.clock.advance(1);
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 2);
  assert.deepEqual([...s.target.entries.keys()], ['a']);

  s.target.entries.delete('a');
  s.reconciler.triggerFull();
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 3);
  assert.ok(s.target.entries.has('a'));
  s.clock.advance(9_999);
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 3, 'the interval counts from the last full round');
});

test('a failing prune is reported in health and the log and retried after retryMinMs; a failing row makes the round not ok', async () => {
  const log = recordingLogger();
  const s = setupReconciler({ fullIntervalMs: HOUR, retryMinMs: 100, retryMaxMs: 1000 }, { log, initialized: false });
  disposers.push(s.dispose);
  s.target.pruneFailure = new Error('map busy');
  s.target.failing.add('bad');
  s.put({ key: 'good', value: 1 }, { key: 'bad', value: 2 });
  await s.reconciler.settled();
  const errorsBefore = s.reconciler.health().errorCount;
  assert.equal(errorsBefore, 1, 'the failing row');
  assert.deepEqual(
    (({ ok, rows, errors }) => ({ ok, rows, errors }))(s.reconciler.health().lastPartial!),
    { ok: false, rows: 2, errors: 1 },
  );
  s.init.done();
  await turns();
  let h = s.reconciler.health();
  assert.equal(h.fullRounds, 1);
  assert.deepEqual(h.lastFull && { ok: h.lastFull.ok, rows: h.lastFull.rows, errors: h.lastFull.errors, error: h.lastFull.error }, { ok: false, rows: 2, errors: 1, error: 'map busy' });
  assert.equal(h.errorCount, errorsBefore + 2, 'the row again, and the prune');
  assert.deepEqual(
    log.lines.filter((l) => l.msg.startsWith('prune')).map((l) => [l.level, l.msg, l.obj.reconciler, l.obj.err]),
    [['warn', 'prune failed; the next full reconciliation retries', 'test', 'map busy']],
  );
  s.target.pruneFailure = undefined;
  s.target.failing.clear();
  s.clock.advance(99);
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 1, 'the prune is retried after retryMinMs, not before');
  s.clock.advance(1);
  await turns();
  h = s.reconciler.health();
  assert.equal(h.fullRounds, 2);
  assert.deepEqual(h.lastFull && { ok: h.lastFull.ok, errors: h.lastFull.errors, error: h.lastFull.error }, { ok: true, errors: 0, error: undefined });
});

test('a failing row is logged as a warning on its first and every tenth attempt, at debug level in between', async () => {
  const log = recordingLogger();
  const s = setupReconciler({ fullIntervalMs: 24 * HOUR, retryMinMs: 1, retryMaxMs: 1 }, { log });
  disposers.push(s.dispose);
  await s.reconciler.settled();
  s.target.failing.add('a');
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  for (let i = 0; i < 10; i++) {
    s.clock.advance(1);
    await turns();
  }
  const lines = log.lines.filter((l) => l.msg === 'reconcile failed; will retry');
  assert.ok(lines.length >= 10);
  assert.deepEqual(
    lines.slice(0, 10).map((l) => [l.obj.attempts, l.level]),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => [n, n === 1 || n === 10 ? 'warn' : 'debug']),
  );
  assert.deepEqual((({ reconciler, key, op, retryInMs, err }) => ({ reconciler, key, op, retryInMs, err }))(lines[0]!.obj), {
    reconciler: 'test',
    key: 'a',
    op: 'upsert',
    retryInMs: 1,
    err: 'update a: injected failure',
  });
});

test('bad configuration is refused, naming the reconciler and the setting', () => {
  const s = setupReconciler();
  disposers.push(s.dispose);
  const make = (config: Partial<typeof reconcilerDefaults>) => () =>
    new Reconciler({ name: 'cfg', db: s.db, table: testRows, ops: s.target, clock: s.clock, log: silentLogger }, { ...reconcilerDefaults, ...config });
  assert.throws(make({ retryMinMs: 0 }), /reconciler cfg: retryMinMs must be > 0, got 0/);
  assert.throws(make({ fullIntervalMs: Number.NaN }), /reconciler cfg: fullIntervalMs must be > 0/);
  assert.throws(make({ retryMinMs: 2000, retryMaxMs: 1000 }), /reconciler cfg: retryMinMs must be <= retryMaxMs/);
  assert.doesNotThrow(make({ retryMinMs: 1000, retryMaxMs: 1000 }));
});

test('a second reconciler of the same name on one database is refused; dispose() removes its statuses and progress', async () => {
  const s = setupReconciler();
  await s.reconciler.settled();
  const twin = new Reconciler({ name: 'test', db: s.db, table: testRows, ops: s.target, clock: s.clock, log: silentLogger });
  assert.throws(
    () => twin.start(),
    (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && /another reconciler named test runs on this database/.test((e as Error).message),
  );
  s.target.failing.add('a');
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  assert.equal(s.db.readTxn().list(reconcileStatusTable).length, 1);
  await s.dispose();
  assert.equal(s.db.readTxn().list(reconcileStatusTable).length, 0);
  assert.equal(s.db.readTxn().get(reconcileProgressTable, 'test'), undefined);
  await assert.rejects(s.reconciler.settled(), /reconciler test is stopped/);
  await assert.rejects(s.reconciler.waitForRow('a', 1), /reconciler test is stopped/);
});

test('start() twice is one start; dispose() of a reconciler never started touches nothing', async () => {
  const s = setupReconciler();
  disposers.push(s.dispose);
  s.target.failing.add('a');
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  assert.doesNotThrow(() => s.reconciler.start());
  const twin = new Reconciler({ name: 'test', db: s.db, table: testRows, ops: s.target, clock: s.clock, log: silentLogger });
  await twin.dispose();
  assert.equal(s.db.readTxn().list(reconcileStatusTable).length, 1, "the running reconciler's status is still there");
  assert.notEqual(s.db.readTxn().get(reconcileProgressTable, 'test'), undefined);
});

test('settled(revision) lists only failures of changes up to that revision', async () => {
  const s = setupReconciler();
  disposers.push(s.dispose);
  s.put({ key: 'ok', value: 1 });
  const before = s.revision();
  await s.reconciler.settled();
  s.target.failing.add('late');
  s.put({ key: 'late', value: 2 });
  await s.reconciler.settled();
  assert.deepEqual(await s.reconciler.settled({ revision: before }), { revision: before, failed: [] });
  assert.deepEqual((await s.reconciler.settled()).failed, ['late']);
});

test('partial rounds count batches of changes only; a retry waits for its time even when other changes wake the loop', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR, retryMinMs: 100, retryMaxMs: 1000 });
  disposers.push(s.dispose);
  await s.reconciler.settled();
  await turns();
  const rounds = s.reconciler.health().partialRounds;
  s.target.failing.add('a');
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  assert.equal(s.reconciler.health().partialRounds, rounds + 1);
  s.reconciler.triggerFull();
  await turns();
  assert.equal(s.reconciler.health().partialRounds, rounds + 1, 'a full round is not a partial one');
  const attempts = () => s.target.log.filter((e) => e.key === 'a').length;
  const before = attempts();
  s.clock.advance(50);
  s.put({ key: 'b', value: 2 });
  await s.reconciler.settled();
  await turns();
  assert.equal(attempts(), before, 'the retry of a is not due before 100 ms');
});

test('a failing delete keeps an error status for the delete revision until a retry succeeds', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR, retryMinMs: 100, retryMaxMs: 100 });
  disposers.push(s.dispose);
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  s.target.failing.add('a');
  s.remove('a');
  const deletedAt = s.revision();
  await s.reconciler.settled();
  s.put({ key: 'b', value: 2 }); // moves the table revision on
  await s.reconciler.settled();
  s.clock.advance(100);
  await turns();
  const st = s.reconciler.status('a');
  assert.deepEqual(st && { kind: st.kind, op: st.op, revision: st.revision, attempts: st.attempts }, { kind: 'error', op: 'delete', revision: deletedAt, attempts: 2 });
  s.target.failing.clear();
  s.clock.advance(100);
  await turns();
  assert.equal(s.reconciler.status('a'), undefined);
  assert.equal(s.target.entries.has('a'), false);
});

test('the status tables as `herald db show` prints them', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR });
  disposers.push(s.dispose);
  s.put({ key: 'good', value: 1 });
  s.target.failing.add('bad');
  s.put({ key: 'bad', value: 2 });
  await s.reconciler.settled();
  assert.equal(
    formatTable(s.db.readTxn(), reconcileStatusTable),
    [
      'reconciler  key   kind   op      revision  attempts  error',
      'test        bad   error  upsert  2         1         update bad: injected failure',
      'test        good  done   upsert  1',
    ].join('\n'),
  );
  assert.equal(formatTable(s.db.readTxn(), reconcileProgressTable), ['reconciler  table      revision', 'test        test-rows  2'].join('\n'));
  assert.deepEqual(
    s.reconciler.errors().map((e) => e.key),
    ['bad'],
  );
});
