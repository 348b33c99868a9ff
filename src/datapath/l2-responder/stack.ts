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
import { PacketMulticastGroups, type MulticastGroups } from '../../os/multicast-groups.js';
import { libbpf } from '../../os/libbpf.js';
import { RingBufferReader } from '../../os/ringbuf.js';
import { ConflictDefender, conflictDefenceDefaults, type ConflictDefenceOptions } from '../conflict-defence.js';
import { GarpAnnouncer, type FrameSender, type GarpSchedule } from '../garp.js';
import { l2AnnounceTable, type L2AnnounceRow } from '../tables/l2-announce.js';
import { L2Datapath, type L2DatapathOptions } from './datapath.js';
import { decodeConflictEvent } from './layout.js';
import type { LivenessGate } from '../../controlplane/ownership/edges.js';
import { L2ResponderOps } from './reconcile-ops.js';
import { answeringLinks, linkHoldDecision } from './link-hold.js';

export interface L2StackConfig {
  datapath: L2DatapathOptions;
  garp: GarpSchedule;
  reconciler: ReconcilerConfig;
  conflictDefence?: ConflictDefenceOptions;
}

export class L2Stack implements Disposable {
  private readonly store = new DisposableStore();
  readonly datapath: L2Datapath;
  readonly garp: GarpAnnouncer;
  reconciler!: Reconciler<L2AnnounceRow>;
  ops!: L2ResponderOps;
  /** Foreign claims of our IPs, defended. */
  readonly conflicts: ConflictDefender;
  /** Solicited-node group memberships of the IPv6 entries. */
  readonly groups: MulticastGroups;

  constructor(
    private readonly deps: { db: StateDB; links: Links; sender: FrameSender; clock: Clock; log: Logger; livenessGate?: LivenessGate; groups?: MulticastGroups },
    private readonly config: L2StackConfig,
  ) {
    this.datapath = this.store.add(new L2Datapath({ clock: deps.clock, log: deps.log, ...(deps.livenessGate ? { livenessGate: deps.livenessGate } : {}) }, config.datapath)); // program, maps, heartbeat
    const held = () => this.datapath.liveness?.answering === false;
    this.garp = this.store.add(new GarpAnnouncer({ sender: deps.sender, clock: deps.clock, log: deps.log, held }, config.garp)); // bursts
    this.conflicts = this.store.add(this.makeConflictDefender()); // validates its options before anything touches the kernel
    this.groups = deps.groups ?? this.store.add(new PacketMulticastGroups()); // NS reception on multicast-filtering devices
  }

  /** Loads the program and starts reconciling the table into it. */
  start(): void {
    const { db, links, clock, log } = this.deps;
    this.datapath.start();
    this.startConflictDefence();
    this.ops = new L2ResponderOps({ map: this.datapath.map, interfaces: this.datapath, links, garp: this.garp, groups: this.groups, log });
    const reconciler = new Reconciler<L2AnnounceRow>({ name: 'l2-responder', db, table: l2AnnounceTable, ops: this.ops, clock, log }, this.config.reconciler);
    this.reconciler = reconciler;
    this.store.add({ dispose: () => void reconciler.dispose() });
    reconciler.start();
    void links.list().then(
      (ls) => {
        for (const l of ls) if (!this.carrier.has(l.ifindex)) this.carrier.set(l.ifindex, l.up && l.carrier);
      },
      () => {},
    );
  }

  private makeConflictDefender(): ConflictDefender {
    const { clock, log } = this.deps;
    return new ConflictDefender(
      {
        clock,
        log: log.child({ module: 'conflicts' }),
        // Read live: the maps exist once start() has loaded the program.
        conflictCount: (key) => this.datapath.maps.responders.lookup(key)?.conflicts,
        interfaceMac: (ifindex) => this.datapath.maps.interfaces.lookup(ifindex)?.mac,
        // Only while our heartbeat runs, and only once the store has
        // confirmed we still own the IP: a foreign claim may be the node that
        // fenced us out while we were cut off (a link back after a flap, a
        // path to the segment healed), and defending then would pull clients
        // back to us beside the rightful owner.
        announce: (target) => {
          const liveness = this.datapath.liveness;
          if (!liveness) return;
          void liveness.recheck(`a foreign MAC claims ${target.ip}`).then(() => {
            if (liveness.answering === false) return;
            if (!this.datapath.maps.responders.lookup({ ip: target.ip, ifindex: target.ifindex })) return; // withdrawn: it is not ours
            this.garp.announceOnce(target);
          });
        },
        interfaceName: (ifindex) => libbpf().ifIndexToName(ifindex),
      },
      this.config.conflictDefence ?? conflictDefenceDefaults,
    );
  }

  /** Conflict events from the program's ring buffer → rate-limited re-announcements. */
  private startConflictDefence(): void {
    const { log } = this.deps;
    const defender = this.conflicts;
    this.store.add(
      RingBufferReader.open(this.datapath.conflictEventsFd, (record) => {
        try {
          defender.onConflict(decodeConflictEvent(record));
        } catch (e) {
          log.warn({ err: String(e) }, 'unreadable conflict event');
        }
      }),
    );
  }

  /** ifindex → carrier, as last seen: a link regaining carrier is re-checked before answering on it. */
  private carrier = new Map<number, boolean>();
  /** The links we served when all of them lost carrier (the heartbeat is held until one regains it). */
  private darkLinks: ReadonlySet<number> | undefined;

  /**
   * Links changed: re-resolve interface names (a recreated interface has a
   * new ifindex). An interface we serve that regains carrier holds the
   * datapath silent until ownership is re-verified (Cilium #35507's other
   * half: the node that lost its link must not come back answering beside
   * the node that took over). Resolves once that hold is in place.
   */
  async linksChanged(): Promise<void> {
    this.ops.invalidateLinks();
    try {
      const links = await this.deps.links.list();
      const decision = linkHoldDecision({ links, served: new Set(this.datapath.maps.interfaces.keys()), answeredBefore: this.carrier, darkLinks: this.darkLinks });
      this.carrier = answeringLinks(links);
      const liveness = this.datapath.liveness;
      if (decision.action === 'recheck') {
        this.darkLinks = undefined;
        void liveness?.holdAndRecheck(decision.reason);
      } else if (decision.action === 'hold') {
        this.darkLinks = decision.darkLinks;
        liveness?.holdWhileLinksDown();
      }
    } catch (e) {
      this.deps.log.warn({ err: String(e) }, 'reading links failed');
    }
    this.reconciler.triggerFull();
  }

  dispose(): void {
    this.store.dispose();
  }
}
