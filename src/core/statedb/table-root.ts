/**
 * One table's committed state: an immutable value that a snapshot holds.
 *
 * Rows live in an immutable OrderedMap kept in revision order (a write moves
 * its key to the end), which doubles as the revision index: the changes since
 * revision R are a reverse scan that stops at the first row at or below R.
 * Secondary indexes map an index value to the set of primary keys holding it.
 */
import { OrderedMap, Map as ImmutableMap, Set as ImmutableSet } from 'immutable';
import { HeraldError } from '../errors.js';
import type { Table } from './table.js';
import { compareStrings } from '../order.js';

/** A row together with the table revision at which it was last written. */
export interface StoredRow<Row> {
  readonly row: Row;
  readonly revision: number;
}

export type RowMap<Row> = OrderedMap<string, StoredRow<Row>>;
/**
 * Index value → the primary keys holding it: the key itself while one row
 * holds the value (most values of a unique-ish index such as an IP: no set per
 * row, which was most of a 1,000-row write), a set once several do.
 */
export type SecondaryIndex = ImmutableMap<string, string | ImmutableSet<string>>;

/** What reads need from a table, whether committed (TableRoot) or a write draft. */
export interface TableView<Row> {
  readonly table: Table<Row>;
  /** The last committed revision of the table. */
  readonly revision: number;
  readonly rows: RowMap<Row>;
  readonly indexes: ReadonlyMap<string, SecondaryIndex>;
}

export class TableRoot<Row> implements TableView<Row> {
  // Filled on first list(): the root never changes, so sorting once per revision is enough.
  private sortedRows: readonly Row[] | undefined;

  constructor(
    readonly table: Table<Row>,
    readonly revision: number,
    readonly rows: RowMap<Row>,
    readonly indexes: ReadonlyMap<string, SecondaryIndex>,
  ) {}

  static empty<Row>(table: Table<Row>): TableRoot<Row> {
    const indexes = new Map<string, SecondaryIndex>(table.indexNames.map((name) => [name, ImmutableMap()]));
    return new TableRoot(table, 0, OrderedMap(), indexes);
  }

  listSorted(): readonly Row[] {
    this.sortedRows ??= Object.freeze(sortedByKey(this.rows));
    return this.sortedRows;
  }
}

export function listRows<Row>(view: TableView<Row>): readonly Row[] {
  return view instanceof TableRoot ? view.listSorted() : sortedByKey(view.rows);
}

export function listRowsBy<Row>(view: TableView<Row>, index: string, value: string): Row[] {
  const byValue = view.indexes.get(index);
  if (!byValue) throw new HeraldError('HERALD_BAD_ARGUMENT', `table ${view.table.name} has no index ${JSON.stringify(index)}`);
  const keys = byValue.get(value);
  if (keys === undefined) return [];
  const rows: Row[] = [];
  for (const key of typeof keys === 'string' ? [keys] : [...keys].sort(compareStrings)) {
    const stored = view.rows.get(key);
    if (stored) rows.push(stored.row);
  }
  return rows;
}


function sortedByKey<Row>(rows: RowMap<Row>): Row[] {
  const entries: [string, Row][] = [];
  rows.forEach((stored, key) => {
    entries.push([key, stored.row]);
  });
  entries.sort((a, b) => compareStrings(a[0], b[0]));
  return entries.map((entry) => entry[1]);
}
