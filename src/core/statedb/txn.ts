/**
 * Transactions. A ReadTxn holds one snapshot (the table roots at one moment)
 * and sees exactly that however long it is held; holding it costs nothing but
 * the memory of roots that later commits replaced. A WriteTxn reads its own
 * uncommitted writes and publishes them all at once on commit().
 */
import { HeraldError } from '../errors.js';
import { TableDraft } from './table-draft.js';
import { listRows, listRowsBy, type StoredRow, type TableRoot, type TableView } from './table-root.js';
import type { AnyRWTable, RWTable, Table } from './table.js';

/** The committed state of every table at one moment. */
export interface Snapshot {
  readonly globalRevision: number;
  readonly roots: ReadonlyMap<string, TableRoot<unknown>>;
}

export class ReadTxn {
  constructor(protected readonly snapshot: Snapshot) {}

  /** Bumped once per commit that changed any table. */
  get globalRevision(): number {
    this.assertUsable();
    return this.snapshot.globalRevision;
  }

  get<Row>(table: Table<Row>, primaryKey: string): Row | undefined {
    return this.view(table).rows.get(primaryKey)?.row;
  }

  /** The row and the table revision at which it was last written. */
  getWithRevision<Row>(table: Table<Row>, primaryKey: string): StoredRow<Row> | undefined {
    return this.view(table).rows.get(primaryKey);
  }

  /** Every row with its key and revision, in revision order (no sorting, no copy: for full scans). */
  forEachWithRevision<Row>(table: Table<Row>, fn: (key: string, row: Row, revision: number) => void): void {
    this.view(table).rows.forEach((stored, key) => {
      fn(key, stored.row, stored.revision);
    });
  }

  /** Every row, sorted by primary key. */
  list<Row>(table: Table<Row>): readonly Row[] {
    return listRows(this.view(table));
  }

  /** The rows whose `index` contains `value`, sorted by primary key. */
  listBy<Row, I extends string>(table: Table<Row, I>, index: NoInfer<I>, value: string): readonly Row[] {
    return listRowsBy(this.view(table), index, value);
  }

  count(table: Table<unknown>): number {
    return this.view(table).rows.size;
  }

  /** The table's last committed revision (0 for a table never written). */
  revision(table: Table<unknown>): number {
    return this.view(table).revision;
  }

  protected view<Row>(table: Table<Row>): TableView<Row> {
    this.assertUsable();
    return rootOf(this.snapshot, table);
  }

  protected assertUsable(): void {}
}

export function rootOf<Row>(snapshot: Snapshot, table: Table<Row>): TableRoot<Row> {
  const root = snapshot.roots.get(table.name) as TableRoot<Row> | undefined;
  // Identity, not just name: a same-named definition from elsewhere is a different table.
  if (!root || root.table !== table) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `table ${table.name} is not registered in this database`);
  }
  return root;
}

type TxnState = 'open' | 'committed' | 'aborted';

/** How the database takes back a finished write txn: drafts on commit, undefined on abort. */
export type FinishWrite = (drafts: ReadonlyMap<string, TableDraft<unknown>> | undefined) => void;

export class WriteTxn extends ReadTxn {
  private state: TxnState = 'open';
  private readonly drafts = new Map<string, TableDraft<unknown>>();

  constructor(
    snapshot: Snapshot,
    private readonly locked: ReadonlySet<AnyRWTable>,
    private readonly finish: FinishWrite,
  ) {
    super(snapshot);
  }

  get isOpen(): boolean {
    return this.state === 'open';
  }

  /** Upsert: returns the row it replaced, if any. The row is frozen. */
  insert<Row>(table: RWTable<Row>, row: Row): Row | undefined {
    return this.draft(table).insert(row);
  }

  /** Deletes by row or primary key; returns the deleted row, if any. */
  delete<Row>(table: RWTable<Row>, rowOrKey: Row | string): Row | undefined {
    const key = typeof rowOrKey === 'string' ? rowOrKey : table.primaryKey(rowOrKey);
    return this.draft(table).delete(key);
  }

  /** Deletes every row; returns how many. */
  deleteAll(table: RWTable<unknown>): number {
    return this.draft(table).deleteAll();
  }

  /** Publishes every write atomically. Tables left unchanged keep their revision. */
  commit(): void {
    this.assertUsable();
    this.state = 'committed';
    this.finish(this.drafts);
  }

  /** Drops every write; the committed state is as if this txn never existed. */
  abort(): void {
    this.assertUsable();
    this.state = 'aborted';
    this.finish(undefined);
  }

  protected override view<Row>(table: Table<Row>): TableView<Row> {
    this.assertUsable();
    return (this.drafts.get(table.name) as TableDraft<Row> | undefined) ?? rootOf(this.snapshot, table);
  }

  protected override assertUsable(): void {
    if (this.state !== 'open') throw new HeraldError('HERALD_TXN', `write transaction already ${this.state}`);
  }

  private draft<Row>(table: RWTable<Row>): TableDraft<Row> {
    this.assertUsable();
    if (!this.locked.has(table)) {
      throw new HeraldError('HERALD_TXN', `table ${table.name} is not locked by this write transaction`);
    }
    let draft = this.drafts.get(table.name) as TableDraft<Row> | undefined;
    if (!draft) {
      draft = new TableDraft(table, rootOf(this.snapshot, table));
      this.drafts.set(table.name, draft as TableDraft<unknown>);
    }
    return draft;
  }
}
