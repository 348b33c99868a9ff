/**
 * Change tracking: iterators that hand a consumer every upsert and delete
 * committed since its previous call, and the graveyard that keeps deleted rows
 * until every iterator has seen them.
 *
 * An iterator is a cursor (the table revision it has seen), not a queue: on
 * next() it reads the rows and tombstones written after that revision, so each
 * key appears once with its latest state and a slow consumer costs no memory
 * beyond the tombstones it has not read yet.
 */
import { OrderedMap } from 'immutable';
import { HeraldError } from '../errors.js';
import type { Disposable } from '../disposable.js';
import type { RowMap, StoredRow, TableRoot } from './table-root.js';
import { Waiters, waitUntil } from './waiters.js';

export interface Change<Row> {
  readonly kind: 'upsert' | 'delete';
  readonly key: string;
  readonly row: Row;
  /** The table revision of the write (for a delete, of the deleting commit). */
  readonly revision: number;
}

export interface ChangeBatch<Row> {
  /** In revision order; each key at most once. */
  readonly changes: readonly Change<Row>[];
  /** The table revision this batch brings the consumer up to. */
  readonly revision: number;
}

/** Deleted rows of one table, in delete order, kept while some iterator still needs them. */
export class Graveyard<Row> {
  private tombstones: RowMap<Row> = OrderedMap();
  private readonly iterators = new Set<ChangeIterator<Row>>();

  get size(): number {
    return this.tombstones.size;
  }

  get followers(): number {
    return this.iterators.size;
  }

  follow(iterator: ChangeIterator<Row>): void {
    this.iterators.add(iterator);
  }

  unfollow(iterator: ChangeIterator<Row>): void {
    this.iterators.delete(iterator);
    this.collect();
  }

  /** Records a commit: buries its tombstones and exhumes re-inserted keys, then wakes iterators. */
  recordCommit(tombstones: ReadonlyMap<string, StoredRow<Row>>, upserted: ReadonlySet<string>): void {
    this.tombstones = this.tombstones.withMutations((graves) => {
      // A re-inserted key is live again: its old tombstone must not be reported after the upsert.
      if (graves.size <= upserted.size) {
        for (const key of [...graves.keys()]) if (upserted.has(key)) graves.remove(key);
      } else {
        for (const key of upserted) graves.remove(key);
      }
      // With no iterator nobody needs tombstones: a new iterator starts with a full sync.
      if (this.iterators.size === 0) return;
      for (const [key, stored] of tombstones) graves.remove(key).set(key, stored);
    });
    this.collect();
    for (const iterator of this.iterators) iterator.notify();
  }

  /** Tombstones written after `revision`, oldest first. */
  deletedSince(revision: number): Change<Row>[] {
    return writtenSince(this.tombstones, revision, 'delete');
  }

  /** Drops the tombstones every iterator has already seen. */
  collect(): void {
    if (this.tombstones.size === 0) return;
    let seenByAll = Infinity;
    for (const iterator of this.iterators) seenByAll = Math.min(seenByAll, iterator.floor);
    if (seenByAll === Infinity) {
      this.tombstones = OrderedMap();
      return;
    }
    const done: string[] = [];
    this.tombstones.forEach((stored, key) => {
      if (stored.revision > seenByAll) return false;
      done.push(key);
      return true;
    });
    if (done.length > 0) this.tombstones = this.tombstones.removeAll(done);
  }
}

/** What an iterator reads from the database for its table. */
export interface ChangeSource<Row> {
  readonly tableName: string;
  currentRoot(): TableRoot<Row>;
  readonly graveyard: Graveyard<Row>;
}

export class ChangeIterator<Row> implements Disposable {
  // undefined until the first next(), which is a full sync and needs no tombstones.
  private seen: number | undefined;
  private closed = false;
  private readonly changed = new Waiters();

  constructor(private readonly source: ChangeSource<Row>) {
    source.graveyard.follow(this);
  }

  /** The revision up to which this iterator has seen every tombstone. */
  get floor(): number {
    return this.seen ?? Infinity;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Whether next() would report something (always true before the first call). */
  get hasUnseen(): boolean {
    return this.seen === undefined || this.source.currentRoot().revision > this.seen;
  }

  /** Everything committed since the previous call; the first call returns every row as an upsert. */
  next(): ChangeBatch<Row> {
    this.assertOpen();
    const root = this.source.currentRoot();
    const changes = this.seen === undefined ? allRows(root.rows) : this.changesSince(root, this.seen);
    this.seen = root.revision;
    this.source.graveyard.collect();
    return { changes, revision: root.revision };
  }

  /** Resolves when next() has something to report, or when the iterator is closed. */
  async wait(signal?: AbortSignal): Promise<void> {
    this.assertOpen();
    await waitUntil(this.changed, () => this.closed || this.hasUnseen, signal);
  }

  /** The batches as an async iterable: the first (full) batch, then every non-empty one. */
  async *batches(signal?: AbortSignal): AsyncGenerator<ChangeBatch<Row>, void, undefined> {
    let first = true;
    while (!this.closed) {
      await this.wait(signal);
      if (this.closed) return;
      const batch = this.next();
      if (first || batch.changes.length > 0) yield batch;
      first = false;
    }
  }

  /** @internal Called by the graveyard after a commit changed the table. */
  notify(): void {
    this.changed.wakeAll();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.source.graveyard.unfollow(this);
    this.changed.wakeAll();
  }

  dispose(): void {
    this.close();
  }

  private changesSince(root: TableRoot<Row>, revision: number): Change<Row>[] {
    return mergeByRevision(writtenSince(root.rows, revision, 'upsert'), this.source.graveyard.deletedSince(revision));
  }

  private assertOpen(): void {
    if (this.closed) throw new HeraldError('HERALD_TXN', `change iterator on table ${this.source.tableName} is closed`);
  }
}

function allRows<Row>(rows: RowMap<Row>): Change<Row>[] {
  const changes: Change<Row>[] = [];
  rows.forEach((stored, key) => {
    changes.push({ kind: 'upsert', key, row: stored.row, revision: stored.revision });
  });
  return changes;
}

/**
 * The entries of `rows` written after `revision`, oldest first. Rows (and
 * tombstones) are kept in revision order, so the scan starts at the newest
 * and stops at the first one already seen.
 */
function writtenSince<Row>(rows: RowMap<Row>, revision: number, kind: Change<Row>['kind']): Change<Row>[] {
  const found: Change<Row>[] = [];
  rows
    .toSeq()
    .reverse()
    .forEach((stored, key) => {
      if (stored.revision <= revision) return false;
      found.push({ kind, key, row: stored.row, revision: stored.revision });
      return true;
    });
  return found.reverse();
}

function mergeByRevision<Row>(a: Change<Row>[], b: Change<Row>[]): Change<Row>[] {
  if (b.length === 0) return a;
  if (a.length === 0) return b;
  const merged: Change<Row>[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const left = a[i];
    const right = b[j];
    if (right === undefined || (left !== undefined && left.revision <= right.revision)) {
      merged.push(left as Change<Row>);
      i++;
    } else {
      merged.push(right);
      j++;
    }
  }
  return merged;
}
