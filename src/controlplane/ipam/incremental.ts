/**
 * LB-IPAM, incrementally: the same result as `allocate()` (a full run over
 * every Service), reconsidering only the Services a change can affect and
 * keeping every other allocation exactly as the last run left it.
 *
 * A run keeps, per handled Service, its import inputs (group and previous
 * IPs), what it claims (those IPs and the ones it holds), and whether it was
 * settled (satisfied by its imports alone: nothing served, nothing failed).
 * The next run reconsiders:
 *   - Services that are new, gone (their IPs are freed), or whose view
 *     (the inputs allocation reads), import group or previous IPs changed;
 *   - Services that were not settled (unsatisfied ones are retried every
 *     run, as a full run does: a freed IP may now serve them);
 *   - and, until nothing more is added: every Service claiming an IP that a
 *     reconsidered one claimed or claims, and every Service of a sharing key
 *     a reconsidered one has or had (a key's IPs are offered in the order
 *     they were taken, so its Services are redone together).
 * The reconsidered Services' holdings are released and they are imported
 * and served again in a full run's order, against a ledger holding everyone
 * else's IPs. Why that equals a full run: a Service not reconsidered imports
 * the same IPs from the same group against the same pools, no reconsidered
 * Service claims any of them, and its sharing key has no reconsidered
 * Service, so its keeps succeed as they did and its serve does nothing; the
 * reconsidered ones see exactly the holdings a full run gives the others.
 *
 * Anything else — the pools or the class policy changed, no pool (dormant),
 * no previous run — is a full run. The property test in
 * test/controlplane/ipam/incremental.test.ts checks the equality on random
 * sequences of Service, status, state and pool changes. The cache is dropped
 * before it is changed and set again only when a run completed, so a run
 * that throws leaves no half-applied cache behind (the next run is full).
 */
import type { IntentSnapshot, IPPoolManifest, ServiceManifest } from '../../intent/index.js';
import { addrOf, compareAddrs, formatAddr } from '../../core/addr.js';
import { compareStrings } from '../../core/order.js';
import { byImportGroup, importOf, Run, type Imported } from './allocator.js';
import { Ledger, type Holding } from './ledger.js';
import { compilePools, type PoolView } from './pools.js';
import { assembleResult, dormantResult, serviceAllocation } from './report.js';
import { compareAge, isHandledService, serviceView, type LbClassPolicy, type ServiceView } from './service-view.js';
import { EMPTY_ALLOCATION_STATE, type AllocationState } from './state.js';
import type { IpamResult, ServiceAllocation } from './types.js';

interface Entry {
  /** The manifest the view was made from (the same object gives the same view). */
  readonly svc: ServiceManifest;
  readonly view: ServiceView;
  readonly imported: Imported;
  /** Canonical IPs of its imports and its holdings. */
  readonly claims: readonly string[];
  readonly settled: boolean;
  /** Fed the state its own result wrote, it imports exactly `imported` again (group 0, its ingress). */
  readonly selfStable: boolean;
  readonly allocation: ServiceAllocation;
}

interface Cache {
  readonly classes: string;
  /** The pool manifests the pools were compiled from, in the snapshot's order. */
  readonly poolInputs: readonly IPPoolManifest[];
  readonly pools: readonly PoolView[];
  readonly ledger: Ledger;
  readonly entries: Map<string, Entry>;
  /** Canonical IP → keys of the Services claiming it. */
  readonly claims: Map<string, Set<string>>;
  /** Sharing key → keys of its Services. */
  readonly members: Map<string, Set<string>>;
  /** Every entry's key, sorted (the result's order). */
  keys: string[];
  /** The ledger's holdings in ingress order. */
  sorted: Holding[];
  /** The last run's result (returned again when nothing changed). */
  result?: IpamResult;
  /** The state the last run was fed. */
  fed?: AllocationState;
}

export interface IncrementalStats {
  /** Runs over every Service. */
  full: number;
  /** Runs that reconsidered only what changed. */
  incremental: number;
  /** Services reconsidered by incremental runs, in total. */
  reconsidered: number;
}

export class IncrementalAllocator {
  #cache: Cache | undefined;
  /** Canonical text of an IP as written (undefined: not an IP), bounded. */
  readonly #canonical = new Map<string, string | undefined>();
  readonly stats: IncrementalStats = { full: 0, incremental: 0, reconsidered: 0 };

  /** The same result as `allocate(snapshot, previous, classes)`. */
  allocate(snapshot: IntentSnapshot, previous: AllocationState = EMPTY_ALLOCATION_STATE, classes: LbClassPolicy = {}): IpamResult {
    const cache = this.#cache;
    this.#cache = undefined; // set again only by a run that completes
    const classKey = JSON.stringify(classes.lbClasses ?? null);
    if (cache && cache.classes === classKey && samePools(cache.poolInputs, snapshot.pools)) {
      const result = this.#incremental(cache, snapshot, previous, classes);
      this.#cache = cache;
      return result;
    }
    return this.#full(snapshot, previous, classes, classKey, cache);
  }

  #canonicalIp(ip: string): string | undefined {
    if (this.#canonical.has(ip)) return this.#canonical.get(ip);
    const addr = addrOf(ip);
    const text = addr ? formatAddr(addr) : undefined;
    if (this.#canonical.size >= 1 << 20) this.#canonical.clear();
    this.#canonical.set(ip, text);
    return text;
  }

  /** The view of `svc`: the cached one when the manifest, or everything allocation reads of it, is unchanged. */
  #viewOf(key: string, svc: ServiceManifest, old: Entry | undefined): ServiceView {
    if (old && old.svc === svc) return old.view;
    const view = serviceView(key, svc);
    return old && sameView(old.view, view) ? old.view : view;
  }

  #full(snapshot: IntentSnapshot, previous: AllocationState, classes: LbClassPolicy, classKey: string, old: Cache | undefined): IpamResult {
    this.stats.full++;
    const imported: Imported[] = [];
    const svcs = new Map<string, ServiceManifest>();
    for (const [key, svc] of snapshot.services) {
      if (!isHandledService(svc, classes)) continue;
      const view = this.#viewOf(key, svc, old?.entries.get(key));
      svcs.set(key, svc);
      imported.push(importOf(view, svc, previous));
    }
    imported.sort((a, b) => compareAge(a.view, b.view));
    if (snapshot.pools.size === 0) return dormantResult(imported.map((i) => i.view), previous);
    const poolInputs = [...snapshot.pools.values()];
    const pools = compilePools(poolInputs);
    const cache: Cache = { classes: classKey, poolInputs, pools, ledger: new Ledger(), entries: new Map(), claims: new Map(), members: new Map(), keys: [], sorted: [] };
    this.#reconsider(cache, byImportGroup(imported), svcs);
    cache.keys = [...cache.entries.keys()].sort(compareStrings);
    cache.sorted = cache.ledger.all();
    cache.fed = previous;
    this.#cache = cache;
    return this.#assemble(cache);
  }

  #incremental(cache: Cache, snapshot: IntentSnapshot, previous: AllocationState, classes: LbClassPolicy): IpamResult {
    this.stats.incremental++;
    // What each reconsidered Service imports now (absent: it is gone).
    const present = new Map<string, { svc: ServiceManifest; imported: Imported }>();
    const dirty = new Set<string>();
    // Fed the same state as the last run, or the state the last run returned
    // (the allocator's own): an unchanged manifest imports what it did.
    const sameFed = previous.allocations === cache.fed?.allocations && previous.fingerprints === cache.fed?.fingerprints;
    const selfFed = previous.allocations === cache.result?.state.allocations && previous.fingerprints === cache.result?.state.fingerprints;
    let known = 0;
    for (const [key, svc] of snapshot.services) {
      if (!isHandledService(svc, classes)) continue;
      const old = cache.entries.get(key);
      if (old) known++;
      if (old?.settled && old.svc === svc && (sameFed || (selfFed && old.selfStable))) continue;
      const view = this.#viewOf(key, svc, old);
      const imported = old?.settled && old.view === view ? sameImport(old.imported, svc, previous) : undefined;
      if (imported) {
        if (old && old.svc !== svc) cache.entries.set(key, { ...old, svc }); // e.g. a status write: the same view, remembered for the new manifest
        continue;
      }
      present.set(key, { svc, imported: importOf(view, svc, previous) });
      dirty.add(key);
    }
    cache.fed = previous;
    let removed = false;
    if (known < cache.entries.size) {
      for (const key of cache.entries.keys()) {
        const svc = snapshot.services.get(key);
        if (svc && isHandledService(svc, classes)) continue;
        dirty.add(key);
        removed = true;
      }
    }
    if (dirty.size === 0 && cache.result) return cache.result;

    // Everything a reconsidered Service can touch is reconsidered with it.
    const queue = [...dirty];
    const touch = (key: string): void => {
      if (dirty.has(key)) return;
      const entry = cache.entries.get(key);
      if (entry) present.set(key, { svc: entry.svc, imported: entry.imported }); // unchanged: imports what it did
      dirty.add(key);
      queue.push(key);
    };
    for (let key = queue.pop(); key !== undefined; key = queue.pop()) {
      const old = cache.entries.get(key);
      const now = present.get(key)?.imported;
      for (const ip of old?.claims ?? []) for (const k of cache.claims.get(ip) ?? []) touch(k);
      for (const ip of now?.ips ?? []) {
        const text = this.#canonicalIp(ip);
        if (text !== undefined) for (const k of cache.claims.get(text) ?? []) touch(k);
      }
      for (const sharingKey of [old?.view.sharingKey, now?.view.sharingKey]) {
        if (sharingKey !== undefined) for (const k of cache.members.get(sharingKey) ?? []) touch(k);
      }
    }
    this.stats.reconsidered += dirty.size;

    // Release what they hold (a shared IP's owners are all reconsidered: one sharing key).
    let added = false;
    for (const key of dirty) {
      const old = cache.entries.get(key);
      if (old) {
        for (const holding of [...cache.ledger.of(old.view)]) if (cache.ledger.get(holding.text) === holding) cache.ledger.release(holding);
        this.#unindex(cache, key, old);
      } else if (present.has(key)) {
        added = true;
      }
    }
    const imported = [...dirty].flatMap((key) => present.get(key)?.imported ?? []).sort((a, b) => compareAge(a.view, b.view));
    const svcs = new Map([...dirty].flatMap((key) => (present.has(key) ? [[key, present.get(key)!.svc] as const] : [])));
    this.#reconsider(cache, byImportGroup(imported), svcs);
    // Holdings in ingress order: the released ones out, the dirty Services' (new objects) in.
    const sorted = cache.sorted.filter((h) => cache.ledger.get(h.text) === h);
    const fresh = new Set<Holding>();
    for (const key of dirty) {
      const entry = cache.entries.get(key);
      if (entry) for (const h of cache.ledger.of(entry.view)) if (!h.owners.some((o) => !dirty.has(o.key)) && !fresh.has(h)) fresh.add(h);
    }
    for (const h of fresh) {
      const at = sortedIndexBy(sorted, h, (a, b) => compareAddrs(a.addr, b.addr));
      if (sorted[at] !== h) sorted.splice(at, 0, h);
    }
    cache.sorted = sorted;
    if (removed) cache.keys = cache.keys.filter((k) => cache.entries.has(k));
    if (added) {
      for (const key of dirty) {
        if (!cache.entries.has(key)) continue;
        const at = sortedIndex(cache.keys, key);
        if (cache.keys[at] !== key) cache.keys.splice(at, 0, key);
      }
    }
    return this.#assemble(cache);
  }

  /** Imports and serves `imported` against the cache's ledger and records each one's entry. */
  #reconsider(cache: Cache, imported: readonly Imported[], svcs: ReadonlyMap<string, ServiceManifest>): void {
    const run = new Run(cache.pools, cache.ledger);
    const { byKey } = run.reconsider(imported);
    for (const i of imported) {
      const key = i.view.key;
      const done = byKey.get(key);
      const svc = svcs.get(key);
      if (!done || !svc) throw new Error(`LB-IPAM: ${key} was not reconsidered`);
      const claims = new Set<string>();
      for (const ip of i.ips) {
        const text = this.#canonicalIp(ip);
        if (text !== undefined) claims.add(text);
      }
      for (const h of cache.ledger.of(i.view)) claims.add(h.text);
      const allocation = serviceAllocation(cache.ledger, done.outcome);
      const selfStable = i.group === 0 && sameList(i.ips, allocation.ingress);
      const entry: Entry = { svc, view: i.view, imported: i, claims: [...claims], settled: done.settled, selfStable, allocation };
      cache.entries.set(key, entry);
      for (const ip of entry.claims) addTo(cache.claims, ip, key);
      if (i.view.sharingKey !== undefined) addTo(cache.members, i.view.sharingKey, key);
    }
  }

  #unindex(cache: Cache, key: string, old: Entry): void {
    for (const ip of old.claims) removeFrom(cache.claims, ip, key);
    if (old.view.sharingKey !== undefined) removeFrom(cache.members, old.view.sharingKey, key);
    cache.entries.delete(key);
  }

  #assemble(cache: Cache): IpamResult {
    const result = assembleResult(
      cache.pools,
      cache.ledger,
      cache.keys.map((key) => cache.entries.get(key)!),
      cache.sorted,
    );
    cache.result = result;
    return result;
  }
}

/** Where `key` is or would go in the sorted `keys`. */
function sortedIndex(keys: readonly string[], key: string): number {
  return sortedIndexBy(keys, key, compareStrings);
}

function sortedIndexBy<T>(items: readonly T[], item: T, compare: (a: T, b: T) => number): number {
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (compare(items[mid] as T, item) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** `old` again when `svc` imports exactly what it did (same group, same IPs) from `previous`, else undefined. */
function sameImport(old: Imported, svc: ServiceManifest, previous: AllocationState): Imported | undefined {
  const key = old.view.key;
  const persisted = Object.hasOwn(previous.allocations, key) ? previous.allocations[key] : undefined;
  if (persisted !== undefined) {
    const group = previous.fingerprints?.[key] === old.view.fingerprint ? 0 : 1;
    return group === old.group && sameList(old.ips, persisted) ? old : undefined;
  }
  if (old.group !== 2) return undefined;
  const ingress = svc.status.loadBalancer.ingress;
  let n = 0;
  for (const i of ingress) {
    if (i.ip === undefined) continue;
    if (old.ips[n] !== i.ip) return undefined;
    n++;
  }
  return n === old.ips.length ? old : undefined;
}

function samePools(inputs: readonly IPPoolManifest[], pools: ReadonlyMap<string, IPPoolManifest>): boolean {
  if (inputs.length !== pools.size) return false;
  let i = 0;
  for (const pool of pools.values()) if (pool !== inputs[i++]) return false;
  return true;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a === b || (a.length === b.length && a.every((x, i) => x === b[i]));
}

/** Everything allocation and its report read of a view (all but the object identity). */
function sameView(a: ServiceView, b: ServiceView): boolean {
  return a.key === b.key && a.created === b.created && a.fingerprint === b.fingerprint && JSON.stringify(viewInputs(a)) === JSON.stringify(viewInputs(b));
}

function viewInputs(v: ServiceView): unknown[] {
  const sorted = (r: Readonly<Record<string, string>>): [string, string][] => Object.entries(r).sort(([x], [y]) => compareStrings(x, y));
  return [
    v.namespace,
    sorted(v.labels),
    v.requested.map((r) => r.text),
    v.sharingKey ?? null,
    v.crossNamespace,
    v.permitDifferentPods,
    v.ports,
    v.externalTrafficPolicy,
    sorted(v.podSelector),
    v.familyPolicy,
    v.wanted,
    v.ignoredAnnotations,
  ];
}

function addTo(index: Map<string, Set<string>>, at: string, key: string): void {
  const set = index.get(at);
  if (set) set.add(key);
  else index.set(at, new Set([key]));
}

function removeFrom(index: Map<string, Set<string>>, at: string, key: string): void {
  const set = index.get(at);
  if (!set) return;
  set.delete(key);
  if (set.size === 0) index.delete(at);
}

