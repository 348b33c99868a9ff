/**
 * `herald status` shows why a row is not in the kernel: per-row errors and
 * pending rows come from the reconcile-status table (issue 10), in the JSON
 * document and in the text rendering.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { buildStatus, renderStatus } from '../../src/api/status.js';
import { setupReconciler, turns } from '../core/reconciler/fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

function statusOf(rowsNotDone: Parameters<typeof buildStatus>[0]['rowsNotDone']) {
  const emptyMap = { entries: () => [], lookup: () => undefined };
  return buildStatus({
    config: { node: 'n1', store: 'local', datapath: { pinDir: '/pins/n1' } },
    startedAt: 0,
    controlPlane: { node: 'n1', snapshotLoaded: true, ipamState: { generation: 0, source: 'file' }, candidates: [], ownership: { owned: new Set(), owners: new Map() } },
    reconciler: undefined,
    rowsNotDone,
    table: [],
    datapath: { maps: { responders: emptyMap, config: emptyMap }, map: { capacity: 16 } },
    garp: { sent: 0, failed: 0 },
    now: 0n,
  } as unknown as Parameters<typeof buildStatus>[0]);
}

test('a failing row is shown with its reconciler, error and attempts; a row in flight as pending', async () => {
  const s = setupReconciler();
  disposers.push(s.dispose);
  s.target.failing.add('198.51.100.7|eth0');
  s.put({ key: '198.51.100.7|eth0', value: 1 });
  const rev = s.revision();
  assert.equal((await s.reconciler.waitForRow('198.51.100.7|eth0', rev)).kind, 'error');
  // Statuses are published once per round: the held row goes in a round of its own.
  s.target.hold('198.51.100.8|eth0');
  s.put({ key: '198.51.100.8|eth0', value: 1 });
  await turns();
  assert.ok(s.target.held.has('198.51.100.8|eth0'));

  const st = statusOf(s.reconciler.notDone());
  const json = JSON.parse(JSON.stringify(st)) as typeof st;
  assert.deepEqual(json.rowErrors, [
    { reconciler: 'test', key: '198.51.100.7|eth0', op: 'upsert', revision: rev, error: 'update 198.51.100.7|eth0: injected failure', attempts: 1, since: new Date(0).toISOString() },
  ]);
  assert.deepEqual(json.rowsPending, [{ reconciler: 'test', key: '198.51.100.8|eth0', op: 'upsert', revision: rev + 1 }]);
  const text = renderStatus(st);
  assert.match(text, /rows pending: 1/);
  assert.match(text, /rows in error \(1\):/);
  assert.match(text, /test\s+198\.51\.100\.7\|eth0\s+upsert\s+\d+\s+1\s+\S+\s+update 198\.51\.100\.7\|eth0: injected failure/);
});

test('nothing not done: no row section at all', () => {
  const st = statusOf([]);
  assert.deepEqual(st.rowErrors, []);
  assert.deepEqual(st.rowsPending, []);
  assert.doesNotMatch(renderStatus(st), /rows (pending|in error)/);
});
