/**
 * The generic reconciler against an in-memory target whose operations a test
 * can make fail or hold (to catch what runs while an operation is in flight),
 * on a manual clock.
 */
import { silentLogger, type Logger } from '../../../src/core/logger.js';
import { Reconciler, reconcilerDefaults, type ReconcilerConfig, type ReconcilerOps } from '../../../src/core/reconciler/reconciler.js';
import { StateDB, defineTable } from '../../../src/core/statedb/index.js';
import { ManualClock } from '../../helpers/manual-clock.js';

export interface TestRow {
  readonly key: string;
  readonly value: number;
}

export const testRows = defineTable<TestRow>({ name: 'test-rows', primaryKey: (r) => r.key });

/** A target map; `log` records every operation when it starts, with the table revision at that moment. */
export class FakeTarget implements ReconcilerOps<TestRow> {
  readonly entries = new Map<string, TestRow>();
  readonly log: Array<{ op: 'update' | 'delete'; key: string; value: number; tableRevision: number }> = [];
  /** Keys whose operations throw. */
  readonly failing = new Set<string>();
  private readonly holds = new Map<string, { opened: Promise<void>; open: () => void }>();

  constructor(private readonly db: StateDB) {}

  /** The next operation on `key` waits until the returned function is called. */
  hold(key: string): () => void {
    let open!: () => void;
    const opened = new Promise<void>((r) => (open = r));
    this.holds.set(key, { opened, open });
    this.opens.push(open);
    return open;
  }

  private readonly opens: Array<() => void> = [];

  /** Opens every hold (cleanup after a failed assertion, so dispose() can finish). */
  openAll(): void {
    for (const open of this.opens.splice(0)) open();
    this.holds.clear();
  }

  /** Whether an operation on `key` is waiting in a hold now. */
  held = new Set<string>();

  private async begin(op: 'update' | 'delete', { key, value }: TestRow): Promise<void> {
    this.log.push({ op, key, value, tableRevision: this.db.readTxn().revision(testRows) });
    const hold = this.holds.get(key);
    if (hold) {
      this.holds.delete(key);
      this.held.add(key);
      await hold.opened;
      this.held.delete(key);
    }
    if (this.failing.has(key)) throw new Error(`${op} ${key}: injected failure`);
  }

  async update(row: TestRow): Promise<void> {
    await this.begin('update', row);
    this.entries.set(row.key, row);
  }

  async delete(row: TestRow): Promise<void> {
    await this.begin('delete', row);
    this.entries.delete(row.key);
  }

  /** Prunes so far; while `pruneFailure` is set, prune() throws it. */
  prunes = 0;
  pruneFailure: Error | undefined;

  prune(desired: readonly TestRow[]): void {
    this.prunes++;
    if (this.pruneFailure) throw this.pruneFailure;
    const keep = new Set(desired.map((r) => r.key));
    for (const key of [...this.entries.keys()]) if (!keep.has(key)) this.entries.delete(key);
  }
}

/** `initialized: false` leaves the table's initializer pending (`init.done()` completes it). */
export function setupReconciler(config: Partial<ReconcilerConfig> = {}, opts: { log?: Logger; initialized?: boolean } = {}) {
  const clock = new ManualClock();
  const db = new StateDB([testRows]);
  const target = new FakeTarget(db);
  const init = db.registerInitializer(testRows, 'test');
  if (opts.initialized !== false) init.done();
  const reconciler = new Reconciler<TestRow>({ name: 'test', db, table: testRows, ops: target, clock, log: opts.log ?? silentLogger }, { ...reconcilerDefaults, ...config });
  reconciler.start();
  const dispose = async () => {
    target.openAll();
    await reconciler.dispose();
  };
  const put = (...rows: TestRow[]) => db.update([testRows], (t) => rows.forEach((r) => t.insert(testRows, r)));
  const remove = (...keys: string[]) =>
    db.update([testRows], (t) => {
      for (const key of keys) {
        const row = t.get(testRows, key);
        if (row) t.delete(testRows, row);
      }
    });
  const revision = () => db.readTxn().revision(testRows);
  return { clock, db, target, reconciler, init, put, remove, revision, dispose };
}

/** Lets the event loop run `turns` times (enough for every in-memory operation to finish). */
export async function turns(n = 10): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

/** Observes a promise without awaiting it. */
export function track<T>(p: Promise<T>) {
  const state: { settled: boolean; value?: T; error?: unknown } = { settled: false };
  p.then(
    (value) => Object.assign(state, { settled: true, value }),
    (error: unknown) => Object.assign(state, { settled: true, error }),
  );
  return state;
}
