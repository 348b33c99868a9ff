/** Records what an IntentSource reports, and waits for it (real time, bounded). */
import { formatErrors, type ManifestDiagnostic } from '../../../src/intent/diagnostics.js';
import type { IntentSnapshot } from '../../../src/intent/snapshot.js';
import type { IntentSourceHandlers } from '../../../src/intent/sources/source.js';

export type Problem = { errors: readonly ManifestDiagnostic[] } | { error: Error };

export class Recorder implements IntentSourceHandlers {
  readonly snapshots: IntentSnapshot[] = [];
  readonly problems: Problem[] = [];
  readonly warnings: (readonly ManifestDiagnostic[])[] = [];

  onSnapshot(snapshot: IntentSnapshot): void {
    this.snapshots.push(snapshot);
  }
  onError(problem: Problem): void {
    this.problems.push(problem);
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
  async snapshotAfter(count: number, timeoutMs = 8000): Promise<IntentSnapshot> {
    await waitUntil(() => this.snapshots.length > count, timeoutMs, `snapshot #${count + 1}`);
    return this.last;
  }

  /** Waits until there are more than `count` problems; returns the last as text. */
  async problemAfter(count: number, timeoutMs = 8000): Promise<string> {
    await waitUntil(() => this.problems.length > count, timeoutMs, `problem #${count + 1}`);
    return this.lastProblem;
  }
}

export async function waitUntil(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Keys of every map of a snapshot, by kind, sorted. */
export function keysOf(s: IntentSnapshot): { services: string[]; pools: string[]; policies: string[]; nodes: string[] } {
  const sorted = (m: ReadonlyMap<string, unknown>): string[] => [...m.keys()].sort();
  return { services: sorted(s.services), pools: sorted(s.pools), policies: sorted(s.policies), nodes: sorted(s.nodes) };
}
