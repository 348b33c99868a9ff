/**
 * LB-IPAM coordination on etcd: the allocator is elected through a key created
 * only if absent and attached to the agent's lease; the allocation state lives
 * in one key, written in a transaction that succeeds only while this agent's
 * leadership key (and lease) still stands — a deposed allocator is fenced off.
 * Every agent watches both keys.
 */
import type { Watcher } from 'etcd3';
import type { IpamCoordinator } from '../../controlplane/ipam/coordinator.js';
import { EMPTY_ALLOCATION_STATE, allocationStateSchema, type AllocationState } from '../../controlplane/ipam/state.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { EtcdSession } from './session.js';

export class EtcdIpamCoordinator implements IpamCoordinator {
  readonly kind = 'etcd' as const;
  private state: AllocationState = EMPTY_ALLOCATION_STATE;
  private leader: string | undefined;
  private leaderLease: string | undefined;
  private watcher: Watcher | undefined;
  private onChange: () => void = () => {};
  private disposed = false;
  private readonly leaderKey: string;
  private readonly stateKey: string;

  constructor(
    private readonly session: EtcdSession,
    private readonly nodeName: string,
    private readonly log: Logger,
  ) {
    this.leaderKey = `${session.prefix}ipam/allocator`;
    this.stateKey = `${session.prefix}ipam/state`;
  }

  async start(onChange: () => void): Promise<void> {
    this.onChange = onChange;
    // Watch first, then read: a write between the two is seen by one or the
    // other (reading first would miss a state written before the watch starts).
    this.watcher = await this.session.client.watch().prefix(`${this.session.prefix}ipam/`).create();
    this.watcher.on('put', () => void this.refresh());
    this.watcher.on('delete', () => void this.refresh());
    this.watcher.on('connected', () => void this.refresh()); // after an etcd restart, re-read
    this.watcher.on('error', (e) => this.log.warn({ err: describeError(e) }, 'etcd ipam watch error'));
    this.session.onState(() => void this.refresh());
    await this.refresh();
    await this.contend();
  }

  private refreshing: Promise<void> | undefined;
  private refreshAgain = false;

  /** Re-reads the leader and the state (one read at a time; bursts coalesce). */
  private async refresh(): Promise<void> {
    if (this.refreshing) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        await this.readOnce();
      } while (this.refreshAgain && !this.disposed);
    })().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  /** Reads the leader and the state, and contends when there is no leader. */
  private async readOnce(): Promise<void> {
    if (this.disposed) return;
    try {
      const res = await this.session.client.getAll().prefix(`${this.session.prefix}ipam/`).exec();
      let leader: string | undefined;
      let leaderLease: string | undefined;
      let state = this.state;
      for (const kv of res.kvs) {
        const key = kv.key.toString();
        if (key === this.leaderKey) {
          leader = kv.value.toString();
          leaderLease = String(kv.lease);
        } else if (key === this.stateKey) {
          const parsed = allocationStateSchema.safeParse(JSON.parse(kv.value.toString()));
          if (parsed.success) state = parsed.data;
          else this.log.error({ key }, 'allocation state in etcd is invalid; keeping the last good one');
        }
      }
      const changed = leader !== this.leader || leaderLease !== this.leaderLease || JSON.stringify(state) !== JSON.stringify(this.state);
      this.leader = leader;
      this.leaderLease = leaderLease;
      this.state = state;
      if (changed) this.onChange();
      if (!leader) await this.contend();
    } catch (e) {
      this.log.debug({ err: describeError(e) }, 'etcd ipam refresh failed');
    }
  }

  private async contend(): Promise<void> {
    const lease = this.session.leaseId;
    if (this.disposed || !lease || this.leader) return;
    try {
      const res = await this.session.client
        .if(this.leaderKey, 'Create', '==', 0)
        .then(this.session.client.put(this.leaderKey).value(this.nodeName).lease(lease))
        .commit();
      if (res.succeeded) {
        this.leader = this.nodeName;
        this.leaderLease = lease;
        this.log.info({}, 'elected LB-IPAM allocator');
        this.onChange();
      }
    } catch (e) {
      this.log.debug({ err: describeError(e) }, 'allocator election attempt failed');
    }
  }

  isAllocator(): boolean {
    return this.leader === this.nodeName && this.leaderLease !== undefined && this.leaderLease === this.session.leaseId;
  }

  current(): AllocationState {
    return this.state;
  }

  async save(state: AllocationState): Promise<boolean> {
    const lease = this.session.leaseId;
    if (!this.isAllocator() || !lease) return false;
    const res = await this.session.client
      .if(this.leaderKey, 'Value', '==', this.nodeName)
      .and(this.leaderKey, 'Lease', '==', lease)
      .then(this.session.client.put(this.stateKey).value(JSON.stringify(state)))
      .commit();
    if (res.succeeded) this.state = state;
    else {
      this.log.warn({}, 'allocation write fenced off: no longer the allocator');
      await this.refresh();
    }
    return res.succeeded;
  }

  allocator(): string | undefined {
    return this.leader;
  }

  dispose(): void {
    this.disposed = true;
    void this.watcher?.cancel();
  }
}
