/**
 * Defends the IPs this node answers for against foreign claims (RFC 5227
 * §2.4 (c)-style): when another MAC announces one of them, clients' neighbour
 * caches now point at that MAC, so the node re-announces the IP with both
 * gratuitous forms (the same round as the take-over burst) to correct them.
 *
 * Rate-limited per (IP, interface): at most one defence per interval, never a
 * flood in reply to a flood. The limit has a trailing edge: after each
 * defence the conflict counter of the entry is checked again one interval
 * later, and any claim counted since triggers another defence. So the last
 * word on the wire is always ours, at most one interval after the last claim,
 * even for claims the program did not report (it reports at most one event per
 * entry per 100 ms, and drops events when its ring buffer is full).
 *
 * Pure logic over injected edges (clock, counter reader, sender): unit-tested
 * with a manual clock.
 */
import type { Clock, TimerHandle } from '../core/clock.js';
import type { Disposable } from '../core/disposable.js';
import { HeraldError, describeError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import type { GarpTarget } from './garp.js';
import type { ConflictEvent, ResponderKey } from './l2-responder/layout.js';

export interface ConflictDefenceOptions {
  /** At most one defensive announcement per IP and interface per interval. */
  intervalMs: number;
}

export const conflictDefenceDefaults: ConflictDefenceOptions = { intervalMs: 1000 };
/** Below this a defence exchange with a misbehaving peer becomes a flood. */
export const CONFLICT_DEFENCE_MIN_INTERVAL_MS = 100;
/** Conflict records kept for status (the oldest idle ones are forgotten first). */
export const CONFLICT_RECORDS_MAX = 1024;

export interface ConflictDefenceDeps {
  clock: Clock;
  log: Logger;
  /** The entry's conflict counter (every claim the program saw); undefined once the node no longer answers for it. */
  conflictCount(key: ResponderKey): bigint | undefined;
  /** This node's MAC on the interface: the source of the defence. */
  interfaceMac(ifindex: number): string | undefined;
  /** Puts one gratuitous round (request and reply forms) on the wire. */
  announce(target: GarpTarget): void;
  /** For logs. */
  interfaceName?(ifindex: number): string | undefined;
}

/** The last conflict seen for one (IP, interface), for status and metrics. */
export interface ConflictRecord {
  ip: string;
  ifindex: number;
  interface: string;
  /** The MAC that claimed the IP most recently. */
  foreignMac: string;
  /** What the claim was: an ARP request or reply, or an NDP solicitation or advertisement. */
  op: ClaimKind;
  /** Wall-clock ms of the last reported claim. */
  lastSeenAt: number;
  /** Claims reported by the program (at most ~10/s per entry). */
  events: number;
  /** Claims counted by the program (every frame), as last read. */
  claims: number;
  defences: number;
  /** Wall-clock ms of the last defence. */
  lastDefenceAt?: number;
}

export type ClaimKind = 'request' | 'reply' | 'solicitation' | 'advertisement';

function claimKind(ev: ConflictEvent): ClaimKind {
  if (ev.family === 6) return ev.op === 136 ? 'advertisement' : 'solicitation';
  return ev.op === 2 ? 'reply' : 'request';
}

interface EntryState {
  key: ResponderKey;
  record: ConflictRecord;
  /** The counter when we last defended: a higher value means claims since. */
  claimsAtDefence: bigint;
  timer?: TimerHandle;
}

const keyOf = (k: ResponderKey) => `${k.ip}|${k.ifindex}`;

export class ConflictDefender implements Disposable {
  private readonly entries = new Map<string, EntryState>();
  private disposed = false;
  readonly stats = { events: 0, defences: 0, failedDefences: 0 };

  constructor(
    private readonly deps: ConflictDefenceDeps,
    private readonly opts: ConflictDefenceOptions = conflictDefenceDefaults,
  ) {
    if (!Number.isFinite(opts.intervalMs) || opts.intervalMs < CONFLICT_DEFENCE_MIN_INTERVAL_MS) {
      throw new HeraldError(
        'HERALD_BAD_ARGUMENT',
        `conflict defence interval must be at least ${CONFLICT_DEFENCE_MIN_INTERVAL_MS} ms, got ${opts.intervalMs}`,
      );
    }
  }

  /** A claim reported by the program. Never throws. */
  onConflict(ev: ConflictEvent): void {
    if (this.disposed) return;
    this.stats.events++;
    const key = { ip: ev.ip, ifindex: ev.ifindex };
    const k = keyOf(key);
    let st = this.entries.get(k);
    if (!st) {
      st = {
        key,
        record: {
          ip: ev.ip,
          ifindex: ev.ifindex,
          interface: this.deps.interfaceName?.(ev.ifindex) ?? `ifindex ${ev.ifindex}`,
          foreignMac: ev.mac, op: claimKind(ev), lastSeenAt: 0, events: 0, claims: 0, defences: 0 },
        claimsAtDefence: 0n,
      };
      this.entries.set(k, st);
      this.evictIfFull();
    }
    const r = st.record;
    r.foreignMac = ev.mac;
    r.op = claimKind(ev);
    r.lastSeenAt = this.deps.clock.now();
    r.events++;
    // Within an interval of the last defence a check is always pending (it
    // runs exactly one interval after it), and it sees this claim in the counter.
    if (st.timer) return;
    this.defend(st);
  }

  private scheduleCheck(st: EntryState, ms: number): void {
    st.timer = this.deps.clock.setTimeout(() => {
      st.timer = undefined;
      const claims = this.deps.conflictCount(st.key);
      if (claims === undefined) return; // withdrawn: nothing of ours to defend
      st.record.claims = Number(claims);
      if (claims > st.claimsAtDefence) this.defend(st);
    }, ms);
  }

  private defend(st: EntryState): void {
    const { key, record } = st;
    const claims = this.deps.conflictCount(key);
    if (claims === undefined) return; // the node no longer answers for it: the claim may be the new owner's
    const mac = this.deps.interfaceMac(key.ifindex);
    if (!mac) return; // the interface is no longer served
    const previous = record.defences > 0 ? st.claimsAtDefence : undefined;
    try {
      this.deps.announce({ ip: key.ip, ifindex: key.ifindex, mac });
    } catch (e) {
      this.stats.failedDefences++;
      this.deps.log.warn({ ip: key.ip, ifindex: key.ifindex, err: describeError(e) }, 'defending an address conflict failed');
    }
    record.defences++;
    record.claims = Number(claims);
    record.lastDefenceAt = this.deps.clock.now();
    this.stats.defences++;
    st.claimsAtDefence = claims;
    // One line per (IP, interface) per interval at most: it carries how many
    // claims were counted since the previous line instead of one line each.
    this.deps.log.warn(
      {
        ip: key.ip,
        iface: record.interface,
        foreignMac: record.foreignMac,
        op: record.op,
        claimsSinceLastLine: previous === undefined ? 1 : Number(claims - previous),
        claimsTotal: Number(claims),
        defences: record.defences,
      },
      'address conflict: a foreign MAC claims an IP this node owns; re-announcing it',
    );
    this.scheduleCheck(st, this.opts.intervalMs);
  }

  private evictIfFull(): void {
    if (this.entries.size <= CONFLICT_RECORDS_MAX) return;
    let oldest: [string, EntryState] | undefined;
    for (const e of this.entries) {
      if (e[1].timer) continue; // still being defended
      if (!oldest || e[1].record.lastSeenAt < oldest[1].record.lastSeenAt) oldest = e;
    }
    if (oldest) this.entries.delete(oldest[0]);
  }

  /** The last conflict per (IP, interface), most recent first. */
  records(): ConflictRecord[] {
    return [...this.entries.values()].map((s) => ({ ...s.record })).sort((a, b) => b.lastSeenAt - a.lastSeenAt);
  }

  dispose(): void {
    this.disposed = true;
    for (const st of this.entries.values()) st.timer?.cancel();
  }
}
