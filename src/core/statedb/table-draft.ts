/**
 * The write path of one table inside a write transaction.
 *
 * A draft starts from the committed root turned into a mutable copy
 * (Immutable's asMutable): writes edit only nodes created by this transaction,
 * so the root that readers hold is never touched and a 100k-row transaction
 * does not copy the table. seal() turns the copy back into an immutable root.
 */
import { Set as ImmutableSet } from 'immutable';
import { TableRoot } from './table-root.js';
import type { RowMap, SecondaryIndex, StoredRow, TableView } from './table-root.js';
import type { Table } from './table.js';

export class TableDraft<Row> implements TableView<Row> {
  rows: RowMap<Row>;
  readonly indexes = new Map<string, SecondaryIndex>();
  /** The revision every row written by this transaction carries. */
  readonly nextRevision: number;
  /** Keys whose net effect in this transaction is an upsert. */
  readonly upserted = new Set<string>();
  /** Keys that existed before this transaction and are gone after it, with their last row. */
  readonly tombstones = new Map<string, StoredRow<Row>>();
  // Per index, the key sets this draft has made mutable; sealed at commit.
  private readonly ownedSets = new Map<string, Map<string, ImmutableSet<string>>>();

  constructor(
    readonly table: Table<Row>,
    readonly base: TableRoot<Row>,
  ) {
    this.rows = base.rows.asMutable();
    for (const [name, index] of base.indexes) this.indexes.set(name, index.asMutable());
    this.nextRevision = base.revision + 1;
  }

  get revision(): number {
    return this.base.revision;
  }

  /** Whether committing would change the table; an unchanged table keeps its revision. */
  get changed(): boolean {
    return this.upserted.size > 0 || this.tombstones.size > 0;
  }

  insert(row: Row): Row | undefined {
    // Shallow freeze: cheap, and it catches the classic bug of editing a row in place.
    const frozen = Object.freeze(row);
    const key = this.table.primaryKey(frozen);
    // Run the user's index functions before touching anything, so a throw leaves the draft intact.
    const newValues = this.indexValuesOf(frozen);
    const old = this.rows.get(key);
    const stored: StoredRow<Row> = Object.freeze({ row: frozen, revision: this.nextRevision });
    // Re-inserting moves the key to the end, keeping `rows` in revision order.
    if (old && old.revision !== this.nextRevision) this.rows = this.rows.remove(key);
    this.rows = this.rows.set(key, stored);
    this.reindex(key, old && this.indexValuesOf(old.row), newValues);
    this.upserted.add(key);
    this.tombstones.delete(key);
    return old?.row;
  }

  delete(key: string): Row | undefined {
    const old = this.rows.get(key);
    if (!old) return undefined;
    this.rows = this.rows.remove(key);
    this.reindex(key, this.indexValuesOf(old.row), undefined);
    this.upserted.delete(key);
    // A row born and deleted inside this transaction was never seen by anyone: no tombstone.
    if (this.base.rows.has(key)) {
      this.tombstones.set(key, Object.freeze({ row: old.row, revision: this.nextRevision }));
    }
    return old.row;
  }

  deleteAll(): number {
    const keys = [...this.rows.keys()];
    for (const key of keys) this.delete(key);
    return keys.length;
  }

  /** The committed root after this transaction; the draft must not be used afterwards. */
  seal(): TableRoot<Row> {
    if (!this.changed) return this.base;
    // asImmutable() seals a mutable copy in place, so the sets already in the index maps are sealed too.
    for (const owned of this.ownedSets.values()) for (const keys of owned.values()) keys.asImmutable();
    const indexes = new Map<string, SecondaryIndex>();
    for (const [name, index] of this.indexes) indexes.set(name, index.asImmutable());
    return new TableRoot(this.table, this.nextRevision, this.rows.asImmutable(), indexes);
  }

  private indexValuesOf(row: Row): Map<string, readonly string[]> | undefined {
    if (this.indexes.size === 0) return undefined;
    const values = new Map<string, readonly string[]>();
    for (const name of this.indexes.keys()) values.set(name, this.table.indexValues(name, row));
    return values;
  }

  private reindex(key: string, before: Map<string, readonly string[]> | undefined, after: Map<string, readonly string[]> | undefined): void {
    for (const [name, index] of this.indexes) {
      const oldValues = before?.get(name) ?? [];
      const newValues = after?.get(name) ?? [];
      let updated = index;
      for (const value of oldValues) {
        if (newValues.includes(value)) continue;
        const held = updated.get(value);
        if (held === undefined) continue;
        if (typeof held === 'string') {
          if (held === key) updated = updated.remove(value);
          continue;
        }
        const keys = this.ownedKeys(name, value, held, updated).remove(key);
        if (keys.size === 0) {
          updated = updated.remove(value);
          this.ownedSets.get(name)?.delete(value);
        }
      }
      for (const value of newValues) {
        if (oldValues.includes(value)) continue;
        const held = updated.get(value);
        if (held === undefined) {
          updated = updated.set(value, key); // the value's only key: no set
        } else if (typeof held === 'string') {
          if (held === key) continue;
          const keys = emptyKeys.asMutable().add(held).add(key);
          this.owned(name).set(value, keys);
          updated = updated.set(value, keys);
        } else {
          this.ownedKeys(name, value, held, updated).add(key);
        }
      }
      this.indexes.set(name, updated);
    }
  }

  private owned(index: string): Map<string, ImmutableSet<string>> {
    let owned = this.ownedSets.get(index);
    if (!owned) this.ownedSets.set(index, (owned = new Map()));
    return owned;
  }

  /**
   * The key set of one index value, as a mutable copy owned by this draft: a
   * value shared by many rows (an interface, a namespace) is then edited in
   * place instead of being copied on every insert.
   */
  private ownedKeys(index: string, value: string, held: ImmutableSet<string>, byValue: SecondaryIndex): ImmutableSet<string> {
    const owned = this.owned(index);
    let keys = owned.get(value);
    if (!keys) {
      keys = held.asMutable();
      owned.set(value, keys);
      byValue.set(value, keys); // byValue is itself a mutable draft copy
    }
    return keys;
  }
}

const emptyKeys = ImmutableSet<string>();
