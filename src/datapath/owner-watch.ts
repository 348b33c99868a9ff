/**
 * Watches other nodes on the wire: for each node that owns an IP this node is
 * a candidate for, send an ARP probe (sender 0.0.0.0, so no neighbour cache is
 * touched) for one of its IPs every `probeIntervalMs` and note every reply.
 * A node heard answering that then stays quiet for `silenceMs` is reported silent — a crashed
 * agent's datapath goes quiet within its liveness limit, a lost node at once —
 * so a candidate can fence it out long before its lease would expire. A live
 * owner keeps answering, so it is never reported.
 */
import type { Clock, TimerHandle } from '../core/clock.js';
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { describeError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { ARPOP_REPLY, arpRequest, parseArpFrame } from '../net/arp.js';
import type { LinkInfo, Links } from '../os/links.js';
import { ETH_P_ARP, PACKET_OUTGOING, PacketSocket } from '../os/packet-socket.js';

export interface OwnerWatchOptions {
  probeIntervalMs: number;
  /** No reply for this long (while watched this long) ⇒ silent. */
  silenceMs: number;
}

export const ownerWatchDefaults: OwnerWatchOptions = { probeIntervalMs: 50, silenceMs: 300 };

export interface WatchTarget {
  /** The owner node (what is reported). */
  node: string;
  /** One IP it owns. */
  ip: string;
  /** Our interface to probe from (a candidate interface for that IP). */
  iface: string;
}

/** The edge the ownership backend depends on (a fake in unit tests). */
export interface OwnerWatch {
  /** Replaces the set of watched owners. */
  setTargets(targets: readonly WatchTarget[]): void;
  onSilent(cb: (node: string) => void): void;
}

interface Tracked extends WatchTarget {
  since: number;
  lastReply: number;
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
  private links = new Map<string, LinkInfo>();
  private tracked = new Map<string, Tracked>();
  private timer: TimerHandle | undefined;
  private silentCb: (node: string) => void = () => {};
  private disposed = false;

  constructor(
    private readonly deps: { links: Links; clock: Clock; log: Logger },
    private readonly opts: OwnerWatchOptions = ownerWatchDefaults,
  ) {}

  onSilent(cb: (node: string) => void): void {
    this.silentCb = cb;
  }

  setTargets(targets: readonly WatchTarget[]): void {
    const now = this.deps.clock.now();
    const next = new Map<string, Tracked>();
    for (const t of targets) {
      const key = `${t.node}|${t.ip}|${t.iface}`;
      next.set(key, this.tracked.get(key) ?? { ...t, since: now, lastReply: now, heard: false, reported: false });
    }
    this.tracked = next;
    if (next.size > 0 && !this.timer) this.schedule();
    void this.ensureSockets();
  }

  private async ensureSockets(): Promise<void> {
    const wanted = new Set([...this.tracked.values()].map((t) => t.iface));
    for (const iface of wanted) {
      if (this.sockets.has(iface)) continue;
      try {
        const link = await this.deps.links.byName(iface);
        if (!link || !link.ethernet || this.disposed) continue;
        const sock = PacketSocket.open(link.ifindex, ETH_P_ARP);
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
      }
    }
  }

  private onFrame(iface: string, frame: Buffer, packetType: number): void {
    if (packetType === PACKET_OUTGOING) return;
    const arp = parseArpFrame(frame);
    if (!arp || arp.op !== ARPOP_REPLY) return;
    const now = this.deps.clock.now();
    for (const t of this.tracked.values()) {
      if (t.iface === iface && t.ip === arp.spa) {
        t.lastReply = now;
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
    if (this.tracked.size === 0) return;
    const now = this.deps.clock.now();
    for (const t of this.tracked.values()) {
      const link = this.links.get(t.iface);
      const sock = this.sockets.get(t.iface);
      if (link && sock) {
        try {
          // An RFC 5227 probe: herald's responder answers it, and it updates nobody's cache.
          sock.send(arpRequest({ srcMac: link.mac, srcIp: '0.0.0.0', targetIp: t.ip }));
        } catch {
          /* a send error is a missed probe; silence is judged on replies */
        }
      }
      if (t.heard && !t.reported && now - t.lastReply >= this.opts.silenceMs) {
        t.reported = true;
        this.deps.log.warn({ node: t.node, ip: t.ip, iface: t.iface, silentMs: now - t.lastReply }, 'owner is silent on the wire');
        this.silentCb(t.node);
      }
    }
    this.schedule();
  }

  dispose(): void {
    this.disposed = true;
    this.timer?.cancel();
    this.sockets.dispose();
  }
}
