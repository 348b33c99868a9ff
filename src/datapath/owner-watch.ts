/**
 * Watches other nodes on the wire: for each node that owns an IP this node is
 * a candidate for, send an ARP probe (sender 0.0.0.0, so no neighbour cache is
 * touched) for one of its IPs every `probeIntervalMs` and note every reply.
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
import { ARPOP_REPLY, arpRequest, parseArpFrame } from '../net/arp.js';
import type { OwnerWatch, WatchTarget } from '../controlplane/ownership/edges.js';
import type { LinkInfo, Links } from '../os/links.js';
import { arpBlock, ipv4Prefix, socketFilter, type BpfInsn } from '../net/socket-filter.js';
import { ETH_P_ARP, PACKET_OUTGOING, PacketSocket } from '../os/packet-socket.js';

export interface OwnerWatchOptions {
  probeIntervalMs: number;
  /** No reply for this long (while watched this long) ⇒ silent. */
  silenceMs: number;
  /**
   * Two probes further apart than this mean our own timer ran late: the
   * evidence so far is void and the window starts again. Default: half the
   * silence window (so at least two on-time probes span any verdict).
   */
  maxProbeGapMs?: number;
  /**
   * Let the kernel drop every frame but ARP replies from a watched IP (a
   * classic BPF socket filter), so a flood of other hosts' ARP costs no
   * JavaScript. Default true; false only to measure the difference (bench/wire-filter).
   */
  wireFilter?: boolean;
}

export const ownerWatchDefaults: OwnerWatchOptions = { probeIntervalMs: 50, silenceMs: 300 };

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
}

export class PacketOwnerWatch implements OwnerWatch, Disposable {
  private readonly sockets = new DisposableMap<string, PacketSocket>();
  /** The watched IPs each socket's filter was built from (sorted, joined). */
  private readonly filterKeys = new Map<string, string>();
  private links = new Map<string, LinkInfo>();
  private tracked = new Map<string, Tracked>();
  private timer: TimerHandle | undefined;
  private silentCb: (node: string) => void = () => {};
  private disposed = false;
  private lastTickAt: number | undefined;
  /** Windows restarted because our own timer fired late, for status. */
  lateTicks = 0;
  reports = 0;

  constructor(
    private readonly deps: { links: Links; clock: Clock; log: Logger },
    private readonly opts: OwnerWatchOptions = ownerWatchDefaults,
  ) {}

  onSilent(cb: (node: string) => void): void {
    this.silentCb = cb;
  }

  setTargets(targets: readonly WatchTarget[]): void {
    const now = monotonicMs(this.deps.clock);
    const next = new Map<string, Tracked>();
    for (const t of targets) {
      const key = `${t.node}|${t.ip}|${t.iface}`;
      next.set(key, this.tracked.get(key) ?? { ...t, since: now, lastReply: now, evidenceFrom: now, probes: 0, heard: false, reported: false });
    }
    this.tracked = next;
    if (next.size > 0 && !this.timer) this.schedule();
    for (const iface of this.sockets.keys()) this.refreshFilter(iface, this.sockets.get(iface)!);
    void this.ensureSockets();
  }

  private async ensureSockets(): Promise<void> {
    const wanted = new Set([...this.tracked.values()].map((t) => t.iface));
    for (const iface of wanted) {
      if (this.sockets.has(iface)) continue;
      try {
        const link = await this.deps.links.byName(iface);
        if (!link || !link.ethernet || this.disposed) continue;
        const filter = this.filterFor(iface);
        const sock = PacketSocket.open(link.ifindex, ETH_P_ARP, filter ? { filter: filter.prog } : {});
        if (filter) this.filterKeys.set(iface, filter.key);
        sock.onFrames((rx) => this.onFrame(iface, rx.frame, rx.packetType));
        this.links.set(iface, link);
        this.sockets.set(iface, sock);
      } catch (e) {
        this.deps.log.warn({ iface, err: describeError(e) }, 'owner watch: cannot open a packet socket');
      }
    }
    for (const iface of [...this.sockets.keys()]) {
      if (!wanted.has(iface)) {
        this.sockets.deleteAndDispose(iface);
        this.links.delete(iface);
        this.filterKeys.delete(iface);
      }
    }
  }

  /** Only ARP replies whose sender is an IP watched on this interface: all `onFrame` reads. */
  private filterFor(iface: string): { key: string; prog: BpfInsn[] } | undefined {
    if (this.opts.wireFilter === false) return undefined;
    const ips = [...new Set([...this.tracked.values()].filter((t) => t.iface === iface && isIpv4(t.ip)).map((t) => t.ip))].sort();
    return { key: ips.join(','), prog: socketFilter([arpBlock({ ops: [ARPOP_REPLY], sender: ips.map((ip) => ipv4Prefix(ip)) })]) };
  }

  private refreshFilter(iface: string, sock: PacketSocket): void {
    const filter = this.filterFor(iface);
    if (!filter || this.filterKeys.get(iface) === filter.key) return;
    try {
      sock.setFilter(filter.prog); // replaces the old one atomically
      this.filterKeys.set(iface, filter.key);
    } catch (e) {
      this.deps.log.warn({ iface, err: describeError(e) }, 'owner watch: cannot update the socket filter');
    }
  }

  private onFrame(iface: string, frame: Buffer, packetType: number): void {
    if (packetType === PACKET_OUTGOING) return;
    const arp = parseArpFrame(frame);
    if (!arp || arp.op !== ARPOP_REPLY) return;
    const now = monotonicMs(this.deps.clock);
    for (const t of this.tracked.values()) {
      if (t.iface === iface && t.ip === arp.spa) {
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
    this.timer = this.deps.clock.setTimeout(() => this.tick(), this.opts.probeIntervalMs);
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
      const link = this.links.get(t.iface);
      const sock = this.sockets.get(t.iface);
      if (link && sock) {
        try {
          // An RFC 5227 probe: herald's responder answers it, and it updates nobody's cache.
          sock.send(arpRequest({ srcMac: link.mac, srcIp: '0.0.0.0', targetIp: t.ip }));
          t.probes++;
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
          this.silentCb(t.node);
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
