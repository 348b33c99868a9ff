/**
 * A failing row is retried after delays that double from retryMinMs and stop
 * growing at retryMaxMs: each retry comes exactly when due, not a
 * millisecond earlier (a constant or uncapped delay fails this).
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { setupReconciler, turns } from './fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

test('retry delays of a failing row are exponential and capped: 100, 200, 400, 800, 1000, 1000', async () => {
  const s = setupReconciler({ retryMinMs: 100, retryMaxMs: 1000, fullIntervalMs: 24 * 3_600_000 });
  disposers.push(s.dispose);
  await s.reconciler.settled();
  s.target.failing.add('a');
  s.put({ key: 'a', value: 1 });
  await s.reconciler.settled();
  const attempts = () => s.target.log.filter((e) => e.key === 'a').length;
  assert.equal(attempts(), 1, 'the first write failed');

  for (const [i, expected] of [100, 200, 400, 800, 1000, 1000].entries()) {
    const before = attempts();
    s.clock.advance(expected - 1);
    await turns();
    assert.equal(attempts(), before, `retry ${i + 1} came before ${expected} ms`);
    s.clock.advance(1);
    await turns();
    assert.equal(attempts(), before + 1, `retry ${i + 1} did not come at ${expected} ms`);
    const status = s.reconciler.status('a');
    assert.equal(status?.kind === 'error' ? status.attempts : status?.kind, i + 2, 'still failing, one attempt more');
  }

  // Once the target accepts the write, the row is done and no retry remains.
  s.target.failing.clear();
  s.clock.advance(1000);
  await turns();
  assert.equal(s.reconciler.status('a')?.kind, 'done');
  assert.equal(s.reconciler.health().retrying, 0);
});
