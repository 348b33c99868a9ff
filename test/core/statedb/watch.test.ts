import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import { addr, addresses, newDB, pools } from './fixtures.js';

/** Whether `promise` has settled once pending microtasks and I/O callbacks ran. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe('watch', () => {
  it('resolves at the next commit that changes the table, not before', async () => {
    const db = newDB();
    const watching = db.watch(addresses);
    db.update([pools], (txn) => txn.insert(pools, { name: 'p', cidr: '' }));
    db.update([addresses], (txn) => txn.delete(addresses, 'absent'));
    assert.equal(await settled(watching), false, 'other tables and no-op commits do not count');
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1')));
    assert.equal(await settled(watching), true);
  });

  it('does not fire on abort', async () => {
    const db = newDB();
    const watching = db.watch(addresses);
    const txn = db.writeTxn([addresses]);
    txn.insert(addresses, addr('10.0.0.1'));
    txn.abort();
    assert.equal(await settled(watching), false);
  });

  it('rejects when its signal aborts, including one already aborted', async () => {
    const db = newDB();
    const controller = new AbortController();
    const watching = db.watch(addresses, controller.signal);
    controller.abort(new Error('cancelled'));
    await assert.rejects(watching, /cancelled/);
    await assert.rejects(db.watch(addresses, controller.signal), /cancelled/);
  });

  it('waitForRevision does not miss a commit made before the call', async () => {
    const db = newDB();
    const revision = db.readTxn().revision(addresses);
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1')));
    await db.waitForRevision(addresses, revision);
    const later = db.waitForRevision(addresses, revision + 1);
    assert.equal(await settled(later), false);
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.2')));
    assert.equal(await settled(later), true);
  });
});

describe('initializers', () => {
  it('a table without initializers is initialized', async () => {
    const db = newDB();
    assert.equal(db.isInitialized(pools), true);
    await db.whenInitialized(pools);
  });

  it('is initialized once every registered initializer is done', async () => {
    const db = newDB();
    const yaml = db.registerInitializer(addresses, 'yaml');
    const etcd = db.registerInitializer(addresses, 'etcd');
    const ready = db.whenInitialized(addresses);
    assert.equal(db.isInitialized(addresses), false);
    assert.deepEqual(db.pendingInitializers(addresses), ['etcd', 'yaml']);
    yaml.done();
    yaml.done();
    assert.equal(await settled(ready), false);
    assert.deepEqual(db.pendingInitializers(addresses), ['etcd']);
    etcd.done();
    assert.equal(await settled(ready), true);
    assert.equal(db.isInitialized(addresses), true);
  });

  it('refuses a duplicate name and registration after the table was seen initialized', () => {
    const db = newDB();
    db.registerInitializer(addresses, 'yaml');
    assert.throws(() => db.registerInitializer(addresses, 'yaml'), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
    assert.equal(db.isInitialized(pools), true);
    assert.throws(() => db.registerInitializer(pools, 'late'), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
  });

  it('whenInitialized honours its signal', async () => {
    const db = newDB();
    db.registerInitializer(addresses, 'k8s');
    const controller = new AbortController();
    const ready = db.whenInitialized(addresses, controller.signal);
    controller.abort(new Error('shutdown'));
    await assert.rejects(ready, /shutdown/);
  });
});
