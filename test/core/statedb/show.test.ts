import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { dumpTable, formatTable } from '../../../src/core/statedb/index.js';
import { addr, addresses, newDB, pools } from './fixtures.js';

describe('inspection', () => {
  it('formats a table as aligned columns sorted by primary key', () => {
    const db = newDB();
    db.update([addresses], (txn) => {
      txn.insert(addresses, addr('198.51.100.7', 'eth0', ['default/svc-a', 'ns/b']));
      txn.insert(addresses, addr('10.0.0.1', 'bond0'));
    });
    assert.equal(
      formatTable(db.readTxn(), addresses),
      [
        'IP            Iface  Origins',
        '10.0.0.1      bond0  default/svc-a',
        '198.51.100.7  eth0   default/svc-a,ns/b',
      ].join('\n'),
    );
  });

  it('falls back to key and JSON columns', () => {
    const db = newDB();
    db.update([pools], (txn) => txn.insert(pools, { name: 'p', cidr: '10.0.0.0/24' }));
    assert.equal(formatTable(db.readTxn(), pools), 'key  row\np    {"name":"p","cidr":"10.0.0.0/24"}');
  });

  it('dumps JSON-serialisable rows with their revisions', () => {
    const db = newDB();
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1')));
    const dump = JSON.parse(JSON.stringify(dumpTable(db.readTxn(), addresses)));
    assert.deepEqual(dump, { table: 'addresses', revision: 1, rows: [{ revision: 1, row: addr('10.0.0.1') }] });
  });
});
