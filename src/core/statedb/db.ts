/**
 * The database: a set of tables, one writer at a time, any number of readers.
 *
 * Its whole committed state is one Snapshot value swapped on commit, which is
 * what makes a commit atomic across tables and a read txn a consistent view.
 * Everything else here (tombstones, watchers, initializers) is bookkeeping per
 * table that lives outside snapshots because only the present needs it.
 */
import { HeraldError } from '../errors.js';
import { ChangeIterator, Graveyard } from './changes.js';
import { InitTracker, type Initializer } from './initializers.js';
import type { TableDraft } from './table-draft.js';
import { TableRoot } from './table-root.js';
import type { AnyRWTable, AnyTable, RWTable, Table } from './table.js';
import { ReadTxn, WriteTxn, rootOf, type Snapshot } from './txn.js';
import { Waiters, waitUntil } from './waiters.js';

interface TableEntry {
  readonly table: AnyTable;
  readonly graveyard: Graveyard<unknown>;
  readonly changed: Waiters;
  readonly init: InitTracker;
}

export class StateDB {
  private snapshot: Snapshot = { globalRevision: 0, roots: new Map() };
  private readonly entries = new Map<string, TableEntry>();
  private writer: WriteTxn | undefined;

  constructor(tables: readonly AnyTable[] = []) {
    for (const table of tables) this.registerTable(table);
  }

  /** Adds a table; registering the same definition twice is a no-op. */
  registerTable(table: AnyTable): void {
    const existing = this.entries.get(table.name);
    if (existing?.table === table) return;
    if (existing) throw new HeraldError('HERALD_BAD_ARGUMENT', `another table named ${table.name} is already registered`);
    this.entries.set(table.name, {
      table,
      graveyard: new Graveyard(),
      changed: new Waiters(),
      init: new InitTracker(table.name),
    });
    const roots = new Map(this.snapshot.roots);
    roots.set(table.name, TableRoot.empty(table));
    this.snapshot = { globalRevision: this.snapshot.globalRevision, roots };
  }

  get tables(): readonly AnyTable[] {
    return [...this.entries.values()].map((entry) => entry.table);
  }

  get globalRevision(): number {
    return this.snapshot.globalRevision;
  }

  readTxn(): ReadTxn {
    return new ReadTxn(this.snapshot);
  }

  /** Opens the one write transaction; it may write only to `tables`. */
  writeTxn(tables: readonly AnyRWTable[]): WriteTxn {
    if (this.writer) throw new HeraldError('HERALD_TXN', 'another write transaction is open');
    for (const table of tables) this.entryOf(table);
    const base = this.snapshot;
    const txn: WriteTxn = new WriteTxn(base, new Set(tables), (drafts) => {
      this.writer = undefined;
      if (drafts) this.publish(base, drafts);
    });
    this.writer = txn;
    return txn;
  }

  /**
   * Runs `fn` in a write transaction: commits if it returns, aborts and
   * rethrows if it throws. `fn` must be synchronous: a txn held across an
   * await would block every other writer for as long.
   */
  update<T>(tables: readonly AnyRWTable[], fn: (txn: WriteTxn) => T): T {
    const txn = this.writeTxn(tables);
    let result: T;
    try {
      result = fn(txn);
    } catch (e) {
      if (txn.isOpen) txn.abort();
      throw e;
    }
    if (isPromiseLike(result)) {
      if (txn.isOpen) txn.abort();
      throw new HeraldError('HERALD_TXN', 'db.update() callback returned a promise; it must be synchronous');
    }
    if (txn.isOpen) txn.commit();
    return result;
  }

  /** A new iterator over the table's changes; close it when done so tombstones can be collected. */
  changes<Row>(table: Table<Row>): ChangeIterator<Row> {
    const entry = this.entryOf(table);
    return new ChangeIterator<Row>({
      tableName: table.name,
      currentRoot: () => rootOf(this.snapshot, table),
      graveyard: entry.graveyard as Graveyard<Row>,
    });
  }

  /** Resolves at the next commit that changes the table. */
  watch(table: AnyTable, signal?: AbortSignal): Promise<void> {
    return this.entryOf(table).changed.wait(signal);
  }

  /** Resolves once the table's revision is above `revision` (at once if it already is). */
  waitForRevision(table: AnyTable, revision: number, signal?: AbortSignal): Promise<void> {
    const entry = this.entryOf(table);
    return waitUntil(entry.changed, () => rootOf(this.snapshot, table).revision > revision, signal);
  }

  /** Only the table's owner registers initializers, hence the RWTable. */
  registerInitializer(table: AnyRWTable, name: string): Initializer {
    return this.entryOf(table).init.register(name);
  }

  isInitialized(table: AnyTable): boolean {
    return this.entryOf(table).init.isInitialized();
  }

  pendingInitializers(table: AnyTable): string[] {
    return this.entryOf(table).init.pendingNames;
  }

  whenInitialized(table: AnyTable, signal?: AbortSignal): Promise<void> {
    return this.entryOf(table).init.whenInitialized(signal);
  }

  /** Deleted rows still kept for some iterator (for inspection and tests). */
  tombstoneCount(table: AnyTable): number {
    return this.entryOf(table).graveyard.size;
  }

  /** Open change iterators on the table (for inspection and leak checks). */
  iteratorCount(table: AnyTable): number {
    return this.entryOf(table).graveyard.followers;
  }

  private publish(base: Snapshot, drafts: ReadonlyMap<string, TableDraft<unknown>>): void {
    const changed = [...drafts.values()].filter((draft) => draft.changed);
    if (changed.length === 0) return;
    // Start from the present, not `base`: tables registered meanwhile must survive.
    const roots = new Map(this.snapshot.roots);
    for (const draft of changed) roots.set(draft.table.name, draft.seal());
    this.snapshot = { globalRevision: base.globalRevision + 1, roots };
    for (const draft of changed) {
      const entry = this.entryOf(draft.table);
      entry.graveyard.recordCommit(draft.tombstones, draft.upserted);
      entry.changed.wakeAll();
    }
  }

  private entryOf(table: AnyTable): TableEntry {
    const entry = this.entries.get(table.name);
    if (!entry || entry.table !== table) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `table ${table.name} is not registered in this database`);
    }
    return entry;
  }
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function';
}
