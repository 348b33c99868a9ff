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

export interface ReconcilerOps<Row> {
  /** Makes the target hold `row`. Must be idempotent. */
  update(row: Row): void | Promise<void>;
  /** Removes `row` from the target. Must be idempotent. */
  delete(row: Row): void | Promise<void>;
  /** Removes from the target everything that `desired` does not hold. */
  prune(desired: readonly Row[]): void | Promise<void>;
}

export interface ReconcilerConfig {
  /** Full reconciliation period (default 5 min, as Cilium). */
  fullIntervalMs: number;
  /** Backoff of a failing row: doubles from min to max. */
  retryMinMs: number;
  retryMaxMs: number;
  /** Prune anyway when the table is still not initialized after this long. */
  initGraceMs: number;
}

export const reconcilerDefaults: ReconcilerConfig = {
  fullIntervalMs: 5 * 60_000,
  retryMinMs: 100,
  retryMaxMs: 60_000,
  initGraceMs: 60_000,
};

export type RowStatus =
  | { kind: 'done'; updatedAt: number }
  | { kind: 'error'; updatedAt: number; error: string; attempts: number };

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

interface SettleWaiter {
  revision: number;
  resolve: (o: SettleOutcome) => void;
  reject: (e: Error) => void;
  timer: TimerHandle;
}

interface Retry<Row> {
  kind: 'upsert' | 'delete';
  row: Row;
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
  private readonly statuses = new Map<string, RowStatus>();
  private readonly retries = new Map<string, Retry<Row>>();
  /** Keys whose last change failed, with that change's table revision (cleared when the key succeeds). */
  private readonly failedAt = new Map<string, number>();
  /** Every change up to this table revision has been applied or has an error status. */
  private appliedRevision = -1;
  private readonly settleWaiters = new Set<SettleWaiter>();
  private iterator: ChangeIterator<Row> | undefined;
  private disposed = false;
  private initialized = false;
  private graceExpired = false;
  private fullDue = false;
  private nextFullAt = Infinity;
  private wake: (() => void) | undefined;
  private readonly timers: TimerHandle[] = [];
  private loop: Promise<void> | undefined;
  private readonly abort = new AbortController();
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
      if (!(typeof v === 'number' && v > 0)) throw new Error(`reconciler ${deps.name}: ${k} must be > 0, got ${v}`);
    }
    if (config.retryMinMs > config.retryMaxMs) throw new Error(`reconciler ${deps.name}: retryMinMs must be <= retryMaxMs`);
  }

  start(): void {
    if (this.loop) return;
    const table = this.deps.table as Table<Row>;
    this.iterator = this.deps.db.changes(table);
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

  status(key: string): RowStatus | undefined {
    return this.statuses.get(key);
  }

  allStatuses(): ReadonlyMap<string, RowStatus> {
    return this.statuses;
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
    if (this.disposed) return Promise.reject(new HeraldError('HERALD_STOPPED', `reconciler ${this.deps.name} is stopped`));
    if (this.appliedRevision >= revision) return Promise.resolve(this.outcome(revision));
    const timeoutMs = opts.timeoutMs ?? settleTimeoutDefaultMs;
    return new Promise<SettleOutcome>((resolve, reject) => {
      const waiter: SettleWaiter = {
        revision,
        resolve,
        reject,
        timer: this.deps.clock.setTimeout(() => {
          this.settleWaiters.delete(waiter);
          reject(
            new HeraldError(
              'HERALD_RECONCILE_TIMEOUT',
              `reconciler ${this.deps.name}: changes up to revision ${revision} not applied within ${timeoutMs} ms (applied up to ${this.appliedRevision})`,
            ),
          );
        }, timeoutMs),
      };
      this.settleWaiters.add(waiter);
    });
  }

  private outcome(revision: number): SettleOutcome {
    const failed = [...this.failedAt].filter(([, rev]) => rev <= revision).map(([key]) => key);
    return { revision, failed };
  }

  private markApplied(revision: number): void {
    if (revision <= this.appliedRevision) return;
    this.appliedRevision = revision;
    for (const w of [...this.settleWaiters]) {
      if (w.revision > revision) continue;
      this.settleWaiters.delete(w);
      w.timer.cancel();
      w.resolve(this.outcome(w.revision));
    }
  }

  private kick(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private async run(): Promise<void> {
    const table = this.deps.table as Table<Row>;
    while (!this.disposed) {
      try {
        const batch = this.iterator!.next();
        if (batch.changes.length > 0) await this.partial(batch.changes);
        this.markApplied(batch.revision);
        await this.runDueRetries();
        if (!this.initialized && (this.deps.db.isInitialized(table) || this.graceExpired)) {
          this.initialized = true;
          this.fullDue = true;
          if (!this.deps.db.isInitialized(table)) {
            this.deps.log.warn({ reconciler: this.deps.name }, 'table not initialized within the grace period: pruning anyway');
          }
        }
        if (this.initialized && (this.fullDue || this.deps.clock.now() >= this.nextFullAt)) await this.full();
      } catch (e) {
        // Only a bug gets here (row errors are handled per row): log, back off, go on.
        this.deps.log.error({ reconciler: this.deps.name, err: describeError(e) }, 'reconciler round failed');
        await this.sleep(this.config.retryMinMs);
      }
      if (this.disposed) break;
      if (this.iterator!.hasUnseen || this.fullDue) continue;
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
      const wakeAt = Math.min(this.nextRetryAt(), this.initialized ? this.nextFullAt : Infinity);
      if (wakeAt !== Infinity) timers.push(this.deps.clock.setTimeout(() => this.kick(), Math.max(0, wakeAt - this.deps.clock.now())));
      this.iterator!.wait(AbortSignal.any([ac.signal, this.abort.signal])).then(
        () => this.kick(),
        () => {},
      );
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
    for (const c of changes) {
      this.retries.delete(c.key); // the newest change supersedes a pending retry
      if (!(await this.apply(c.kind, c.key, c.row, 0))) {
        errors++;
        this.failedAt.set(c.key, c.revision);
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
      const current = this.deps.db.readTxn().get(table, key) as Row | undefined;
      if (current === undefined) await this.apply('delete', key, r.row, r.attempts);
      else await this.apply('upsert', key, current, r.attempts);
    }
  }

  /** Applies one change; on failure records the error and schedules a retry. */
  private async apply(kind: 'upsert' | 'delete', key: string, row: Row, attempts: number): Promise<boolean> {
    try {
      if (kind === 'upsert') {
        await this.deps.ops.update(row);
        this.statuses.set(key, { kind: 'done', updatedAt: this.deps.clock.now() });
      } else {
        await this.deps.ops.delete(row);
        this.statuses.delete(key);
      }
      this.failedAt.delete(key);
      return true;
    } catch (e) {
      this.recordError(kind, key, row, attempts + 1, e);
      return false;
    }
  }

  private recordError(kind: 'upsert' | 'delete', key: string, row: Row, attempts: number, e: unknown): void {
    this.stats.errorCount++;
    const error = describeError(e);
    const backoff = Math.min(this.config.retryMaxMs, this.config.retryMinMs * 2 ** Math.min(attempts - 1, 30));
    this.retries.set(key, { kind, row, attempts, dueAt: this.deps.clock.now() + backoff });
    this.statuses.set(key, { kind: 'error', updatedAt: this.deps.clock.now(), error, attempts });
    const level = attempts === 1 || attempts % 10 === 0 ? 'warn' : 'debug';
    this.deps.log[level]({ reconciler: this.deps.name, key, op: kind, attempts, retryInMs: backoff, err: error }, 'reconcile failed; will retry');
  }

  private async full(): Promise<void> {
    this.fullDue = false;
    const started = this.deps.clock.now();
    this.nextFullAt = started + this.config.fullIntervalMs;
    const table = this.deps.table as Table<Row>;
    const txn = this.deps.db.readTxn();
    const rows = txn.list(table) as readonly Row[];
    let errors = 0;
    for (const row of rows) {
      const key = table.primaryKey(row);
      // Changed or deleted since the snapshot (while an earlier row was applied): the pending partial handles it.
      if (this.deps.db.readTxn().get(table, key) !== row) continue;
      this.retries.delete(key);
      if (!(await this.apply('upsert', key, row, 0))) errors++;
    }
    let pruneError: string | undefined;
    try {
      // Prune against the table as it is now, so a row deleted meanwhile is not kept.
      await this.deps.ops.prune(this.deps.db.readTxn().list(table) as readonly Row[]);
    } catch (e) {
      pruneError = describeError(e);
      this.stats.errorCount++;
      this.deps.log.warn({ reconciler: this.deps.name, err: pruneError }, 'prune failed; the next full reconciliation retries');
      this.nextFullAt = started + this.config.retryMinMs;
    }
    // Forget statuses of rows that no longer exist.
    const keys = new Set(rows.map((r) => table.primaryKey(r)));
    for (const key of [...this.statuses.keys()]) if (!keys.has(key) && !this.retries.has(key)) this.statuses.delete(key);
    this.stats.fullRounds++;
    this.stats.lastFull = {
      at: started,
      durationMs: this.deps.clock.now() - started,
      ok: errors === 0 && pruneError === undefined,
      rows: rows.length,
      errors,
      ...(pruneError ? { error: pruneError } : {}),
    };
    this.deps.log.debug({ reconciler: this.deps.name, ...this.stats.lastFull }, 'full reconciliation');
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.abort.abort();
    for (const t of this.timers) t.cancel();
    for (const w of this.settleWaiters) {
      w.timer.cancel();
      w.reject(new HeraldError('HERALD_STOPPED', `reconciler ${this.deps.name} stopped before revision ${w.revision} was applied`));
    }
    this.settleWaiters.clear();
    this.kick();
    this.iterator?.close();
    await this.loop;
  }
}
