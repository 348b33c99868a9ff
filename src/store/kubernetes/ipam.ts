/**
 * LB-IPAM coordination on Kubernetes: one allocator, elected on the Lease
 * `herald-ipam` (LeaseOwnership.elect: valid while the leader's node Lease
 * is, written only when leadership moves), and no state object of its own —
 * the allocation is persisted where users look for it, in
 * `Service.status.loadBalancer.ingress`.
 *
 * - Followers: the state in force is what the Services' statuses say (the
 *   informer cache), so they announce only IPs the leader has written.
 * - The leader: the state it last saved (its allocation, which the status
 *   writer is writing), seeded from the statuses when it became leader. So a
 *   new leader imports exactly what its predecessor wrote: a leader change
 *   loses no allocation and reshuffles nothing.
 * - `save` is fenced by `isLeader()` (our node Lease valid on our own clock).
 */
import type { IpamCoordinator, IpamStateStatus } from '../../controlplane/ipam/coordinator.js';
import { sameAllocations, type AllocationState } from '../../controlplane/ipam/state.js';
import type { KubeObject } from '../../intent/sources/kube-client.js';
import type { LeaderElection } from './lease-ownership.js';

export const IPAM_ELECTION = 'herald-ipam';

/**
 * The allocation the Services' status shows (`namespace/name` → ingress IPs,
 * in the order the status lists them: LB-IPAM's order when herald wrote them;
 * allocations are compared as sets, and the allocator sorts on import).
 */
export function statusAllocations(services: Iterable<KubeObject>): AllocationState {
  const allocations: Record<string, string[]> = {};
  for (const svc of services) {
    const ingress = (svc.status as { loadBalancer?: { ingress?: { ip?: string }[] } } | undefined)?.loadBalancer?.ingress ?? [];
    const ips = ingress.map((i) => i.ip).filter((ip): ip is string => typeof ip === 'string' && ip !== '');
    if (ips.length === 0) continue;
    allocations[`${svc.metadata.namespace ?? 'default'}/${svc.metadata.name}`] = ips;
  }
  return { version: 1, allocations };
}

export class KubeIpamCoordinator implements IpamCoordinator {
  readonly kind = 'kubernetes' as const;
  /** What we saved while leader (undefined: follow the statuses). */
  private saved: AllocationState | undefined;
  private generation = 0;
  private wasLeader = false;

  constructor(
    private readonly election: LeaderElection,
    /** The informer's Services (raw, with status). */
    private readonly services: () => Iterable<KubeObject>,
  ) {}

  /**
   * `onChange` fires on every election change. Status writes need no call of
   * their own: the informer publishes a new snapshot when a Service's status
   * changes, and the controller's pass reads `current()` again then.
   */
  async start(onChange: () => void): Promise<void> {
    this.election.onChange(() => {
      const leader = this.election.isLeader();
      // Lost or (re)gained: start again from what the statuses say.
      if (leader !== this.wasLeader) this.saved = undefined;
      this.wasLeader = leader;
      onChange();
    });
  }

  isAllocator(): boolean {
    return this.election.isLeader();
  }

  current(): AllocationState {
    if (this.saved && this.election.isLeader()) return this.saved;
    return statusAllocations(this.services());
  }

  async save(state: AllocationState): Promise<boolean> {
    if (!this.election.isLeader()) return false;
    if (this.saved && sameAllocations(this.saved, state)) return true;
    this.generation++;
    this.saved = { ...state, generation: this.generation };
    return true;
  }

  allocator(): string | undefined {
    return this.election.leader();
  }

  status(): IpamStateStatus {
    const leader = this.election.leader();
    return {
      ...(leader ? { allocator: leader } : {}),
      // Of the state in force: ours while we lead and have saved; the statuses (no generation: 0) otherwise.
      generation: this.saved && this.election.isLeader() ? (this.saved.generation ?? 0) : 0,
      source: 'store',
      ...(leader ? {} : { waiting: `no node holds the ${this.election.name} Lease yet` }),
    };
  }

  dispose(): void {}
}
