/**
 * Bad use of the state database is refused with a coded error that names the
 * table, index or initializer, and leaves the database as it was.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError, type HeraldErrorCode } from '../../../src/core/errors.js';
import { defineTable, StateDB } from '../../../src/core/statedb/index.js';
import { addr, addresses, newDB, pools } from './fixtures.js';

const coded = (code: HeraldErrorCode, text: RegExp) => (e: unknown) => isHeraldError(e, code) && text.test((e as Error).message);

test('defineTable refuses a table without a name, or with columns but no toColumns', () => {
  assert.throws(() => defineTable<{ k: string }>({ name: '', primaryKey: (r) => r.k }), coded('HERALD_BAD_ARGUMENT', /a table needs a name/));
  assert.throws(
    () => defineTable<{ k: string }>({ name: 'half', primaryKey: (r) => r.k, columns: ['k'] }),
    coded('HERALD_BAD_ARGUMENT', /defineTable\(half\): give both columns and toColumns, or neither/),
  );
});

test('a primary key that is not a string, and an index that does not exist, are refused by name', () => {
  const odd = defineTable<{ k: number }>({ name: 'odd', primaryKey: (r) => r.k as unknown as string });
  assert.throws(() => odd.primaryKey({ k: 1 }), coded('HERALD_BAD_ARGUMENT', /table odd: primaryKey returned number, not a string/));
  assert.throws(() => addresses.indexValues('nope' as 'iface', addr('192.0.2.1')), coded('HERALD_BAD_ARGUMENT', /table addresses has no index "nope"/));
  const db = newDB();
  assert.throws(() => db.readTxn().listBy(addresses, 'nope' as 'iface', 'x'), coded('HERALD_BAD_ARGUMENT', /table addresses has no index "nope"/));
});

test('an index function that repeats a value counts the row once under it', () => {
  const tagged = defineTable<{ k: string; tags: string[] }>({ name: 'tagged', primaryKey: (r) => r.k, indexes: { tag: (r) => r.tags } });
  assert.deepEqual(tagged.indexValues('tag', { k: 'a', tags: ['x', 'x', 'y', 'x'] }), ['x', 'y']);
  const db = new StateDB([tagged]);
  db.update([tagged], (t) => t.insert(tagged, { k: 'a', tags: ['x', 'x'] }));
  assert.deepEqual(db.readTxn().listBy(tagged, 'tag', 'x').map((r) => r.k), ['a']);
});

test('registering a table: the same definition twice is fine, another one of the same name is refused', () => {
  const db = newDB();
  assert.doesNotThrow(() => db.registerTable(addresses));
  const impostor = defineTable<{ k: string }>({ name: 'addresses', primaryKey: (r) => r.k });
  assert.throws(() => db.registerTable(impostor), coded('HERALD_BAD_ARGUMENT', /another table named addresses is already registered/));
  assert.throws(() => db.readTxn().list(impostor), coded('HERALD_BAD_ARGUMENT', /table addresses is not registered in this database/));
  const stranger = defineTable<{ k: string }>({ name: 'stranger', primaryKey: (r) => r.k });
  assert.throws(() => db.update([stranger as never], () => {}), coded('HERALD_BAD_ARGUMENT', /table stranger is not registered in this database/));
});

test('one writer at a time; an async update callback is refused and nothing it wrote is kept', async () => {
  const db = newDB();
  const txn = db.writeTxn([pools]);
  assert.throws(() => db.writeTxn([pools]), coded('HERALD_TXN', /another write transaction is open/));
  txn.abort();
  assert.throws(
    () =>
      db.update([pools], async (t) => {
        t.insert(pools, { name: 'p', cidr: '192.0.2.0/24' });
      }),
    coded('HERALD_TXN', /db.update\(\) callback returned a promise; it must be synchronous/),
  );
  assert.equal(db.readTxn().get(pools, 'p'), undefined);
  assert.doesNotThrow(() => db.update([pools], () => {}), 'the writer was released');
  // A callback that commits or aborts the txn itself is left alone.
  db.update([pools], (t) => {
    t.insert(pools, { name: 'q', cidr: '198.51.100.0/24' });
    t.commit();
  });
  assert.notEqual(db.readTxn().get(pools, 'q'), undefined);
  assert.throws(() =>
    db.update([pools], (t) => {
      t.abort();
      throw new Error('after abort');
    }),
  /after abort/);
});

test('initializers: a duplicate pending one and one registered after the table was seen initialized are refused; done() is idempotent', async () => {
  const db = newDB();
  const a = db.registerInitializer(pools, 'files');
  const b = db.registerInitializer(pools, 'etcd');
  assert.throws(() => db.registerInitializer(pools, 'files'), coded('HERALD_BAD_ARGUMENT', /table pools already has a pending initializer "files"/));
  a.done();
  a.done();
  assert.equal(db.isInitialized(pools), false, 'etcd is still pending: a second done() of files does not count for it');
  let woke = false;
  void db.whenInitialized(pools).then(() => (woke = true));
  await new Promise((r) => setImmediate(r));
  assert.equal(woke, false);
  b.done();
  await new Promise((r) => setImmediate(r));
  assert.equal(woke, true);
  assert.equal(db.isInitialized(pools), true);
  assert.throws(() => db.registerInitializer(pools, 'late'), coded('HERALD_BAD_ARGUMENT', /table pools is already initialized; register initializer "late" before anyone reads it/));
});

test('a closed change iterator refuses to be read, naming its table', () => {
  const db = newDB();
  const it = db.changes(pools);
  it.close();
  assert.throws(() => it.next(), coded('HERALD_TXN', /change iterator on table pools is closed/));
});
