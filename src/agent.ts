/**
 * The composition root: builds the whole agent by hand, one line per module.
 *
 *   infra         clock, logger, links (rtnetlink), frame sender (AF_PACKET), state tables
 *   control plane sources of desired state → the l2-announce table
 *   datapath      L2 responder program + pinned maps + heartbeat, gratuitous ARP,
 *                 and the reconciler that applies the table to the kernel
 */
import { systemClock, type Clock } from './core/clock.js';
import { DisposableStore, type Disposable } from './core/disposable.js';
import type { Logger } from './core/logger.js';
import { Reconciler, type ReconcilerConfig } from './core/reconciler/reconciler.js';
import { StateDB } from './core/statedb/index.js';
import { writeStaticAnnouncements, type StaticAnnouncement } from './controlplane/static-announcements.js';
import { GarpAnnouncer, type GarpSchedule } from './datapath/garp.js';
import { L2Datapath, type L2DatapathOptions } from './datapath/l2-responder/datapath.js';
import { L2ResponderOps } from './datapath/l2-responder/reconcile-ops.js';
import { PacketFrameSender } from './datapath/packet-sender.js';
import { l2AnnounceTable, type L2AnnounceRow } from './datapath/tables/l2-announce.js';
import { NetlinkLinks } from './os/links.js';

export interface AgentConfig {
  node: string;
  announcements: StaticAnnouncement[];
  datapath: L2DatapathOptions;
  garp: GarpSchedule;
  reconciler: ReconcilerConfig;
}

export class Agent implements Disposable {
  private readonly store = new DisposableStore();
  readonly db = new StateDB([l2AnnounceTable]);
  readonly datapath: L2Datapath;
  readonly garp: GarpAnnouncer;
  private readonly links: NetlinkLinks;
  private reconciler: Reconciler<L2AnnounceRow> | undefined;

  constructor(
    readonly config: AgentConfig,
    private readonly log: Logger,
    private readonly clock: Clock = systemClock,
  ) {
    // infra
    this.links = this.store.add(new NetlinkLinks()); // interface lookups and link events
    const sender = this.store.add(new PacketFrameSender()); // gratuitous ARP frames out
    // datapath
    this.datapath = this.store.add(new L2Datapath({ clock, log }, config.datapath)); // program, pinned maps, heartbeat
    this.garp = this.store.add(new GarpAnnouncer({ sender, clock, log }, config.garp)); // bursts on new entries
  }

  async start(): Promise<void> {
    this.datapath.start();
    const ops = new L2ResponderOps({ map: this.datapath.map, interfaces: this.datapath, links: this.links, garp: this.garp, log: this.log });
    // Sources register before the reconciler starts, so it cannot prune early.
    const staticSource = this.db.registerInitializer(l2AnnounceTable, 'static-announcements');
    const reconciler = new Reconciler<L2AnnounceRow>(
      { name: 'l2-responder', db: this.db, table: l2AnnounceTable, ops, clock: this.clock, log: this.log },
      this.config.reconciler,
    );
    this.reconciler = reconciler;
    this.store.add({ dispose: () => void reconciler.dispose() });
    reconciler.start();
    // An interface deleted and recreated gets a new ifindex: re-resolve everything.
    this.store.add(
      this.links.subscribe(() => {
        ops.invalidateLinks();
        reconciler.triggerFull();
      }),
    );
    // control plane
    writeStaticAnnouncements(this.db, this.config.announcements);
    staticSource.done();
  }

  health() {
    return this.reconciler?.health();
  }

  /** Runs a full datapath reconciliation now (operators, benchmarks). */
  triggerFullReconcile(): void {
    this.reconciler?.triggerFull();
  }

  dispose(): void {
    this.store.dispose();
  }
}
