/**
 * The rule every intent source follows when it has read its input, in one
 * place: identical input (by content hash) is ignored; a load with errors is
 * reported once and the last good snapshot stays; a good load is published
 * only when it differs from the snapshot in force.
 */
import { createHash } from 'node:crypto';
import type { Logger } from '../../core/logger.js';
import { countIgnoredKinds, type ManifestLoad } from '../parse.js';
import type { IntentSourceHandlers } from './source.js';

/** sha256 over (name, content) pairs, in the order given. */
export function contentHash(parts: Iterable<readonly [string, string]>): string {
  const h = createHash('sha256');
  for (const [name, content] of parts) {
    h.update(name).update('\u0000').update(String(Buffer.byteLength(content))).update('\u0000').update(content);
  }
  return h.digest('hex');
}

export type PublishOutcome = 'same' | 'rejected' | 'published' | 'restored' | 'closed';

export class SnapshotPublisher {
  /** Hash of the input last looked at, whatever came of it. */
  private seen: string | undefined;
  /** Hash of the input behind the snapshot in force. */
  private applied: string | undefined;
  private failure: string | undefined;
  /** Offers run one at a time, in order (a load may be asynchronous: parsed in a worker). */
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly handlers: IntentSourceHandlers,
    private readonly log: Logger,
  ) {}

  /** True once a snapshot was published. */
  get hasSnapshot(): boolean {
    return this.applied !== undefined;
  }

  /**
   * Offers input with content hash `hash`; `load` validates it (called only
   * when the input is new). Resolves to what happened; after `close()`,
   * nothing more is published ('closed').
   */
  offer(hash: string, load: () => ManifestLoad | Promise<ManifestLoad>): Promise<PublishOutcome> {
    const run = this.queue.then(() => this.offerNow(hash, load));
    this.queue = run.catch(() => {});
    return run;
  }

  /** No handler is called any more (the source is being disposed). */
  close(): void {
    this.closed = true;
  }

  private async offerNow(hash: string, load: () => ManifestLoad | Promise<ManifestLoad>): Promise<PublishOutcome> {
    if (this.closed) return 'closed';
    if (hash === this.seen) return 'same';
    this.seen = hash;
    this.failure = undefined;
    let result: ManifestLoad;
    try {
      result = await load();
    } catch (e) {
      this.seen = undefined; // look at this input again next time
      throw e;
    }
    if (this.closed) return 'closed';
    // Other controllers' objects: one line per kind (not per object), for each new input.
    for (const [kind, count] of countIgnoredKinds(result.ignored)) {
      const first = result.ignored.find((o) => o.kind === kind);
      this.log.info({ kind, count, apiVersion: first?.apiVersion, firstAt: first?.source.file }, 'ignoring objects of a kind herald does not read');
    }
    if (!result.snapshot) {
      this.handlers.onError({ errors: result.errors });
      return 'rejected';
    }
    if (hash === this.applied) {
      this.log.info({}, 'intent is back to the snapshot in force');
      return 'restored';
    }
    this.applied = hash;
    this.handlers.onSnapshot(result.snapshot);
    if (result.warnings.length > 0) this.handlers.onWarnings?.(result.warnings);
    return 'published';
  }

  /**
   * The input could not be read. Reported once per distinct message until
   * input is read again; the next successful read is always looked at.
   */
  fail(error: Error): void {
    if (this.closed) return;
    this.seen = undefined;
    if (this.failure === error.message) return;
    this.failure = error.message;
    this.handlers.onError({ error });
  }
}
