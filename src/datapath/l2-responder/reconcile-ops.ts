/**
 * How the generic reconciler applies L2 announce rows to the kernel: resolve
 * the interface (cached, re-resolved when links change), make sure the program
 * serves it, create the responder entry, and start a gratuitous burst for an
 * entry that is new. The map write never waits on, or is undone by, the burst.
 */
import { HeraldError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import { isIpv4 } from '../../core/addr.js';
import type { LinkInfo, Links } from '../../os/links.js';
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
  log: Logger;
}

const keyOf = (k: ResponderKey) => `${k.ip}|${k.ifindex}`;

export class L2ResponderOps implements ReconcilerOps<L2AnnounceRow> {
  private links = new Map<string, LinkInfo>();
  /** ifindex → MAC the program was prepared with in this agent's lifetime. */
  private prepared = new Map<number, string>();
  private readonly skippedV6 = new Set<string>();
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
      throw new HeraldError('HERALD_LINK_NOT_ETHERNET', `interface ${name} has no Ethernet header; ARP cannot be answered there`);
    }
    this.links.set(name, link);
    return link;
  }

  private skipIpv6(row: L2AnnounceRow): boolean {
    if (isIpv4(row.ip)) return false;
    if (!this.skippedV6.has(row.ip)) {
      this.skippedV6.add(row.ip);
      this.deps.log.debug({ ip: row.ip, iface: row.iface }, 'IPv6 announcement skipped: NDP is not implemented yet');
    }
    return true;
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
    if (this.skipIpv6(row)) return;
    const link = await this.resolve(row.iface);
    this.ensurePrepared(link);
    const key = { ip: row.ip, ifindex: link.ifindex };
    if (this.deps.map.create(key)) {
      // The first gratuitous round goes out the moment the entry answers, before anything else (even the log line).
      this.deps.garp.announce({ ip: row.ip, ifindex: link.ifindex, mac: link.mac });
      this.deps.log.info({ ip: row.ip, iface: row.iface, ifindex: link.ifindex, origins: row.origins }, 'announcing');
    }
  }

  async delete(row: L2AnnounceRow): Promise<void> {
    if (!isIpv4(row.ip)) return;
    const link = this.links.get(row.iface) ?? (await this.deps.links.byName(row.iface));
    if (!link) return; // the interface is gone: the full reconciliation prunes its stale keys
    this.withdraw({ ip: row.ip, ifindex: link.ifindex }, row.iface);
  }

  private withdraw(key: ResponderKey, iface?: string): void {
    this.deps.garp.cancel(key.ip, key.ifindex);
    if (this.deps.map.delete(key)) this.deps.log.info({ ip: key.ip, ifindex: key.ifindex, ...(iface ? { iface } : {}) }, 'withdrawn');
  }

  async prune(desired: readonly L2AnnounceRow[]): Promise<void> {
    if (this.lookupFailed) {
      this.lookupFailed = false;
      throw new HeraldError('HERALD_LINK_LOOKUP', 'interfaces could not be read; not pruning on partial knowledge');
    }
    const wanted = new Set<string>();
    for (const row of desired) {
      if (!isIpv4(row.ip)) continue;
      const link = this.links.get(row.iface); // resolved by the update pass just before
      if (link) wanted.add(keyOf({ ip: row.ip, ifindex: link.ifindex }));
    }
    for (const key of this.deps.map.keys()) {
      if (!wanted.has(keyOf(key))) this.withdraw(key);
    }
    const current = new Set((await this.deps.links.list()).filter((l) => l.ethernet).map((l) => l.ifindex));
    for (const ifindex of [...this.prepared.keys()]) if (!current.has(ifindex)) this.prepared.delete(ifindex);
    this.deps.interfaces.forgetAllBut(current);
  }
}
