/**
 * The datapath half of the agent as one unit: program + pinned maps +
 * heartbeat, gratuitous ARP, and the reconciler that applies the l2-announce
 * table. The agent builds it; so do tools that drive the table directly.
 */
import type { Clock } from '../../core/clock.js';
import { DisposableStore, type Disposable } from '../../core/disposable.js';
import type { Logger } from '../../core/logger.js';
import { Reconciler, type ReconcilerConfig } from '../../core/reconciler/reconciler.js';
import type { StateDB } from '../../core/statedb/index.js';
import type { Links } from '../../os/links.js';
import { GarpAnnouncer, type FrameSender, type GarpSchedule } from '../garp.js';
import { l2AnnounceTable, type L2AnnounceRow } from '../tables/l2-announce.js';
import { L2Datapath, type L2DatapathOptions } from './datapath.js';
import type { LivenessGate } from './liveness.js';
import { L2ResponderOps } from './reconcile-ops.js';

export interface L2StackConfig {
  datapath: L2DatapathOptions;
  garp: GarpSchedule;
  reconciler: ReconcilerConfig;
}

export class L2Stack implements Disposable {
  private readonly store = new DisposableStore();
  readonly datapath: L2Datapath;
  readonly garp: GarpAnnouncer;
  reconciler!: Reconciler<L2AnnounceRow>;
  ops!: L2ResponderOps;

  constructor(
    private readonly deps: { db: StateDB; links: Links; sender: FrameSender; clock: Clock; log: Logger; livenessGate?: LivenessGate },
    private readonly config: L2StackConfig,
  ) {
    this.datapath = this.store.add(new L2Datapath({ clock: deps.clock, log: deps.log, ...(deps.livenessGate ? { livenessGate: deps.livenessGate } : {}) }, config.datapath)); // program, maps, heartbeat
    this.garp = this.store.add(new GarpAnnouncer({ sender: deps.sender, clock: deps.clock, log: deps.log }, config.garp)); // bursts
  }

  /** Loads the program and starts reconciling the table into it. */
  start(): void {
    const { db, links, clock, log } = this.deps;
    this.datapath.start();
    this.ops = new L2ResponderOps({ map: this.datapath.map, interfaces: this.datapath, links, garp: this.garp, log });
    const reconciler = new Reconciler<L2AnnounceRow>({ name: 'l2-responder', db, table: l2AnnounceTable, ops: this.ops, clock, log }, this.config.reconciler);
    this.reconciler = reconciler;
    this.store.add({ dispose: () => void reconciler.dispose() });
    reconciler.start();
  }

  /** Links changed: re-resolve interface names (a recreated interface has a new ifindex). */
  linksChanged(): void {
    this.ops.invalidateLinks();
    this.reconciler.triggerFull();
  }

  dispose(): void {
    this.store.dispose();
  }
}
