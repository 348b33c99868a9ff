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
import { describeError, HeraldError } from '../core/errors.js';
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
  /**
   * Queues one frame for transmission. Returns false (nothing sent, nothing
   * failed) when the interface's queue or the socket's send buffer is full:
   * try the frame again shortly. Throws on any other failure.
   */
  send(ifindex: number, frame: Buffer): boolean | void;
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

const prebuiltKey = (t: GarpTarget) => `${t.ip}|${t.ifindex}|${t.mac}`;

/** How soon a round postponed by a held heartbeat is tried again. */
const HELD_ROUND_RETRY_MS = 20;
/** How soon frames refused by a full queue are tried again (1,000 small frames leave a 1 Gb/s link in under 1 ms). */
const FULL_QUEUE_RETRY_MS = 1;
/** Frames sent in one turn of the event loop; the rest follow on the next turn (10k IPs must not stall the agent for 100 ms). */
const FRAMES_PER_TURN = 1024;

/** A round waiting to go out: its frames not yet sent, and what to do once they are. */
interface PendingRound {
  target: GarpTarget;
  frames: Buffer[];
  cancelled: boolean;
  done: () => void;
}

/**
 * A FIFO with O(1) removal from the front (a shift() per round over 10k rounds
 * is quadratic). Removed slots are cleared at once and given back in one copy
 * once more than 1,024 of them make up more than half the array. Exported for
 * its tests.
 */
export class Fifo<T> {
  private items: T[] = [];
  private head = 0;
  get length(): number {
    return this.items.length - this.head;
  }
  /** Slots the backing array holds, removed ones included (for tests of the compaction). */
  get slots(): number {
    return this.items.length;
  }
  push(x: T): void {
    this.items.push(x);
  }
  peek(): T | undefined {
    return this.items[this.head];
  }
  shift(): T | undefined {
    const x = this.items[this.head];
    if (x === undefined) return undefined;
    this.items[this.head++] = undefined as T;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return x;
  }
}

/**
 * Rounds go out through one paced queue: every IP's first round ahead of any
 * repeat round, at most FRAMES_PER_TURN frames per turn, and a frame the
 * interface refuses (its queue or the socket's send buffer is full — a
 * failover of 1,000 IPs is 1,000–2,000 frames at once) is retried a
 * millisecond later instead of being lost. A round's next one is timed from
 * when it actually went out, so the per-IP schedule holds.
 */
export class GarpAnnouncer implements Disposable {
  private readonly bursts = new DisposableMap<string, Disposable>();
  readonly stats: GarpStats = { sent: 0, failed: 0 };
  /** Per-IP counters for metrics and status. */
  readonly perIp = new Map<string, GarpStats>();
  /** Times a frame was refused by a full queue and retried (for tests and tracing). */
  deferred = 0;
  /** Frames built ahead for addresses this node may take over ("ip|ifindex|mac" → frames): see prepare(). */
  private readonly prebuilt = new Map<string, Buffer[]>();
  private readonly firstRounds = new Fifo<PendingRound>();
  private readonly repeatRounds = new Fifo<PendingRound>();
  private drainTimer: TimerHandle | undefined;
  private sentThisTurn = 0;

  constructor(
    /** `held`: the heartbeat is held back (ownership in doubt): the paced queue waits, so a burst never outruns the re-check. */
    private readonly deps: { sender: FrameSender; clock: Clock; log: Logger; held?: () => boolean },
    private readonly schedule: GarpSchedule,
  ) {
    if (!(schedule.count >= 0) || !(schedule.intervalMs >= 0)) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `gratuitous ARP count and interval must be >= 0 (got count ${schedule.count}, interval ${schedule.intervalMs} ms)`);
    }
  }

  /** Starts (or restarts) the burst for one (IP, interface); its first round goes out now unless frames are waiting. Never throws. */
  announce(target: GarpTarget): void {
    if (this.schedule.count === 0) return;
    const key = `${target.ip}|${target.ifindex}`;
    let remaining = this.schedule.count;
    let timer: TimerHandle | undefined;
    let pending: PendingRound | undefined;
    // Built once per burst (or ahead, by prepare()): every round sends the same frames (a send never changes them).
    const frames = this.prebuilt.get(prebuiltKey(target)) ?? this.frames(target);
    const round = (first: boolean) => {
      timer = undefined;
      pending = {
        target,
        frames: [...frames],
        cancelled: false,
        done: () => {
          pending = undefined;
          remaining--;
          if (remaining > 0) timer = this.deps.clock.setTimeout(() => round(false), this.schedule.intervalMs);
          else this.bursts.deleteAndDispose(key);
        },
      };
      (first ? this.firstRounds : this.repeatRounds).push(pending);
      this.drain();
    };
    this.bursts.set(key, {
      dispose: () => {
        timer?.cancel();
        if (pending) pending.cancelled = true;
      },
    });
    round(true);
  }

  /**
   * Builds a target's frames ahead of its first burst (a candidate this node
   * may take over), so a hand-over of many addresses spends no time building
   * frames. Until unprepare().
   */
  prepare(target: GarpTarget): void {
    const key = prebuiltKey(target);
    if (!this.prebuilt.has(key)) this.prebuilt.set(key, this.frames(target));
  }

  unprepare(target: GarpTarget): void {
    this.prebuilt.delete(prebuiltKey(target));
  }

  /** Targets with frames built ahead (for tests and status). */
  get preparedTargets(): number {
    return this.prebuilt.size;
  }

  /** One round now, outside any burst (a conflict defence). Never throws. */
  announceOnce(target: GarpTarget): void {
    for (const frame of this.frames(target)) if (!this.sendFrame(target, frame)) this.deps.log.debug({ ip: target.ip }, 'conflict defence frame dropped: the interface queue is full');
  }

  /** Stops a running burst (the IP was withdrawn). */
  cancel(ip: string, ifindex: number): void {
    this.bursts.deleteAndDispose(`${ip}|${ifindex}`);
  }

  get activeBursts(): number {
    return this.bursts.size;
  }

  /** Rounds waiting in the paced queue. */
  get queuedRounds(): number {
    return this.firstRounds.length + this.repeatRounds.length;
  }

  private frames(t: GarpTarget): Buffer[] {
    return isIpv4(t.ip) ? [gratuitousRequest(t.mac, t.ip), gratuitousReply(t.mac, t.ip)] : [unsolicitedAdvertisement(t.mac, t.ip)];
  }

  /** Sends queued rounds in order (first rounds ahead) until the queue is empty, the turn's budget is spent or the interface is full. */
  private drain(): void {
    if (this.drainTimer) return; // a retry is due: keep the order
    for (;;) {
      const queue = this.firstRounds.length > 0 ? this.firstRounds : this.repeatRounds;
      const r = queue.peek();
      if (!r) return;
      if (r.cancelled) {
        queue.shift();
        continue;
      }
      if (this.deps.held?.()) return this.retryIn(HELD_ROUND_RETRY_MS);
      while (r.frames.length > 0) {
        if (this.sentThisTurn >= FRAMES_PER_TURN) return this.retryIn(0);
        if (!this.sendFrame(r.target, r.frames[0]!)) {
          this.deferred++;
          return this.retryIn(FULL_QUEUE_RETRY_MS);
        }
        r.frames.shift();
        if (this.sentThisTurn++ === 0) queueMicrotask(() => (this.sentThisTurn = 0));
      }
      queue.shift();
      r.done();
    }
  }

  private retryIn(ms: number): void {
    this.drainTimer = this.deps.clock.setTimeout(() => {
      this.drainTimer = undefined;
      this.sentThisTurn = 0;
      this.drain();
    }, ms);
  }

  /** One frame: false when the interface refused it for now (not counted); true once sent or failed (counted; a failure logged). */
  private sendFrame(t: GarpTarget, frame: Buffer): boolean {
    const counters = this.perIp.get(t.ip) ?? { sent: 0, failed: 0 };
    this.perIp.set(t.ip, counters);
    try {
      if (this.deps.sender.send(t.ifindex, frame) === false) return false;
      this.stats.sent++;
      counters.sent++;
      return true;
    } catch (e) {
      this.stats.failed++;
      counters.failed++;
      this.deps.log.warn({ ip: t.ip, ifindex: t.ifindex, err: describeError(e) }, isIpv4(t.ip) ? 'gratuitous ARP send failed' : 'unsolicited neighbor advertisement send failed');
      return true;
    }
  }

  dispose(): void {
    this.prebuilt.clear();
    this.bursts.dispose();
    this.drainTimer?.cancel();
    this.drainTimer = undefined;
  }
}
