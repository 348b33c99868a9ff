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
  readonly kind: 'local' | 'etcd';
  /** Loads the persisted state; `onChange` fires when it or the allocator role changes. */
  start(onChange: () => void): Promise<void>;
  isAllocator(): boolean;
  /** The last persisted state (what every node may announce from). */
  current(): AllocationState;
  /** Persists `state` if this agent is still the allocator; false when fenced off. */
  save(state: AllocationState): Promise<boolean>;
  /** Who holds the allocator role, for status. */
  allocator(): string | undefined;
}
