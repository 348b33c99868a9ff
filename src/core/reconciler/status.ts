/**
 * Per-row reconcile status, kept in statedb tables so that "has revision N of
 * this row reached the target?" is a query and an awaitable on the database,
 * not a private map of one reconciler (cilium/statedb keeps the same status on
 * each object: reconciler/types.go Status{Kind, UpdatedAt, Error}).
 *
 * Design: two companion tables written only by reconcilers, not a status field
 * on the desired row.
 * - A status field would be a write to the desired table, and so a change the
 *   reconciler itself iterates: Cilium then needs the reconciler to recognise
 *   and skip status-only changes. A separate table cannot re-trigger anything:
 *   a reconciler follows only its desired table.
 * - Desired-state tables are shared (the l2-announce table feeds both the
 *   responder-map and the local-routes reconcilers); a companion table keyed by
 *   (reconciler, row key) holds one status per target without touching the
 *   row's owner or its revision.
 *
 * `reconcile-status` holds what a reconciler did with a key: `done` or
 * `error`, with the desired table's revision of the change it refers to (the
 * row's write, or its deletion). A successful delete removes the key's status.
 * `reconcile-progress` holds, per reconciler, the desired table revision up to
 * which every change has been applied or has an error status. Both are
 * written in one transaction per round, so a reader never sees progress
 * without the statuses behind it.
 *
 * `pending` is never stored: a row is pending while its status refers to an
 * older revision than the row (or it has none yet). Deriving it from the two
 * tables in one snapshot keeps it exact and costs no write per change.
 */
import type { Clock } from '../clock.js';
import { HeraldError } from '../errors.js';
import { defineTable, type AnyTable, type ReadTxn, type StateDB, type Table } from '../statedb/index.js';

export type RowStatusKind = 'pending' | 'done' | 'error';

export interface RowStatus {
  readonly kind: RowStatusKind;
  /** The desired table's revision of the change this status refers to (for a pending delete: the table revision by which it happened). */
  readonly revision: number;
  /** Whether that change put the row into the target or takes it out. */
  readonly op: 'upsert' | 'delete';
  /** When the reconciler recorded it (absent while pending). */
  readonly updatedAt?: number;
  readonly error?: string;
  /** Failed attempts in a row (error only). */
  readonly attempts?: number;
}

/** A stored status: what one reconciler last did with one key. */
export interface StatusRow extends RowStatus {
  readonly reconciler: string;
  readonly key: string;
  readonly kind: 'done' | 'error';
  readonly updatedAt: number;
}

/** How far one reconciler has got through its desired table. */
export interface ProgressRow {
  readonly reconciler: string;
  /** The desired table's name. */
  readonly table: string;
  /** Every change up to this revision has been applied or has an error status. */
  readonly revision: number;
  readonly updatedAt: number;
}

/** A row's status together with whose it is (for status documents and the cluster view). */
export interface RowStatusEntry extends RowStatus {
  readonly reconciler: string;
  readonly key: string;
}

export const statusKey = (reconciler: string, key: string): string => `${reconciler}\u0000${key}`;

const reconcileStatus = defineTable<StatusRow, 'error'>({
  name: 'reconcile-status',
  primaryKey: (r) => statusKey(r.reconciler, r.key),
  // No index by reconciler: an index entry per row was a third of writing 10,000 statuses, and only
  // rowsNotDone (a status page, which lists the desired table anyway) and dispose look rows up that way.
  indexes: {
    // Only rows in error are indexed: "which rows fail" is a lookup, not a scan.
    error: (r) => (r.kind === 'error' ? [r.reconciler] : []),
  },
  columns: ['reconciler', 'key', 'kind', 'op', 'revision', 'attempts', 'error'],
  toColumns: (r) => [r.reconciler, r.key, r.kind, r.op, String(r.revision), String(r.attempts ?? ''), r.error ?? ''],
});

const reconcileProgress = defineTable<ProgressRow>({
  name: 'reconcile-progress',
  primaryKey: (r) => r.reconciler,
  columns: ['reconciler', 'table', 'revision'],
  toColumns: (r) => [r.reconciler, r.table, String(r.revision)],
});

/** Read-only handles; only the reconciler (reconciler.ts) writes them, through reconcileStatusWritable. */
export const reconcileStatusTable: Table<StatusRow, 'error'> = reconcileStatus;

/** Every stored status of one reconciler (a scan: see the table's indexes). */
export function statusesOf(txn: ReadTxn, reconciler: string): StatusRow[] {
  return txn.list(reconcileStatus).filter((s) => s.reconciler === reconciler);
}
export const reconcileProgressTable: Table<ProgressRow> = reconcileProgress;
/** @internal The writable handles, for reconciler.ts only. */
export const reconcileStatusWritable = { status: reconcileStatus, progress: reconcileProgress };

export function registerStatusTables(db: StateDB): void {
  db.registerTable(reconcileStatus);
  db.registerTable(reconcileProgress);
}

/** The desired table revision `reconciler` has applied up to (-1 before its first round). */
export function appliedRevision(txn: ReadTxn, reconciler: string): number {
  return txn.get(reconcileProgress, reconciler)?.revision ?? -1;
}

/**
 * The status of one row for one reconciler, as of `txn`: `done`/`error` for
 * the change it refers to, `pending` while a newer write or a delete has not
 * been handled yet. Undefined: no such row, and nothing left to withdraw.
 */
export function rowStatus<Row>(txn: ReadTxn, reconciler: string, table: Table<Row>, key: string): RowStatus | undefined {
  const stored = txn.get(reconcileStatus, statusKey(reconciler, key));
  const desired = txn.getWithRevision(table, key);
  if (desired) {
    if (stored && stored.op === 'upsert' && stored.revision >= desired.revision) return publicStatus(stored);
    return { kind: 'pending', op: 'upsert', revision: desired.revision };
  }
  if (stored?.op === 'delete') return publicStatus(stored); // a withdrawal that fails
  const tableRevision = txn.revision(table);
  // In the target (or maybe on its way there) and not wanted any more.
  if (stored || appliedRevision(txn, reconciler) < tableRevision) return { kind: 'pending', op: 'delete', revision: tableRevision };
  return undefined;
}

/** Every row of `reconciler` that is not done: pending writes and deletes, and errors. Sorted by key. */
export function rowsNotDone<Row>(txn: ReadTxn, reconciler: string, table: Table<Row>): RowStatusEntry[] {
  const keys = new Set<string>(txn.list(table).map((row) => table.primaryKey(row)));
  for (const s of statusesOf(txn, reconciler)) keys.add(s.key);
  const out: RowStatusEntry[] = [];
  for (const key of [...keys].sort()) {
    const s = rowStatus(txn, reconciler, table, key);
    if (s && s.kind !== 'done') out.push({ reconciler, key, ...s });
  }
  return out;
}

/** Rows whose last attempt failed, for one reconciler or all; sorted by reconciler, then key. */
export function rowsInError(txn: ReadTxn, reconciler?: string): RowStatusEntry[] {
  const reconcilers = reconciler !== undefined ? [reconciler] : txn.list(reconcileProgress).map((p) => p.reconciler);
  return reconcilers.flatMap((name) => txn.listBy(reconcileStatus, 'error', name).map((s) => ({ reconciler: name, key: s.key, ...publicStatus(s) })));
}

export interface WaitOptions {
  /** Reject with HERALD_RECONCILE_TIMEOUT after this long, on the injected clock (default 10 s). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface WaitForRowOptions extends WaitOptions {
  /** Wait through errors (retries) until the row is done; default false: an error resolves too. */
  untilDone?: boolean;
}

export const waitTimeoutDefaultMs = 10_000;

/**
 * Resolves with the status of `key` once `reconciler` has handled revision
 * `revision` of it or a later one: `done` (it reached the target; for a
 * deleted row `{kind: 'done', op: 'delete'}`) or `error` (the attempt failed
 * and is being retried; with `untilDone` it waits on through retries). Never
 * resolves on a pending row. Rejects with HERALD_RECONCILE_TIMEOUT at the
 * deadline.
 */
export function waitForRow<Row>(
  deps: { db: StateDB; clock: Clock },
  reconciler: string,
  table: Table<Row>,
  key: string,
  revision: number,
  opts: WaitForRowOptions = {},
): Promise<RowStatus> {
  return waitOnTables(deps, [table, reconcileStatus, reconcileProgress], opts, `row ${key} of ${reconciler} to reach revision ${revision}`, (txn) => {
    const stored = txn.get(reconcileStatus, statusKey(reconciler, key));
    if (stored && stored.revision >= revision) return stored.kind === 'error' && opts.untilDone ? undefined : publicStatus(stored);
    const applied = appliedRevision(txn, reconciler);
    // No status and no row: the delete was applied (or there never was anything to write).
    if (!stored && applied >= revision && txn.get(table, key) === undefined) return { kind: 'done', op: 'delete', revision: applied };
    return undefined;
  });
}

/**
 * Evaluates `ready` on a fresh snapshot at once and after every commit to
 * `tables` until it returns a value. The deadline runs on the injected clock.
 */
export async function waitOnTables<T>(
  deps: { db: StateDB; clock: Clock },
  tables: readonly AnyTable[],
  opts: WaitOptions,
  what: string,
  ready: (txn: ReadTxn) => T | undefined,
): Promise<T> {
  const first = ready(deps.db.readTxn());
  if (first !== undefined) return first;
  const timeoutMs = opts.timeoutMs ?? waitTimeoutDefaultMs;
  const deadline = new AbortController();
  const timer = deps.clock.setTimeout(
    () => deadline.abort(new HeraldError('HERALD_RECONCILE_TIMEOUT', `waited ${timeoutMs} ms for ${what}`)),
    timeoutMs,
  );
  const signal = opts.signal ? AbortSignal.any([deadline.signal, opts.signal]) : deadline.signal;
  try {
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const round = new AbortController();
      try {
        // Whichever table commits first; the other watches are dropped with the round.
        await Promise.race(tables.map((t) => deps.db.watch(t, AbortSignal.any([signal, round.signal]))));
      } finally {
        round.abort();
      }
      const value = ready(deps.db.readTxn());
      if (value !== undefined) return value;
    }
  } finally {
    timer.cancel();
  }
}

function publicStatus(s: StatusRow): RowStatus {
  return {
    kind: s.kind,
    revision: s.revision,
    op: s.op,
    updatedAt: s.updatedAt,
    ...(s.error !== undefined ? { error: s.error } : {}),
    ...(s.attempts !== undefined ? { attempts: s.attempts } : {}),
  };
}
