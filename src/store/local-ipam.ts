/** Local LB-IPAM coordination: this agent is the allocator; state in an atomically written file. */
import type { IpamCoordinator, IpamStateStatus } from '../controlplane/ipam/coordinator.js';
import { EMPTY_ALLOCATION_STATE, allocationStateSchema, type AllocationState } from '../controlplane/ipam/state.js';
import { StateFile } from '../os/state-file.js';

export class LocalIpamCoordinator implements IpamCoordinator {
  readonly kind = 'local' as const;
  private readonly file: StateFile<AllocationState>;
  private state: AllocationState = EMPTY_ALLOCATION_STATE;

  constructor(
    path: string,
    private readonly nodeName: string,
  ) {
    this.file = new StateFile<AllocationState>({ path, schema: allocationStateSchema, indent: 1 });
  }

  async start(): Promise<void> {
    this.state = (await this.file.load()) ?? EMPTY_ALLOCATION_STATE;
  }
  isAllocator(): boolean {
    return true;
  }
  current(): AllocationState {
    return this.state;
  }
  async save(state: AllocationState): Promise<boolean> {
    await this.file.save(state);
    this.state = state;
    return true;
  }
  allocator(): string {
    return this.nodeName;
  }
  status(): IpamStateStatus {
    return { allocator: this.nodeName, generation: this.state.generation ?? 0, source: 'file' };
  }
  dispose(): void {}
}
