/**
 * Where intent comes from (files, etcd; Kubernetes informers later), behind
 * one interface. A source hands out complete, validated snapshots only: a bad
 * change is reported and the previous good snapshot stays in force.
 */
import type { Disposable } from '../../core/disposable.js';
import type { ManifestDiagnostic } from '../diagnostics.js';
import type { IntentSnapshot } from '../snapshot.js';

export interface IntentSourceHandlers {
  /** A new complete, valid snapshot (also the first one). */
  onSnapshot(snapshot: IntentSnapshot): void;
  /**
   * A change was rejected (every error, with file/document/field), or the
   * source could not be read; the last good snapshot stays in force.
   */
  onError(problem: { errors: readonly ManifestDiagnostic[] } | { error: Error }): void;
  /** Non-fatal notes on an accepted snapshot. */
  onWarnings?(warnings: readonly ManifestDiagnostic[]): void;
}

export interface IntentSource extends Disposable {
  readonly name: string;
  /**
   * Starts reading and watching. Resolves after the first read attempt, whether
   * it produced a snapshot or an error; watching goes on until dispose().
   */
  start(handlers: IntentSourceHandlers): Promise<void>;
}
