/**
 * The node's L2 datapath as one unit: the loaded responder program with its
 * pinned maps, the interfaces it serves, and the liveness heartbeat.
 * Kernel state (pinned maps, tc filters) deliberately outlives this object:
 * dispose() stops the heartbeat but leaves the node answering until the
 * liveness limit passes or the next agent takes over.
 */
import type { Clock } from '../../core/clock.js';
import { DisposableStore, type Disposable } from '../../core/disposable.js';
import { HeraldError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { LinkInfo } from '../../os/links.js';
import type { LivenessGate } from '../../controlplane/ownership/edges.js';
import { LivenessWriter, type LivenessOptions } from './liveness.js';
import { L2ResponderProgram } from './program.js';
import { tcAttachModeDetail } from '../../os/tc-attach.js';
import type { InterfacePreparer } from './reconcile-ops.js';
import { BpfResponderMap, type ResponderMap } from './responder-map.js';

export interface L2DatapathOptions {
  pinDir: string;
  responderMapSize: number;
  liveness: LivenessOptions;
  /**
   * Start with an empty responder map instead of answering from the pinned
   * entries. Right with a shared store: a restarted agent has a new lease and
   * owns nothing until it wins IPs again, so the entries of its previous life
   * may belong to another node by now. (Local store: keep them — hitless restart.)
   */
  resetEntriesOnStart?: boolean;
}

export const RESPONDER_MAP_SIZE_DEFAULT = 65536;

export class L2Datapath implements InterfacePreparer, Disposable {
  private readonly store = new DisposableStore();
  private program: L2ResponderProgram | undefined;
  private responderMap: ResponderMap | undefined;
  /** The heartbeat (for status: held-back stamps, late wake-ups). */
  liveness: LivenessWriter | undefined;

  constructor(
    private readonly deps: { clock: Clock; log: Logger; livenessGate?: LivenessGate },
    readonly opts: L2DatapathOptions,
  ) {
    if (!Number.isInteger(opts.responderMapSize) || opts.responderMapSize < 1) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `responder map size must be a positive integer, got ${opts.responderMapSize}`);
    }
  }

  /** Loads the program (reusing pinned maps and their entries) and starts the heartbeat. */
  start(): void {
    const how = tcAttachModeDetail();
    this.deps.log.info({ attach: how.mode, reason: how.reason }, `tc programs attach through ${how.mode === 'tcx' ? 'tcx links' : 'cls_bpf filters'}`);
    const program = this.store.add(
      L2ResponderProgram.load({ pinDir: this.opts.pinDir, responderMapSize: this.opts.responderMapSize }),
    );
    this.program = program;
    this.responderMap = new BpfResponderMap(program.maps.responders);
    if (this.opts.resetEntriesOnStart) {
      for (const key of program.maps.responders.keys()) program.maps.responders.delete(key);
    }
    // The heartbeat starts before anything is attached: a restarted agent's
    // program is alive from its first packet.
    const liveness = this.store.add(
      new LivenessWriter({ config: program.maps.config, clock: this.deps.clock, log: this.deps.log, ...(this.deps.livenessGate ? { gate: this.deps.livenessGate } : {}) }, this.opts.liveness),
    );
    this.liveness = liveness;
    liveness.start();
    // A restarted agent replaces the previous program on every interface it
    // served at once (atomically), so the new code and maps are in force before
    // the first reconciliation. Its MACs first: the new program's our_macs starts empty.
    this.syncOurMacs();
    let gone = false;
    for (const ifindex of program.maps.interfaces.keys()) {
      try {
        program.attach(ifindex);
      } catch {
        program.maps.interfaces.delete(ifindex); // the interface is gone
        gone = true;
      }
    }
    if (gone) this.syncOurMacs();
  }

  /** our_macs := the MACs in the interfaces map (the program's one-lookup "is this MAC one of ours"). */
  private syncOurMacs(): void {
    const { interfaces, ourMacs } = this.requireProgram().maps;
    const want = new Set(interfaces.entries().map(([, info]) => info.mac));
    for (const mac of want) ourMacs.update(mac, 1);
    for (const mac of ourMacs.keys()) if (!want.has(mac)) ourMacs.delete(mac);
  }

  /** How the tc programs are attached on this node (tcx links or cls_bpf filters). */
  get attachMode(): string {
    return tcAttachModeDetail().mode;
  }

  get map(): ResponderMap {
    if (!this.responderMap) throw new HeraldError('HERALD_STOPPED', 'the L2 datapath is not started');
    return this.responderMap;
  }

  get maps() {
    return this.requireProgram().maps;
  }

  /** The program's conflict event ring buffer. */
  get conflictEventsFd(): number {
    return this.requireProgram().conflictEventsFd;
  }

  prepare(link: LinkInfo): void {
    const program = this.requireProgram();
    // The MAC first: the program answers only on interfaces it knows the MAC of.
    program.maps.interfaces.update(link.ifindex, { mac: link.mac });
    this.syncOurMacs();
    const { progId, mode } = program.attach(link.ifindex);
    this.deps.log.info({ iface: link.name, ifindex: link.ifindex, mac: link.mac, progId, attach: mode }, 'L2 responder serving interface');
  }

  forgetAllBut(current: ReadonlySet<number>): void {
    const interfaces = this.requireProgram().maps.interfaces;
    for (const ifindex of interfaces.keys()) {
      if (current.has(ifindex)) continue;
      interfaces.delete(ifindex);
      this.requireProgram().detach(ifindex);
    }
    this.syncOurMacs();
  }

  private requireProgram(): L2ResponderProgram {
    if (!this.program) throw new HeraldError('HERALD_STOPPED', 'the L2 datapath is not started');
    return this.program;
  }

  dispose(): void {
    this.store.dispose();
  }
}
