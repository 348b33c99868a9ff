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
import { CandidateStandby } from './standby.js';
import { performance } from 'node:perf_hooks';

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

/** A prune that removes at least this many entries deletes them in one batch. */
const PRUNE_BATCH_MIN = 16;

export class L2ResponderOps implements ReconcilerOps<L2AnnounceRow> {
  private links = new Map<string, LinkInfo>();
  /** ifindex → MAC the program was prepared with in this agent's lifetime. */
  private prepared = new Map<number, string>();
  /** Keys of IPv6 entries whose solicited-node group this agent joined, with the group MAC. */
  private readonly joined = new Map<string, { ifindex: number; mac: string }>();
  /** A lookup failed for another reason than "no such link": do not prune on partial knowledge. */
  private lookupFailed = false;

  /**
   * The addresses this node is a candidate for, prepared ahead of ownership:
   * their interfaces served by the program, IPv6 groups joined, first-round
   * frames built — so that taking one over costs only a map write and a send.
   */
  readonly standby: CandidateStandby;

  constructor(private readonly deps: L2ResponderOpsDeps) {
    this.standby = new CandidateStandby({
      resolve: async (name) => {
        const link = await this.resolve(name);
        this.ensurePrepared(link);
        return link;
      },
      groups: deps.groups,
      garp: deps.garp,
      log: deps.log,
    });
  }

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
  private joinGroup(key: ResponderKey, iface: string): void {
    if (isIpv4(key.ip)) return;
    const k = keyOf(key);
    if (this.joined.has(k)) return;
    // A candidate's group is known already (the standby joined it): no second parse on the hand-over's path.
    const mac = this.standby.preparedGroup(key.ip, iface, key.ifindex) ?? solicitedNodeMac(key.ip);
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
    this.joinGroup(key, row.iface);
    if (this.deps.map.create(key)) {
      // The first gratuitous round goes out the moment the entry answers, before anything else (even the log line).
      this.deps.garp.announce({ ip: row.ip, ifindex: link.ifindex, mac: link.mac });
      this.deps.log.info({ ip: row.ip, iface: row.iface, ifindex: link.ifindex, origins: row.origins }, 'announcing');
    }
  }

  /**
   * update() for many rows: interfaces resolved once each, then one batched
   * create in the map (existing entries found by one batched read). A row
   * whose interface or key fails gets its own error; the others go in.
   */
  async updateBatch(rows: readonly L2AnnounceRow[]): Promise<unknown[]> {
    const t0 = performance.now();
    const out: unknown[] = new Array<unknown>(rows.length).fill(undefined);
    const links = await this.resolveAll(rows.map((r) => r.iface), (name) => this.resolve(name));
    const keys: ResponderKey[] = [];
    const at: number[] = [];
    rows.forEach((row, i) => {
      const link = links.get(row.iface)!;
      if (link instanceof Error) {
        out[i] = link;
        return;
      }
      try {
        this.ensurePrepared(link);
        const key = { ip: row.ip, ifindex: link.ifindex };
        this.joinGroup(key, row.iface); // the group first: the first solicitation after the map write must arrive
        keys.push(key);
        at.push(i);
      } catch (e) {
        out[i] = e;
      }
    });
    const t1 = performance.now();
    const created = this.deps.map.createMany(keys);
    const t2 = performance.now();
    // Every new entry's first gratuitous round first, then the log lines (a
    // thousand synchronous log writes must not stand between the last IP and its announcement).
    const announced: number[] = [];
    created.forEach((c, j) => {
      const i = at[j]!;
      if (c instanceof Error) {
        out[i] = c;
      } else if (c) {
        const key = keys[j]!;
        this.deps.garp.announce({ ip: key.ip, ifindex: key.ifindex, mac: (links.get(rows[i]!.iface) as LinkInfo).mac });
        announced.push(j);
      }
    });
    const t3 = performance.now();
    this.deps.log.debug({ rows: rows.length, created: announced.length, ms: Math.round(t3 - t0), groupsMs: Math.round(t1 - t0), mapMs: Math.round(t2 - t1), garpMs: Math.round(t3 - t2) }, 'trace: responder entries created, first rounds queued');
    if (announced.length > 0) {
      setImmediate(() => {
        for (const j of announced) {
          const row = rows[at[j]!]!;
          this.deps.log.info({ ip: row.ip, iface: row.iface, ifindex: keys[j]!.ifindex, origins: row.origins }, 'announcing');
        }
      });
    }
    return out;
  }

  /** delete() for many rows: one batched delete in the map. */
  async deleteBatch(rows: readonly L2AnnounceRow[]): Promise<unknown[]> {
    const out: unknown[] = new Array<unknown>(rows.length).fill(undefined);
    const links = await this.resolveAll(
      rows.map((r) => r.iface),
      async (name) => this.links.get(name) ?? (await this.deps.links.byName(name)),
    );
    const keys: ResponderKey[] = [];
    const at: number[] = [];
    rows.forEach((row, i) => {
      const link = links.get(row.iface);
      if (link instanceof Error) out[i] = link;
      else if (link) {
        // the interface is gone otherwise: the full reconciliation prunes its stale keys
        keys.push({ ip: row.ip, ifindex: link.ifindex });
        at.push(i);
      }
    });
    for (const key of keys) this.deps.garp.cancel(key.ip, key.ifindex);
    const deleted = this.deps.map.deleteMany(keys);
    deleted.forEach((d, j) => {
      const key = keys[j]!;
      if (d instanceof Error) {
        out[at[j]!] = d;
        return;
      }
      this.leaveGroup(key);
      if (d) this.deps.log.info({ ip: key.ip, ifindex: key.ifindex, iface: rows[at[j]!]!.iface }, 'withdrawn');
    });
    return out;
  }

  /** Each distinct interface name resolved once: its link, undefined, or the error of its lookup. */
  private async resolveAll(
    names: readonly string[],
    lookup: (name: string) => Promise<LinkInfo | undefined>,
  ): Promise<Map<string, LinkInfo | Error | undefined>> {
    const links = new Map<string, LinkInfo | Error | undefined>();
    for (const name of names) {
      if (links.has(name)) continue;
      try {
        links.set(name, await lookup(name));
      } catch (e) {
        links.set(name, e instanceof Error ? e : new Error(String(e)));
      }
    }
    return links;
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
    const wanted: ResponderKey[] = [];
    for (const row of desired) {
      const link = this.links.get(row.iface); // resolved by the update pass just before
      if (link) wanted.push({ ip: row.ip, ifindex: link.ifindex });
    }
    const unwanted = this.deps.map.keysNotIn(wanted);
    if (unwanted.length >= PRUNE_BATCH_MIN) {
      for (const key of unwanted) this.deps.garp.cancel(key.ip, key.ifindex);
      const deleted = this.deps.map.deleteMany(unwanted);
      const failed = deleted.filter((d) => d instanceof Error);
      unwanted.forEach((key, j) => {
        if (deleted[j] instanceof Error) return;
        this.leaveGroup(key);
        if (deleted[j]) this.deps.log.info({ ip: key.ip, ifindex: key.ifindex }, 'withdrawn');
      });
      if (failed.length > 0) throw failed[0];
    } else {
      for (const key of unwanted) this.withdraw(key);
    }
    if (this.joined.size > 0) {
      const wantedKeys = new Set(wanted.map(keyOf));
      for (const [k, j] of [...this.joined]) {
        if (!wantedKeys.has(k)) this.leaveGroup({ ip: k.slice(0, k.lastIndexOf('|')), ifindex: j.ifindex });
      }
    }
    const current = new Set((await this.deps.links.list()).filter((l) => l.ethernet).map((l) => l.ifindex));
    for (const ifindex of [...this.prepared.keys()]) if (!current.has(ifindex)) this.prepared.delete(ifindex);
    for (const [k, j] of [...this.joined]) if (!current.has(j.ifindex)) this.joined.delete(k);
    this.deps.groups.forgetAllBut(current);
    this.deps.interfaces.forgetAllBut(current);
  }
}
