/**
 * settled(): what a node giving an IP away waits on before it lets go. It
 * resolves only once every change up to a table revision has reached the
 * target (or has an error status the caller is told about), and fails loudly
 * at its deadline instead of reporting a withdrawal that has not happened.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import { setupReconciler, track, turns } from './fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

function setup() {
  const s = setupReconciler();
  disposers.push(s.dispose);
  return s;
}

test('settled() does not resolve while the withdrawal is blocked in the target, and resolves once it is done', async () => {
  const s = setup();
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  assert.ok(s.target.entries.has('a'));

  const open = s.target.hold('a');
  s.remove('a');
  const waiting = track(s.reconciler.settled());
  // Far more event-loop turns than any "give up after N turns" loop would wait.
  await turns(3000);
  assert.ok(s.target.held.has('a'), 'the delete is in flight');
  assert.equal(waiting.settled, false, 'settled() reported success while the entry was still in the target');
  assert.ok(s.target.entries.has('a'));

  open();
  await turns();
  assert.equal(waiting.settled, true);
  assert.equal(waiting.error, undefined);
  assert.deepEqual(waiting.value, { revision: s.revision(), failed: [] });
  assert.equal(s.target.entries.has('a'), false);
});

test('settled(revision) waits for that revision only: an earlier one resolves while a later change is still in flight', async () => {
  const s = setup();
  s.put({ key: 'a', value: 1 });
  const first = s.revision();
  await s.reconciler.settled();
  const open = s.target.hold('b');
  s.put({ key: 'b', value: 1 });
  await turns();
  assert.ok(s.target.held.has('b'));
  assert.deepEqual(await s.reconciler.settled({ revision: first }), { revision: first, failed: [] });
  const current = track(s.reconciler.settled());
  await turns(100);
  assert.equal(current.settled, false);
  open();
  await turns();
  assert.equal(current.settled, true);
});

test('settled() rejects with HERALD_RECONCILE_TIMEOUT at its deadline and never resolves', async () => {
  const s = setup();
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  const open = s.target.hold('a');
  s.remove('a');
  const waiting = track(s.reconciler.settled({ timeoutMs: 1000 }));
  await turns();
  s.clock.advance(999);
  await turns();
  assert.equal(waiting.settled, false, 'still waiting before the deadline');
  s.clock.advance(1);
  await turns();
  assert.equal(waiting.settled, true);
  assert.ok(isHeraldError(waiting.error, 'HERALD_RECONCILE_TIMEOUT'), `rejected with ${String(waiting.error)}`);
  assert.equal(waiting.value, undefined, 'never a success');
  open();
  await turns();
});

test('a change that failed is reported by settled() (it is not a success) until a retry succeeds', async () => {
  const s = setup();
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  s.target.failing.add('a');
  s.remove('a');
  assert.deepEqual(await s.reconciler.settled(), { revision: s.revision(), failed: ['a'] });
  assert.equal(s.reconciler.status('a')?.kind, 'error');
  assert.ok(s.target.entries.has('a'), 'the entry is still in the target');
  s.target.failing.clear();
  await turns();
  s.clock.advance(100); // the first backoff
  await turns();
  assert.equal(s.target.entries.has('a'), false);
  assert.deepEqual((await s.reconciler.settled()).failed, []);
});

test('dispose() rejects a pending settled() with HERALD_STOPPED', async () => {
  const s = setup();
  const open = s.target.hold('a');
  s.put({ key: 'a', value: 1 });
  const waiting = track(s.reconciler.settled());
  await turns();
  const disposed = s.reconciler.dispose();
  await turns();
  assert.ok(isHeraldError(waiting.error, 'HERALD_STOPPED'), `rejected with ${String(waiting.error)}`);
  open();
  await disposed;
});
