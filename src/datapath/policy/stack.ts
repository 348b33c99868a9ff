/**
 * The policy datapath as one unit: the program (maps pinned when a pin
 * directory is given), the generic reconciler applying the service-policy
 * table to its maps, and the tc attachments. The agent builds it; so do the
 * lab's policy node and bench/policy.
 */
import type { Clock } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import type { Logger } from '../../core/logger.js';
import { Reconciler, reconcilerDefaults, type ReconcilerConfig } from '../../core/reconciler/reconciler.js';
import type { StateDB, Table } from '../../core/statedb/index.js';
import type { ServicePolicyRow } from '../tables/service-policy.js';
import { PolicyMapOps, type PolicyOpsEvents } from './ops.js';
import { PolicyProgram } from './program.js';

export interface PolicyStackDeps {
  db: StateDB;
  table: Table<ServicePolicyRow>;
  clock: Clock;
  log: Logger;
  pinDir?: string;
  events?: PolicyOpsEvents;
}

export class PolicyStack implements Disposable {
  readonly program: PolicyProgram;
  readonly ops: PolicyMapOps;
  readonly reconciler: Reconciler<ServicePolicyRow>;
  private readonly attached = new Set<number>();

  constructor(deps: PolicyStackDeps, config: ReconcilerConfig = reconcilerDefaults) {
    this.program = PolicyProgram.load(deps.pinDir !== undefined ? { pinDir: deps.pinDir } : {});
    this.ops = new PolicyMapOps(this.program.maps, deps.events);
    // Pinned maps may hold a previous run's entries, still enforced: write around them, prune them later.
    if (deps.pinDir !== undefined) {
      const held = this.ops.adopt();
      if (held.ips > 0) deps.log.info(held, 'policy maps adopted from the previous run');
    }
    this.reconciler = new Reconciler<ServicePolicyRow>({ name: 'service-policy', db: deps.db, table: deps.table, ops: this.ops, clock: deps.clock, log: deps.log }, config);
  }

  start(): void {
    this.reconciler.start();
  }

  /** tc ingress priority 2 on `ifindex` (idempotent). */
  attach(ifindex: number): void {
    this.program.attach(ifindex);
    this.attached.add(ifindex);
  }

  /** Whether this program is the one at tc ingress priority 2 on `ifindex` now. */
  isAttached(ifindex: number): boolean {
    return this.program.attachedHere(ifindex);
  }

  /** Removes the filter from one interface (false: it was not there, or the interface is gone). */
  detach(ifindex: number): boolean {
    this.attached.delete(ifindex);
    return this.program.detach(ifindex);
  }

  /** Resolves when the maps hold the table up to `tableRevision`. */
  async realized(tableRevision: number): Promise<void> {
    const out = await this.reconciler.settled({ revision: tableRevision });
    if (out.failed.length > 0) throw new Error(`policy rows failed to apply: ${out.failed.join(', ')}`);
  }

  /** Detaches from every interface it attached to (the agent's clean stop). */
  detachAll(): void {
    for (const ifindex of this.attached) this.program.detach(ifindex);
    this.attached.clear();
  }

  dispose(): void {
    this.reconciler.dispose();
    this.program.dispose();
  }
}
