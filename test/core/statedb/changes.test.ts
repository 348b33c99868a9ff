import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { isHeraldError } from '../../../src/core/errors.js';
import type { Change, StateDB } from '../../../src/core/statedb/index.js';
import { addr, addresses, newDB, type Address } from './fixtures.js';

/** Compact view of a batch: "+key@rev" for upserts, "-key@rev" for deletes. */
function summary(changes: readonly Change<Address>[]): string[] {
  return changes.map((c) => `${c.kind === 'upsert' ? '+' : '-'}${c.row.ip}@${c.revision}`);
}

const dbs: StateDB[] = [];
function trackedDB(): StateDB {
  const db = newDB();
  dbs.push(db);
  return db;
}

// Leak check: every test closes the iterators it opened.
afterEach(() => {
  for (const db of dbs.splice(0)) assert.equal(db.iteratorCount(addresses), 0, 'an iterator was left open');
});

function insert(db: StateDB, ...ips: string[]): void {
  db.update([addresses], (txn) => {
    for (const ip of ips) txn.insert(addresses, addr(ip));
  });
}

function remove(db: StateDB, ...ips: string[]): void {
  db.update([addresses], (txn) => {
    for (const ip of ips) txn.delete(addresses, `${ip}|eth0`);
  });
}

describe('change iterator', () => {
  it('returns every row on the first call, then only deltas', () => {
    const db = trackedDB();
    insert(db, '10.0.0.1', '10.0.0.2');
    const it = addresses.changes(db);
    const first = it.next();
    assert.deepEqual(summary(first.changes), ['+10.0.0.1@1', '+10.0.0.2@1']);
    assert.equal(first.revision, 1);
    assert.deepEqual(it.next().changes, []);

    insert(db, '10.0.0.3');
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1', 'eth0', ['x'])));
    remove(db, '10.0.0.2');
    const delta = it.next();
    assert.deepEqual(summary(delta.changes), ['+10.0.0.3@2', '+10.0.0.1@3', '-10.0.0.2@4']);
    assert.equal(delta.revision, 4);
    it.close();
  });

  it('reports each key once, with its latest state', () => {
    const db = trackedDB();
    const it = db.changes(addresses);
    it.next();
    insert(db, '10.0.0.1');
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1', 'eth0', ['v2'])));
    db.update([addresses], (txn) => txn.insert(addresses, addr('10.0.0.1', 'eth0', ['v3'])));
    const { changes } = it.next();
    assert.equal(changes.length, 1);
    assert.deepEqual(changes[0]?.row.origins, ['v3']);
    it.close();
  });

  it('never misses a delete, even after re-insert and delete between calls', () => {
    const db = trackedDB();
    insert(db, '10.0.0.1');
    const it = db.changes(addresses);
    assert.deepEqual(summary(it.next().changes), ['+10.0.0.1@1']);
    remove(db, '10.0.0.1');
    insert(db, '10.0.0.1');
    remove(db, '10.0.0.1');
    assert.deepEqual(summary(it.next().changes), ['-10.0.0.1@4']);
    // Deleted then re-inserted: the consumer sees the row's new state, not a stale delete.
    insert(db, '10.0.0.1');
    remove(db, '10.0.0.1');
    insert(db, '10.0.0.1');
    assert.deepEqual(summary(it.next().changes), ['+10.0.0.1@7']);
    it.close();
  });

  it('keeps tombstones until every iterator has seen them', () => {
    const db = trackedDB();
    insert(db, '10.0.0.1', '10.0.0.2');
    const fast = db.changes(addresses);
    const slow = db.changes(addresses);
    fast.next();
    slow.next();
    remove(db, '10.0.0.1');
    assert.equal(db.tombstoneCount(addresses), 1);
    assert.deepEqual(summary(fast.next().changes), ['-10.0.0.1@2']);
    assert.equal(db.tombstoneCount(addresses), 1, 'slow has not seen it yet');
    remove(db, '10.0.0.2');
    assert.deepEqual(summary(fast.next().changes), ['-10.0.0.2@3']);
    assert.deepEqual(summary(slow.next().changes), ['-10.0.0.1@2', '-10.0.0.2@3']);
    assert.equal(db.tombstoneCount(addresses), 0);
    fast.close();
    slow.close();
  });

  it('collects tombstones when the lagging iterator closes, and keeps none without iterators', () => {
    const db = trackedDB();
    insert(db, '10.0.0.1', '10.0.0.2');
    remove(db, '10.0.0.1');
    assert.equal(db.tombstoneCount(addresses), 0, 'nobody follows the table');

    const lagging = db.changes(addresses);
    const fresh = db.changes(addresses);
    lagging.next();
    remove(db, '10.0.0.2');
    assert.equal(db.tombstoneCount(addresses), 1, 'needed by lagging');
    assert.deepEqual(summary(fresh.next().changes), [], 'a first call is a full sync: no deletes');
    lagging.close();
    assert.equal(db.tombstoneCount(addresses), 0);
    fresh.close();
  });

  it('does not need tombstones for an iterator that has not started', () => {
    const db = trackedDB();
    insert(db, '10.0.0.1');
    const unstarted = db.changes(addresses);
    remove(db, '10.0.0.1');
    assert.equal(db.tombstoneCount(addresses), 0);
    assert.deepEqual(unstarted.next().changes, []);
    unstarted.close();
  });

  it('throws when used after close', () => {
    const db = trackedDB();
    const it = db.changes(addresses);
    it.dispose();
    it.close();
    assert.throws(() => it.next(), (e) => isHeraldError(e, 'HERALD_TXN'));
  });

  it('wait() resolves when there is something unseen, and on close', async () => {
    const db = trackedDB();
    const it = db.changes(addresses);
    await it.wait(); // unstarted: the full sync is unseen
    it.next();
    let woke = false;
    const waiting = it.wait().then(() => (woke = true));
    await Promise.resolve();
    assert.equal(woke, false);
    insert(db, '10.0.0.1');
    await waiting;
    assert.equal(it.hasUnseen, true);
    it.next();
    const closing = it.wait();
    it.close();
    await closing;
  });

  it('wait() rejects with the abort reason', async () => {
    const db = trackedDB();
    const it = db.changes(addresses);
    it.next();
    const controller = new AbortController();
    const waiting = it.wait(controller.signal);
    controller.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    it.close();
  });

  it('batches() yields the full sync then each non-empty batch until closed', async () => {
    const db = trackedDB();
    insert(db, '10.0.0.1');
    const it = db.changes(addresses);
    const seen: string[][] = [];
    const consumer = (async () => {
      for await (const batch of it.batches()) {
        seen.push(summary(batch.changes));
        if (seen.length === 2) it.close();
      }
    })();
    await new Promise((resolve) => setImmediate(resolve));
    remove(db, '10.0.0.1');
    await consumer;
    assert.deepEqual(seen, [['+10.0.0.1@1'], ['-10.0.0.1@2']]);
  });
});
