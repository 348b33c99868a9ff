/**
 * Network interfaces of the agent's network namespace, read over rtnetlink
 * (never sysfs: under `nsenter --net` /sys/class/net shows the host's links).
 */
// Only the rtnetlink part of the package: its index also loads the generic
// netlink, nl80211 and WireGuard definitions (half of its 60 ms import).
import { createRtNetlink, type RtNetlinkSocket } from 'netlink/dist/rt/rt.js';
import type { Disposable } from '../core/disposable.js';
import { HeraldError } from '../core/errors.js';
import { formatMac } from '../net/addr.js';

export interface LinkInfo {
  name: string;
  ifindex: number;
  /** Lower-case colon MAC; '' for links without a 6-byte hardware address. */
  mac: string;
  /** ARPHRD_ETHER with a 6-byte address: frames carry an Ethernet header. */
  ethernet: boolean;
  /** Administratively up (IFF_UP). */
  up: boolean;
  /** Carrier present (IFF_LOWER_UP). */
  carrier: boolean;
  /** The link answers ARP itself unless told not to (IFF_NOARP unset). */
  arp: boolean;
}

/** The edge the datapath uses to resolve and follow interfaces. */
export interface Links {
  list(): Promise<LinkInfo[]>;
  byName(name: string): Promise<LinkInfo | undefined>;
  /**
   * Called after any link is added, changed (carrier, MAC, name) or deleted.
   * A trigger only: consumers re-list, which also catches missed notifications.
   */
  subscribe(onChange: () => void): Disposable;
}

type LinkMessage = Awaited<ReturnType<RtNetlinkSocket['getLinks']>>[number];

function toLinkInfo(msg: LinkMessage): LinkInfo {
  const address = msg.attrs.address as Buffer | undefined;
  const mac = address && address.length === 6 ? formatMac(address) : '';
  const flags = msg.data.flags ?? {};
  return {
    name: msg.attrs.ifname ?? `if${msg.data.index}`,
    ifindex: msg.data.index ?? 0,
    mac,
    ethernet: msg.data.type === 'ETHER' && mac !== '',
    up: Boolean(flags.up),
    carrier: Boolean(flags.lowerUp),
    arp: !flags.noarp,
  };
}

export class NetlinkLinks implements Links, Disposable {
  private socket: RtNetlinkSocket | undefined;
  private events: RtNetlinkSocket | undefined;

  /** The tail of the request queue: one request at a time on the socket. */
  private queue: Promise<unknown> = Promise.resolve();

  private sock(): RtNetlinkSocket {
    this.socket ??= createRtNetlink();
    return this.socket;
  }

  /**
   * Runs one request on the shared socket after the previous one finished:
   * concurrent dumps on one netlink socket interleave their replies and fail
   * ("Multipart message not terminated properly", EBUSY).
   */
  private request<T>(run: (sock: RtNetlinkSocket) => Promise<T>): Promise<T> {
    const result = this.queue.then(() => run(this.sock()));
    this.queue = result.catch(() => {});
    return result;
  }

  async list(): Promise<LinkInfo[]> {
    const msgs = await this.request((sock) => sock.getLinks());
    return msgs.map(toLinkInfo);
  }

  async byName(name: string): Promise<LinkInfo | undefined> {
    try {
      const msgs = await this.request((sock) => sock.getLink({}, { ifname: name }));
      const first = msgs[0];
      return first ? toLinkInfo(first) : undefined;
    } catch (e) {
      if (String(e).includes('ENODEV')) return undefined;
      throw new HeraldError('HERALD_LINK_LOOKUP', `reading link ${name} over rtnetlink failed`, { cause: e });
    }
  }

  subscribe(onChange: () => void): Disposable {
    // A separate socket: multicast notifications must not interleave with request replies.
    const events = (this.events ??= createRtNetlink({ ref: false } as never));
    events.addMembership('LINK');
    const listener = (msgs: Array<{ kind?: string }>) => {
      if (msgs.some((m) => m.kind === 'link')) onChange();
    };
    events.on('message', listener as never);
    return { dispose: () => events.off('message', listener as never) };
  }

  dispose(): void {
    for (const s of [this.socket, this.events]) {
      (s?.socket as unknown as { close?: () => void } | undefined)?.close?.();
    }
    this.socket = undefined;
    this.events = undefined;
  }
}

export async function requireEthernetLink(links: Links, name: string): Promise<LinkInfo> {
  const link = await links.byName(name);
  if (!link) throw new HeraldError('HERALD_LINK_NOT_FOUND', `interface ${name} does not exist`);
  if (!link.ethernet) {
    throw new HeraldError(
      'HERALD_LINK_NOT_ETHERNET',
      `interface ${name} has no Ethernet header (ARP cannot be answered there); serve an Ethernet or VLAN interface`,
    );
  }
  return link;
}
