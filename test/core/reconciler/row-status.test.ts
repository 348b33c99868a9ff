/**
 * Per-row reconcile status lives in statedb (reconcile-status and
 * reconcile-progress), so "has revision N of this row reached the target?" is
 * a query on a read txn and an awaitable, for `herald status` and the cluster
 * view alike. Issue 10.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import { silentLogger } from '../../../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../../../src/core/reconciler/reconciler.js';
import {
  appliedRevision,
  reconcileStatusTable,
  rowStatus,
  rowsInError,
  rowsNotDone,
  statusKey,
} from '../../../src/core/reconciler/status.js';
import { FakeTarget, setupReconciler, testRows, track, turns } from './fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

function setup() {
  const s = setupReconciler({ retryMinMs: 100 });
  disposers.push(s.dispose);
  return s;
}

test('a row that reached the target has a done status for its revision in the reconcile-status table', async () => {
  const s = setup();
  s.put({ key: 'a', value: 1 });
  const rev = s.revision();
  assert.deepEqual(await s.reconciler.waitForRow('a', rev), { kind: 'done', op: 'upsert', revision: rev, updatedAt: 0 });
  assert.equal(s.target.entries.get('a')?.value, 1, 'done means it is in the target');

  // Read straight from the table, as the status socket and the cluster view do.
  await s.reconciler.settled();
  const txn = s.db.readTxn();
  const stored = txn.get(reconcileStatusTable, statusKey('test', 'a'));
  assert.equal(stored?.kind, 'done');
  assert.equal(stored?.revision, rev);
  assert.ok(appliedRevision(txn, 'test') >= rev);
  assert.deepEqual(rowStatus(txn, 'test', testRows, 'a'), { kind: 'done', op: 'upsert', revision: rev, updatedAt: 0 });
  assert.deepEqual(rowsNotDone(txn, 'test', testRows), []);
});

test('a row is pending while its write is in flight, and waitForRow() resolves only once the write is done', async () => {
  const s = setup();
  const open = s.target.hold('a');
  s.put({ key: 'a', value: 1 });
  const rev = s.revision();
  const waiting = track(s.reconciler.waitForRow('a', rev));
  await turns(200);
  assert.ok(s.target.held.has('a'), 'the write is in flight');
  assert.equal(waiting.settled, false, 'waitForRow() resolved before the row reached the target');
  assert.deepEqual(s.reconciler.status('a'), { kind: 'pending', op: 'upsert', revision: rev });
  assert.deepEqual(
    s.reconciler.notDone().map((e) => [e.key, e.kind]),
    [['a', 'pending']],
  );

  open();
  await turns();
  assert.equal(waiting.settled, true);
  assert.equal((waiting.value as { kind: string }).kind, 'done');
  assert.ok(s.target.entries.has('a'));

  // A newer write makes it pending again until that revision is done too.
  const open2 = s.target.hold('a');
  s.put({ key: 'a', value: 2 });
  await turns();
  assert.equal(s.reconciler.status('a')?.kind, 'pending');
  assert.equal((await s.reconciler.waitForRow('a', rev)).revision, rev, 'the earlier revision stays reached');
  open2();
  assert.equal((await s.reconciler.waitForRow('a', s.revision())).kind, 'done');
  assert.equal(s.target.entries.get('a')?.value, 2);
});

test('a failing row is an error status (with its error and attempts) until a retry succeeds; untilDone waits through it', async () => {
  const s = setup();
  s.target.failing.add('a');
  s.put({ key: 'a', value: 1 }, { key: 'b', value: 1 });
  const rev = s.revision();
  const failed = await s.reconciler.waitForRow('a', rev);
  assert.equal(failed.kind, 'error');
  assert.match(failed.error ?? '', /injected failure/);
  assert.equal(failed.attempts, 1);
  const errors = rowsInError(s.db.readTxn());
  assert.deepEqual(
    errors.map((e) => [e.reconciler, e.key, e.op, e.revision]),
    [['test', 'a', 'upsert', rev]],
    'one row in error, the other done',
  );
  assert.equal((await s.reconciler.waitForRow('b', rev)).kind, 'done', 'a failing row never blocks the others');

  const done = track(s.reconciler.waitForRow('a', rev, { untilDone: true }));
  s.clock.advance(100);
  await turns();
  assert.equal(done.settled, false, 'resolved while the row still fails');
  assert.equal(s.reconciler.status('a')?.attempts, 2);
  s.target.failing.clear();
  s.clock.advance(200);
  await turns();
  assert.equal(done.settled, true);
  assert.equal((done.value as { kind: string }).kind, 'done');
  assert.deepEqual(rowsInError(s.db.readTxn()), []);
});

test('a deleted row: waitForRow(delete revision) resolves only once the entry has left the target, and no status is left', async () => {
  const s = setup();
  s.put({ key: 'a', value: 1 });
  await s.reconciler.waitForRow('a', s.revision());
  const open = s.target.hold('a');
  s.remove('a');
  const deletedAt = s.revision();
  const waiting = track(s.reconciler.waitForRow('a', deletedAt));
  await turns(200);
  assert.ok(s.target.held.has('a'));
  assert.equal(waiting.settled, false, 'reported withdrawn while the entry was still in the target');
  assert.deepEqual(s.reconciler.status('a'), { kind: 'pending', op: 'delete', revision: deletedAt });
  open();
  await turns();
  assert.equal(waiting.settled, true);
  assert.deepEqual(waiting.value, { kind: 'done', op: 'delete', revision: deletedAt });
  assert.equal(s.target.entries.has('a'), false);
  assert.equal(s.reconciler.status('a'), undefined);
  assert.equal(s.db.readTxn().get(reconcileStatusTable, statusKey('test', 'a')), undefined);
});

test('writing a status does not re-trigger the row: after a marker row is done, the first row was written exactly once', async () => {
  const s = setup();
  // Past the start-up full pass, which re-applies every row by design.
  await s.reconciler.settled();
  await turns();
  assert.equal(s.reconciler.health().fullRounds, 1);
  s.put({ key: 'a', value: 1 });
  await s.reconciler.waitForRow('a', s.revision());
  const desiredRevision = s.revision();
  // The marker is written after any re-trigger the status write could cause, and the reconciler handles changes in order.
  s.put({ key: 'marker', value: 0 });
  await s.reconciler.waitForRow('marker', s.revision());
  assert.deepEqual(
    s.target.log.map((e) => `${e.op} ${e.key}`),
    ['update a', 'update marker'],
  );
  assert.equal(s.revision(), desiredRevision + 1, 'status writes never touch the desired table');
});

test('waitForRow() rejects with HERALD_RECONCILE_TIMEOUT at its deadline (injected clock) and HERALD_STOPPED on dispose', async () => {
  const s = setup();
  s.target.hold('a');
  s.put({ key: 'a', value: 1 });
  const late = track(s.reconciler.waitForRow('a', s.revision(), { timeoutMs: 1000 }));
  const stopped = track(s.reconciler.waitForRow('a', s.revision()));
  await turns();
  s.clock.advance(999);
  await turns();
  assert.equal(late.settled, false);
  s.clock.advance(1);
  await turns();
  assert.ok(isHeraldError(late.error) && late.error.code === 'HERALD_RECONCILE_TIMEOUT', String(late.error));
  await s.dispose();
  await turns();
  assert.ok(isHeraldError(stopped.error) && stopped.error.code === 'HERALD_STOPPED', String(stopped.error));
  assert.deepEqual(s.db.readTxn().list(reconcileStatusTable), [], 'a stopped reconciler leaves no statuses behind');
});

test('two reconcilers on one table keep separate statuses: one target failing does not mark the other', async () => {
  const s = setup();
  const other = new FakeTarget(s.db);
  other.failing.add('a');
  const second = new Reconciler({ name: 'second', db: s.db, table: testRows, ops: other, clock: s.clock, log: silentLogger }, { ...reconcilerDefaults, retryMinMs: 100 });
  second.start();
  disposers.push(() => second.dispose());
  s.put({ key: 'a', value: 1 });
  const rev = s.revision();
  assert.equal((await s.reconciler.waitForRow('a', rev)).kind, 'done');
  assert.equal((await second.waitForRow('a', rev)).kind, 'error');
  assert.deepEqual(
    rowsInError(s.db.readTxn()).map((e) => `${e.reconciler}/${e.key}`),
    ['second/a'],
  );
  assert.throws(
    () => new Reconciler({ name: 'second', db: s.db, table: testRows, ops: other, clock: s.clock, log: silentLogger }).start(),
    /another reconciler named second/,
  );
});
