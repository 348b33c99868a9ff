import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import { addr, addresses, keysOf, newDB } from './fixtures.js';

describe('secondary indexes', () => {
  it('look up non-unique, multi-valued values, sorted by primary key', () => {
    const db = newDB();
    db.update([addresses], (txn) => {
      txn.insert(addresses, addr('10.0.0.2', 'eth0', ['ns/a', 'ns/b']));
      txn.insert(addresses, addr('10.0.0.1', 'eth0', ['ns/a']));
      txn.insert(addresses, addr('10.0.0.3', 'eth1', ['ns/b', 'ns/b']));
    });
    const read = db.readTxn();
    assert.deepEqual(keysOf(read.listBy(addresses, 'origin', 'ns/a')), ['10.0.0.1|eth0', '10.0.0.2|eth0']);
    assert.deepEqual(keysOf(read.listBy(addresses, 'origin', 'ns/b')), ['10.0.0.2|eth0', '10.0.0.3|eth1']);
    assert.deepEqual(keysOf(read.listBy(addresses, 'iface', 'eth0')), ['10.0.0.1|eth0', '10.0.0.2|eth0']);
    assert.deepEqual(read.listBy(addresses, 'iface', 'eth9'), []);
  });

  it('are maintained on update and delete', () => {
    const db = newDB();
    db.update([addresses], (txn) => {
      txn.insert(addresses, addr('10.0.0.1', 'eth0', ['ns/a', 'ns/b']));
      txn.insert(addresses, addr('10.0.0.2', 'eth0', ['ns/a']));
    });
    db.update([addresses], (txn) => {
      txn.insert(addresses, addr('10.0.0.1', 'eth0', ['ns/b', 'ns/c']));
      txn.delete(addresses, '10.0.0.2|eth0');
    });
    const read = db.readTxn();
    assert.deepEqual(read.listBy(addresses, 'origin', 'ns/a'), []);
    assert.deepEqual(keysOf(read.listBy(addresses, 'origin', 'ns/b')), ['10.0.0.1|eth0']);
    assert.deepEqual(keysOf(read.listBy(addresses, 'origin', 'ns/c')), ['10.0.0.1|eth0']);
    assert.deepEqual(keysOf(read.listBy(addresses, 'iface', 'eth0')), ['10.0.0.1|eth0']);
  });

  it('reflect uncommitted writes inside the write txn only', () => {
    const db = newDB();
    const txn = db.writeTxn([addresses]);
    txn.insert(addresses, addr('10.0.0.1', 'eth0', ['ns/a']));
    assert.equal(txn.listBy(addresses, 'origin', 'ns/a').length, 1);
    assert.equal(db.readTxn().listBy(addresses, 'origin', 'ns/a').length, 0);
    txn.abort();
    assert.equal(db.readTxn().listBy(addresses, 'origin', 'ns/a').length, 0);
  });

  it('reject an unknown index name', () => {
    const db = newDB();
    // @ts-expect-error: 'nope' is not an index of addresses
    assert.throws(() => db.readTxn().listBy(addresses, 'nope', 'x'), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
  });
});
