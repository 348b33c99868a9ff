/**
 * How the generic reconciler applies L2 announce rows to the kernel: resolve
 * the interface (cached, re-resolved when links change), make sure the program
 * serves it, create the responder entry, and start a gratuitous burst for an
 * entry that is new. The map write never waits on, or is undone by, the burst.
 * IPv6 rows go to responder_v6 (NDP), and the interface joins the address's
 * solicited-node multicast group so the solicitations reach the program.
 */
import { HeraldError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import { isIpv4 } from '../../core/addr.js';
import { solicitedNodeMac } from '../../net/ndp.js';
import type { LinkInfo, Links } from '../../os/links.js';
import type { MulticastGroups } from '../../os/multicast-groups.js';
import type { GarpAnnouncer } from '../garp.js';
import type { L2AnnounceRow } from '../tables/l2-announce.js';
import type { ResponderKey } from './layout.js';
import type { ResponderMap } from './responder-map.js';

/** The edge that makes the program serve an interface (attach + its MAC in the interfaces map). */
export interface InterfacePreparer {
  prepare(link: LinkInfo): void;
  /** Drops interfaces-map entries whose ifindex is not among `current`. */
  forgetAllBut(current: ReadonlySet<number>): void;
}

export interface L2ResponderOpsDeps {
  map: ResponderMap;
  interfaces: InterfacePreparer;
  links: Links;
  garp: GarpAnnouncer;
  /** Solicited-node group memberships for IPv6 entries. */
  groups: MulticastGroups;
  log: Logger;
}

const keyOf = (k: ResponderKey) => `${k.ip}|${k.ifindex}`;

export class L2ResponderOps implements ReconcilerOps<L2AnnounceRow> {
  private links = new Map<string, LinkInfo>();
  /** ifindex → MAC the program was prepared with in this agent's lifetime. */
  private prepared = new Map<number, string>();
  /** Keys of IPv6 entries whose solicited-node group this agent joined, with the group MAC. */
  private readonly joined = new Map<string, { ifindex: number; mac: string }>();
  /** A lookup failed for another reason than "no such link": do not prune on partial knowledge. */
  private lookupFailed = false;

  constructor(private readonly deps: L2ResponderOpsDeps) {}

  /** Links changed: forget every resolution; the next full reconciliation re-resolves. */
  invalidateLinks(): void {
    this.links.clear();
  }

  private async resolve(name: string): Promise<LinkInfo> {
    const cached = this.links.get(name);
    if (cached) return cached;
    let link: LinkInfo | undefined;
    try {
      link = await this.deps.links.byName(name);
    } catch (e) {
      this.lookupFailed = true;
      throw e;
    }
    if (!link) throw new HeraldError('HERALD_LINK_NOT_FOUND', `interface ${name} does not exist`);
    if (!link.ethernet) {
      throw new HeraldError('HERALD_LINK_NOT_ETHERNET', `interface ${name} has no Ethernet header; ARP and NDP cannot be answered there`);
    }
    this.links.set(name, link);
    return link;
  }

  /** Joins the solicited-node group of an IPv6 entry (once per agent lifetime of the key, also for a pinned entry). */
  private joinGroup(key: ResponderKey): void {
    if (isIpv4(key.ip)) return;
    const k = keyOf(key);
    if (this.joined.has(k)) return;
    const mac = solicitedNodeMac(key.ip);
    this.deps.groups.join(key.ifindex, mac);
    this.joined.set(k, { ifindex: key.ifindex, mac });
  }

  private leaveGroup(key: ResponderKey): void {
    const k = keyOf(key);
    const j = this.joined.get(k);
    if (!j) return;
    this.joined.delete(k);
    this.deps.groups.leave(j.ifindex, j.mac);
  }

  /**
   * Makes the program serve an interface ahead of any entry on it (interfaces
   * this node is a candidate on), so taking over an IP costs only a map write.
   */
  async prepareInterface(name: string): Promise<void> {
    const link = await this.resolve(name);
    this.ensurePrepared(link);
  }

  private ensurePrepared(link: LinkInfo): void {
    if (this.prepared.get(link.ifindex) === link.mac) return;
    this.deps.interfaces.prepare(link);
    this.prepared.set(link.ifindex, link.mac);
  }

  async update(row: L2AnnounceRow): Promise<void> {
    const link = await this.resolve(row.iface);
    this.ensurePrepared(link);
    const key = { ip: row.ip, ifindex: link.ifindex };
    // The group first: the first solicitation after the map write must arrive.
    this.joinGroup(key);
    if (this.deps.map.create(key)) {
      // The first gratuitous round goes out the moment the entry answers, before anything else (even the log line).
      this.deps.garp.announce({ ip: row.ip, ifindex: link.ifindex, mac: link.mac });
      this.deps.log.info({ ip: row.ip, iface: row.iface, ifindex: link.ifindex, origins: row.origins }, 'announcing');
    }
  }

  async delete(row: L2AnnounceRow): Promise<void> {
    const link = this.links.get(row.iface) ?? (await this.deps.links.byName(row.iface));
    if (!link) return; // the interface is gone: the full reconciliation prunes its stale keys
    this.withdraw({ ip: row.ip, ifindex: link.ifindex }, row.iface);
  }

  private withdraw(key: ResponderKey, iface?: string): void {
    this.deps.garp.cancel(key.ip, key.ifindex);
    const deleted = this.deps.map.delete(key);
    this.leaveGroup(key);
    if (deleted) this.deps.log.info({ ip: key.ip, ifindex: key.ifindex, ...(iface ? { iface } : {}) }, 'withdrawn');
  }

  async prune(desired: readonly L2AnnounceRow[]): Promise<void> {
    if (this.lookupFailed) {
      this.lookupFailed = false;
      throw new HeraldError('HERALD_LINK_LOOKUP', 'interfaces could not be read; not pruning on partial knowledge');
    }
    const wanted = new Set<string>();
    for (const row of desired) {
      const link = this.links.get(row.iface); // resolved by the update pass just before
      if (link) wanted.add(keyOf({ ip: row.ip, ifindex: link.ifindex }));
    }
    for (const key of this.deps.map.keys()) {
      if (!wanted.has(keyOf(key))) this.withdraw(key);
    }
    for (const [k, j] of [...this.joined]) {
      if (!wanted.has(k)) this.leaveGroup({ ip: k.slice(0, k.lastIndexOf('|')), ifindex: j.ifindex });
    }
    const current = new Set((await this.deps.links.list()).filter((l) => l.ethernet).map((l) => l.ifindex));
    for (const ifindex of [...this.prepared.keys()]) if (!current.has(ifindex)) this.prepared.delete(ifindex);
    for (const [k, j] of [...this.joined]) if (!current.has(j.ifindex)) this.joined.delete(k);
    this.deps.groups.forgetAllBut(current);
    this.deps.interfaces.forgetAllBut(current);
  }
}
