/**
 * Standby for the addresses this node is a candidate for: before it owns one,
 * the interface already receives the address's solicited-node group (IPv6)
 * and the first gratuitous round's frames are built. Taking an address over
 * is then a map write and a send — no setsockopt and no frame building on the
 * hand-over's path (measured: ~500 group joins took 17–26 ms of a successor's
 * hand-over of 1,000 IPs).
 *
 * Joining the group of an address this node does not answer changes nothing
 * on the wire: the program answers only for entries in its map, and the
 * kernel ignores a solicitation for an address it does not have. Group
 * memberships are counted, so an owned entry's own join and leave nest inside.
 */
import { isIpv4 } from '../../core/addr.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { solicitedNodeMac } from '../../net/ndp.js';
import type { LinkInfo } from '../../os/links.js';
import type { MulticastGroups } from '../../os/multicast-groups.js';
import type { GarpAnnouncer } from '../garp.js';

/** Candidates prepared per turn of the event loop. */
const WORK_PER_TURN = 256;

export interface StandbyDeps {
  /** The interface's link (cached by the caller); throws when it cannot serve. */
  resolve(name: string): Promise<LinkInfo>;
  groups: MulticastGroups;
  garp: Pick<GarpAnnouncer, 'prepare' | 'unprepare'>;
  log: Logger;
}

interface Prepared {
  ip: string;
  ifindex: number;
  mac: string;
  /** The solicited-node group joined for it (IPv6). */
  group?: string;
  /** The last pass that wanted it. */
  generation: number;
}

export class CandidateStandby {
  private readonly prepared = new Map<string, Prepared>();
  private wanted: ReadonlyMap<string, readonly string[]> = new Map();
  private running: Promise<void> | undefined;
  private again = false;
  private generation = 0;

  constructor(private readonly deps: StandbyDeps) {}

  /** (ip, interface) pairs prepared now, for status and tests. */
  get size(): number {
    return this.prepared.size;
  }

  /**
   * The solicited-node group joined ahead for `ip` on interface `iface`
   * (ifindex `ifindex`), if any: the hand-over's path then joins by it
   * instead of parsing the address again (~500 of those per successor).
   */
  preparedGroup(ip: string, iface: string, ifindex: number): string | undefined {
    const p = this.prepared.get(`${ip}|${iface}`);
    return p?.ifindex === ifindex ? p.group : undefined;
  }

  /**
   * The candidate set changed: `wanted` maps each candidate IP to its
   * interfaces. Applied in the background, one pass at a time, always the
   * latest set; resolves when that set is applied.
   */
  set(wanted: ReadonlyMap<string, readonly string[]>): Promise<void> {
    this.wanted = wanted;
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.apply(this.wanted);
        } while (this.again);
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  private async apply(wanted: ReadonlyMap<string, readonly string[]>): Promise<void> {
    const links = new Map<string, LinkInfo | undefined>();
    for (const ifaces of wanted.values()) for (const name of ifaces) links.set(name, undefined);
    for (const name of links.keys()) {
      // Not servable now: nothing to prepare there (the rows report why once owned).
      links.set(name, await this.deps.resolve(name).catch(() => undefined));
    }
    // Entries this pass wants carry its generation; the others are let go after it (no set of 10,000 keys per pass).
    const generation = ++this.generation;
    let work = 0;
    for (const [ip, ifaces] of wanted) {
      // 10,000 new candidates are ~0.5 s of joins and frame building: let the event loop breathe in between.
      if (work >= WORK_PER_TURN) {
        work = 0;
        await new Promise<void>((r) => setImmediate(r));
      }
      for (const name of ifaces) {
        const link = links.get(name);
        if (!link) continue;
        const key = `${ip}|${name}`;
        const had = this.prepared.get(key);
        if (had && had.ifindex === link.ifindex && had.mac === link.mac) {
          had.generation = generation;
          continue;
        }
        if (had) this.release(key, had);
        work++;
        const p: Prepared = { ip, ifindex: link.ifindex, mac: link.mac, generation };
        try {
          if (!isIpv4(ip)) {
            const group = solicitedNodeMac(ip);
            this.deps.groups.join(link.ifindex, group);
            p.group = group;
          }
          this.deps.garp.prepare({ ip, ifindex: link.ifindex, mac: link.mac });
        } catch (e) {
          // Only a head start is lost: the owned row joins and builds on its own.
          this.deps.log.debug({ ip, iface: name, err: describeError(e) }, 'standby preparation failed');
        }
        this.prepared.set(key, p);
      }
    }
    for (const [key, p] of this.prepared) if (p.generation !== generation) this.release(key, p);
  }

  private release(key: string, p: Prepared): void {
    this.prepared.delete(key);
    if (p.group) this.deps.groups.leave(p.ifindex, p.group);
    this.deps.garp.unprepare({ ip: p.ip, ifindex: p.ifindex, mac: p.mac });
  }
}
