/**
 * Inspection: a table as aligned text (the CLI's `db show`) or as JSON.
 * Both read through a ReadTxn, so what is shown is one consistent snapshot.
 */
import type { Table } from './table.js';
import type { ReadTxn } from './txn.js';

export function formatTable<Row>(txn: ReadTxn, table: Table<Row>): string {
  const lines: (readonly string[])[] = [table.columns, ...txn.list(table).map((row) => table.toColumns(row))];
  const widths = table.columns.map((_, column) => Math.max(...lines.map((line) => (line[column] ?? '').length)));
  return lines
    .map((line) =>
      widths
        .map((width, column) => (line[column] ?? '').padEnd(width))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export interface TableDump<Row> {
  readonly table: string;
  readonly revision: number;
  readonly rows: readonly { readonly revision: number; readonly row: Row }[];
}

/** A JSON-serialisable dump of the table, rows sorted by primary key. */
export function dumpTable<Row>(txn: ReadTxn, table: Table<Row>): TableDump<Row> {
  const rows = txn.list(table).map((row) => {
    const stored = txn.getWithRevision(table, table.primaryKey(row));
    return { revision: stored?.revision ?? 0, row };
  });
  return { table: table.name, revision: txn.revision(table), rows };
}
