/** What LB-IPAM reports: per-Service and per-pool status, in Cilium's condition vocabulary. */
import type { AllocationState } from './state.js';

export const CONDITION_REQUEST_SATISFIED = 'cilium.io/IPAMRequestSatisfied';
export const CONDITION_IPS_TOTAL = 'cilium.io/IPsTotal';
export const CONDITION_IPS_AVAILABLE = 'cilium.io/IPsAvailable';
export const CONDITION_IPS_USED = 'cilium.io/IPsUsed';
export const CONDITION_POOL_CONFLICT = 'cilium.io/PoolConflict';

/** Reasons of `cilium.io/IPAMRequestSatisfied`. */
export type RequestReason =
  | 'satisfied'
  | 'no_pool'
  | 'out_of_ips'
  | 'pool_selector_mismatch'
  | 'already_allocated'
  | 'already_allocated_incompatible_service'
  /** herald's own: allocated, but the allocator has not persisted it yet, so nobody announces it. */
  | 'waiting_for_allocator';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** A metav1.Condition without the timestamps (the writer adds those). */
export interface IpamCondition {
  readonly type: string;
  readonly status: ConditionStatus;
  readonly reason: string;
  readonly message: string;
}

export interface ServiceCondition extends IpamCondition {
  readonly type: typeof CONDITION_REQUEST_SATISFIED;
  readonly status: 'True' | 'False';
  readonly reason: RequestReason;
}

export interface ServiceAllocation {
  /** `status.loadBalancer.ingress` IPs: IPv4 first, then numerically. */
  readonly ingress: readonly string[];
  readonly condition: ServiceCondition;
  /** Cilium annotations this Service carries that herald ignores (`key: reason`); absent when none. */
  readonly warnings?: readonly string[];
}

export interface PoolStatus {
  /** PoolConflict, IPsTotal, IPsAvailable, IPsUsed, as Cilium writes them. */
  readonly conditions: readonly IpamCondition[];
  /** Addresses in all blocks (reserved first/last addresses included, as in Cilium). */
  readonly total: bigint;
  /** Addresses held by Services plus reserved ones (Cilium counts both as allocated). */
  readonly used: bigint;
  readonly available: bigint;
  readonly conflicting: boolean;
  readonly disabled: boolean;
}

export interface IpamResult {
  /** No pool exists: LB-IPAM does nothing and `state` is carried over (minus deleted Services). */
  readonly dormant: boolean;
  /** What to persist for the next run. */
  readonly state: AllocationState;
  /** Handled Services only (type LoadBalancer, class unset or Cilium's), by key. */
  readonly services: ReadonlyMap<string, ServiceAllocation>;
  readonly pools: ReadonlyMap<string, PoolStatus>;
  /** IP → keys of the Services holding it (more than one when shared), IPs in ingress order. */
  readonly ipOwners: ReadonlyMap<string, readonly string[]>;
}
