/**
 * Records what an IntentSource reports, and waits for it: a wait is woken by
 * each report (no polling), bounded by a generous real-time deadline that
 * only turns a hang into a failure.
 */
import { formatErrors, type ManifestDiagnostic } from '../../../src/intent/diagnostics.js';
import type { IntentSnapshot } from '../../../src/intent/snapshot.js';
import type { IntentSourceHandlers } from '../../../src/intent/sources/source.js';

export type Problem = { errors: readonly ManifestDiagnostic[] } | { error: Error };

export class Recorder implements IntentSourceHandlers {
  readonly snapshots: IntentSnapshot[] = [];
  readonly problems: Problem[] = [];
  readonly warnings: (readonly ManifestDiagnostic[])[] = [];
  private readonly waiters = new Set<() => void>();

  onSnapshot(snapshot: IntentSnapshot): void {
    this.snapshots.push(snapshot);
    this.wake();
  }
  onError(problem: Problem): void {
    this.problems.push(problem);
    this.wake();
  }
  onWarnings(warnings: readonly ManifestDiagnostic[]): void {
    this.warnings.push(warnings);
  }

  get last(): IntentSnapshot {
    const s = this.snapshots.at(-1);
    if (!s) throw new Error('no snapshot yet');
    return s;
  }

  /** The last problem as text: formatted diagnostics, or the error message. */
  get lastProblem(): string {
    const p = this.problems.at(-1);
    if (!p) throw new Error('no problem reported');
    return 'errors' in p ? formatErrors(p.errors) : p.error.message;
  }

  /** Waits until there are more than `count` snapshots. */
  async snapshotAfter(count: number, timeoutMs = 15_000): Promise<IntentSnapshot> {
    await this.until(() => this.snapshots.length > count, timeoutMs, `snapshot #${count + 1}`);
    return this.last;
  }

  /** Waits for a snapshot that satisfies `pred` (one already recorded counts); returns it. */
  async snapshotWhere(pred: (s: IntentSnapshot) => boolean, what: string, timeoutMs = 15_000): Promise<IntentSnapshot> {
    await this.until(() => this.snapshots.some(pred), timeoutMs, what);
    return this.snapshots.find(pred)!;
  }

  /** Waits until there are more than `count` problems; returns the last as text. */
  async problemAfter(count: number, timeoutMs = 15_000): Promise<string> {
    await this.until(() => this.problems.length > count, timeoutMs, `problem #${count + 1}`);
    return this.lastProblem;
  }

  /** Re-checks `cond` at each report until it holds. */
  private async until(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (cond()) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const check = (): void => {
        if (!cond()) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      this.waiters.add(check);
    });
  }

  private wake(): void {
    for (const check of [...this.waiters]) check();
  }
}

/** Polls `cond` (state with no event to wait on, e.g. a revision read over the network) until it holds. */
export async function waitUntil(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Keys of every map of a snapshot, by kind, sorted. */
export function keysOf(s: IntentSnapshot): { services: string[]; pools: string[]; policies: string[]; nodes: string[] } {
  const sorted = (m: ReadonlyMap<string, unknown>): string[] => [...m.keys()].sort();
  return { services: sorted(s.services), pools: sorted(s.pools), policies: sorted(s.policies), nodes: sorted(s.nodes) };
}
