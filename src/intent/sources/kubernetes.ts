/**
 * Intent from a Kubernetes API server: one informer (client-node's ListWatch:
 * list, then watch from the list's resourceVersion) per kind herald reads.
 *
 * - Watches ask for bookmarks (`allowWatchBookmarks`), so a re-watch resumes
 *   from a recent resourceVersion, and end server-side after `watchTimeoutS`
 *   (plus jitter), so a half-open connection is noticed; ListWatch re-watches
 *   from the last resourceVersion.
 * - `410 Gone` (the resourceVersion was compacted away): ListWatch lists
 *   again and replaces its cache (objects gone meanwhile are deleted then).
 * - Any other error stops a ListWatch (client-node 1.x): it is started again
 *   here after a backoff doubling from `retryMinMs` to `retryMaxMs`; its cache
 *   and the snapshot in force stay meanwhile (no withdrawal on an outage).
 * - Nothing is published before every informer has listed once: the first
 *   snapshot is complete, so nothing is pruned at start.
 *
 * Every object goes through the same validation as a file: it is turned into
 * the stored form (stored-manifest.ts: server metadata dropped, canonical
 * JSON) under the key `kubernetes/<Kind>/<namespace or _cluster>/<name>`, and
 * the whole set is offered to the SnapshotPublisher (debounced), which
 * publishes it when it is new and valid.
 *
 * Incremental: informer events mark their object's key dirty; a pass (the
 * debounced Trigger) turns only the dirty keys into stored form and validates
 * only those whose stored form changed (a status-only write to a pool, a
 * Node heartbeat: nothing to validate), keeps each key's outcome (objects,
 * errors, warnings) and applies the changed outcomes to the intent tables it
 * keeps (one sorted map per kind, the objects' content hash as an XOR of
 * per-key digests): a pass costs O(changed objects) — validation, hash and
 * tables — and the snapshot reuses every kind's map the pass did not touch
 * (a changed kind's map is one native copy). A relist marks every key of its
 * kind dirty (objects gone meanwhile are dropped). Fully at start and
 * periodically (`fullEveryMs`): the tables and the hash are rebuilt from the
 * kept outcomes and compared with the incremental ones (a difference is
 * logged, counted in `stats.drift` and repaired by publishing the rebuilt
 * state). `stats` counts what each pass touched.
 */
import type * as k8s from '@kubernetes/client-node';
import { systemClock, type Clock, type TimerHandle } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { Trigger } from '../../core/trigger.js';
import type { ManifestError } from '../diagnostics.js';
import { objectKey, type IntentKind } from '../kinds.js';
import { manifestLimitDefaults, tooLargeError, type ManifestLimits } from '../limits.js';
import type { ManifestLoad } from '../parse.js';
import { KubeApiError, type KubeClient, type KubeList, type KubeObject } from './kube-client.js';
import type { ParseJob } from './parse-job.js';
import { SnapshotPublisher } from './publisher.js';
import { createHash } from 'node:crypto';
import { buildSnapshot, frozenTable, snapshotOf, SNAPSHOT_TABLE_OF, type IntentSnapshot } from '../snapshot.js';
import { keyOf } from '../kinds.js';
import { monotonicMs } from '../../core/clock.js';
import type { IgnoredObject } from '../parse.js';
import type { IntentObject } from '../kinds.js';
import type { ManifestWarning } from '../diagnostics.js';
import type { IntentSource, IntentSourceHandlers } from './source.js';
import { CLUSTER_SEGMENT, storageKey, storedValueOf } from './stored-manifest.js';
import { parseManifestJob } from './worker-parser.js';

export interface KubeResource {
  readonly kind: IntentKind;
  readonly apiVersion: string;
  /** The collection across all namespaces. */
  readonly path: string;
  /** Top-level fields left out before validation (written often, never read: a Node's heartbeats). */
  readonly drop?: readonly string[];
  /**
   * The resource type may not be installed (a CRD of an optional feature:
   * BGP, policies): a `404` list counts as an empty, synced collection, and
   * the type is looked for again every `missingRecheckMs`. Required kinds
   * hold every snapshot back until they list.
   */
  readonly optional?: boolean;
}

export const KUBE_RESOURCES: readonly KubeResource[] = [
  { kind: 'Service', apiVersion: 'v1', path: '/api/v1/services' },
  { kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1', path: '/apis/discovery.k8s.io/v1/endpointslices' },
  { kind: 'Node', apiVersion: 'v1', path: '/api/v1/nodes', drop: ['status'] },
  { kind: 'CiliumLoadBalancerIPPool', apiVersion: 'cilium.io/v2alpha1', path: '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools', drop: ['status'] },
  { kind: 'CiliumL2AnnouncementPolicy', apiVersion: 'cilium.io/v2alpha1', path: '/apis/cilium.io/v2alpha1/ciliuml2announcementpolicies', drop: ['status'] },
  // BGP (what --bgp reads from files), then the policy kinds (service traffic policy).
  { kind: 'CiliumBGPClusterConfig', apiVersion: 'cilium.io/v2', path: '/apis/cilium.io/v2/ciliumbgpclusterconfigs', drop: ['status'], optional: true },
  { kind: 'CiliumBGPPeerConfig', apiVersion: 'cilium.io/v2', path: '/apis/cilium.io/v2/ciliumbgppeerconfigs', drop: ['status'], optional: true },
  { kind: 'CiliumBGPAdvertisement', apiVersion: 'cilium.io/v2', path: '/apis/cilium.io/v2/ciliumbgpadvertisements', drop: ['status'], optional: true },
  { kind: 'CiliumBGPNodeConfigOverride', apiVersion: 'cilium.io/v2', path: '/apis/cilium.io/v2/ciliumbgpnodeconfigoverrides', drop: ['status'], optional: true },
  { kind: 'CiliumNetworkPolicy', apiVersion: 'cilium.io/v2', path: '/apis/cilium.io/v2/ciliumnetworkpolicies', drop: ['status'], optional: true },
  { kind: 'CiliumClusterwideNetworkPolicy', apiVersion: 'cilium.io/v2', path: '/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies', drop: ['status'], optional: true },
  { kind: 'NetworkPolicy', apiVersion: 'networking.k8s.io/v1', path: '/apis/networking.k8s.io/v1/networkpolicies', drop: ['status'], optional: true },
  { kind: 'CiliumCIDRGroup', apiVersion: 'cilium.io/v2alpha1', path: '/apis/cilium.io/v2alpha1/ciliumcidrgroups', drop: ['status'], optional: true },
];

/** The key prefix objects are named by in messages (`kubernetes/Service/shop/web`). */
export const KUBE_KEY_PREFIX = 'kubernetes/';

export interface KubernetesIntentSourceOptions {
  readonly client: KubeClient;
  readonly log: Logger;
  readonly resources?: readonly KubeResource[];
  readonly debounceMs?: number;
  readonly retryMinMs?: number;
  readonly retryMaxMs?: number;
  /** Server-side end of each watch (seconds, plus up to 20 % jitter). */
  readonly watchTimeoutS?: number;
  /** An optional kind found missing (404) is listed again this often. */
  readonly missingRecheckMs?: number;
  readonly clock?: Clock;
  readonly limits?: ManifestLimits;
  readonly parse?: (job: ParseJob) => Promise<ManifestLoad>;
  /** The intent tables are rebuilt from every kept outcome this often (and checked against the incremental ones). */
  readonly fullEveryMs?: number;
}

export const kubernetesSourceDefaults = { debounceMs: 100, retryMinMs: 250, retryMaxMs: 10_000, watchTimeoutS: 300, missingRecheckMs: 30_000, fullEveryMs: 300_000 } as const;

interface Informer {
  readonly resource: KubeResource;
  readonly lw: k8s.ListWatch<KubeObject>;
  /** Listed at least once: its cache is complete. */
  synced: boolean;
  /** The first list or watch attempt is over (success or error). */
  tried: boolean;
  retryDelay: number;
  retryTimer: TimerHandle | undefined;
  lists: number;
  errors: number;
  /** An optional kind whose resource type the API server does not serve (404). */
  missing: boolean;
}

/** One object's validation outcome, kept until its stored form changes. */
interface KeyOutcome {
  readonly kind: IntentKind;
  /** sha1 of the stored form (what the content hash is built from). */
  readonly digest: string;
  readonly value: string;
  readonly objects: readonly IntentObject[];
  readonly ignored: readonly IgnoredObject[];
  readonly errors: readonly ManifestError[];
  readonly warnings: readonly ManifestWarning[];
  /** sha256 of key and digest: XOR-ed into the content hash while the outcome is kept. */
  readonly mix: Buffer;
}

/** One kind's intent table: objects by intent key (keyOf), the keys sorted, and the frozen map of the last snapshot. */
interface IntentTable {
  readonly objects: Map<string, { readonly obj: IntentObject; readonly from: string }>;
  readonly sorted: string[];
  frozen: ReadonlyMap<string, IntentObject> | undefined;
}

/** Counters of the incremental passes (status, bench, tests). */
export interface KubernetesSourceStats {
  /** Passes that looked at dirty keys. */
  passes: number;
  /** Objects whose stored form was computed (dirty keys). */
  looked: number;
  /** Objects validated (stored form changed). */
  validated: number;
  /** Outcomes applied to (or removed from) the intent tables, one per changed key: O(changed). */
  applied: number;
  /** Snapshot maps made (copied): only kinds a pass changed, or every kind on a full rebuild. */
  tablesMade: number;
  /** Full rebuilds of the tables from every kept outcome (at start, periodically, after a duplicate). */
  full: number;
  /** Full rebuilds that found the incremental tables or hash different (repaired then). */
  drift: number;
}

export interface KubernetesSourceStatus {
  readonly synced: boolean;
  readonly informers: readonly { kind: string; synced: boolean; lists: number; errors: number; objects: number; resourceVersion: string; missing?: true }[];
}

export class KubernetesIntentSource implements IntentSource {
  readonly name: string;
  private readonly client: KubeClient;
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly resources: readonly KubeResource[];
  private readonly retryMinMs: number;
  private readonly retryMaxMs: number;
  private readonly watchTimeoutS: number;
  private readonly missingRecheckMs: number;
  private readonly limits: ManifestLimits;
  private readonly parse: (job: ParseJob) => Promise<ManifestLoad>;
  private readonly abort = new AbortController();
  private readonly applies: Trigger;
  private readonly informers: Informer[] = [];
  private publisher: SnapshotPublisher | undefined;
  private firstTry: (() => void) | undefined;
  private disposed = false;
  /** Each key's outcome, by storage key. */
  private readonly outcomes = new Map<string, KeyOutcome>();
  /** Keys to look at in the next pass: informer + name/namespace of the object. */
  private readonly dirty = new Map<string, { inf: Informer; name: string; namespace: string | undefined }>();
  readonly stats: KubernetesSourceStats = { passes: 0, looked: 0, validated: 0, applied: 0, tablesMade: 0, full: 0, drift: 0 };
  /** The intent tables, by snapshot field (see IntentTable). */
  private tables = new Map<keyof IntentSnapshot, IntentTable>();
  /** XOR of every kept outcome's mix: the content hash, kept in O(changed). */
  private acc = Buffer.alloc(32);
  /** Keys whose outcome holds errors, warnings or ignored objects (assembled per publish: few). */
  private readonly errorKeys = new Set<string>();
  private readonly warningKeys = new Set<string>();
  private readonly ignoredKeys = new Set<string>();
  /** A full rebuild is due (start; two keys gave one intent key: the full path reports the duplicate). */
  private needFull = true;
  private lastFull = 0;
  /** Bumped when a full rebuild repaired drift, so the publisher looks at the repaired state. */
  private repairs = 0;
  private readonly fullEveryMs: number;

  constructor(opts: KubernetesIntentSourceOptions) {
    this.client = opts.client;
    this.clock = opts.clock ?? systemClock;
    this.resources = opts.resources ?? KUBE_RESOURCES;
    this.retryMinMs = opts.retryMinMs ?? kubernetesSourceDefaults.retryMinMs;
    this.retryMaxMs = opts.retryMaxMs ?? kubernetesSourceDefaults.retryMaxMs;
    this.watchTimeoutS = opts.watchTimeoutS ?? kubernetesSourceDefaults.watchTimeoutS;
    this.missingRecheckMs = opts.missingRecheckMs ?? kubernetesSourceDefaults.missingRecheckMs;
    this.limits = opts.limits ?? manifestLimitDefaults;
    this.parse = opts.parse ?? ((job) => parseManifestJob(job, { signal: this.abort.signal }));
    this.fullEveryMs = opts.fullEveryMs ?? kubernetesSourceDefaults.fullEveryMs;
    this.name = `kubernetes ${this.client.server}`;
    this.log = opts.log.child({ source: this.name });
    this.applies = new Trigger({
      name: `${this.name} (changes)`,
      run: () => this.publish(),
      clock: this.clock,
      log: this.log,
      delayMs: opts.debounceMs ?? kubernetesSourceDefaults.debounceMs,
      periodicMs: this.fullEveryMs,
      onError: (e) => this.log.error({ err: describeError(e) }, 'applying intent from kubernetes failed'),
    });
  }

  /** Every informer has listed once (the snapshots published are complete). */
  get synced(): boolean {
    return this.informers.length > 0 && this.informers.every((i) => i.synced);
  }

  status(): KubernetesSourceStatus {
    return {
      synced: this.synced,
      informers: this.informers.map((i) => ({
        kind: i.resource.kind,
        synced: i.synced,
        lists: i.lists,
        errors: i.errors,
        objects: i.lw.list().length,
        resourceVersion: i.lw.latestResourceVersion(),
        ...(i.missing ? { missing: true as const } : {}),
      })),
    };
  }

  /** The cached object (raw, as the API server sent it), for write-back. */
  cached(kind: IntentKind, name: string, namespace?: string): KubeObject | undefined {
    return this.informers.find((i) => i.resource.kind === kind)?.lw.get(name, namespace);
  }

  /** Every cached object of a kind (raw), e.g. Services with their status. */
  objects(kind: IntentKind): readonly KubeObject[] {
    return this.informers.find((i) => i.resource.kind === kind)?.lw.list() ?? [];
  }

  async start(handlers: IntentSourceHandlers): Promise<void> {
    this.publisher = new SnapshotPublisher(handlers, this.log);
    const { k8s } = this.client;
    const watch = new k8s.Watch(this.client.kc);
    const tried = new Promise<void>((resolve) => (this.firstTry = resolve));
    for (const resource of this.resources) {
      // ListWatch calls watch() right after it has applied a list: that is "synced".
      let informer: Informer | undefined;
      const watcher = {
        watch: (path: string, query: Record<string, unknown>, cb: (phase: string, obj: any, watchObj?: any) => void, done: (err: any) => void) => {
          if (informer && !this.disposed) this.listed(informer);
          if (informer?.missing) {
            // Nothing to watch: list again later (a 410 makes ListWatch relist).
            const ac = new AbortController();
            const timer = this.clock.setTimeout(() => done({ statusCode: 410 }), this.missingRecheckMs);
            ac.signal.addEventListener('abort', () => timer.cancel());
            return Promise.resolve(ac);
          }
          const timeoutSeconds = Math.round(this.watchTimeoutS * (1 + Math.random() * 0.2));
          return watch.watch(path, { ...query, allowWatchBookmarks: true, timeoutSeconds }, cb, done);
        },
      };
      const listFn = async (): Promise<KubeList> => {
        let list: KubeList;
        try {
          list = await this.client.list(resource.path);
        } catch (e) {
          if (!resource.optional || !(e instanceof KubeApiError) || e.status !== 404) throw e;
          if (informer && !informer.missing) this.log.info({ kind: resource.kind, path: resource.path }, 'kubernetes: this kind is not served (its CRD is not installed); read as empty, looked for again later');
          if (informer) informer.missing = true;
          return { metadata: {}, items: [] };
        }
        if (informer) {
          informer.lists++;
          informer.missing = false;
        }
        return list;
      };
      const lw = new k8s.ListWatch<KubeObject>(resource.path, watcher as unknown as k8s.Watch, listFn as never, false);
      informer = { resource, lw, synced: false, tried: false, retryDelay: this.retryMinMs, retryTimer: undefined, lists: 0, errors: 0, missing: false };
      const inf = informer;
      const changed = (obj: KubeObject): void => {
        if (obj?.metadata?.name) this.markDirty(inf, obj.metadata.name, obj.metadata.namespace);
        if (inf.synced) this.applies.trigger();
      };
      lw.on('add', changed);
      lw.on('update', changed);
      lw.on('delete', changed);
      lw.on('error', (err: unknown) => this.failed(inf, err));
      this.informers.push(inf);
    }
    for (const inf of this.informers) void this.run(inf);
    await tried;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.publisher?.close();
    this.abort.abort();
    this.applies.dispose();
    for (const inf of this.informers) {
      inf.retryTimer?.cancel();
      void inf.lw.stop().catch(() => {});
    }
    this.firstTry?.();
  }

  private async run(inf: Informer): Promise<void> {
    if (this.disposed) return;
    try {
      await inf.lw.start();
    } catch (e) {
      this.failed(inf, e);
    }
  }

  private listed(inf: Informer): void {
    inf.retryDelay = this.retryMinMs;
    const first = !inf.synced;
    inf.synced = true;
    this.tried(inf);
    if (first && this.synced) this.log.info({ kinds: this.informers.map((i) => i.resource.kind) }, 'kubernetes informers synced');
    // A (re)list may have changed the cache without add/update/delete events for
    // objects seen before: look at every key of this kind again (gone ones too).
    for (const [key, o] of this.outcomes) if (o.kind === inf.resource.kind) this.dirty.set(key, this.dirtyEntryOf(inf, key));
    for (const obj of inf.lw.list()) this.markDirty(inf, obj.metadata.name, obj.metadata.namespace);
    this.applies.trigger();
  }

  private tried(inf: Informer): void {
    inf.tried = true;
    if (this.informers.every((i) => i.tried)) {
      this.firstTry?.();
      this.firstTry = undefined;
    }
  }

  private failed(inf: Informer, err: unknown): void {
    if (this.disposed) return;
    inf.errors++;
    const delay = inf.retryDelay;
    inf.retryDelay = Math.min(inf.retryDelay * 2, this.retryMaxMs);
    const message = describeError(err);
    const missing = /\b404\b|not found/i.test(message) && inf.resource.kind.startsWith('Cilium');
    this.log.warn(
      { kind: inf.resource.kind, err: message, retryInMs: delay, ...(missing ? { hint: 'install the CustomResourceDefinitions (deploy/kubernetes/crds.yaml)' } : {}) },
      inf.synced ? 'kubernetes watch failed; retrying (the last good intent stays in force)' : 'kubernetes list failed; retrying',
    );
    if (!inf.synced) this.publisher?.fail(new Error(`kubernetes: cannot list ${inf.resource.kind}: ${message}`));
    this.tried(inf);
    inf.retryTimer?.cancel();
    inf.retryTimer = this.clock.setTimeout(() => {
      inf.retryTimer = undefined;
      void this.run(inf);
    }, delay);
  }

  private keyOf(inf: Informer, name: string, namespace: string | undefined): string {
    return storageKey(KUBE_KEY_PREFIX, inf.resource.kind, objectKey(inf.resource.kind, name, namespace));
  }

  private markDirty(inf: Informer, name: string, namespace: string | undefined): void {
    this.dirty.set(this.keyOf(inf, name, namespace), { inf, name, namespace });
  }

  /** The dirty entry of a kept key (its name and namespace read back from the key). */
  private dirtyEntryOf(inf: Informer, key: string): { inf: Informer; name: string; namespace: string | undefined } {
    const rest = key.slice(KUBE_KEY_PREFIX.length + inf.resource.kind.length + 1).split('/');
    return rest[0] === CLUSTER_SEGMENT || rest.length < 2 ? { inf, name: rest[rest.length - 1]!, namespace: undefined } : { inf, name: rest[1]!, namespace: rest[0] };
  }

  /**
   * Brings the kept outcomes up to date with the dirty keys: the stored form
   * of each, validated (one parse job, in a worker when large) only when it
   * changed. False when the parser failed as a whole (the keys stay dirty).
   */
  private async refresh(): Promise<boolean> {
    if (this.dirty.size === 0) return true;
    const batch = [...this.dirty];
    this.dirty.clear();
    this.stats.passes++;
    this.stats.looked += batch.length;
    const kvs: { key: string; value: string }[] = [];
    const pending = new Map<string, { kind: IntentKind; digest: string; value: string }>();
    for (const [key, { inf, name, namespace }] of batch) {
      const obj = inf.lw.get(name, namespace);
      if (!obj) {
        this.setOutcome(key, undefined);
        continue;
      }
      const { resource } = inf;
      const raw: Record<string, unknown> = { ...obj, apiVersion: resource.apiVersion, kind: resource.kind };
      for (const f of resource.drop ?? []) delete raw[f];
      const value = storedValueOf(raw, resource.kind);
      if (this.outcomes.get(key)?.value === value) continue;
      const digest = createHash('sha1').update(value).digest('hex');
      const bytes = Buffer.byteLength(value);
      if (bytes > this.limits.maxBytes) {
        this.setOutcome(key, { kind: resource.kind, digest, value, objects: [], ignored: [], errors: [tooLargeError(key, bytes, this.limits, 'stored value')], warnings: [], mix: mixOf(key, digest) });
        continue;
      }
      pending.set(key, { kind: resource.kind, digest, value });
      kvs.push({ key, value });
    }
    if (kvs.length === 0) return true;
    kvs.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const load = await this.parse({ kind: 'stored', prefix: KUBE_KEY_PREFIX, kvs, ioErrors: [], limits: this.limits });
    const foreign = load.errors.find((e) => !pending.has(e.file));
    if (foreign) {
      // The parser failed as a whole (stopped, crashed): nothing of this batch is kept.
      for (const [key, entry] of batch) if (!this.dirty.has(key)) this.dirty.set(key, entry);
      this.publisher?.fail(new Error(`kubernetes: validating ${kvs.length} objects failed: ${foreign.message}`));
      return false;
    }
    this.stats.validated += kvs.length;
    const by = <T>(items: readonly T[], fileOf: (t: T) => string): Map<string, T[]> => {
      const m = new Map<string, T[]>();
      for (const t of items) {
        const f = fileOf(t);
        const list = m.get(f);
        if (list) list.push(t);
        else m.set(f, [t]);
      }
      return m;
    };
    const objects = by(load.objects, (o) => o.source.file);
    const ignored = by(load.ignored, (o) => o.source.file);
    const errors = by(load.errors, (e) => e.file);
    const warnings = by(load.warnings, (w) => w.file);
    for (const [key, p] of pending) {
      this.setOutcome(key, { ...p, objects: objects.get(key) ?? [], ignored: ignored.get(key) ?? [], errors: errors.get(key) ?? [], warnings: warnings.get(key) ?? [], mix: mixOf(key, p.digest) });
    }
    return true;
  }

  /** Keeps (or drops) a key's outcome and applies the change to the hash and the intent tables: O(that key). */
  private setOutcome(key: string, outcome: KeyOutcome | undefined): void {
    const old = this.outcomes.get(key);
    if (old) {
      xorInto(this.acc, old.mix);
      this.untable(key, old);
    }
    if (outcome) {
      this.outcomes.set(key, outcome);
      xorInto(this.acc, outcome.mix);
      this.table(key, outcome);
    } else this.outcomes.delete(key);
    if (old || outcome) this.stats.applied++;
  }

  private tableOf(field: keyof IntentSnapshot): IntentTable {
    let t = this.tables.get(field);
    if (!t) this.tables.set(field, (t = { objects: new Map(), sorted: [], frozen: undefined }));
    return t;
  }

  private table(key: string, o: KeyOutcome): void {
    for (const obj of o.objects) {
      const t = this.tableOf(SNAPSHOT_TABLE_OF[obj.kind]);
      const k = keyOf(obj);
      const held = t.objects.get(k);
      if (held && held.from !== key) {
        this.needFull = true; // two keys, one intent key: the full path reports it
        continue;
      }
      if (!held) t.sorted.splice(sortedIndex(t.sorted, k), 0, k);
      t.objects.set(k, { obj, from: key });
      t.frozen = undefined;
    }
    if (o.errors.length > 0) this.errorKeys.add(key);
    if (o.warnings.length > 0) this.warningKeys.add(key);
    if (o.ignored.length > 0) this.ignoredKeys.add(key);
  }

  private untable(key: string, o: KeyOutcome): void {
    for (const obj of o.objects) {
      const t = this.tableOf(SNAPSHOT_TABLE_OF[obj.kind]);
      const k = keyOf(obj);
      if (t.objects.get(k)?.from !== key) continue;
      t.objects.delete(k);
      const i = sortedIndex(t.sorted, k);
      if (t.sorted[i] === k) t.sorted.splice(i, 1);
      t.frozen = undefined;
    }
    this.errorKeys.delete(key);
    this.warningKeys.delete(key);
    this.ignoredKeys.delete(key);
  }

  /**
   * Rebuilds the hash and the tables from every kept outcome, and says
   * whether the incremental ones differed (they should not: counted, logged).
   */
  private rebuild(): void {
    const keys = [...this.outcomes.keys()].sort();
    const before = { acc: this.acc, tables: this.tables };
    this.acc = Buffer.alloc(32);
    this.tables = new Map();
    for (const k of [this.errorKeys, this.warningKeys, this.ignoredKeys]) k.clear();
    this.needFull = false;
    for (const key of keys) {
      const o = this.outcomes.get(key)!;
      xorInto(this.acc, mixOf(key, o.digest));
      this.table(key, o);
    }
    this.stats.full++;
    this.lastFull = monotonicMs(this.clock);
    let same = before.acc.equals(this.acc);
    for (const field of new Set([...before.tables.keys(), ...this.tables.keys()])) {
      const b = before.tables.get(field);
      const t = this.tableOf(field);
      const equal = (b?.sorted.length ?? 0) === t.sorted.length && t.sorted.every((k, i) => b!.sorted[i] === k && b!.objects.get(k)?.obj === t.objects.get(k)!.obj);
      if (equal && b?.frozen) t.frozen = b.frozen; // unchanged: the snapshot keeps its map
      same &&= equal;
    }
    if (!same && this.stats.full > 1) {
      this.stats.drift++;
      this.repairs++;
      this.log.warn({ objects: keys.length }, 'kubernetes intent tables differed from a full rebuild; the rebuilt ones are in force');
    }
  }

  /** The snapshot of the tables: maps of kinds no change touched are the last snapshot's. */
  private snapshotNow(): IntentSnapshot {
    const maps: Partial<Record<keyof IntentSnapshot, ReadonlyMap<string, IntentObject>>> = {};
    for (const [field, t] of this.tables) {
      if (!t.frozen) {
        t.frozen = frozenTable(t.sorted.map((k) => [k, t.objects.get(k)!.obj] as const));
        this.stats.tablesMade++;
      }
      maps[field] = t.frozen;
    }
    return snapshotOf(maps as Parameters<typeof snapshotOf>[0]);
  }

  private async publish(): Promise<void> {
    const publisher = this.publisher;
    if (!publisher || this.disposed || !this.synced) return;
    if (!(await this.refresh()) || this.disposed) return;
    if (this.needFull || monotonicMs(this.clock) - this.lastFull >= this.fullEveryMs) this.rebuild();
    const hash = `${this.acc.toString('hex')}:${this.outcomes.size}:${this.repairs}`;
    const outcome = await publisher.offer(hash, () => {
      const pick = <T>(keys: ReadonlySet<string>, of: (o: KeyOutcome) => readonly T[]): T[] => [...keys].sort().flatMap((k) => of(this.outcomes.get(k)!));
      const ignored = pick(this.ignoredKeys, (o) => o.ignored);
      const errors = pick(this.errorKeys, (o) => o.errors);
      const warnings = pick(this.warningKeys, (o) => o.warnings);
      if (errors.length > 0) return { objects: [], ignored, errors, warnings, snapshot: undefined };
      if (this.needFull) {
        // Two keys gave one intent key (cannot happen with informers: a key is kind, namespace and name):
        // the full path, whose buildSnapshot names the duplicate.
        const objects = [...this.outcomes.keys()].sort().flatMap((k) => this.outcomes.get(k)!.objects);
        return { objects, ignored, errors, warnings, snapshot: buildSnapshot(objects) };
      }
      // `objects` stays empty: the publisher reads the snapshot (which holds them all), not the list.
      return { objects: [], ignored, errors, warnings, snapshot: this.snapshotNow() };
    });
    if (outcome !== 'same') this.log.debug({ objects: this.outcomes.size, outcome }, 'intent read from kubernetes');
  }
}

function mixOf(key: string, digest: string): Buffer {
  return createHash('sha256').update(key).update('\u0000').update(digest).digest();
}

function xorInto(acc: Buffer, b: Buffer): void {
  for (let i = 0; i < acc.length; i++) acc[i]! ^= b[i]!;
}

/** Where `k` is or would go in the sorted array (binary search). */
function sortedIndex(sorted: readonly string[], k: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid]! < k) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
