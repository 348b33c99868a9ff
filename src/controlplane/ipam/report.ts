/** Turns one allocation run into an `IpamResult`: Service conditions, pool counts, state to persist. */
import { compareAddrs, formatAddr } from '../../core/addr.js';
import { blockSize, type Block } from './blocks.js';
import type { Holding, Ledger } from './ledger.js';
import type { PoolView } from './pools.js';
import type { ServiceView } from './service-view.js';
import type { AllocationState } from './state.js';
import {
  CONDITION_IPS_AVAILABLE,
  CONDITION_IPS_TOTAL,
  CONDITION_IPS_USED,
  CONDITION_POOL_CONFLICT,
  CONDITION_REQUEST_SATISFIED,
  type IpamCondition,
  type IpamResult,
  type PoolStatus,
  type RequestReason,
  type ServiceAllocation,
  type ServiceCondition,
} from './types.js';
import { byString } from '../../core/order.js';

export interface ServiceOutcome {
  readonly view: ServiceView;
  /** Why requests failed, in request order; empty = satisfied. */
  readonly failures: readonly { readonly reason: RequestReason; readonly message: string }[];
}

const byKey = byString<{ readonly view: ServiceView }>((o) => o.view.key);

function serviceCondition(ingress: readonly string[], outcome: ServiceOutcome): ServiceCondition {
  const [first] = outcome.failures;
  if (first === undefined) {
    return { type: CONDITION_REQUEST_SATISFIED, status: 'True', reason: 'satisfied', message: `Allocated ${ingress.join(', ')}` };
  }
  // The first failure names the reason; the message lists them all.
  const message = outcome.failures.map((f) => f.message).join('; ');
  return { type: CONDITION_REQUEST_SATISFIED, status: 'False', reason: first.reason, message };
}

function countCondition(type: string, value: bigint): IpamCondition {
  return { type, status: 'Unknown', reason: 'noreason', message: value.toString() };
}

/** Counts as Cilium's `updatePoolCounts` reports them: reserved addresses count as used. */
function poolStatus(pool: PoolView, heldHere: bigint, ledger: Ledger): PoolStatus {
  let total = 0n;
  let reservedFree = 0n;
  const isFree = (block: Block, value: bigint): boolean => !ledger.get(formatAddr({ family: block.family, value }));
  for (const block of pool.blocks) {
    total += blockSize(block);
    if (block.reserved > 0n) {
      if (isFree(block, block.first)) reservedFree += 1n;
      if (isFree(block, block.last)) reservedFree += 1n;
    }
  }
  const used = heldHere + reservedFree;
  const available = total - used;
  const conflict: IpamCondition = pool.conflict
    ? { type: CONDITION_POOL_CONFLICT, status: 'True', reason: 'cidr_overlap', message: pool.conflict.message }
    : { type: CONDITION_POOL_CONFLICT, status: 'False', reason: 'resolved', message: '' };
  return {
    conditions: [
      conflict,
      countCondition(CONDITION_IPS_TOTAL, total),
      countCondition(CONDITION_IPS_AVAILABLE, available),
      countCondition(CONDITION_IPS_USED, used),
    ],
    total,
    used,
    available,
    conflicting: pool.conflict !== undefined,
    disabled: pool.disabled,
  };
}

/** One Service's result: its IPs in ingress order and its condition. */
export function serviceAllocation(ledger: Ledger, outcome: ServiceOutcome): ServiceAllocation {
  const held = ledger.of(outcome.view);
  const ingress = (held.length > 1 ? [...held].sort((a, b) => compareAddrs(a.addr, b.addr)) : held).map((h) => h.text);
  const warnings = outcome.view.ignoredAnnotations;
  return { ingress, condition: serviceCondition(ingress, outcome), ...(warnings.length > 0 ? { warnings } : {}) };
}

export function allocationResult(pools: readonly PoolView[], ledger: Ledger, outcomes: readonly ServiceOutcome[]): IpamResult {
  return assembleResult(
    pools,
    ledger,
    [...outcomes].sort(byKey).map((outcome) => ({ view: outcome.view, allocation: serviceAllocation(ledger, outcome) })),
  );
}

/**
 * The result from every Service's allocation (`served` in key order) and the
 * ledger they were taken from (`holdings`: the ledger's, in ingress order).
 */
export function assembleResult(
  pools: readonly PoolView[],
  ledger: Ledger,
  served: Iterable<{ readonly view: ServiceView; readonly allocation: ServiceAllocation }>,
  holdings: Iterable<Holding> = ledger.all(),
): IpamResult {
  const services = new Map<string, ServiceAllocation>();
  const allocations: Record<string, readonly string[]> = {};
  const fingerprints: Record<string, string> = {};
  for (const { view, allocation } of served) {
    services.set(view.key, allocation);
    allocations[view.key] = allocation.ingress;
    fingerprints[view.key] = view.fingerprint;
  }

  const ipOwners = new Map<string, readonly string[]>();
  const heldPerPool = new Map<string, number>(); // counted as numbers (a bigint per IP per pass was a cost at 10,000)
  for (const holding of holdings) {
    ipOwners.set(holding.text, holding.owners.length === 1 ? [holding.owners[0]?.key as string] : holding.owners.map((o) => o.key).sort());
    heldPerPool.set(holding.pool.name, (heldPerPool.get(holding.pool.name) ?? 0) + 1);
  }
  const poolStatuses = new Map<string, PoolStatus>();
  for (const pool of pools) poolStatuses.set(pool.name, poolStatus(pool, BigInt(heldPerPool.get(pool.name) ?? 0), ledger));

  return {
    dormant: false,
    state: { version: 1, allocations, fingerprints },
    services,
    pools: poolStatuses,
    ipOwners,
  };
}

/**
 * What a node may announce when the allocator has not persisted (all of) a
 * result: only the persisted IPs. A Service that lost some says so, with
 * reason `waiting_for_allocator` (never `satisfied` with status False).
 */
export function onlyPersisted(result: IpamResult, persisted: AllocationState, allocator: string | undefined): IpamResult {
  const services = new Map<string, ServiceAllocation>();
  for (const [key, svc] of result.services) {
    const kept = Object.hasOwn(persisted.allocations, key) ? persisted.allocations[key]! : [];
    // The common case, every IP persisted in the same order (the same array, or equal): no set to build.
    if (kept === svc.ingress || (kept.length === svc.ingress.length && kept.every((ip, i) => ip === svc.ingress[i]))) {
      services.set(key, svc);
      continue;
    }
    const held = new Set(kept);
    const ingress = svc.ingress.filter((ip) => held.has(ip));
    if (ingress.length === svc.ingress.length) {
      services.set(key, svc);
      continue;
    }
    const missing = svc.ingress.filter((ip) => !held.has(ip)).join(', ');
    const waiting =
      allocator === undefined
        ? `no LB-IPAM allocator is elected, so ${missing} is not persisted and not announced yet`
        : `waiting for the LB-IPAM allocator (${allocator}) to persist ${missing}`;
    const condition: ServiceCondition =
      svc.condition.status === 'False'
        ? { ...svc.condition, message: `${svc.condition.message}; ${waiting}` }
        : { type: CONDITION_REQUEST_SATISFIED, status: 'False', reason: 'waiting_for_allocator', message: waiting };
    services.set(key, { ingress, condition, ...(svc.warnings ? { warnings: svc.warnings } : {}) });
  }
  return { ...result, services };
}

/**
 * No pool exists: Cilium's LB-IPAM goes dormant and touches nothing. The
 * state is carried over for the Services that still exist, so pools coming
 * back re-import the same IPs.
 */
export function dormantResult(views: readonly ServiceView[], previous: AllocationState): IpamResult {
  const allocations: Record<string, readonly string[]> = {};
  const fingerprints: Record<string, string> = {};
  for (const view of [...views].sort(byString((v) => v.key))) {
    const ips = Object.hasOwn(previous.allocations, view.key) ? previous.allocations[view.key] : undefined;
    if (ips === undefined) continue;
    allocations[view.key] = ips;
    const fp = previous.fingerprints?.[view.key];
    if (fp !== undefined) fingerprints[view.key] = fp;
  }
  return {
    dormant: true,
    state: { version: 1, allocations, fingerprints },
    services: new Map(),
    pools: new Map(),
    ipOwners: new Map(),
  };
}
