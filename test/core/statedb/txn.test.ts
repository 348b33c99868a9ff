import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import { defineTable, StateDB } from '../../../src/core/statedb/index.js';
import { addr, addresses, keysOf, newDB, pools } from './fixtures.js';

const isTxnError = (e: unknown): boolean => isHeraldError(e, 'HERALD_TXN');

describe('write transactions', () => {
  it('inserts, upserts and deletes by row or key', () => {
    const db = newDB();
    const txn = db.writeTxn([addresses]);
    assert.equal(txn.insert(addresses, addr('10.0.0.1')), undefined);
    const replaced = txn.insert(addresses, addr('10.0.0.1', 'eth0', ['ns/other']));
    assert.deepEqual(replaced, addr('10.0.0.1'));
    txn.insert(addresses, addr('10.0.0.2'));
    txn.insert(addresses, addr('10.0.0.3'));
    assert.deepEqual(txn.delete(addresses, addr('10.0.0.2')), addr('10.0.0.2'));
    assert.deepEqual(txn.delete(addresses, '10.0.0.3|eth0'), addr('10.0.0.3'));
    assert.equal(txn.delete(addresses, 'nope'), undefined);
    assert.equal(txn.count(addresses), 1, 'a write txn reads its own writes');
    txn.commit();

    const read = db.readTxn();
    assert.deepEqual(read.get(addresses, '10.0.0.1|eth0'), addr('10.0.0.1', 'eth0', ['ns/other']));
    assert.equal(read.count(addresses), 1);
  });

  it('freezes rows on insert', () => {
    const db = newDB();
    const row = addr('10.0.0.1');
    db.update([addresses], (txn) => txn.insert(addresses, row));
    assert.ok(Object.isFrozen(row));
    assert.ok(Object.isFrozen(db.readTxn().getWithRevision(addresses, '10.0.0.1|eth0')));
  });

  it('deleteAll empties the table and reports how many rows went', () => {
    const db = newDB();
    db.update([addresses], (txn) => {
      for (let i = 0; i < 100; i++) txn.insert(addresses, addr(`10.0.0.${i}`));
    });
    assert.equal(db.update([addresses], (txn) => txn.deleteAll(addresses)), 100);
    assert.equal(db.readTxn().count(addresses), 0);
    assert.deepEqual(db.readTxn().listBy(addresses, 'iface', 'eth0'), []);
  });

  it('commits atomically across tables; abort leaves nothing', () => {
    const db = newDB();
    const aborted = db.writeTxn([addresses, pools]);
    aborted.insert(addresses, addr('10.0.0.1'));
    aborted.insert(pools, { name: 'p', cidr: '10.0.0.0/24' });
    aborted.abort();
    const empty = db.readTxn();
    assert.equal(empty.count(addresses) + empty.count(pools), 0);
    assert.equal(db.globalRevision, 0);

    const txn = db.writeTxn([addresses, pools]);
    txn.insert(addresses, addr('10.0.0.1'));
    assert.equal(db.readTxn().count(addresses), 0, 'uncommitted writes are invisible');
    txn.insert(pools, { name: 'p', cidr: '10.0.0.0/24' });
    txn.commit();
    const after = db.readTxn();
    assert.equal(after.count(addresses), 1);
    assert.equal(after.count(pools), 1);
    assert.equal(after.globalRevision, 1);
  });

  it('allows one writer at a time', () => {
    const db = newDB();
    const first = db.writeTxn([addresses]);
    assert.throws(() => db.writeTxn([pools]), isTxnError);
    first.commit();
    db.writeTxn([pools]).abort();
  });

  it('refuses any use of a finished txn', () => {
    const db = newDB();
    const committed = db.writeTxn([addresses]);
    committed.commit();
    assert.throws(() => committed.insert(addresses, addr('10.0.0.1')), isTxnError);
    assert.throws(() => committed.get(addresses, 'x'), isTxnError);
    assert.throws(() => committed.commit(), isTxnError);
    assert.throws(() => committed.abort(), isTxnError);
    const aborted = db.writeTxn([addresses]);
    aborted.abort();
    assert.throws(() => aborted.list(addresses), isTxnError);
    assert.equal(aborted.isOpen, false);
  });

  it('refuses writes to a table the txn did not lock, and unknown tables', () => {
    const db = newDB();
    const txn = db.writeTxn([addresses]);
    assert.throws(() => txn.insert(pools, { name: 'p', cidr: '' }), isTxnError);
    assert.equal(txn.count(pools), 0, 'reads of other tables are fine');
    txn.abort();
    const stranger = defineTable<{ id: string }>({ name: 'stranger', primaryKey: (r) => r.id });
    assert.throws(() => db.writeTxn([stranger]), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
    const twin = defineTable<{ id: string }>({ name: 'pools', primaryKey: (r) => r.id });
    assert.throws(() => db.readTxn().count(twin), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
  });

  it('a throwing index function leaves the txn as it was', () => {
    const fragile = defineTable<{ id: string; bad?: boolean }>({
      name: 'fragile',
      primaryKey: (r) => r.id,
      indexes: {
        flag: (r) => {
          if (r.bad) throw new Error('bad row');
          return 'ok';
        },
      },
    });
    const db = new StateDB([fragile]);
    const txn = db.writeTxn([fragile]);
    txn.insert(fragile, { id: 'a' });
    assert.throws(() => txn.insert(fragile, { id: 'a', bad: true }), /bad row/);
    assert.deepEqual(txn.get(fragile, 'a'), { id: 'a' });
    assert.deepEqual(txn.listBy(fragile, 'flag', 'ok'), [{ id: 'a' }]);
    txn.commit();
  });
});

describe('db.update', () => {
  it('commits when fn returns and passes its result through', () => {
    const db = newDB();
    const n = db.update([addresses], (txn) => {
      txn.insert(addresses, addr('10.0.0.1'));
      return 42;
    });
    assert.equal(n, 42);
    assert.equal(db.readTxn().count(addresses), 1);
  });

  it('aborts and rethrows when fn throws, and frees the writer', () => {
    const db = newDB();
    const boom = new Error('boom');
    assert.throws(
      () =>
        db.update([addresses], (txn) => {
          txn.insert(addresses, addr('10.0.0.1'));
          throw boom;
        }),
      (e) => e === boom,
    );
    assert.equal(db.readTxn().count(addresses), 0);
    db.update([addresses], () => undefined);
  });

  it('rejects an async fn instead of committing before it finishes', () => {
    const db = newDB();
    assert.throws(() => db.update([addresses], async () => undefined), isTxnError);
    assert.equal(db.readTxn().count(addresses), 0);
  });
});

describe('revisions', () => {
  it('bumps the table and global revisions once per changing commit', () => {
    const db = newDB();
    db.update([addresses], (txn) => {
      txn.insert(addresses, addr('10.0.0.1'));
      txn.insert(addresses, addr('10.0.0.2'));
    });
    let read = db.readTxn();
    assert.equal(read.revision(addresses), 1);
    assert.equal(read.revision(pools), 0);
    assert.equal(read.getWithRevision(addresses, '10.0.0.2|eth0')?.revision, 1);

    db.update([addresses, pools], (txn) => {
      txn.insert(addresses, addr('10.0.0.2', 'eth1'));
      txn.insert(pools, { name: 'p', cidr: '' });
    });
    read = db.readTxn();
    assert.equal(read.revision(addresses), 2);
    assert.equal(read.revision(pools), 1);
    assert.equal(read.globalRevision, 2);
    assert.equal(read.getWithRevision(addresses, '10.0.0.1|eth0')?.revision, 1, 'untouched rows keep theirs');
    assert.equal(read.getWithRevision(addresses, '10.0.0.2|eth1')?.revision, 2);
  });

  it('does not bump revisions for a commit that changed nothing', () => {
    const db = newDB();
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1')));
    db.update([addresses, pools], (txn) => {
      txn.delete(addresses, 'absent');
      txn.deleteAll(pools);
      // Born and deleted inside one txn: no net change.
      txn.insert(addresses, addr('10.0.0.9'));
      txn.delete(addresses, addr('10.0.0.9'));
    });
    db.writeTxn([addresses]).commit();
    const read = db.readTxn();
    assert.equal(read.revision(addresses), 1);
    assert.equal(read.revision(pools), 0);
    assert.equal(read.globalRevision, 1);
  });
});

describe('read transactions', () => {
  it('see one snapshot however many commits follow', () => {
    const db = newDB();
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1')));
    const held = db.readTxn();
    db.update([addresses, pools], (txn) => {
      txn.insert(addresses, addr('10.0.0.1', 'eth0', ['changed']));
      txn.insert(addresses, addr('10.0.0.2'));
      txn.insert(pools, { name: 'p', cidr: '' });
    });
    db.update([addresses], (txn) => txn.delete(addresses, '10.0.0.1|eth0'));
    assert.deepEqual(held.list(addresses), [addr('10.0.0.1')]);
    assert.deepEqual(held.listBy(addresses, 'origin', 'default/svc-a'), [addr('10.0.0.1')]);
    assert.equal(held.count(pools), 0);
    assert.equal(held.revision(addresses), 1);
    assert.deepEqual(keysOf(db.readTxn().list(addresses)), ['10.0.0.2|eth0']);
  });

  it('lists sorted by primary key', () => {
    const db = newDB();
    db.update([addresses], (txn) => {
      for (const ip of ['10.0.0.3', '10.0.0.1', '10.0.0.2']) txn.insert(addresses, addr(ip));
      txn.insert(addresses, addr('10.0.0.1', 'bond0'));
    });
    assert.deepEqual(keysOf(db.readTxn().list(addresses)), ['10.0.0.1|bond0', '10.0.0.1|eth0', '10.0.0.2|eth0', '10.0.0.3|eth0']);
  });
});
