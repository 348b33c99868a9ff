/**
 * LB-IPAM: a pure, deterministic allocator with Cilium's semantics
 * (cilium:operator/pkg/lbipam/lbipam.go): a run is a function of the intent
 * snapshot and the previously persisted state. `allocate()` runs over every
 * Service; the control plane uses IncrementalAllocator (incremental.ts),
 * which gives the same result reconsidering only what a change can affect.
 *
 * One run:
 *   1. Dormant if no pool exists: nothing is allocated or stripped.
 *   2. Import. Every Service's previous IPs (the persisted state, or
 *      `status.loadBalancer.ingress` for a Service the state does not know)
 *      are re-validated and kept when still valid. Services are visited in
 *      three groups (state with unchanged inputs, state with changed inputs,
 *      status only), oldest creationTimestamp first within a group, then
 *      namespace/name. So an unchanged Service never loses its IP to a
 *      changed or new one (cilium/cilium#40358, #41458, #39033, #43131).
 *   3. Serve. Then, in the same age order, each Service's missing IPs are
 *      requested: first every Service's specific IPs (so a generic request
 *      cannot take an address another Service names in the same run), then
 *      one IP per missing family for the others.
 *
 * A previous IP stays valid while the Service still asks for it (its specific
 * request names it or, without one, its family is wanted), it lies in a
 * block of a pool whose selector matches the Service, and every co-owner is
 * still compatible. A disabled or conflicting pool still validates IPs: both
 * only stop new allocations (Cilium keeps such IPs in-process but loses them
 * on restart). A held first/last address that `allowFirstLastIPs: No` now
 * reserves is kept too, as Cilium does when that field changes.
 *
 * New addresses come from the pools in name order, their blocks in spec
 * order, lowest free address first (Cilium takes the first address of the
 * smallest free block; this order is simpler to predict and just as stable).
 * Joining a sharing key's IP also needs a usable pool that selects the
 * Service (Cilium reuses any IP of the key, whichever pool it came from).
 * A key's IPs are offered oldest first (see Ledger.sharing).
 */
import type { IntentSnapshot, IpFamily, ServiceManifest } from '../../intent/index.js';
import { addrOf, formatAddr, type Addr } from '../../core/addr.js';
import { isReserved } from './blocks.js';
import { allocationResult, dormantResult, type ServiceOutcome } from './report.js';
import { Ledger, type Holding } from './ledger.js';
import { blockOf, compilePools, poolMatches, type PoolView } from './pools.js';
import {
  compareAge,
  incompatibility,
  isHandledService,
  serviceView,
  type LbClassPolicy,
  type ServiceView,
} from './service-view.js';
import { EMPTY_ALLOCATION_STATE, type AllocationState } from './state.js';
import type { IpamResult, RequestReason } from './types.js';
import { byString } from '../../core/order.js';

interface Failure {
  readonly reason: RequestReason;
  /**
   * A message naming an IP's holders is rendered once every Service was
   * served: holders that join later in the run (a sharing Service after a
   * refused request) must be named as a restart, which imports them first,
   * names them — the message may not depend on the order of the run.
   */
  readonly message: string | (() => string);
}

/**
 * Allocates LoadBalancer IPs for every handled Service of `snapshot`.
 * `previous` is what the last run returned as `state` (empty on a fresh
 * store: the Services' status ingress IPs are imported instead).
 * (IncrementalAllocator gives the same result reconsidering only what changed.)
 */
export function allocate(
  snapshot: IntentSnapshot,
  previous: AllocationState = EMPTY_ALLOCATION_STATE,
  classes: LbClassPolicy = {},
): IpamResult {
  const views: ServiceView[] = [];
  for (const [key, svc] of snapshot.services) if (isHandledService(svc, classes)) views.push(serviceView(key, svc));
  views.sort(compareAge);
  if (snapshot.pools.size === 0) return dormantResult(views, previous);

  const pools = compilePools(snapshot.pools.values());
  const run = new Run(pools);
  const { outcomes } = run.reconsider(importOrder(views, snapshot, previous));
  return allocationResult(pools, run.ledger, outcomes);
}

/**
 * Import groups (see the file comment): 0 = in the state with unchanged
 * inputs, 1 = in the state with changed inputs, 2 = status only.
 */
export type ImportGroup = 0 | 1 | 2;

export interface Imported {
  readonly view: ServiceView;
  readonly group: ImportGroup;
  /** Its previous IPs, as given (the state's, or its status ingress). */
  readonly ips: readonly string[];
}

/** The import group of one Service and the previous IPs it imports. */
export function importOf(view: ServiceView, svc: ServiceManifest, previous: AllocationState): Imported {
  const persisted = Object.hasOwn(previous.allocations, view.key) ? previous.allocations[view.key] : undefined;
  if (persisted !== undefined) return { view, group: previous.fingerprints?.[view.key] === view.fingerprint ? 0 : 1, ips: persisted };
  const ingress = svc.status.loadBalancer.ingress;
  return { view, group: 2, ips: ingress.flatMap((i) => (i.ip === undefined ? [] : [i.ip])) };
}

/** Import order: by group, oldest first within a group (`imported` must be in age order). */
export function byImportGroup(imported: readonly Imported[]): Imported[] {
  const groups: Imported[][] = [[], [], []];
  for (const i of imported) groups[i.group]!.push(i);
  return groups.flat();
}

/** Services (in age order) with their previous IPs, in import order (see the file comment). */
function importOrder(views: readonly ServiceView[], snapshot: IntentSnapshot, previous: AllocationState): Imported[] {
  return byImportGroup(views.map((view) => importOf(view, snapshot.services.get(view.key) as ServiceManifest, previous)));
}

/** What reconsidering one Service ended with. */
export interface Reconsidered {
  readonly outcome: ServiceOutcome;
  /** Satisfied by its imports alone: nothing served, nothing failed. */
  readonly settled: boolean;
}

export class Run {
  readonly ledger: Ledger;
  readonly #pools: readonly PoolView[];

  /** `ledger`: what other Services already hold (the incremental allocator's kept holdings). */
  constructor(pools: readonly PoolView[], ledger: Ledger = new Ledger()) {
    this.#pools = pools;
    this.ledger = ledger;
  }

  /**
   * Imports then serves `imported` (in import order): each Service's previous
   * IPs are re-validated and kept, then, in age order, every Service's
   * specific requests and then the others' missing families are served.
   */
  reconsider(imported: readonly Imported[]): { outcomes: ServiceOutcome[]; byKey: Map<string, Reconsidered> } {
    const kept = new Map<string, number>();
    for (const { view, ips } of imported) {
      for (const ip of ips) this.keep(view, ip);
      kept.set(view.key, this.ledger.of(view).length);
    }
    const views = imported.map((i) => i.view).sort(compareAge);
    // Specific requests first, so a generic request never takes an address
    // that another Service names in this same run.
    const specific = views.filter((v) => v.requested.length > 0);
    const generic = views.filter((v) => v.requested.length === 0);
    const served = [...specific, ...generic].map((view) => ({ view, failures: this.serve(view) }));
    const outcomes: ServiceOutcome[] = served.map(({ view, failures }) => ({
      view,
      failures: failures.map((f) => ({ reason: f.reason, message: typeof f.message === 'function' ? f.message() : f.message })),
    }));
    const byKey = new Map<string, Reconsidered>();
    for (const outcome of outcomes) {
      const settled = outcome.failures.length === 0 && this.ledger.of(outcome.view).length === kept.get(outcome.view.key);
      byKey.set(outcome.view.key, { outcome, settled });
    }
    return { outcomes, byKey };
  }

  /** Re-validates one previous IP of `view` and keeps it if it is still valid. */
  keep(view: ServiceView, ip: string): void {
    const addr = addrOf(ip);
    if (!addr) return;
    const text = formatAddr(addr);
    if (this.ledger.holds(view, text)) return;
    // Still asked for: a specific request names it, or (no specific request) its family is wanted.
    if (view.requested.length > 0 ? !view.requested.some((r) => r.text === text) : !view.wanted.includes(addr.family)) {
      return;
    }
    // Still inside a pool that selects the Service. A disabled or conflicting
    // pool still counts: those only stop new allocations.
    const matching = this.#pools.filter((p) => blockOf(p, addr) && poolMatches(p, view.labels));
    const pool = matching.find((p) => p.usable) ?? matching[0];
    if (!pool) return;
    const holding = this.ledger.get(text);
    if (!holding) {
      this.ledger.take(view, addr, text, pool);
    } else if (holding.owners.every((o) => incompatibility(o, view) === undefined)) {
      this.ledger.join(view, holding);
    }
  }

  /** Requests what `view` still misses; returns the failures (none = satisfied). */
  serve(view: ServiceView): Failure[] {
    const failures: Failure[] = [];
    if (view.requested.length > 0) {
      for (const { text, addr } of view.requested) {
        if (this.ledger.holds(view, text)) continue;
        const failure = this.#specific(view, addr, text);
        if (failure) failures.push(failure);
      }
      return failures;
    }
    for (const family of view.wanted) {
      if (this.ledger.of(view).some((h) => h.addr.family === family)) continue;
      const failure = this.#generic(view, family);
      if (failure) failures.push(failure);
    }
    return failures;
  }

  /** Pools open for new allocations that select `view`. */
  #usablePools(view: ServiceView): PoolView[] {
    return this.#pools.filter((p) => p.usable && poolMatches(p, view.labels));
  }

  #specific(view: ServiceView, addr: Addr, text: string): Failure | undefined {
    const containing = this.#pools.filter((p) => p.usable && blockOf(p, addr));
    const pool = containing.find((p) => poolMatches(p, view.labels));
    if (!pool) {
      return containing.length > 0
        ? { reason: 'pool_selector_mismatch', message: `The pool containing '${text}' (${names(containing)}) doesn't select this service` }
        : { reason: 'no_pool', message: `No enabled, non-conflicting pool has a block containing '${text}'${closedPools(this.#pools.filter((p) => blockOf(p, addr)))}` };
    }
    const holding = this.ledger.get(text);
    if (!holding) {
      const block = blockOf(pool, addr);
      if (block && isReserved(block, addr)) {
        return {
          reason: 'already_allocated',
          message: `The IP '${text}' is reserved: pool '${pool.name}' has allowFirstLastIPs: No`,
        };
      }
      this.ledger.take(view, addr, text, pool);
      return undefined;
    }
    if (view.sharingKey === undefined) {
      return {
        reason: 'already_allocated',
        message: () => `The IP '${text}' is already allocated to another service (${ownerKeys(holding)}); set a sharing key on both to share it`,
      };
    }
    if (firstIncompatibility(holding, view) !== undefined) {
      return {
        reason: 'already_allocated_incompatible_service',
        message: () => `The IP '${text}' is already allocated to an incompatible service: ${firstIncompatibility(holding, view)}`,
      };
    }
    this.ledger.join(view, holding);
    return undefined;
  }

  #generic(view: ServiceView, family: IpFamily): Failure | undefined {
    const usable = this.#usablePools(view);
    if (view.sharingKey !== undefined) {
      // Reuse an IP of the sharing key if every holder is compatible and a
      // usable pool that selects this Service contains it.
      for (const holding of this.ledger.sharing(view.sharingKey)) {
        if (holding.addr.family !== family) continue;
        if (!usable.some((p) => blockOf(p, holding.addr))) continue;
        if (firstIncompatibility(holding, view) !== undefined) continue;
        this.ledger.join(view, holding);
        return undefined;
      }
    }
    let offered = false;
    const used = this.ledger.used(family);
    for (const pool of usable) {
      for (const block of pool.blocks) {
        if (block.family !== family) continue;
        offered = true;
        const value = used.firstFree(block.lo, block.hi);
        if (value === undefined) continue;
        const addr = { family, value };
        this.ledger.take(view, addr, formatAddr(addr), pool);
        return undefined;
      }
    }
    return offered
      ? { reason: 'out_of_ips', message: `All enabled pools that match this service ran out of ${family} addresses` }
      : {
          reason: 'no_pool',
          message: `There are no enabled pools with ${family} blocks that match this service${closedPools(
            this.#pools.filter((p) => poolMatches(p, view.labels) && p.blocks.some((b) => b.family === family)),
          )}`,
        };
  }
}

/** The first holder (by key) `view` may not share with, and why. */
function firstIncompatibility(holding: Holding, view: ServiceView): string | undefined {
  for (const owner of [...holding.owners].sort(byString((o) => o.key))) {
    const why = incompatibility(owner, view);
    if (why !== undefined) return `${owner.key}: ${why}`;
  }
  return undefined;
}

function ownerKeys(holding: Holding): string {
  return holding.owners.map((o) => o.key).sort().join(', ');
}

/** Why pools that would otherwise serve are closed: ` ('b' is disabled; 'c': Pool conflicts since …)`. */
function closedPools(pools: readonly PoolView[]): string {
  const why = pools.filter((p) => !p.usable).map((p) => (p.conflict ? `'${p.name}': ${p.conflict.message}` : `'${p.name}' is disabled`));
  return why.length > 0 ? ` (${why.join('; ')})` : '';
}

function names(pools: readonly PoolView[]): string {
  return pools.map((p) => `'${p.name}'`).join(', ');
}
