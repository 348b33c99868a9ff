/**
 * The composition root: builds the whole agent by hand, one line per module.
 *
 *   infra       clock, logger, links (rtnetlink), frame sender (AF_PACKET)
 *   datapath    L2 responder program + maps, liveness heartbeat, gratuitous ARP
 *   announce    the static announcements given on the command line
 */
import { systemClock, type Clock } from './core/clock.js';
import { DisposableStore, type Disposable } from './core/disposable.js';
import { HeraldError } from './core/errors.js';
import type { Logger } from './core/logger.js';
import { isIpv4 } from './net/addr.js';
import { L2Datapath, type L2DatapathOptions } from './datapath/l2-responder/datapath.js';
import { PacketFrameSender } from './datapath/packet-sender.js';
import { NetlinkLinks } from './os/links.js';

export interface StaticAnnouncement {
  ip: string;
  interface: string;
}

export interface AgentConfig {
  node: string;
  interfaces: string[];
  announcements: StaticAnnouncement[];
  datapath: L2DatapathOptions;
}

/** "198.51.100.10@eth0" → { ip, interface }. */
export function parseAnnouncement(text: string): StaticAnnouncement {
  const at = text.lastIndexOf('@');
  const ip = at > 0 ? text.slice(0, at) : '';
  const iface = at > 0 ? text.slice(at + 1) : '';
  if (!isIpv4(ip) || iface === '') {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `announcement "${text}" must look like IPv4@interface, e.g. 198.51.100.10@eth0`);
  }
  return { ip, interface: iface };
}

export class Agent implements Disposable {
  private readonly store = new DisposableStore();
  readonly datapath: L2Datapath;

  constructor(
    readonly config: AgentConfig,
    private readonly log: Logger,
    clock: Clock = systemClock,
  ) {
    // infra
    const links = this.store.add(new NetlinkLinks()); // interface lookups and link events
    const sender = this.store.add(new PacketFrameSender()); // gratuitous ARP frames out
    // datapath
    this.datapath = this.store.add(new L2Datapath({ links, sender, clock, log }, config.datapath));
    for (const a of config.announcements) {
      if (!config.interfaces.includes(a.interface)) {
        throw new HeraldError('HERALD_BAD_ARGUMENT', `announcement ${a.ip}@${a.interface}: ${a.interface} is not in --interface`);
      }
    }
  }

  async start(): Promise<void> {
    await this.datapath.start(this.config.interfaces);
    this.syncAnnouncements();
  }

  /** Adds what is wanted first, then removes the rest: the node never stops answering a kept IP. */
  private syncAnnouncements(): void {
    const wanted = new Set<string>();
    for (const a of this.config.announcements) {
      const link = this.datapath.servedInterface(a.interface);
      if (!link) continue;
      wanted.add(`${a.ip}|${link.ifindex}`);
      const created = this.datapath.announce(a.ip, a.interface);
      this.log.info({ ip: a.ip, interface: a.interface, created }, created ? 'announcing' : 'already announced');
    }
    for (const [key] of this.datapath.entries()) {
      if (wanted.has(`${key.ip}|${key.ifindex}`)) continue;
      this.datapath.withdraw(key);
      this.log.info({ ip: key.ip, ifindex: key.ifindex }, 'withdrawn (no longer configured)');
    }
  }

  dispose(): void {
    this.store.dispose();
  }
}
