/**
 * Property test: random sequences of writes, commits, aborts, snapshots and
 * iterator calls, checked against a plain Map model after every step.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { defineTable, StateDB, type ChangeIterator, type ReadTxn, type WriteTxn } from '../../../src/core/statedb/index.js';

interface Item {
  readonly id: string;
  readonly v: number;
  readonly tags: readonly string[];
}

const items = defineTable({
  name: 'items',
  primaryKey: (item: Item) => item.id,
  indexes: { tag: (item) => item.tags },
});

type Op =
  | { op: 'begin' }
  | { op: 'insert'; id: string; v: number; tags: string[] }
  | { op: 'delete'; id: string }
  | { op: 'deleteAll' }
  | { op: 'commit' }
  | { op: 'abort' }
  | { op: 'open' }
  | { op: 'next'; which: number }
  | { op: 'close'; which: number }
  | { op: 'snapshot' };

const ids = fc.constantFrom('a', 'b', 'c', 'd', 'e');
const tags = fc.subarray(['red', 'green', 'blue']);
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.constant<Op>({ op: 'begin' }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('insert' as const), id: ids, v: fc.nat(3), tags }), weight: 8 },
  { arbitrary: fc.record({ op: fc.constant('delete' as const), id: ids }), weight: 5 },
  { arbitrary: fc.constant<Op>({ op: 'deleteAll' }), weight: 1 },
  { arbitrary: fc.constant<Op>({ op: 'commit' }), weight: 3 },
  { arbitrary: fc.constant<Op>({ op: 'abort' }), weight: 1 },
  { arbitrary: fc.constant<Op>({ op: 'open' }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('next' as const), which: fc.nat(3) }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('close' as const), which: fc.nat(3) }), weight: 1 },
  { arbitrary: fc.constant<Op>({ op: 'snapshot' }), weight: 1 },
);

interface ModelRow {
  row: Item;
  revision: number;
}

interface Follower {
  iterator: ChangeIterator<Item>;
  view: Map<string, Item> | undefined; // what the consumer rebuilt from its batches
  seen: number;
}

function assertMatches(read: ReadTxn, model: ReadonlyMap<string, ModelRow>, revision: number): void {
  const expected = [...model.keys()].sort();
  assert.deepEqual(read.list(items).map((item) => item.id), expected);
  assert.equal(read.count(items), model.size);
  assert.equal(read.revision(items), revision);
  for (const [id, row] of model) assert.deepEqual(read.getWithRevision(items, id), row);
  for (const tag of ['red', 'green', 'blue']) {
    const tagged = expected.filter((id) => model.get(id)?.row.tags.includes(tag));
    assert.deepEqual(read.listBy(items, 'tag', tag).map((item) => item.id), tagged);
  }
}

function run(ops: readonly Op[]): void {
  const db = new StateDB([items]);
  let committed = new Map<string, ModelRow>();
  let revision = 0;
  let txn: { db: WriteTxn; rows: Map<string, Item>; upserted: Set<string> } | undefined;
  const followers: Follower[] = [];
  const snapshots: { read: ReadTxn; rows: Map<string, ModelRow>; revision: number }[] = [];

  for (const step of ops) {
    switch (step.op) {
      case 'begin':
        if (txn) {
          assert.throws(() => db.writeTxn([items]));
          break;
        }
        txn = { db: db.writeTxn([items]), rows: new Map([...committed].map(([id, r]) => [id, r.row])), upserted: new Set() };
        break;
      case 'insert': {
        if (!txn) break;
        const item: Item = { id: step.id, v: step.v, tags: step.tags };
        assert.deepEqual(txn.db.insert(items, item), txn.rows.get(step.id));
        txn.rows.set(step.id, item);
        txn.upserted.add(step.id);
        break;
      }
      case 'delete':
        if (!txn) break;
        assert.deepEqual(txn.db.delete(items, step.id), txn.rows.get(step.id));
        txn.rows.delete(step.id);
        txn.upserted.delete(step.id);
        break;
      case 'deleteAll':
        if (!txn) break;
        assert.equal(txn.db.deleteAll(items), txn.rows.size);
        txn.rows.clear();
        txn.upserted.clear();
        break;
      case 'commit': {
        if (!txn) break;
        txn.db.commit();
        const deleted = [...committed.keys()].some((id) => !txn?.rows.has(id));
        if (txn.upserted.size > 0 || deleted) {
          revision++;
          const next = new Map<string, ModelRow>();
          for (const [id, item] of txn.rows) {
            next.set(id, txn.upserted.has(id) ? { row: item, revision } : (committed.get(id) as ModelRow));
          }
          committed = next;
        }
        txn = undefined;
        break;
      }
      case 'abort':
        txn?.db.abort();
        txn = undefined;
        break;
      case 'open':
        followers.push({ iterator: db.changes(items), view: undefined, seen: 0 });
        break;
      case 'next': {
        const follower = followers[step.which % Math.max(1, followers.length)];
        if (!follower) break;
        const batch = follower.iterator.next();
        const keys = batch.changes.map((change) => change.key);
        assert.equal(new Set(keys).size, keys.length, 'each key at most once');
        const view = follower.view ?? new Map<string, Item>();
        if (follower.view === undefined) assert.ok(batch.changes.every((change) => change.kind === 'upsert'));
        for (const change of batch.changes) {
          assert.ok(change.revision > follower.seen && change.revision <= revision, 'revision in (seen, current]');
          if (change.kind === 'upsert') view.set(change.key, change.row);
          else view.delete(change.key);
        }
        follower.view = view;
        follower.seen = batch.revision;
        assert.equal(batch.revision, revision);
        // Applying the deltas must rebuild exactly the committed state: no missed delete.
        // (assert compares Maps as unordered collections of entries.)
        assert.deepEqual(view, new Map([...committed].map(([id, r]) => [id, r.row] as const)));
        break;
      }
      case 'close': {
        const [follower] = followers.splice(step.which % Math.max(1, followers.length), 1);
        follower?.iterator.close();
        break;
      }
      case 'snapshot':
        snapshots.push({ read: db.readTxn(), rows: new Map(committed), revision });
        break;
    }
    assertMatches(db.readTxn(), committed, revision);
    for (const snapshot of snapshots) assertMatches(snapshot.read, snapshot.rows, snapshot.revision);
    // Tombstones only exist while some started iterator may still need them.
    if (!followers.some((f) => f.view !== undefined)) assert.equal(db.tombstoneCount(items), 0);
  }
  txn?.db.abort();
  for (const follower of followers) follower.iterator.close();
  assert.equal(db.tombstoneCount(items), 0);
}

describe('statedb against a Map model', () => {
  it('agrees on random operation sequences', () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 1, maxLength: 150, size: 'max' }), (ops) => run(ops)),
      { numRuns: 300 },
    );
  });
});
