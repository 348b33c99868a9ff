/**
 * The node's L2 datapath as one unit: the loaded responder program, the
 * interfaces it is attached to, the liveness heartbeat and gratuitous ARP.
 * Kernel state (pinned maps, tc filters) deliberately outlives this object:
 * dispose() stops the heartbeat and timers but leaves the node answering until
 * the liveness limit passes or the next agent takes over.
 */
import type { Clock } from '../../core/clock.js';
import { DisposableStore, type Disposable } from '../../core/disposable.js';
import { HeraldError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { isIpv4 } from '../../net/addr.js';
import { requireEthernetLink, type LinkInfo, type Links } from '../../os/links.js';
import { GarpAnnouncer, type FrameSender, type GarpSchedule } from '../garp.js';
import type { ResponderKey, ResponderStats } from './layout.js';
import { LivenessWriter, type LivenessOptions } from './liveness.js';
import { L2ResponderProgram, detach } from './program.js';

export interface L2DatapathOptions {
  pinDir: string;
  responderMapSize: number;
  liveness: LivenessOptions;
  garp: GarpSchedule;
}

export interface L2DatapathDeps {
  links: Links;
  sender: FrameSender;
  clock: Clock;
  log: Logger;
}

export const RESPONDER_MAP_SIZE_DEFAULT = 65536;

export class L2Datapath implements Disposable {
  private readonly store = new DisposableStore();
  private program: L2ResponderProgram | undefined;
  private liveness: LivenessWriter | undefined;
  readonly garp: GarpAnnouncer;
  /** Interfaces served, by name. */
  private served = new Map<string, LinkInfo>();

  constructor(
    private readonly deps: L2DatapathDeps,
    readonly opts: L2DatapathOptions,
  ) {
    if (!Number.isInteger(opts.responderMapSize) || opts.responderMapSize < 1) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `responder map size must be a positive integer, got ${opts.responderMapSize}`);
    }
    this.garp = this.store.add(new GarpAnnouncer({ sender: deps.sender, clock: deps.clock, log: deps.log }, opts.garp));
  }

  /** Loads the program (reusing pinned maps), starts the heartbeat, serves the interfaces. */
  async start(interfaceNames: string[]): Promise<void> {
    // Resolve every interface before touching the kernel: a bad name changes nothing.
    const links = await Promise.all(interfaceNames.map((n) => requireEthernetLink(this.deps.links, n)));
    this.program = this.store.add(
      L2ResponderProgram.load({ pinDir: this.opts.pinDir, responderMapSize: this.opts.responderMapSize }),
    );
    // Heartbeat before attaching: a restarted agent's new program answers at once.
    this.liveness = this.store.add(
      new LivenessWriter({ config: this.program.maps.config, clock: this.deps.clock, log: this.deps.log }, this.opts.liveness),
    );
    this.liveness.start();
    this.serve(links);
  }

  private serve(links: LinkInfo[]): void {
    const program = this.requireProgram();
    const wanted = new Map(links.map((l) => [l.ifindex, l]));
    for (const link of links) {
      program.maps.interfaces.update(link.ifindex, { mac: link.mac });
      const progId = program.attach(link.ifindex);
      this.deps.log.info({ interface: link.name, ifindex: link.ifindex, mac: link.mac, progId }, 'L2 responder attached');
    }
    // Interfaces a previous agent served but this one does not: stop answering there.
    for (const ifindex of program.maps.interfaces.keys()) {
      if (wanted.has(ifindex)) continue;
      program.maps.interfaces.delete(ifindex);
      detach(ifindex);
      this.deps.log.info({ ifindex }, 'L2 responder detached from an interface no longer served');
    }
    this.served = new Map(links.map((l) => [l.name, l]));
  }

  get maps() {
    return this.requireProgram().maps;
  }

  servedInterface(name: string): LinkInfo | undefined {
    return this.served.get(name);
  }

  /** Live entries, read from the kernel. */
  entries(): Array<[ResponderKey, ResponderStats]> {
    return this.requireProgram().maps.responders.entries();
  }

  /**
   * Makes the node answer for `ip` on `ifname`. A newly created entry starts a
   * gratuitous burst; an existing one keeps its counters. Returns whether it was new.
   */
  announce(ip: string, ifname: string): boolean {
    if (!isIpv4(ip)) throw new HeraldError('HERALD_BAD_ARGUMENT', `not an IPv4 address: "${ip}"`);
    const link = this.served.get(ifname);
    if (!link) throw new HeraldError('HERALD_BAD_ARGUMENT', `interface ${ifname} is not served by the L2 responder`);
    const key = { ip, ifindex: link.ifindex };
    const responders = this.requireProgram().maps.responders;
    if (responders.lookup(key)) return false;
    responders.update(key, { replies: 0n, conflicts: 0n }, 'create');
    // The map entry is in place first; the burst cannot undo it.
    this.garp.announce({ ip, ifindex: link.ifindex, mac: link.mac });
    return true;
  }

  withdraw(key: ResponderKey): boolean {
    this.garp.cancel(key.ip, key.ifindex);
    return this.requireProgram().maps.responders.delete(key);
  }

  private requireProgram(): L2ResponderProgram {
    if (!this.program) throw new HeraldError('HERALD_STOPPED', 'the L2 datapath is not started');
    return this.program;
  }

  dispose(): void {
    this.store.dispose();
  }
}
