/**
 * The cluster view's timeline: events recorded by agents (allocations,
 * ownership moves, store outages, rejected intent), held in a bounded ring
 * and fanned out to followers (SSE clients, `herald events`) through bounded
 * per-follower queues.
 *
 * Ids are monotonic: with etcd they are the store revision of the event's key
 * (one order for the whole cluster, the same after an agent restart); with the
 * local store a counter. A follower that comes back with the last id it saw
 * gets exactly the events after it — or, when they have left the ring, a
 * `gap` telling it to reload the snapshot (never a silent loss).
 *
 * A follower never blocks the agent: its queue holds at most `maxQueued`
 * events; one that falls further behind is cut off (`overflow`) and must
 * reconnect with its last id.
 */

export type OwnershipCause = 'clean-stop' | 'crash' | 'lease-ended' | 'wire-silence' | 'link-or-policy' | 'spread-rebalance' | 'store-outage' | 'unknown';

export type EventBody =
  /** This node claimed an IP. `from` the previous owner (if one was seen), `gapMs` from the previous owner's key vanishing to our claim. */
  | { kind: 'owner-took'; ip: string; from?: string; gapMs?: number; hint?: 'fenced' | 'lease-ended' | 'released' | 'free'; cause?: OwnershipCause; causeText?: string }
  /** This node gives an IP up (written before its key is deleted), and why. */
  | { kind: 'owner-released'; ip: string; why: string; cause: OwnershipCause }
  /** This node revoked a silent owner's lease. */
  | { kind: 'owner-fenced'; fenced: string; ips: string[] }
  /** This node stops cleanly (written before its lease is revoked). */
  | { kind: 'node-stopping' }
  /** This node's agent died (written by its supervisor, before revoking its lease). */
  | { kind: 'node-crashed'; signal?: string; code?: number }
  | { kind: 'node-started'; version: string }
  | { kind: 'allocated'; service: string; ip: string; pool?: string }
  | { kind: 'freed'; service: string; ip: string }
  | { kind: 'store-lost'; reason: string }
  | { kind: 'store-live'; outageMs?: number }
  | { kind: 'intent-rejected'; reasons: string[] }
  | { kind: 'intent-accepted' };

export type ClusterEvent = EventBody & {
  /** Monotonic id (store revision with etcd). */
  id: number;
  /** The node that recorded it. */
  node: string;
  /** Wall-clock time at the recording node (ISO). */
  at: string;
};

/** Where agents record events; the store-backed one gives them their id. */
export interface EventJournal {
  record(body: EventBody): Promise<void>;
  readonly ring: EventRing;
}

export interface Follower {
  /** Events to send, in id order. */
  drain(): ClusterEvent[];
  readonly overflowed: boolean;
  close(): void;
}

export interface EventRingOptions {
  /** Events kept (oldest dropped first). */
  capacity: number;
  /** Events queued per follower before it is cut off. */
  maxQueued: number;
}

export const eventRingDefaults: EventRingOptions = { capacity: 2000, maxQueued: 5000 };

class RingFollower implements Follower {
  queue: ClusterEvent[] = [];
  overflowed = false;
  closed = false;
  constructor(
    private readonly ring: EventRing,
    readonly wake: () => void,
  ) {}
  drain(): ClusterEvent[] {
    const out = this.queue;
    this.queue = [];
    return out;
  }
  close(): void {
    this.closed = true;
    this.ring.unfollow(this);
  }
}

export class EventRing {
  private events: ClusterEvent[] = [];
  private readonly followers = new Set<RingFollower>();
  private lastId = 0;

  constructor(readonly opts: EventRingOptions = eventRingDefaults) {}

  /** Adds events with ids above the last one (others are duplicates: ignored). Returns the ones added. */
  add(...events: ClusterEvent[]): ClusterEvent[] {
    const added: ClusterEvent[] = [];
    for (const e of events) {
      if (e.id <= this.lastId) continue;
      this.lastId = e.id;
      added.push(enrich(e, this.events));
      this.events.push(added[added.length - 1]!);
    }
    if (this.events.length > this.opts.capacity) {
      const cut = this.events.length - this.opts.capacity;
      this.droppedUpTo = Math.max(this.droppedUpTo, this.events[cut - 1]!.id);
      this.events = this.events.slice(cut);
    }
    if (added.length === 0) return added;
    for (const f of this.followers) {
      if (f.overflowed) continue;
      if (f.queue.length + added.length > this.opts.maxQueued) {
        f.overflowed = true;
        f.queue = [];
      } else f.queue.push(...added);
      f.wake();
    }
    return added;
  }

  get last(): number {
    return this.lastId;
  }

  /** Every event kept, oldest first. */
  list(): readonly ClusterEvent[] {
    return this.events;
  }

  /**
   * The events after `afterId` and whether some were lost (dropped from the
   * ring before the follower saw them). `afterId` undefined: everything kept.
   */
  since(afterId: number | undefined): { events: ClusterEvent[]; gap: boolean } {
    if (afterId === undefined) return { events: [...this.events], gap: false };
    return { events: this.events.filter((e) => e.id > afterId), gap: this.droppedUpTo > afterId };
  }

  /** The highest id dropped from the ring (0: none yet). */
  private droppedUpTo = 0;

  /** Follows new events; `wake` is called (synchronously) when some are queued. */
  follow(wake: () => void): Follower {
    const f = new RingFollower(this, wake);
    this.followers.add(f);
    return f;
  }

  unfollow(f: Follower): void {
    this.followers.delete(f as RingFollower);
  }

  get followerCount(): number {
    return this.followers.size;
  }
}

const CAUSE_TEXT: Record<OwnershipCause, string> = {
  'clean-stop': 'clean stop of the previous owner',
  crash: 'the previous owner crashed (its supervisor handed its IPs over and revoked its lease)',
  'lease-ended': "the previous owner's lease expired (frozen, cut off, or crashed without a supervisor)",
  'wire-silence': 'the previous owner went silent on the wire (fenced)',
  'link-or-policy': 'the previous owner no longer qualified (link down or policy change)',
  'spread-rebalance': 'spread rebalance: handed over to the preferred node',
  'store-outage': 'the previous owner lost the store',
  unknown: 'no earlier owner seen',
};

export function causeText(c: OwnershipCause): string {
  return CAUSE_TEXT[c];
}

/**
 * A takeover's cause, from what the ring already holds: events are added in id
 * (store revision) order, and the previous owner's release, stop or fence was
 * written before its key went, so it is always seen before the takeover.
 */
function enrich(e: ClusterEvent, before: readonly ClusterEvent[]): ClusterEvent {
  if (e.kind !== 'owner-took' || e.cause) return e;
  let cause: OwnershipCause = e.from ? 'lease-ended' : 'unknown';
  const from = e.from;
  if (from) {
    const atMs = Date.parse(e.at);
    for (let i = before.length - 1; i >= 0; i--) {
      const b = before[i]!;
      if (atMs - Date.parse(b.at) > 30_000) break;
      // Older than the previous owner's own claim or start: not about this ownership.
      if (b.node === from && ((b.kind === 'owner-took' && b.ip === e.ip) || b.kind === 'node-started')) break;
      if (b.node === from && b.kind === 'owner-released' && b.ip === e.ip) {
        cause = b.cause;
        break;
      }
      if (b.node === from && b.kind === 'node-stopping') {
        cause = 'clean-stop';
        break;
      }
      if (b.node === from && b.kind === 'node-crashed') {
        cause = 'crash';
        break;
      }
      if (b.kind === 'owner-fenced' && b.fenced === from && b.ips.includes(e.ip)) {
        cause = 'wire-silence';
        break;
      }
      if (b.node === from && b.kind === 'store-lost') {
        cause = 'store-outage';
        break;
      }
    }
    if (cause === 'lease-ended' && e.hint === 'fenced') cause = 'wire-silence';
  }
  return { ...e, cause, causeText: causeText(cause) };
}

/** The journal without a shared store: the ring alone, ids from a counter seeded by the clock (increasing across restarts). */
export class MemoryJournal implements EventJournal {
  readonly ring = new EventRing(eventRingDefaults);
  private next = Date.now();

  constructor(private readonly node: string) {}

  record(body: EventBody): Promise<void> {
    this.next = Math.max(this.next + 1, Date.now());
    this.ring.add({ ...body, id: this.next, node: this.node, at: new Date().toISOString() } as ClusterEvent);
    return Promise.resolve();
  }
}
