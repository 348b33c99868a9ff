/**
 * Table definitions: the schema of one typed table (primary key, secondary
 * indexes, CLI columns). A definition holds no data; rows live in a StateDB.
 *
 * defineTable() returns an RWTable, the writable handle. Its owner exports the
 * same object typed as Table<Row> to everyone else, so only the owner can name
 * it in a write transaction (statedb: "do not export RWTable").
 */
import { HeraldError } from '../errors.js';
import type { ChangeIterator } from './changes.js';
import type { StateDB } from './db.js';

/** A secondary index maps a row to zero or more index values (non-unique, multi-valued). */
export type IndexFn<Row> = (row: Row) => string | readonly string[];

export interface TableSchema<Row, I extends string = string> {
  /** Unique within a database; also the name the CLI shows. */
  readonly name: string;
  readonly primaryKey: (row: Row) => string;
  readonly indexes?: { readonly [K in I]: IndexFn<Row> };
  /** Column headers for `db show`; defaults to key + JSON. */
  readonly columns?: readonly string[];
  readonly toColumns?: (row: Row) => readonly string[];
}

// A type-only brand: it exists in no object at runtime, so a Table<Row> cannot
// be passed where an RWTable<Row> is required without an explicit cast.
declare const writable: unique symbol;

/** Read-only handle on a table: enough to read, list, watch and follow changes. */
export interface Table<Row, I extends string = string> {
  readonly name: string;
  readonly indexNames: readonly I[];
  readonly columns: readonly string[];
  primaryKey(row: Row): string;
  /** The distinct values `row` has in `index`. */
  indexValues(index: I, row: Row): readonly string[];
  toColumns(row: Row): readonly string[];
  /** Same as db.changes(this). */
  changes(db: StateDB): ChangeIterator<Row>;
}

/** The writable handle: only the module that owns the table should hold it. */
export interface RWTable<Row, I extends string = string> extends Table<Row, I> {
  readonly [writable]: true;
}

/** Any table, whatever its row type (method parameters are bivariant). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyTable = Table<any, string>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyRWTable = RWTable<any, string>;

export function defineTable<Row, I extends string = string>(schema: TableSchema<Row, I>): RWTable<Row, I> {
  if (!schema.name) throw new HeraldError('HERALD_BAD_ARGUMENT', 'defineTable: a table needs a name');
  if ((schema.columns === undefined) !== (schema.toColumns === undefined)) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `defineTable(${schema.name}): give both columns and toColumns, or neither`);
  }
  const indexFns = new Map<string, IndexFn<Row>>(Object.entries(schema.indexes ?? {}) as [string, IndexFn<Row>][]);
  const primaryKey = schema.primaryKey;
  const toColumns = schema.toColumns ?? ((row: Row) => [primaryKey(row), JSON.stringify(row)]);

  const table = {
    name: schema.name,
    indexNames: Object.freeze([...indexFns.keys()]) as readonly I[],
    columns: Object.freeze([...(schema.columns ?? ['key', 'row'])]),
    primaryKey(row: Row): string {
      const key = primaryKey(row);
      if (typeof key !== 'string') {
        throw new HeraldError('HERALD_BAD_ARGUMENT', `table ${schema.name}: primaryKey returned ${typeof key}, not a string`);
      }
      return key;
    },
    indexValues(index: I, row: Row): readonly string[] {
      const fn = indexFns.get(index);
      if (!fn) throw new HeraldError('HERALD_BAD_ARGUMENT', `table ${schema.name} has no index ${JSON.stringify(index)}`);
      const values = fn(row);
      if (typeof values === 'string') return [values];
      // Dedupe so a row is counted once per value even if the function repeats one.
      return values.length < 2 ? values : [...new Set(values)];
    },
    toColumns,
    changes(db: StateDB): ChangeIterator<Row> {
      return db.changes(table);
    },
  };
  return Object.freeze(table) as unknown as RWTable<Row, I>;
}
