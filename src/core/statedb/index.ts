/**
 * In-memory desired-state tables, modelled on cilium/statedb: typed tables with
 * secondary indexes, atomic multi-table write txns, snapshot read txns, per-row
 * revisions, change iterators with a graveyard, watches and initializers.
 */
export { defineTable, type AnyRWTable, type AnyTable, type IndexFn, type RWTable, type Table, type TableSchema } from './table.js';
export { StateDB } from './db.js';
export { ReadTxn, WriteTxn } from './txn.js';
export { ChangeIterator, type Change, type ChangeBatch } from './changes.js';
export type { Initializer } from './initializers.js';
export type { StoredRow } from './table-root.js';
export { dumpTable, formatTable, type TableDump } from './show.js';
