/**
 * A failed row is retried with backoff, but a retry never writes back a row
 * that was deleted from the table meanwhile: a withdrawn IP must stay
 * withdrawn (the next owner may already answer for it).
 */
import { FakeMulticastGroups } from '../../../src/os/fake/multicast-groups.js';
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { HeraldError } from '../../../src/core/errors.js';
import { silentLogger } from '../../../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../../../src/core/reconciler/reconciler.js';
import { StateDB } from '../../../src/core/statedb/index.js';
import { FakeLinks } from '../../../src/os/fake/links.js';
import { GarpAnnouncer, type FrameSender } from '../../../src/datapath/garp.js';
import { L2ResponderOps } from '../../../src/datapath/l2-responder/reconcile-ops.js';
import { FakeResponderMap } from '../../../src/datapath/l2-responder/responder-map.js';
import { l2AnnounceKey, l2AnnounceTable, type L2AnnounceRow } from '../../../src/datapath/tables/l2-announce.js';
import { ManualClock } from '../../helpers/manual-clock.js';
import { setupReconciler, turns } from './fixtures.js';

const disposers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const d of disposers.splice(0)) await d();
});

test('a failed row deleted before its retry is due is never written back to the responder map', async () => {
  const clock = new ManualClock();
  const db = new StateDB([l2AnnounceTable]);
  const map = new FakeResponderMap();
  const links = new FakeLinks();
  const eth0 = links.add('eth0');
  const sender: FrameSender = { send: () => {} };
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 1, intervalMs: 1000 });
  const ops = new L2ResponderOps({ map, interfaces: { prepare: () => {}, forgetAllBut: () => {} }, links, garp, groups: new FakeMulticastGroups(), log: silentLogger });
  db.registerInitializer(l2AnnounceTable, 'test').done();
  const reconciler = new Reconciler<L2AnnounceRow>({ name: 'l2-responder', db, table: l2AnnounceTable, ops, clock, log: silentLogger }, reconcilerDefaults);
  reconciler.start();
  disposers.push(() => reconciler.dispose());
  await reconciler.settled();

  const row: L2AnnounceRow = { ip: '198.51.100.40', iface: 'eth0', origins: ['service:default/web'] };
  const key = l2AnnounceKey(row.ip, row.iface);
  map.failWrites = { count: 1, error: new HeraldError('HERALD_BPF_MAP', 'update in responder_v4: EAGAIN') };
  db.update([l2AnnounceTable], (t) => t.insert(l2AnnounceTable, row));
  await reconciler.settled();
  assert.equal(reconciler.status(key)?.kind, 'error', 'the write failed');
  assert.equal(reconciler.health().retrying, 1, 'and is queued for a retry with backoff');

  // Ownership moves away before the retry is due: the row is deleted.
  db.update([l2AnnounceTable], (t) => t.delete(l2AnnounceTable, row));
  await reconciler.settled();
  assert.equal(reconciler.health().retrying, 0, 'the delete supersedes the pending retry');
  assert.equal(reconciler.status(key), undefined, 'no stale error status is left for a row nobody wants');

  // Long past every backoff: nothing brings the entry back.
  for (let i = 0; i < 20; i++) {
    clock.advance(reconcilerDefaults.retryMaxMs);
    await turns();
  }
  assert.deepEqual(map.keys(), [], `entry resurrected: ${JSON.stringify(map.keys())} (ifindex ${eth0.ifindex})`);
});

test('a retry that comes due while another retry is in flight retries what the table holds now, not the stale row', async () => {
  const s = setupReconciler({ retryMinMs: 100 });
  disposers.push(s.dispose);
  await s.reconciler.settled();
  s.target.failing.add('a').add('b');
  s.put({ key: 'a', value: 1 }, { key: 'b', value: 1 });
  await s.reconciler.settled();
  assert.equal(s.reconciler.health().retrying, 2);
  s.target.failing.clear();
  await turns(); // the loop parks with its retry timer armed

  // Both retries are due; a's holds the loop while b is deleted from the table.
  const openA = s.target.hold('a');
  s.clock.advance(100);
  await turns();
  assert.ok(s.target.held.has('a'), "a's retry is in flight");
  s.remove('b');
  const deletedAt = s.revision();
  openA();
  await s.reconciler.settled();
  await turns();

  const staleWrites = s.target.log.filter((e) => e.key === 'b' && e.op === 'update' && e.tableRevision >= deletedAt);
  assert.deepEqual(staleWrites, [], 'b was written back after it had been deleted from the table');
  assert.deepEqual([...s.target.entries.keys()], ['a']);
  assert.equal(s.reconciler.health().retrying, 0);
});

test('a retry of a row updated meanwhile writes the newer row', async () => {
  const s = setupReconciler({ retryMinMs: 100 });
  disposers.push(s.dispose);
  await s.reconciler.settled();
  s.target.failing.add('a').add('b');
  s.put({ key: 'a', value: 1 }, { key: 'b', value: 1 });
  await s.reconciler.settled();
  s.target.failing.clear();
  await turns();
  const openA = s.target.hold('a');
  s.clock.advance(100);
  await turns();
  assert.ok(s.target.held.has('a'), "a's retry is in flight");
  s.put({ key: 'b', value: 2 });
  const updatedAt = s.revision();
  openA();
  await s.reconciler.settled();
  await turns();
  assert.equal(s.target.entries.get('b')?.value, 2);
  const staleWrites = s.target.log.filter((e) => e.key === 'b' && e.value !== 2 && e.tableRevision >= updatedAt);
  assert.deepEqual(staleWrites, [], 'the old row was written after the newer one was committed');
});
