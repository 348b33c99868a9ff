/**
 * Watches other nodes on the wire: for each node that owns an IP this node is
 * a candidate for, send an ARP probe (sender 0.0.0.0, so no neighbour cache is
 * touched) — or for an IPv6 address a Neighbor Solicitation from our
 * link-local address — for one of its IPs every `probeIntervalMs` and note
 * every reply.
 * A node heard answering that then stays quiet for `silenceMs` is reported silent — a crashed
 * agent's datapath goes quiet within its liveness limit, a lost node at once —
 * so a candidate can fence it out long before its lease would expire. A live
 * owner keeps answering, so it is never reported.
 *
 * Silence is evidence, and only evidence gathered while we ran on time
 * counts: probes actually sent, at most `maxProbeGapMs` apart, and left
 * unanswered for the whole window. A timer that fires late (we were stopped,
 * starved or blocked) restarts the window, and the verdict is taken only
 * after pending replies have been read (setImmediate runs after the poll
 * phase), so a paused or overloaded candidate never fences a healthy owner
 * on its own late clock.
 */
import { monotonicMs, type Clock, type TimerHandle } from '../core/clock.js';
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { isIpv4 } from '../core/addr.js';
import { describeError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { linkLocalOf } from '../net/addr.js';
import { ARPOP_REPLY, arpRequest, parseArpFrame } from '../net/arp.js';
import type { OwnerWatch, WatchTarget } from '../controlplane/ownership/edges.js';
import type { LinkInfo, Links } from '../os/links.js';
import { arpBlock, ipv4Prefix, ndBlock, socketFilter, type BpfInsn } from '../net/socket-filter.js';
import { ETH_P_ARP, ETH_P_IPV6, PACKET_OUTGOING, PacketSocket } from '../os/packet-socket.js';
import { ND_NEIGHBOR_ADVERT, neighborSolicitation, parseNdFrame } from '../net/ndp.js';

const familyOf = (ip: string) => (isIpv4(ip) ? 4 : 6);

import { ownerWatchDefaults, type OwnerWatchOptions } from './owner-watch-options.js';
export { ownerWatchDefaults, type OwnerWatchOptions } from './owner-watch-options.js';

interface Tracked extends WatchTarget {
  since: number;
  lastReply: number;
  /** Monotonic ms from which our evidence of silence is valid (last reply, or the last time our timer ran late). */
  evidenceFrom: number;
  /** Probes sent since `evidenceFrom`. */
  probes: number;
  /**
   * Only an owner seen answering can go silent: a node that has just won an IP
   * may take a moment to program its map, and must not be fenced for that.
   * (An owner that died before we ever heard it is freed by lease expiry.)
   */
  heard: boolean;
  reported: boolean;
  /** Monotonic ms of our last probe to it (paced per target: overdue ones are probed faster). */
  lastSent: number;
}

export class PacketOwnerWatch implements OwnerWatch, Disposable {
  private readonly sockets = new DisposableMap<string, PacketSocket>();
  /** The watched IPs each socket's filter was built from (sorted, joined). */
  private readonly filterKeys = new Map<string, string>();
  private links = new Map<string, LinkInfo>();
  private tracked = new Map<string, Tracked>();
  private timer: TimerHandle | undefined;
  private silentCb: (node: string, ip: string) => void = () => {};
  private disposed = false;
  private lastTickAt: number | undefined;
  /** Windows restarted because our own timer fired late, for status. */
  lateTicks = 0;
  reports = 0;
  probesSent = 0;

  constructor(
    private readonly deps: { links: Links; clock: Clock; log: Logger },
    private readonly opts: OwnerWatchOptions = ownerWatchDefaults,
  ) {}

  onSilent(cb: (node: string, ip: string) => void): void {
    this.silentCb = cb;
  }

  stillSilent(node: string, ip: string): boolean {
    for (const t of this.tracked.values()) if (t.node === node && t.ip === ip) return t.reported;
    return false; // no longer watched through that IP: no evidence
  }

  setTargets(targets: readonly WatchTarget[]): void {
    const now = monotonicMs(this.deps.clock);
    const next = new Map<string, Tracked>();
    for (const t of targets) {
      const key = `${t.node}|${t.ip}|${t.iface}`;
      next.set(key, this.tracked.get(key) ?? { ...t, since: now, lastReply: now, evidenceFrom: now, probes: 0, heard: false, reported: false, lastSent: -Infinity });
    }
    this.tracked = next;
    if (next.size > 0 && !this.timer) this.schedule();
    for (const key of this.sockets.keys()) this.refreshFilter(key, this.sockets.get(key)!);
    void this.ensureSockets();
  }

  /** One socket per (interface, family) watched: "eth0|4" (ARP replies) and "eth0|6" (NAs), each filtered in the kernel. */
  private async ensureSockets(): Promise<void> {
    const wanted = new Set([...this.tracked.values()].map((t) => `${t.iface}|${familyOf(t.ip)}`));
    for (const key of wanted) {
      if (this.sockets.has(key)) continue;
      const [iface, family] = key.split('|') as [string, string];
      try {
        const link = await this.deps.links.byName(iface);
        if (!link || !link.ethernet || this.disposed) continue;
        const filter = this.filterFor(key);
        const sock = PacketSocket.open(link.ifindex, family === '4' ? ETH_P_ARP : ETH_P_IPV6, filter ? { filter: filter.prog } : {});
        if (filter) this.filterKeys.set(key, filter.key);
        sock.onFrames((rx) => this.onFrame(iface, rx.frame, rx.packetType));
        this.links.set(iface, link);
        this.sockets.set(key, sock);
      } catch (e) {
        this.deps.log.warn({ iface, err: describeError(e) }, 'owner watch: cannot open a packet socket');
      }
    }
    for (const key of [...this.sockets.keys()]) {
      if (!wanted.has(key)) {
        this.sockets.deleteAndDispose(key);
        this.filterKeys.delete(key);
      }
    }
    const ifaces = new Set([...wanted].map((k) => k.split('|')[0]!));
    for (const iface of [...this.links.keys()]) if (!ifaces.has(iface)) this.links.delete(iface);
  }

  /** The address a reply vouches for: an ARP reply's sender, or a Neighbor Advertisement's target. */
  private static answeredIp(frame: Buffer): string | undefined {
    if (frame.length >= 14 && frame.readUInt16BE(12) === ETH_P_IPV6) {
      const nd = parseNdFrame(frame);
      return nd && nd.type === ND_NEIGHBOR_ADVERT && nd.checksumOk ? nd.target : undefined;
    }
    const arp = parseArpFrame(frame);
    return arp && arp.op === ARPOP_REPLY ? arp.spa : undefined;
  }

  /**
   * What the socket `key` ("eth0|4" / "eth0|6") lets through, so all `onFrame`
   * reads are answers about watched IPs: on ARP sockets, ARP replies whose
   * sender is an IPv4 watched on the interface; on IPv6 sockets, Neighbor
   * Advertisements whose target is an IPv6 watched there. Without the wire
   * filter, ARP sockets take everything and IPv6 ones every NA (a socket bound
   * to IPv6 would otherwise read all of the segment's IPv6 traffic).
   */
  private filterFor(key: string): { key: string; prog: BpfInsn[] } | undefined {
    const [iface, family] = key.split('|') as [string, string];
    const v4 = family === '4';
    if (this.opts.wireFilter === false) return v4 ? undefined : { key: '*', prog: socketFilter([ndBlock({ types: [ND_NEIGHBOR_ADVERT] })]) };
    const ips = [...new Set([...this.tracked.values()].filter((t) => t.iface === iface && isIpv4(t.ip) === v4).map((t) => t.ip))].sort();
    const block = v4 ? arpBlock({ ops: [ARPOP_REPLY], sender: ips.map((ip) => ipv4Prefix(ip)) }) : ndBlock({ types: [ND_NEIGHBOR_ADVERT], targets: ips });
    return { key: ips.join(','), prog: socketFilter([block]) };
  }

  private refreshFilter(key: string, sock: PacketSocket): void {
    const filter = this.filterFor(key);
    if (!filter || this.filterKeys.get(key) === filter.key) return;
    try {
      sock.setFilter(filter.prog); // replaces the old one atomically
      this.filterKeys.set(key, filter.key);
    } catch (e) {
      this.deps.log.warn({ socket: key, err: describeError(e) }, 'owner watch: cannot update the socket filter');
    }
  }

  private onFrame(iface: string, frame: Buffer, packetType: number): void {
    if (packetType === PACKET_OUTGOING) return;
    const ip = PacketOwnerWatch.answeredIp(frame);
    if (ip === undefined) return;
    const now = monotonicMs(this.deps.clock);
    for (const t of this.tracked.values()) {
      if (t.iface === iface && t.ip === ip) {
        t.lastReply = now;
        t.evidenceFrom = now;
        t.probes = 0;
        t.heard = true;
        t.reported = false;
      }
    }
  }

  private schedule(): void {
    if (this.disposed) return;
    const fast = [...this.tracked.values()].some((t) => this.overdue(t));
    this.timer = this.deps.clock.setTimeout(() => this.tick(), fast ? this.opts.suspectProbeIntervalMs! : this.opts.probeIntervalMs);
  }

  /** Heard before and now `suspectAfterProbes` probes in a row without an answer: probed fast until answered or reported. */
  private overdue(t: Tracked): boolean {
    const fastMs = this.opts.suspectProbeIntervalMs ?? 0;
    return fastMs > 0 && fastMs < this.opts.probeIntervalMs && t.heard && !t.reported && t.probes >= (this.opts.suspectAfterProbes ?? 2);
  }

  private tick(): void {
    this.timer = undefined;
    if (this.tracked.size === 0) {
      this.lastTickAt = undefined;
      return;
    }
    const now = monotonicMs(this.deps.clock);
    const maxGap = this.opts.maxProbeGapMs ?? this.opts.silenceMs / 2;
    if (this.lastTickAt !== undefined && now - this.lastTickAt > maxGap) {
      // Our timer ran late: whatever we did not hear meanwhile proves nothing.
      this.lateTicks++;
      this.deps.log.debug({ lateByMs: now - this.lastTickAt - this.opts.probeIntervalMs }, 'owner watch ran late: silence evidence restarts');
      for (const t of this.tracked.values()) {
        t.evidenceFrom = now;
        t.probes = 0;
      }
    }
    this.lastTickAt = now;
    for (const t of this.tracked.values()) {
      // Every probe interval, or at the fast pace once overdue (a tick a little early still counts).
      const pace = this.overdue(t) ? this.opts.suspectProbeIntervalMs! : this.opts.probeIntervalMs;
      if (now - t.lastSent < pace * 0.8) continue;
      const link = this.links.get(t.iface);
      const v4 = isIpv4(t.ip);
      const sock = this.sockets.get(`${t.iface}|${v4 ? 4 : 6}`);
      if (link && sock) {
        try {
          // IPv4: an RFC 5227 probe: herald's responder answers it, and it updates nobody's cache.
          // IPv6: a solicitation from our link-local address (not a DAD probe, whose
          // answer goes to all-nodes): answered to us alone.
          sock.send(
            v4
              ? arpRequest({ srcMac: link.mac, srcIp: '0.0.0.0', targetIp: t.ip })
              : neighborSolicitation({ srcMac: link.mac, srcIp: linkLocalOf(link.mac), target: t.ip }),
          );
          t.probes++;
          t.lastSent = now;
          this.probesSent++;
        } catch {
          /* a send error is a missed probe: no evidence */
        }
      }
    }
    const suspects = [...this.tracked.values()].filter((t) => this.silentBy(t, now));
    if (suspects.length > 0) {
      // Read every reply already queued before judging: timers run before I/O
      // in an event-loop turn, setImmediate after it.
      setImmediate(() => {
        const at = monotonicMs(this.deps.clock);
        for (const t of suspects) {
          if (this.disposed || !this.silentBy(t, at)) continue;
          t.reported = true;
          this.reports++;
          this.deps.log.warn({ node: t.node, ip: t.ip, iface: t.iface, silentMs: at - t.lastReply, unansweredProbes: t.probes }, 'owner is silent on the wire');
          this.silentCb(t.node, t.ip);
        }
      });
    }
    this.schedule();
  }

  /** Heard before, and unanswered for the whole window by probes we sent on time. */
  private silentBy(t: Tracked, now: number): boolean {
    if (!t.heard || t.reported || !this.tracked.has(`${t.node}|${t.ip}|${t.iface}`)) return false;
    const minProbes = Math.max(2, Math.floor(this.opts.silenceMs / this.opts.probeIntervalMs) - 1);
    return now - t.evidenceFrom >= this.opts.silenceMs && t.probes >= minProbes;
  }

  /** For status. */
  stats(): { targets: number; lateTicks: number; reports: number } {
    return { targets: this.tracked.size, lateTicks: this.lateTicks, reports: this.reports };
  }

  dispose(): void {
    this.disposed = true;
    this.timer?.cancel();
    this.sockets.dispose();
  }
}
