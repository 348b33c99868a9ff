/**
 * Tick-only mode of the generic reconciler (ReconcilerConfig.tickMs): table
 * changes reach the target only on a tick — all of them since the last tick,
 * in one round — never as they commit; without tickMs the same changes are
 * applied at once (the event-driven default, shown side by side).
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { setupReconciler, turns } from './fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

const HOUR = 3_600_000;

test('tick-only: upserts and deletes wait for the next tick, then are applied together in one round', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR, tickMs: 2000 });
  disposers.push(s.dispose);
  await turns();
  assert.equal(s.target.prunes, 1, 'the first tick is at start (the full round of an initialized table)');
  const rounds = s.reconciler.health().partialRounds;

  s.clock.advance(100);
  s.put({ key: 'a', value: 1 });
  await turns();
  s.clock.advance(1000);
  s.put({ key: 'b', value: 2 });
  s.put({ key: 'a', value: 3 });
  await turns();
  s.clock.advance(899); // t = 1999
  await turns();
  assert.equal(s.target.log.length, 0, 'nothing applied between ticks');
  assert.equal(s.reconciler.health().partialRounds, rounds);

  s.clock.advance(1); // t = 2000: the tick
  await s.reconciler.settled({ timeoutMs: 1 });
  assert.deepEqual([...s.target.entries.values()].sort((x, y) => (x.key < y.key ? -1 : 1)), [{ key: 'a', value: 3 }, { key: 'b', value: 2 }]);
  assert.equal(s.reconciler.health().partialRounds, rounds + 1, 'one round for everything since the last tick');
  assert.deepEqual(s.target.log.map((l) => [l.op, l.key, l.value]).sort(), [['update', 'a', 3], ['update', 'b', 2]], 'a key changed twice is applied once, as it is now');

  const before = s.target.log.length;
  s.remove('a');
  s.clock.advance(1999); // t = 3999
  await turns();
  assert.equal(s.target.log.length, before, 'a delete waits for the tick too');
  assert.ok(s.target.entries.has('a'));
  s.clock.advance(1); // t = 4000
  await turns();
  assert.equal(s.target.entries.has('a'), false);
});

test('tick-only: the periodic full round waits for a tick as well', async () => {
  const s = setupReconciler({ fullIntervalMs: 3000, tickMs: 2000 });
  disposers.push(s.dispose);
  await turns();
  assert.equal(s.target.prunes, 1);
  s.target.entries.set('drift', { key: 'drift', value: 0 });
  s.clock.advance(2000); // a tick; the full round is due at 3000
  await turns();
  assert.equal(s.target.prunes, 1);
  s.clock.advance(1500); // t = 3500: the full round is due, but no tick yet
  await turns();
  assert.equal(s.target.prunes, 1);
  s.clock.advance(500); // t = 4000: a tick with the full round due
  await turns();
  assert.equal(s.target.prunes, 2);
  assert.equal(s.target.entries.has('drift'), false);
});

test('event-driven (no tickMs): the same change is applied at once', async () => {
  const s = setupReconciler({ fullIntervalMs: HOUR });
  disposers.push(s.dispose);
  await turns();
  s.clock.advance(100);
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled({ timeoutMs: 1 });
  assert.deepEqual(s.target.log.map((l) => [l.op, l.key]), [['update', 'a']]);
});

test('tickMs must be > 0 when given', () => {
  assert.throws(() => setupReconciler({ tickMs: 0 }), /tickMs must be > 0/);
});
