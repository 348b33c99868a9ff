/**
 * One generic reconciler: makes a target (a BPF map, routes, a config file)
 * hold what a desired-state table says. Written once, used per target.
 *
 * - Partial: every batch of table changes is applied as it commits.
 * - Full: at start (once the table is initialized) and periodically, every row
 *   is re-applied and the target is pruned of everything nobody wants.
 * - Pruning waits until every source has filled the table (or a grace period
 *   passes), so a restarting agent never empties kernel state it answers from.
 * - A failing row is retried on its own with backoff and gets an error status;
 *   it never blocks the other rows, and the loop never dies.
 * - Every row's status (done / error, for which revision) and how far the
 *   reconciler has got are written to statedb tables (status.ts), once per
 *   round: settled(), waitForRow() and `herald status` all read them there.
 *
 * Modelled on cilium/statedb's reconciler (incremental + full, per-object
 * status and retries), in the shape of herald's jobs: owned, disposable, timed
 * by an injected clock.
 */
import type { Clock, TimerHandle } from '../clock.js';
import type { Disposable } from '../disposable.js';
import { HeraldError, describeError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { AnyRWTable, AnyTable, ChangeIterator, StateDB, Table } from '../statedb/index.js';
import {
  appliedRevision,
  reconcileProgressTable,
  reconcileStatusWritable,
  registerStatusTables,
  rowStatus,
  rowsInError,
  rowsNotDone,
  statusKey,
  statusesOf,
  waitForRow,
  waitOnTables,
  type RowStatus,
  type RowStatusEntry,
  type StatusRow,
  type WaitForRowOptions,
} from './status.js';

export type { RowStatus, RowStatusEntry } from './status.js';

export interface ReconcilerOps<Row> {
  /** Makes the target hold `row`. Must be idempotent. */
  update(row: Row): void | Promise<void>;
  /** Removes `row` from the target. Must be idempotent. */
  delete(row: Row): void | Promise<void>;
  /** Removes from the target everything that `desired` does not hold. */
  prune(desired: readonly Row[]): void | Promise<void>;
  /**
   * Optional batch capability: update() for many rows at once (e.g. one
   * syscall per thousands of map entries). Returns one outcome per row, in
   * order: undefined when the row is in the target, else that row's error
   * (recorded and retried for that row alone). If it throws, the reconciler
   * falls back to update() row by row to attribute the error.
   */
  updateBatch?(rows: readonly Row[]): ReadonlyArray<unknown> | Promise<ReadonlyArray<unknown>>;
  /** Optional: delete() for many rows at once, with the same contract as updateBatch. */
  deleteBatch?(rows: readonly Row[]): ReadonlyArray<unknown> | Promise<ReadonlyArray<unknown>>;
}

/** Partial rounds with at least this many upserts (or deletes) use the ops' batch calls, when they have them. */
export const BATCH_MIN_ROWS = 16;

export interface ReconcilerConfig {
  /** Full reconciliation period (default 5 min, as Cilium). */
  fullIntervalMs: number;
  /** Backoff of a failing row: doubles from min to max. */
  retryMinMs: number;
  retryMaxMs: number;
  /** Prune anyway when the table is still not initialized after this long. */
  initGraceMs: number;
  /**
   * Tick-only: table changes are applied only on a tick every `tickMs` (the
   * first at start), all changes since the last tick in one round — the way
   * a periodic control loop (flock's 2 s ticker) works — instead of as they
   * commit. The full round also waits for a tick; retries of failed rows keep
   * their own backoff. Absent: event-driven (the default).
   */
  tickMs?: number;
}

export const reconcilerDefaults: ReconcilerConfig = {
  fullIntervalMs: 5 * 60_000,
  retryMinMs: 100,
  retryMaxMs: 60_000,
  initGraceMs: 60_000,
};

export interface RoundOutcome {
  at: number;
  durationMs: number;
  ok: boolean;
  rows: number;
  errors: number;
  error?: string;
}

export interface ReconcilerHealth {
  name: string;
  /** The table was complete (or the grace period passed) and pruning is allowed. */
  initialized: boolean;
  lastPartial?: RoundOutcome;
  lastFull?: RoundOutcome;
  /** Row operations that failed, since start. */
  errorCount: number;
  /** Rows waiting for a retry. */
  retrying: number;
  partialRounds: number;
  fullRounds: number;
}

/** What settled() saw once every change up to its revision had been handled. */
export interface SettleOutcome {
  /** The table revision that has been reconciled. */
  revision: number;
  /** Keys whose change up to that revision failed and is still failing (retried with backoff). */
  failed: string[];
}

export interface SettleOptions {
  /** Wait for changes up to this table revision (default: the table's revision now). */
  revision?: number;
  /** Reject with HERALD_RECONCILE_TIMEOUT after this long (on the injected clock). Default 10 s. */
  timeoutMs?: number;
}

export const settleTimeoutDefaultMs = 10_000;

interface Retry<Row> {
  kind: 'upsert' | 'delete';
  row: Row;
  /** The table revision of the change that failed. */
  revision: number;
  attempts: number;
  dueAt: number;
}

export interface ReconcilerDeps<Row> {
  name: string;
  db: StateDB;
  table: Table<Row> | AnyRWTable | AnyTable;
  ops: ReconcilerOps<Row>;
  clock: Clock;
  log: Logger;
}

export class Reconciler<Row> implements Disposable {
  private readonly retries = new Map<string, Retry<Row>>();
  /** Status writes of this round, by key (null: remove the key's status); written with the progress in one txn. */
  private readonly statusWrites = new Map<string, StatusRow | null>();
  /**
   * The statuses this reconciler has stored (it is their only writer): an
   * unchanged status is recognised here, without a read of the status table
   * per row, and never rewritten.
   */
  private readonly stored = new Map<string, StatusRow>();
  /** Every change up to this table revision has been applied or has an error status (as published in reconcile-progress). */
  private appliedRevision = -1;
  private iterator: ChangeIterator<Row> | undefined;
  private disposed = false;
  private initialized = false;
  private graceExpired = false;
  private fullDue = false;
  private nextFullAt = Infinity;
  /**
   * Keys this round has applied, with the revision: a full round right after the partial that
   * applied them (the first one, as the table becomes initialized) does not write them again.
   */
  private appliedThisRound = new Map<string, number>();
  /** Tick-only mode: when the next tick is due (clock ms). */
  private nextTickAt = 0;
  private wake: (() => void) | undefined;
  private readonly timers: TimerHandle[] = [];
  private loop: Promise<void> | undefined;
  private readonly abort = new AbortController();
  /** Settled by the first full round (pruned and applied: the target is what the table says), or rejected at dispose. */
  private readonly firstFull = deferred();
  private readonly stats = { errorCount: 0, partialRounds: 0, fullRounds: 0 } as {
    errorCount: number;
    partialRounds: number;
    fullRounds: number;
    lastPartial?: RoundOutcome;
    lastFull?: RoundOutcome;
  };

  constructor(
    private readonly deps: ReconcilerDeps<Row>,
    private readonly config: ReconcilerConfig = reconcilerDefaults,
  ) {
    for (const [k, v] of Object.entries(config)) {
      if (k === 'tickMs' && v === undefined) continue;
      if (!(typeof v === 'number' && v > 0)) throw new Error(`reconciler ${deps.name}: ${k} must be > 0, got ${v}`);
    }
    if (config.retryMinMs > config.retryMaxMs) throw new Error(`reconciler ${deps.name}: retryMinMs must be <= retryMaxMs`);
    registerStatusTables(deps.db);
  }

  start(): void {
    if (this.loop) return;
    const table = this.deps.table as Table<Row>;
    if (this.deps.db.readTxn().get(reconcileProgressTable, this.deps.name)) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `another reconciler named ${this.deps.name} runs on this database`);
    }
    this.iterator = this.deps.db.changes(table);
    this.nextTickAt = this.deps.clock.now();
    this.timers.push(
      this.deps.clock.setTimeout(() => {
        this.graceExpired = true;
        this.kick();
      }, this.config.initGraceMs),
    );
    this.deps.db.whenInitialized(table, this.abort.signal).then(
      () => this.kick(),
      () => {},
    );
    this.loop = this.run();
  }

  /** Asks for a full reconciliation as soon as possible (e.g. links changed). */
  triggerFull(): void {
    this.fullDue = true;
    this.kick();
  }

  /** The row's status as the status table says now (see status.ts for pending). */
  status(key: string): RowStatus | undefined {
    return rowStatus(this.deps.db.readTxn(), this.deps.name, this.deps.table as Table<Row>, key);
  }

  /** Rows not done now: pending writes and deletes, and errors. */
  notDone(): RowStatusEntry[] {
    return rowsNotDone(this.deps.db.readTxn(), this.deps.name, this.deps.table as Table<Row>);
  }

  /** Rows whose last attempt failed. */
  errors(): RowStatusEntry[] {
    return rowsInError(this.deps.db.readTxn(), this.deps.name);
  }

  /**
   * Resolves once revision `revision` (or a later one) of `key` has been
   * handled: `done` or `error` (see status.ts waitForRow). Rejects with
   * HERALD_RECONCILE_TIMEOUT at the deadline and HERALD_STOPPED on dispose.
   */
  waitForRow(key: string, revision: number, opts: WaitForRowOptions = {}): Promise<RowStatus> {
    if (this.disposed) return Promise.reject(this.stoppedError());
    const signal = opts.signal ? AbortSignal.any([opts.signal, this.abort.signal]) : this.abort.signal;
    return waitForRow(this.deps, this.deps.name, this.deps.table as Table<Row>, key, revision, { ...opts, signal });
  }

  /**
   * Resolves once the first full reconciliation has run — the target was made
   * what the table said then, stale state pruned (a row that failed shows in
   * status, not here). Rejects with HERALD_STOPPED if disposed before.
   */
  firstFullRound(): Promise<void> {
    return this.firstFull.promise;
  }

  health(): ReconcilerHealth {
    return {
      name: this.deps.name,
      initialized: this.initialized,
      ...(this.stats.lastPartial ? { lastPartial: this.stats.lastPartial } : {}),
      ...(this.stats.lastFull ? { lastFull: this.stats.lastFull } : {}),
      errorCount: this.stats.errorCount,
      retrying: this.retries.size,
      partialRounds: this.stats.partialRounds,
      fullRounds: this.stats.fullRounds,
    };
  }

  /**
   * Resolves once every change up to `revision` (default: the table's revision
   * now) has been applied to the target or has a recorded error status; the
   * outcome lists the keys that failed. Rejects with HERALD_RECONCILE_TIMEOUT
   * at the deadline and HERALD_STOPPED on dispose: it never reports a
   * withdrawal it has not done (a caller about to give an IP away relies on it).
   */
  settled(opts: SettleOptions = {}): Promise<SettleOutcome> {
    const table = this.deps.table as Table<Row>;
    const revision = opts.revision ?? this.deps.db.readTxn().revision(table);
    if (this.disposed) return Promise.reject(this.stoppedError());
    return waitOnTables(
      this.deps,
      [reconcileProgressTable],
      { timeoutMs: opts.timeoutMs ?? settleTimeoutDefaultMs, signal: this.abort.signal },
      `reconciler ${this.deps.name} to apply changes up to revision ${revision}`,
      (txn) => {
        if (appliedRevision(txn, this.deps.name) < revision) return undefined;
        // Rows whose change up to `revision` failed and still fails (a newer change's error is not this revision's).
        const failed = rowsInError(txn, this.deps.name).filter((e) => e.revision <= revision).map((e) => e.key);
        return { revision, failed };
      },
    );
  }

  private stoppedError(): HeraldError {
    return new HeraldError('HERALD_STOPPED', `reconciler ${this.deps.name} is stopped`);
  }

  /** Publishes this round's statuses and, with them, how far the reconciler has got. */
  private flush(revision: number): void {
    const advance = revision > this.appliedRevision;
    if (this.statusWrites.size === 0 && !advance) return;
    const { status, progress } = reconcileStatusWritable;
    this.deps.db.update([status, progress], (txn) => {
      for (const [key, row] of this.statusWrites) {
        const id = statusKey(this.deps.name, key);
        if (row === null) {
          txn.delete(status, id);
          this.stored.delete(key);
        } else {
          txn.insert(status, row);
          this.stored.set(key, row);
        }
      }
      if (advance) {
        txn.insert(progress, { reconciler: this.deps.name, table: this.deps.table.name, revision, updatedAt: this.deps.clock.now() });
      }
    });
    this.statusWrites.clear();
    if (advance) this.appliedRevision = revision;
  }

  /** Records this round's status of `key` (null: none), dropping a write that would change nothing. */
  private setStatus(key: string, row: StatusRow | null): void {
    const stored = this.stored.get(key);
    const same = row === null ? stored === undefined : stored !== undefined && sameStatus(stored, row);
    if (same) this.statusWrites.delete(key);
    else this.statusWrites.set(key, row);
  }

  /** setStatus(done) without building the row when the stored status already says so. */
  private setDone(key: string, revision: number): void {
    this.appliedThisRound.set(key, revision);
    const stored = this.stored.get(key);
    if (stored !== undefined && stored.kind === 'done' && stored.op === 'upsert' && stored.revision === revision) {
      this.statusWrites.delete(key);
      return;
    }
    this.statusWrites.set(key, { reconciler: this.deps.name, key, kind: 'done', op: 'upsert', revision, updatedAt: this.deps.clock.now() });
  }

  private kick(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private async run(): Promise<void> {
    const table = this.deps.table as Table<Row>;
    const tickMs = this.config.tickMs;
    while (!this.disposed) {
      // Event-driven: every round takes the changes committed since the last. Tick-only: only a due tick does.
      const tick = tickMs === undefined || this.deps.clock.now() >= this.nextTickAt;
      this.appliedThisRound.clear();
      try {
        // The next tick on the same phase; ticks missed while a round ran are dropped (as Go's time.Ticker).
        if (tick && tickMs !== undefined) this.nextTickAt += tickMs * Math.max(1, Math.ceil((this.deps.clock.now() - this.nextTickAt + 1) / tickMs));
        if (tick) {
          const batch = this.iterator!.next();
          if (batch.changes.length > 0) await this.partial(batch.changes);
          this.flush(batch.revision);
        }
        await this.runDueRetries();
        this.flush(this.appliedRevision);
        if (!this.initialized && (this.deps.db.isInitialized(table) || this.graceExpired)) {
          this.initialized = true;
          this.fullDue = true;
          if (!this.deps.db.isInitialized(table)) {
            this.deps.log.warn({ reconciler: this.deps.name }, 'table not initialized within the grace period: pruning anyway');
          }
        }
        if (tick && this.initialized && (this.fullDue || this.deps.clock.now() >= this.nextFullAt)) {
          await this.full();
          this.flush(this.appliedRevision);
        }
      } catch (e) {
        // Only a bug gets here (row errors are handled per row): log, back off, go on.
        this.deps.log.error({ reconciler: this.deps.name, err: describeError(e) }, 'reconciler round failed');
        await this.sleep(this.config.retryMinMs);
      }
      if (this.disposed) break;
      if (tickMs === undefined ? this.iterator!.hasUnseen || this.fullDue : this.deps.clock.now() >= this.nextTickAt) continue;
      await this.waitForWork();
    }
  }

  private waitForWork(): Promise<void> {
    return new Promise<void>((resolve) => {
      const ac = new AbortController();
      const timers: TimerHandle[] = [];
      this.wake = () => {
        ac.abort();
        for (const t of timers) t.cancel();
        resolve();
      };
      const ticking = this.config.tickMs !== undefined;
      // Tick-only: the next tick is the only wake-up besides retries (a full round waits for a tick too).
      const wakeAt = ticking ? Math.min(this.nextRetryAt(), this.nextTickAt) : Math.min(this.nextRetryAt(), this.initialized ? this.nextFullAt : Infinity);
      if (wakeAt !== Infinity) timers.push(this.deps.clock.setTimeout(() => this.kick(), Math.max(0, wakeAt - this.deps.clock.now())));
      if (!ticking) {
        this.iterator!.wait(AbortSignal.any([ac.signal, this.abort.signal])).then(
          () => this.kick(),
          () => {},
        );
      }
    });
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.timers.push(this.deps.clock.setTimeout(resolve, ms));
    });
  }

  private nextRetryAt(): number {
    let at = Infinity;
    for (const r of this.retries.values()) at = Math.min(at, r.dueAt);
    return at;
  }

  private async partial(changes: ReadonlyArray<{ kind: 'upsert' | 'delete'; key: string; row: Row; revision: number }>): Promise<void> {
    const started = this.deps.clock.now();
    let errors = 0;
    const { ops } = this.deps;
    const upserts = changes.filter((c) => c.kind === 'upsert');
    if (changes.length >= BATCH_MIN_ROWS) this.deps.log.debug({ reconciler: this.deps.name, rows: changes.length, upserts: upserts.length }, 'trace: partial round');
    if ((ops.updateBatch && upserts.length >= BATCH_MIN_ROWS) || (ops.deleteBatch && changes.length - upserts.length >= BATCH_MIN_ROWS)) {
      // Each key appears once per round, so the order between keys is free: deletes first (they free room in a bounded target).
      const deletes = changes.filter((c) => c.kind === 'delete');
      for (const c of changes) this.retries.delete(c.key); // the newest change supersedes a pending retry
      errors += await this.applyMany('delete', deletes.map((c) => c.key), deletes.map((c) => c.row), deletes.map((c) => c.revision));
      errors += await this.applyMany('upsert', upserts.map((c) => c.key), upserts.map((c) => c.row), upserts.map((c) => c.revision));
    } else {
      for (const c of changes) {
        this.retries.delete(c.key); // the newest change supersedes a pending retry
        if (!(await this.apply(c.kind, c.key, c.row, c.revision, 0))) errors++;
      }
    }
    this.stats.partialRounds++;
    this.stats.lastPartial = { at: started, durationMs: this.deps.clock.now() - started, ok: errors === 0, rows: changes.length, errors };
  }

  private async runDueRetries(): Promise<void> {
    const now = this.deps.clock.now();
    const table = this.deps.table as Table<Row>;
    for (const [key, r] of [...this.retries]) {
      // A newer change (handled meanwhile, or by an earlier retry's await) supersedes this one.
      if (this.retries.get(key) !== r || r.dueAt > now) continue;
      this.retries.delete(key);
      // Retry what the table wants now, not what it wanted when the attempt
      // failed: a row deleted meanwhile must never be written back.
      const current = this.deps.db.readTxn().getWithRevision(table, key);
      if (current === undefined) await this.apply('delete', key, r.row, r.kind === 'delete' ? r.revision : this.deps.db.readTxn().revision(table), r.attempts);
      else await this.apply('upsert', key, current.row as Row, current.revision, r.attempts);
    }
  }

  /** Applies one change; on failure records the error and schedules a retry. */
  private async apply(kind: 'upsert' | 'delete', key: string, row: Row, revision: number, attempts: number): Promise<boolean> {
    try {
      if (kind === 'upsert') {
        await this.deps.ops.update(row);
        this.setDone(key, revision);
      } else {
        await this.deps.ops.delete(row);
        this.setStatus(key, null);
      }
      return true;
    } catch (e) {
      this.recordError(kind, key, row, revision, attempts + 1, e);
      return false;
    }
  }

  /**
   * Applies many changes of one kind: through the ops' batch call when it has
   * one and there are enough of them, else row by row. Returns how many failed.
   * A batch call that throws is retried row by row, so each error is a row's.
   */
  private async applyMany(kind: 'upsert' | 'delete', keys: readonly string[], rows: readonly Row[], revisions: readonly number[]): Promise<number> {
    const batch = kind === 'upsert' ? this.deps.ops.updateBatch : this.deps.ops.deleteBatch;
    let errors = 0;
    let results: ReadonlyArray<unknown> | undefined;
    if (batch && rows.length >= BATCH_MIN_ROWS) {
      try {
        results = await batch.call(this.deps.ops, rows);
        if (results.length !== rows.length) throw new Error(`batch ${kind} returned ${results.length} outcomes for ${rows.length} rows`);
      } catch (e) {
        this.deps.log.debug({ reconciler: this.deps.name, op: kind, rows: rows.length, err: describeError(e) }, 'batch failed; applying row by row');
        results = undefined;
      }
    }
    if (!results) {
      for (let i = 0; i < rows.length; i++) if (!(await this.apply(kind, keys[i]!, rows[i]!, revisions[i]!, 0))) errors++;
      return errors;
    }
    for (let i = 0; i < rows.length; i++) {
      const r = results[i];
      if (r === undefined) {
        if (kind === 'upsert') this.setDone(keys[i]!, revisions[i]!);
        else this.setStatus(keys[i]!, null);
      } else {
        errors++;
        this.recordError(kind, keys[i]!, rows[i]!, revisions[i]!, 1, r);
      }
    }
    return errors;
  }

  private recordError(kind: 'upsert' | 'delete', key: string, row: Row, revision: number, attempts: number, e: unknown): void {
    this.stats.errorCount++;
    const error = describeError(e);
    const backoff = Math.min(this.config.retryMaxMs, this.config.retryMinMs * 2 ** Math.min(attempts - 1, 30));
    this.retries.set(key, { kind, row, revision, attempts, dueAt: this.deps.clock.now() + backoff });
    const now = this.deps.clock.now();
    this.setStatus(key, { reconciler: this.deps.name, key, kind: 'error', op: kind, revision, updatedAt: now, error, attempts });
    const level = attempts === 1 || attempts % 10 === 0 ? 'warn' : 'debug';
    this.deps.log[level]({ reconciler: this.deps.name, key, op: kind, attempts, retryInMs: backoff, err: error }, 'reconcile failed; will retry');
  }

  private async full(): Promise<void> {
    this.fullDue = false;
    const started = this.deps.clock.now();
    this.nextFullAt = started + this.config.fullIntervalMs;
    const table = this.deps.table as Table<Row>;
    const txn = this.deps.db.readTxn();
    let errors = 0;
    let rowCount: number;
    if (this.deps.ops.updateBatch && txn.count(table) >= BATCH_MIN_ROWS) {
      const keys: string[] = [];
      const rows: Row[] = [];
      const revisions: number[] = [];
      let skipped = 0;
      txn.forEachWithRevision(table, (key, row, revision) => {
        if (this.appliedThisRound.get(key) === revision && !this.retries.has(key)) return void skipped++; // written moments ago
        keys.push(key);
        rows.push(row);
        revisions.push(revision);
      });
      rowCount = rows.length + skipped;
      for (const key of keys) this.retries.delete(key);
      const snapshotRevision = txn.revision(table);
      errors = await this.applyMany('upsert', keys, rows, revisions);
      // Changed or deleted while the batch ran: the pending partial handles those rows, and their status.
      const now = this.deps.db.readTxn();
      if (now.revision(table) !== snapshotRevision) {
        for (let i = 0; i < keys.length; i++) {
          if (now.get(table, keys[i]!) !== rows[i]) this.statusWrites.delete(keys[i]!);
        }
      }
    } else {
      const rows = txn.list(table) as readonly Row[];
      rowCount = rows.length;
      errors = await this.fullRowByRow(rows);
    }
    let pruneError: string | undefined;
    try {
      // Prune against the table as it is now, so a row deleted meanwhile is not kept (in no particular order).
      const desired: Row[] = [];
      this.deps.db.readTxn().forEachWithRevision(table, (_key, row) => desired.push(row));
      await this.deps.ops.prune(desired);
    } catch (e) {
      pruneError = describeError(e);
      this.stats.errorCount++;
      this.deps.log.warn({ reconciler: this.deps.name, err: pruneError }, 'prune failed; the next full reconciliation retries');
      this.nextFullAt = started + this.config.retryMinMs;
    }
    this.stats.fullRounds++;
    this.stats.lastFull = {
      at: started,
      durationMs: this.deps.clock.now() - started,
      ok: errors === 0 && pruneError === undefined,
      rows: rowCount,
      errors,
      ...(pruneError ? { error: pruneError } : {}),
    };
    this.deps.log.debug({ reconciler: this.deps.name, ...this.stats.lastFull }, 'full reconciliation');
    this.firstFull.resolve();
  }

  /** The full pass without a batch capability: row by row, skipping rows changed since the snapshot. */
  private async fullRowByRow(rows: readonly Row[]): Promise<number> {
    const table = this.deps.table as Table<Row>;
    let errors = 0;
    for (const row of rows) {
      const key = table.primaryKey(row);
      // Changed or deleted since the snapshot (while an earlier row was applied): the pending partial handles it.
      const current = this.deps.db.readTxn().getWithRevision(table, key);
      if (current?.row !== row) continue;
      this.retries.delete(key);
      if (!(await this.apply('upsert', key, row, current.revision, 0))) errors++;
    }
    return errors;
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    // settled() and waitForRow() waiters reject with this reason.
    this.abort.abort(new HeraldError('HERALD_STOPPED', `reconciler ${this.deps.name} stopped`));
    this.firstFull.promise.catch(() => {}); // nobody may be waiting
    this.firstFull.reject(this.stoppedError());
    for (const t of this.timers) t.cancel();
    this.kick();
    this.iterator?.close();
    await this.loop;
    if (!this.loop) return;
    // Its statuses say nothing once it is gone (and a successor may take the name).
    const { status, progress } = reconcileStatusWritable;
    this.deps.db.update([status, progress], (txn) => {
      for (const row of statusesOf(txn, this.deps.name)) txn.delete(status, row);
      txn.delete(progress, this.deps.name);
    });
  }
}

function sameStatus(a: StatusRow | undefined, b: StatusRow): boolean {
  return a !== undefined && a.kind === b.kind && a.op === b.op && a.revision === b.revision && a.error === b.error && a.attempts === b.attempts;
}

/** A promise with its settle functions outside (Promise.withResolvers is Node 22). */
function deferred(): { promise: Promise<void>; resolve: () => void; reject: (e: unknown) => void } {
  let resolve!: () => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
