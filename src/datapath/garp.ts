/**
 * Gratuitous ARP bursts when this node starts answering for an IP, so clients
 * and switches move to the new MAC within milliseconds instead of waiting for
 * their ARP entries to expire.
 *
 * Each round sends both forms: the RFC 5227 announcement (a request with
 * sender = target = the IP) and the broadcast reply, because some stacks honour
 * only one opcode (MetalLB #172, #291). Default schedule: at once, then 4 more
 * rounds 1 s apart (Cilium sends once, which clients miss).
 *
 * For an IPv6 address each round is one unsolicited Neighbor Advertisement to
 * all-nodes (ff02::1) with Override set, Solicited clear and the target
 * link-layer option (RFC 4861 7.2.6). Linux clients update an existing
 * neighbour entry from it; they create a missing one only with
 * net.ipv6.conf.<if>.accept_untracked_na (or when they are routers).
 *
 * A failed send is logged and counted and never blocks or undoes programming
 * the responder map (Cilium #48626: a failed gARP left the entry out for good).
 */
import type { Clock, TimerHandle } from '../core/clock.js';
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { describeError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { isIpv4 } from '../core/addr.js';
import { gratuitousReply, gratuitousRequest } from '../net/arp.js';
import { unsolicitedAdvertisement } from '../net/ndp.js';

export interface GarpSchedule {
  /** Rounds in a burst (the first is sent at once). 0 disables gratuitous ARP. */
  count: number;
  intervalMs: number;
}

export const garpDefaults: GarpSchedule = { count: 5, intervalMs: 1000 };

/** The edge that puts a frame on an interface (AF_PACKET in production). */
export interface FrameSender {
  send(ifindex: number, frame: Buffer): void;
}

export interface GarpStats {
  sent: number;
  failed: number;
}

export interface GarpTarget {
  ip: string;
  ifindex: number;
  mac: string;
}

/** How soon a round postponed by a held heartbeat is tried again. */
const HELD_ROUND_RETRY_MS = 20;

export class GarpAnnouncer implements Disposable {
  private readonly bursts = new DisposableMap<string, Disposable>();
  readonly stats: GarpStats = { sent: 0, failed: 0 };
  /** Per-IP counters for metrics and status. */
  readonly perIp = new Map<string, GarpStats>();

  constructor(
    /** `held`: the heartbeat is held back (ownership in doubt): rounds wait, so a burst never outruns the re-check. */
    private readonly deps: { sender: FrameSender; clock: Clock; log: Logger; held?: () => boolean },
    private readonly schedule: GarpSchedule,
  ) {
    if (schedule.count < 0 || schedule.intervalMs < 0) throw new Error('gARP count and interval must be >= 0');
  }

  /** Starts (or restarts) the burst for one (IP, interface). Never throws. */
  announce(target: GarpTarget): void {
    if (this.schedule.count === 0) return;
    const key = `${target.ip}|${target.ifindex}`;
    let remaining = this.schedule.count;
    let timer: TimerHandle | undefined;
    const round = () => {
      if (this.deps.held?.()) {
        timer = this.deps.clock.setTimeout(round, HELD_ROUND_RETRY_MS);
        return;
      }
      this.sendRound(target);
      remaining--;
      if (remaining > 0) timer = this.deps.clock.setTimeout(round, this.schedule.intervalMs);
      else this.bursts.deleteAndDispose(key);
    };
    this.bursts.set(key, { dispose: () => timer?.cancel() });
    round();
  }

  /** One round now, outside any burst (a conflict defence). Never throws. */
  announceOnce(target: GarpTarget): void {
    this.sendRound(target);
  }

  /** Stops a running burst (the IP was withdrawn). */
  cancel(ip: string, ifindex: number): void {
    this.bursts.deleteAndDispose(`${ip}|${ifindex}`);
  }

  get activeBursts(): number {
    return this.bursts.size;
  }

  private sendRound(t: GarpTarget): void {
    const counters = this.perIp.get(t.ip) ?? { sent: 0, failed: 0 };
    this.perIp.set(t.ip, counters);
    const frames = isIpv4(t.ip) ? [gratuitousRequest(t.mac, t.ip), gratuitousReply(t.mac, t.ip)] : [unsolicitedAdvertisement(t.mac, t.ip)];
    for (const frame of frames) {
      try {
        this.deps.sender.send(t.ifindex, frame);
        this.stats.sent++;
        counters.sent++;
      } catch (e) {
        this.stats.failed++;
        counters.failed++;
        this.deps.log.warn({ ip: t.ip, ifindex: t.ifindex, err: describeError(e) }, isIpv4(t.ip) ? 'gratuitous ARP send failed' : 'unsolicited neighbor advertisement send failed');
      }
    }
  }

  dispose(): void {
    this.bursts.dispose();
  }
}
