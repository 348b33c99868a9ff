/**
 * One allocator is active at a time. The coordinator says whether this agent
 * is it, holds the last persisted allocation state, and persists new state —
 * fenced, so an agent that lost the role cannot overwrite its successor.
 * Local: the agent, with a state file. etcd: elected through etcd, state in a
 * key written in a transaction guarded by the leadership key.
 */
import type { Disposable } from '../../core/disposable.js';
import type { AllocationState } from './state.js';

export interface IpamCoordinator extends Disposable {
  readonly kind: 'local' | 'etcd' | 'kubernetes';
  /** Loads the persisted state; `onChange` fires when it or the allocator role changes. */
  start(onChange: () => void): Promise<void>;
  isAllocator(): boolean;
  /** The last persisted state (what every node may announce from). */
  current(): AllocationState;
  /** Persists `state` if this agent is still the allocator; false when fenced off. */
  save(state: AllocationState): Promise<boolean>;
  /** Who holds the allocator role, for status. */
  allocator(): string | undefined;
  /** Where the state in force came from and what went wrong last, for status. */
  status(): IpamStateStatus;
}

export interface IpamStateStatus {
  allocator?: string;
  /** Generation of the state in force (0: none yet, or written before generations existed). */
  generation: number;
  /** 'store', 'local-copy' (this node's copy in --state-dir), 'restored' (from `restoredFrom` after a store wipe or rollback), 'file' (local store), 'none'. */
  source: 'store' | 'local-copy' | 'restored' | 'file' | 'none';
  restoredFrom?: string;
  /** Services whose restored allocations are held until they are applied again. */
  held?: number;
  /** Why this node, though allocator, is not allocating now. */
  waiting?: string;
  lastStateError?: { message: string; at: string };
}
