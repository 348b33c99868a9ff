import type { IpamCoordinator, IpamStateStatus } from '../../src/controlplane/ipam/coordinator.js';
import { EMPTY_ALLOCATION_STATE, type AllocationState } from '../../src/controlplane/ipam/state.js';

/** The allocation store for control-plane tests: this node is the allocator; state in memory. */
export class MemoryIpam implements IpamCoordinator {
  readonly kind = 'local' as const;
  state: AllocationState = EMPTY_ALLOCATION_STATE;
  async start(): Promise<void> {}
  isAllocator(): boolean {
    return true;
  }
  current(): AllocationState {
    return this.state;
  }
  async save(state: AllocationState): Promise<boolean> {
    this.state = state;
    return true;
  }
  allocator(): string {
    return 'node-a';
  }
  status(): IpamStateStatus {
    return { allocator: 'node-a', generation: this.state.generation ?? 0, source: 'file' };
  }
  dispose(): void {}
}
