/**
 * The reconciler's optional batch capability: bulk partial rounds and the full
 * pass go through the ops' batch calls, yet every row keeps its own outcome —
 * a row that fails inside a batch gets its error status and is retried alone,
 * and a batch call that throws is redone row by row to attribute the error.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { silentLogger } from '../../../src/core/logger.js';
import { BATCH_MIN_ROWS, Reconciler, reconcilerDefaults } from '../../../src/core/reconciler/reconciler.js';
import { reconcileStatusTable } from '../../../src/core/reconciler/status.js';
import { StateDB } from '../../../src/core/statedb/index.js';
import { ManualClock } from '../../helpers/manual-clock.js';
import { FakeTarget, testRows, turns, type TestRow } from './fixtures.js';

/** FakeTarget with batch calls; `batches` records each call, `throwBatch` makes the calls throw. */
class BatchTarget extends FakeTarget {
  readonly batches: Array<{ op: 'update' | 'delete'; rows: number }> = [];
  throwBatch = false;

  updateBatch(rows: readonly TestRow[]): unknown[] {
    this.batches.push({ op: 'update', rows: rows.length });
    if (this.throwBatch) throw new Error('batch update: injected failure');
    return rows.map((row) => {
      if (this.failing.has(row.key)) return new Error(`update ${row.key}: injected failure`);
      this.entries.set(row.key, row);
      return undefined;
    });
  }

  deleteBatch(rows: readonly TestRow[]): unknown[] {
    this.batches.push({ op: 'delete', rows: rows.length });
    if (this.throwBatch) throw new Error('batch delete: injected failure');
    return rows.map((row) => {
      if (this.failing.has(row.key)) return new Error(`delete ${row.key}: injected failure`);
      this.entries.delete(row.key);
      return undefined;
    });
  }
}

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

async function setup() {
  const clock = new ManualClock();
  const db = new StateDB([testRows]);
  const target = new BatchTarget(db);
  db.registerInitializer(testRows, 'test').done();
  const reconciler = new Reconciler<TestRow>({ name: 'test', db, table: testRows, ops: target, clock, log: silentLogger }, reconcilerDefaults);
  reconciler.start();
  disposers.push(() => reconciler.dispose());
  await reconciler.settled();
  const rows = (n: number, value = 1) => Array.from({ length: n }, (_, i) => ({ key: `k${String(i).padStart(4, '0')}`, value }));
  const put = (rs: TestRow[]) => db.update([testRows], (t) => rs.forEach((r) => t.insert(testRows, r)));
  return { clock, db, target, reconciler, rows, put };
}

test('a bulk partial round goes through the batch call; a row failing inside it gets its own error and is retried alone', async () => {
  const { clock, db, target, reconciler, rows, put } = await setup();
  const n = BATCH_MIN_ROWS * 4;
  target.failing.add('k0003');
  put(rows(n));
  const outcome = await reconciler.settled();
  assert.deepEqual(target.batches, [{ op: 'update', rows: n }], 'one batch call, no row-by-row calls');
  assert.equal(target.log.length, 0);
  assert.deepEqual(outcome.failed, ['k0003']);
  assert.equal(target.entries.size, n - 1, 'every other row is in the target');
  const rev = db.readTxn().getWithRevision(testRows, 'k0000')!.revision;
  assert.deepEqual({ ...reconciler.status('k0000'), updatedAt: 0 }, { kind: 'done', op: 'upsert', revision: rev, updatedAt: 0 });
  assert.equal(reconciler.status('k0003')?.kind, 'error');
  assert.match(reconciler.status('k0003')?.error ?? '', /injected failure/);

  // The retry is the failed row's alone, through update().
  target.failing.delete('k0003');
  clock.advance(reconcilerDefaults.retryMinMs);
  await turns();
  await reconciler.settled();
  assert.deepEqual(target.log.map((l) => `${l.op} ${l.key}`), ['update k0003']);
  assert.equal(reconciler.status('k0003')?.kind, 'done');
  assert.equal(target.entries.size, n);
  assert.equal(reconciler.errors().length, 0);
});

test('a batch call that throws is redone row by row, so the error lands on the row that has it', async () => {
  const { target, reconciler, rows, put } = await setup();
  const n = BATCH_MIN_ROWS * 2;
  target.throwBatch = true;
  target.failing.add('k0007');
  put(rows(n));
  const outcome = await reconciler.settled();
  assert.equal(target.batches.length, 1);
  assert.equal(target.log.length, n, 'then every row through update()');
  assert.deepEqual(outcome.failed, ['k0007']);
  assert.equal(target.entries.size, n - 1);
  assert.equal(reconciler.status('k0000')?.kind, 'done');
});

test('bulk deletes go through the batch call; a failing delete keeps its error status and its entry', async () => {
  const { target, reconciler, rows, put, db } = await setup();
  const n = BATCH_MIN_ROWS * 2;
  put(rows(n));
  await reconciler.settled();
  target.failing.add('k0001');
  db.update([testRows], (t) => t.deleteAll(testRows));
  const outcome = await reconciler.settled();
  assert.deepEqual(target.batches.at(-1), { op: 'delete', rows: n });
  assert.deepEqual(outcome.failed, ['k0001']);
  assert.deepEqual([...target.entries.keys()], ['k0001']);
  assert.deepEqual(
    reconciler.notDone().map((e) => [e.key, e.kind, e.op]),
    [['k0001', 'error', 'delete']],
    'deleted rows lose their status; the failed one says why',
  );
});

test('the full pass applies every row in one batch and repairs the target; unchanged statuses are not rewritten', async () => {
  const { target, reconciler, rows, put, db } = await setup();
  const n = BATCH_MIN_ROWS * 3;
  put(rows(n));
  await reconciler.settled();
  const statusBefore = db.readTxn().get(reconcileStatusTable, `test\u0000k0002`);
  // Damage the target behind the reconciler's back.
  target.entries.delete('k0002');
  target.entries.set('stray', { key: 'stray', value: 9 });
  const rounds = reconciler.health().fullRounds;
  reconciler.triggerFull();
  while (reconciler.health().fullRounds === rounds) await turns(1);
  assert.deepEqual(target.batches.at(-1), { op: 'update', rows: n });
  assert.equal(target.entries.size, n);
  assert.ok(target.entries.has('k0002') && !target.entries.has('stray'));
  assert.equal(reconciler.health().lastFull?.ok, true);
  assert.equal(reconciler.health().lastFull?.rows, n);
  const statusAfter = db.readTxn().get(reconcileStatusTable, `test\u0000k0002`);
  assert.equal(statusAfter, statusBefore, 'the same stored status object: nothing rewritten');
});

test('a full-pass batch with a failing row records that row only; the next success clears it', async () => {
  const { target, reconciler, rows, put } = await setup();
  const n = BATCH_MIN_ROWS * 2;
  put(rows(n));
  await reconciler.settled();
  target.failing.add('k0005');
  const rounds = reconciler.health().fullRounds;
  reconciler.triggerFull();
  while (reconciler.health().fullRounds === rounds) await turns(1);
  assert.equal(reconciler.health().lastFull?.errors, 1);
  assert.deepEqual(reconciler.errors().map((e) => e.key), ['k0005']);
  target.failing.delete('k0005');
  reconciler.triggerFull();
  while (reconciler.health().fullRounds === rounds + 1) await turns(1);
  assert.deepEqual(reconciler.errors(), []);
  assert.equal(reconciler.status('k0005')?.kind, 'done');
});

test('an agent start: the first full round does not write again the rows the same round has just written (it still prunes)', async () => {
  const clock = new ManualClock();
  const db = new StateDB([testRows]);
  const target = new BatchTarget(db);
  const init = db.registerInitializer(testRows, 'test');
  target.entries.set('stale', { key: 'stale', value: 0 }); // left by the previous run
  const reconciler = new Reconciler<TestRow>({ name: 'test', db, table: testRows, ops: target, clock, log: silentLogger }, reconcilerDefaults);
  reconciler.start();
  disposers.push(() => reconciler.dispose());
  await turns();
  // The source fills the table and says it is complete in one go (as the BGP control plane does), before the next round.
  const n = BATCH_MIN_ROWS * 2;
  db.update([testRows], (t) => {
    for (let i = 0; i < n; i++) t.insert(testRows, { key: `k${i}`, value: 1 });
  });
  init.done();
  await reconciler.settled();
  await turns();
  assert.equal(reconciler.health().fullRounds, 1);
  assert.deepEqual(target.batches, [{ op: 'update', rows: n }], 'written once, by the partial round');
  assert.equal(target.entries.has('stale'), false, 'pruned');
  assert.equal(reconciler.health().lastFull?.rows, n);

  // A later full round writes every row again (it repairs drift).
  target.entries.delete('k0');
  reconciler.triggerFull();
  await turns();
  assert.deepEqual(target.batches.at(-1), { op: 'update', rows: n });
  assert.ok(target.entries.has('k0'));
});
