/**
 * Intent from etcd: every object under a key prefix (layout:
 * stored-manifest.ts), kept current by a watch.
 *
 * A local copy of the prefix (key → value, at revision `cacheRev`) is filled
 * by one range read (one revision) and then moved forward by watch events
 * from that revision + 1; every change validates the whole copy (debounced)
 * and publishes it as a whole or not at all (SnapshotPublisher).
 *
 * Outages: etcd3 re-dials the watch and resumes it from the revision it last
 * saw. That bookkeeping can skip events when a stream breaks again while it
 * is still catching up (it jumps to the header revision of the "created"
 * reply), so after every reconnect the prefix is listed again and the copy
 * replaced; events that arrive during the read and are newer than it are
 * applied on top. A watch that etcd cancels (its revision was compacted) is
 * replaced by a fresh read and a fresh watch. A failed read is reported once
 * and retried with backoff; the last good snapshot stays in force throughout.
 */
import type { Etcd3, IEvent, Watcher } from 'etcd3';
import { systemClock, type Clock, type TimerHandle } from '../../core/clock.js';
import { HeraldError, describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { Trigger } from '../../core/trigger.js';
import { createEtcdClient, parseEtcdEndpoints, storeError } from './etcd-client.js';
import type { ManifestError } from '../diagnostics.js';
import { manifestLimitDefaults, tooLargeError, type ManifestLimits } from '../limits.js';
import type { ManifestLoad } from '../parse.js';
import { listManifests, type StoreListing } from './etcd-store.js';
import type { ParseJob } from './parse-job.js';
import { SnapshotPublisher, contentHash } from './publisher.js';
import type { IntentSource, IntentSourceHandlers } from './source.js';
import { DEFAULT_MANIFEST_PREFIX, normalizeManifestPrefix } from './stored-manifest.js';
import { parseManifestJob } from './worker-parser.js';
import { sortedEntries } from '../../core/order.js';

export interface EtcdIntentSourceOptions {
  /** `http://host:port` or `unix:///abs/path` (validated here). */
  readonly endpoints: readonly string[];
  /** Key prefix of the manifests; default `/herald/manifests/`. */
  readonly prefix?: string;
  readonly log: Logger;
  /** Watch events within this long after the first are applied together. */
  readonly debounceMs?: number;
  /** Backoff of a failed read: doubling from `retryMinMs` up to `retryMaxMs`. */
  readonly retryMinMs?: number;
  readonly retryMaxMs?: number;
  /** Deadline of each etcd call. */
  readonly callTimeoutMs?: number;
  readonly clock?: Clock;
  /** Size cap of a stored value and YAML bounds (limits.ts). */
  readonly limits?: ManifestLimits;
  /** Where parsing runs; default parseManifestJob (worker-parser.ts): inline when small and alias-free, else a worker thread. */
  readonly parse?: (job: ParseJob) => Promise<ManifestLoad>;
}

export const etcdSourceDefaults = { debounceMs: 100, retryMinMs: 250, retryMaxMs: 5000 } as const;

/** A stored value; `text` is '' when `bytes` is over the size cap (never decoded). */
interface StoredValue {
  readonly text: string;
  readonly bytes: number;
}

interface Change {
  readonly key: string;
  /** undefined = deleted. */
  readonly value: StoredValue | undefined;
  readonly revision: number;
}

function toChange(ev: IEvent, maxBytes: number): Change {
  const deleted = String(ev.type).toLowerCase() === 'delete';
  const bytes = ev.kv.value.length;
  return {
    key: ev.kv.key.toString('utf8'),
    value: deleted ? undefined : { text: bytes > maxBytes ? '' : ev.kv.value.toString('utf8'), bytes },
    revision: Number(ev.kv.mod_revision),
  };
}

export class EtcdIntentSource implements IntentSource {
  readonly name: string;
  readonly prefix: string;
  private readonly endpoints: readonly string[];
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly debounceMs: number;
  private readonly retryMinMs: number;
  private readonly retryMaxMs: number;
  private readonly callTimeoutMs: number | undefined;
  private readonly limits: ManifestLimits;
  private readonly parse: (job: ParseJob) => Promise<ManifestLoad>;
  private readonly abort = new AbortController();
  private client: Etcd3 | undefined;
  private publisher: SnapshotPublisher | undefined;
  private watcher: Watcher | undefined;
  /** Bumped for every new watcher; events of older ones are ignored. */
  private watchGeneration = 0;
  private disconnected = false;
  /** The prefix as of `cacheRev`. */
  private cache = new Map<string, StoredValue>();
  private cacheRev = 0;
  /** The etcd revision of the last copy offered to the publisher (validated, and published unless unchanged or rejected). */
  private offeredRev = 0;
  /** Events received while a read is in flight (applied on top of its result). */
  private duringRead: Change[] | undefined;
  /** Reads of the prefix: one at a time; a request during a read runs once more after it. */
  private readonly reads: Trigger;
  /** Publishes of watched changes: debounced by `debounceMs`, one at a time. */
  private readonly applies: Trigger;
  private retryTimer: TimerHandle | undefined;
  private retryDelay: number;
  private disposed = false;

  constructor(opts: EtcdIntentSourceOptions) {
    this.endpoints = parseEtcdEndpoints(opts.endpoints);
    this.prefix = normalizeManifestPrefix(opts.prefix ?? DEFAULT_MANIFEST_PREFIX);
    this.debounceMs = opts.debounceMs ?? etcdSourceDefaults.debounceMs;
    this.retryMinMs = opts.retryMinMs ?? etcdSourceDefaults.retryMinMs;
    this.retryMaxMs = opts.retryMaxMs ?? etcdSourceDefaults.retryMaxMs;
    if (!(this.debounceMs >= 0) || !(this.retryMinMs > 0) || !(this.retryMaxMs >= this.retryMinMs)) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', 'etcd source: need debounceMs >= 0 and 0 < retryMinMs <= retryMaxMs');
    }
    this.retryDelay = this.retryMinMs;
    this.clock = opts.clock ?? systemClock;
    this.name = `etcd ${this.endpoints.join(',')} ${this.prefix}`;
    this.log = opts.log.child({ source: this.name });
    this.callTimeoutMs = opts.callTimeoutMs;
    this.limits = opts.limits ?? manifestLimitDefaults;
    this.parse = opts.parse ?? ((job) => parseManifestJob(job, { signal: this.abort.signal }));
    this.reads = new Trigger({
      name: this.name,
      run: () => this.readAll(),
      clock: this.clock,
      log: this.log,
      // Only a throwing handler gets here; the source keeps going.
      onError: (e) => this.log.error({ err: describeError(e) }, 'applying intent from etcd failed'),
    });
    this.applies = new Trigger({
      name: `${this.name} (changes)`,
      run: () => this.publish(),
      clock: this.clock,
      log: this.log,
      delayMs: this.debounceMs,
      onError: (e) => this.log.error({ err: describeError(e) }, 'applying intent from etcd failed'),
    });
  }

  async start(handlers: IntentSourceHandlers): Promise<void> {
    if (this.disposed) throw new HeraldError('HERALD_STOPPED', `${this.name}: start() after dispose()`);
    if (this.publisher) throw new HeraldError('HERALD_INTERNAL', `${this.name}: started twice`);
    this.publisher = new SnapshotPublisher(handlers, this.log);
    this.client = createEtcdClient({
      endpoints: this.endpoints,
      ...(this.callTimeoutMs !== undefined ? { callTimeoutMs: this.callTimeoutMs } : {}),
    });
    await this.sync();
  }

  /**
   * Every change up to this etcd revision has been looked at: published,
   * found unchanged, or rejected. What "has the source seen my write?" waits on.
   */
  get offeredRevision(): number {
    return this.offeredRev;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.publisher?.close();
    this.abort.abort();
    this.reads.dispose();
    this.applies.dispose();
    this.retryTimer?.cancel();
    this.dropWatcher();
    this.client?.close();
  }

  /** Reads the prefix (serialised: a request during a read runs once more after it). */
  private sync(): Promise<void> {
    return this.reads.triggerNow();
  }

  private async readAll(): Promise<void> {
    const client = this.client;
    const publisher = this.publisher;
    if (!client || !publisher || this.disposed) return;
    this.retryTimer?.cancel();
    this.retryTimer = undefined;
    const revBefore = this.cacheRev;
    this.duringRead = [];
    let listing: StoreListing | undefined;
    let failure: unknown;
    try {
      listing = await listManifests(client, this.prefix, this.limits.maxBytes);
    } catch (e) {
      failure = e;
    }
    // Events that raced the read: those newer than it are applied on top of it.
    const during = this.duringRead ?? [];
    this.duringRead = undefined;
    if (this.disposed) return;
    if (!listing) {
      const err = storeError('read from', this.endpoints, failure);
      this.log.warn({ err: err.message, retryInMs: this.retryDelay }, 'reading intent from etcd failed');
      publisher.fail(err);
      this.scheduleRetry();
      return;
    }
    this.retryDelay = this.retryMinMs;
    const wentBack = listing.revision < revBefore;
    if (wentBack) {
      this.log.warn({ was: this.cacheRev, now: listing.revision }, 'etcd revision went back (restored or new cluster): watching anew');
    }
    this.cache = new Map(listing.kvs.map((kv) => [kv.key, { text: kv.value, bytes: kv.bytes }]));
    this.cacheRev = listing.revision;
    if (!wentBack) this.applyChanges(during);
    if (!this.watcher || wentBack) this.watchFrom(listing.revision + 1);
    // A debounced publish still pending finds this copy already offered ('same').
    await this.publish();
  }

  private scheduleRetry(): void {
    if (this.disposed || this.retryTimer) return;
    const delay = this.retryDelay;
    this.retryDelay = Math.min(this.retryDelay * 2, this.retryMaxMs);
    this.retryTimer = this.clock.setTimeout(() => {
      this.retryTimer = undefined;
      void this.sync();
    }, delay);
  }

  private watchFrom(revision: number): void {
    const client = this.client;
    if (!client || this.disposed) return;
    this.dropWatcher();
    const generation = ++this.watchGeneration;
    const current = (): boolean => generation === this.watchGeneration && !this.disposed;
    const w = client.watch().prefix(this.prefix).startRevision(String(revision)).watcher();
    this.watcher = w;
    w.on('data', (res) => {
      if (!current()) return;
      const changes = res.events.map((ev) => toChange(ev, this.limits.maxBytes));
      if (changes.length === 0) return;
      this.duringRead?.push(...changes);
      this.applyChanges(changes);
      this.scheduleApply();
    });
    w.on('disconnected', (err) => {
      if (!current() || this.disconnected) return;
      this.disconnected = true;
      this.log.warn({ err: describeError(err) }, 'etcd watch disconnected; retrying (the last good intent stays in force)');
    });
    w.on('connected', () => {
      if (!current() || !this.disconnected) return;
      this.disconnected = false;
      this.log.info({}, 'etcd watch resumed; re-reading the prefix');
      void this.sync();
    });
    w.on('error', (err) => {
      if (!current()) return;
      // etcd cancelled the watch, e.g. its revision was compacted: read everything again, then watch from there.
      this.log.warn({ err: describeError(err) }, 'etcd cancelled the watch; re-reading the prefix');
      this.dropWatcher();
      void this.sync();
    });
  }

  private dropWatcher(): void {
    const w = this.watcher;
    if (!w) return;
    this.watcher = undefined;
    this.watchGeneration++;
    // A late 'error' with no listener would throw from the emitter.
    w.on('error', () => {});
    w.cancel().catch(() => {});
  }

  /**
   * Moves the copy forward. Events at or below `cacheRev` are already in it;
   * the events of one transaction share a revision, so the bound is taken
   * before the batch.
   */
  private applyChanges(changes: readonly Change[]): void {
    const base = this.cacheRev;
    for (const c of changes) {
      if (c.revision <= base) continue;
      if (c.value === undefined) this.cache.delete(c.key);
      else this.cache.set(c.key, c.value);
      if (c.revision > this.cacheRev) this.cacheRev = c.revision;
    }
  }

  private scheduleApply(): void {
    this.applies.trigger();
  }

  /** Offers the copy; values over the size cap are refused by their size, unparsed. */
  private async publish(): Promise<void> {
    const publisher = this.publisher;
    if (!publisher || this.disposed) return;
    const entries = sortedEntries(this.cache);
    const kvs: { key: string; value: string }[] = [];
    const ioErrors: ManifestError[] = [];
    for (const [key, v] of entries) {
      if (v.bytes > this.limits.maxBytes) ioErrors.push(tooLargeError(key, v.bytes, this.limits, 'stored value'));
      else kvs.push({ key, value: v.text });
    }
    const hash = contentHash(entries.map(([key, v]) => [key, `${v.bytes}\u0000${v.text}`] as const));
    const revision = this.cacheRev;
    const outcome = await publisher.offer(hash, () => this.parse({ kind: 'stored', prefix: this.prefix, kvs, ioErrors, limits: this.limits }));
    if (revision > this.offeredRev) this.offeredRev = revision;
    if (outcome !== 'same') this.log.debug({ keys: entries.length, revision: this.cacheRev, outcome }, 'intent read from etcd');
  }
}
