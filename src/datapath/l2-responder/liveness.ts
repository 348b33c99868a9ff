/**
 * The liveness gate's heartbeat: CLOCK_MONOTONIC nanoseconds stamped into the
 * runtime_config map; the BPF program stops answering once the stamp is older
 * than the configured limit.
 *
 * With `thread` (the agent), the stamps come from a thread of their own
 * (heartbeat-thread.ts), so a busy agent thread — a recompute of thousands of
 * Services, a large store read — does not silence a healthy node; a stopped or
 * starved process does, and so does a lease whose validity ran out (the agent's
 * thread publishes that validity: a blocked agent thread stops extending it).
 * Without it (unit tests, or when the thread cannot run) this object stamps on
 * its own timer, with the same rules (HeartbeatState.tick).
 */
import { monotonicMs, type Clock, type TimerHandle } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import type { Logger } from '../../core/logger.js';
import { describeError } from '../../core/errors.js';
import type { BpfMap } from '../../os/bpf-map.js';
import { openGate, type LivenessGate } from '../../controlplane/ownership/edges.js';
import { CONFIG_LIVENESS_NS, CONFIG_MAX_AGE_NS } from './layout.js';
import { HeartbeatState } from './heartbeat-state.js';
import { startHeartbeatThread, type HeartbeatThread } from './heartbeat-thread.js';
import type { HeartbeatMessage } from './heartbeat-worker.js';

export interface LivenessOptions {
  /** How often the stamp is written. */
  intervalMs: number;
  /** The program goes silent when the stamp is older than this. */
  maxAgeMs: number;
  /** Stamp from a thread of its own (the agent); otherwise on this thread's timer. */
  thread?: boolean;
}

// The limit is a trade-off. With a shared store it sits well below the etcd
// lease TTL (3 s): a crashed agent's node goes silent before anyone may take
// over, and candidates fence it out on the wire within ~1 s. With the local
// store nobody takes over, so it must outlast an agent restart instead.
export const livenessDefaults: LivenessOptions = { intervalMs: 200, maxAgeMs: 800, thread: true };
export const LOCAL_STORE_LIVENESS_MAX_AGE_MS = 3000;

export class LivenessWriter implements Disposable {
  private timer: TimerHandle | undefined;
  private disposed = false;
  private readonly state = new HeartbeatState();
  private thread: HeartbeatThread | undefined;
  /** Monotonic ms of this thread's last stamping tick (without a thread). */
  private lastTickAt: number | undefined;
  /** `failures` when the current streak of failed stamps began (this thread's stamps); undefined while they succeed. */
  private failingSince: number | undefined;
  private recheckDone: Promise<void> | undefined;
  /** Bumped by every hold that needs a re-check of its own: a re-check begun before it does not release it. */
  private holdGeneration = 0;
  /** Every served link is without carrier: silent until one regains it and ownership is re-checked. */
  private linksDown = false;

  constructor(
    private readonly deps: { config: BpfMap<number, bigint>; clock: Clock; log: Logger; gate?: LivenessGate },
    private readonly opts: LivenessOptions,
  ) {
    if (opts.intervalMs <= 0 || opts.maxAgeMs <= 0) throw new Error('liveness interval and max age must be > 0');
    if (opts.intervalMs >= opts.maxAgeMs) {
      throw new Error(`liveness interval (${opts.intervalMs} ms) must be shorter than its limit (${opts.maxAgeMs} ms)`);
    }
  }

  /** Times the heartbeat was held back (gate closed or re-checking), for status. */
  get held(): number {
    return this.state.counters.held;
  }
  get lateWakeups(): number {
    return this.state.counters.lateWakeups;
  }
  get failures(): number {
    return this.state.counters.failures;
  }
  /** Silent because every served link lost carrier (for status). */
  get linksDark(): boolean {
    return this.linksDown;
  }
  /** Whether stamps run on a thread of their own (for status). */
  get threaded(): boolean {
    return this.thread !== undefined;
  }

  /** False while the heartbeat is held back (the datapath is, or is about to be, silent). */
  get answering(): boolean {
    const now = monotonicMs(this.deps.clock);
    const s = this.state;
    return !s.held && !s.stopped && !s.rechecking && now < s.answerUntilMs && now - s.lastStampMs <= this.opts.maxAgeMs;
  }

  start(): void {
    this.deps.config.update(CONFIG_MAX_AGE_NS, BigInt(this.opts.maxAgeMs) * 1_000_000n);
    this.publish();
    this.state.stampIfAllowed(monotonicMs(this.deps.clock), () => this.stamp());
    if (this.opts.thread) this.startThread();
    this.tick();
  }

  private startThread(): void {
    try {
      this.thread = startHeartbeatThread({
        state: this.state,
        mapFd: this.deps.config.fd,
        key: CONFIG_LIVENESS_NS,
        intervalMs: this.opts.intervalMs,
        maxAgeMs: this.opts.maxAgeMs,
        onMessage: (m) => this.onThreadMessage(m),
        onExit: (why) => {
          if (this.disposed) return;
          // Stamping falls back to this thread: a node whose heartbeat thread died is still alive.
          this.thread = undefined;
          this.lastTickAt = undefined;
          this.deps.log.error({ why }, 'the heartbeat thread ended: stamping from the agent thread');
        },
      });
    } catch (e) {
      this.deps.log.error({ err: describeError(e) }, 'the heartbeat thread could not start: stamping from the agent thread');
    }
  }

  private onThreadMessage(m: HeartbeatMessage): void {
    if (this.disposed) return;
    if (m.kind === 'late') this.lateRecheck(m.sleptMs);
    else if (m.kind === 'lapsed') this.runRecheck('our lease validity ran out before it was renewed');
    else if (m.kind === 'failed') this.deps.log.error({ errno: m.errno }, 'writing the liveness stamp failed');
    else this.deps.log.info({}, 'liveness stamp written again');
  }

  /** Writes a fresh stamp now (unconditionally: start-up and tests). */
  stamp(): void {
    this.deps.config.update(CONFIG_LIVENESS_NS, this.deps.clock.monotonicNs());
  }

  /** Our lease's validity, for the stamper: the only thing it learns from this thread. */
  private publish(): void {
    this.state.answerUntilMs = (this.deps.gate ?? openGate).answerUntilMs();
  }

  private tick(): void {
    if (this.disposed) return;
    this.timer = this.deps.clock.setTimeout(() => this.tick(), this.opts.intervalMs);
    this.publish();
    if (this.thread) return;
    const now = monotonicMs(this.deps.clock);
    const sinceLastTick = this.lastTickAt === undefined ? 0 : now - this.lastTickAt;
    this.lastTickAt = now;
    const outcome = this.state.tick(now, sinceLastTick, this.opts.maxAgeMs, () => this.stamp());
    if (outcome === 'late') this.lateRecheck(sinceLastTick);
    else if (outcome === 'lapsed') this.runRecheck('our lease validity ran out before it was renewed');
    else if (outcome === 'failed') {
      // One line per failure streak at error level, not one per tick (every few hundred ms).
      if (this.failingSince === undefined) {
        this.failingSince = this.failures - 1;
        this.deps.log.error({ err: describeError(this.state.lastError) }, 'writing the liveness stamp failed');
      } else this.deps.log.debug({ err: describeError(this.state.lastError) }, 'writing the liveness stamp failed');
    } else if (outcome === 'stamped' && this.failingSince !== undefined) {
      this.deps.log.info({ failedTicks: this.failures - this.failingSince }, 'liveness stamp written again');
      this.failingSince = undefined;
    }
  }

  // The stamper ran so late that our last stamp went stale (we were stopped,
  // starved or blocked): the datapath fell silent and a candidate may have
  // fenced us out meanwhile. Re-check with the store before answering again,
  // instead of resuming beside the new owner.
  private lateRecheck(sleptMs: number): void {
    this.deps.log.warn({ sleptMs, limitMs: this.opts.maxAgeMs }, 'heartbeat woke up late: re-checking ownership before answering again');
    this.runRecheck(`woke up ${Math.round(sleptMs)} ms late`);
  }

  /**
   * Asks the store (once at a time); the stamper is held (`recheck` raised) until it has answered. The hold is
   * released only by a re-check begun after it (same generation) and never while every served link is down.
   */
  private runRecheck(why: string): Promise<void> {
    if (this.recheckDone) return this.recheckDone;
    const gate = this.deps.gate ?? openGate;
    const generation = this.holdGeneration;
    this.recheckDone = gate
      .recheck(why)
      .catch((e: unknown) => this.deps.log.warn({ err: describeError(e) }, 'ownership re-check failed; the gate decides'))
      .finally(() => {
        this.recheckDone = undefined;
        if (this.disposed) return;
        if (this.linksDown || generation !== this.holdGeneration) {
          // Held since this re-check began: its answer may predate what the hold is for (a fence while our
          // link was down). Stay held; the newer hold's own re-check releases it.
          this.state.clearRecheck();
          return;
        }
        this.state.releaseHold();
        this.state.clearRecheck();
        this.publish();
        // Answer again at once, not at the stamper's next tick.
        this.state.stampIfAllowed(monotonicMs(this.deps.clock), () => this.stamp());
      });
    return this.recheckDone;
  }

  /**
   * Falls silent now (the stamp is cleared: the program treats it as never
   * written) and answers again only once ownership is re-verified with the
   * store. For a link that regains carrier: while it had none, nobody saw us
   * answer, so a candidate may have fenced us out; answering, or sending a
   * gratuitous burst, before asking the store would pull clients back to a
   * node that no longer owns the IP.
   */
  holdAndRecheck(why: string): Promise<void> {
    if (this.disposed) return Promise.resolve();
    this.linksDown = false;
    this.holdSilent();
    // A re-check already in flight began before this hold: its answer does not count for it; ask again after it.
    const inFlight = this.recheckDone;
    return inFlight ? inFlight.then(() => this.runRecheck(why)) : this.runRecheck(why);
  }

  /**
   * Every link we serve lost carrier: fall silent now and stay silent until one
   * regains it (holdAndRecheck). Nobody can hear us meanwhile, so this costs
   * nothing; without it the stamp stays fresh through the outage (the lease is
   * still valid) and the program answers the first requests after the port
   * comes back, beside the node that took over, before the regain is seen.
   */
  holdWhileLinksDown(): void {
    if (this.disposed || this.linksDown) return;
    this.linksDown = true;
    this.holdSilent();
    this.deps.log.warn({}, 'every served link lost carrier: silent until one regains it and ownership is re-checked');
  }

  private holdSilent(): void {
    this.holdGeneration++;
    try {
      this.state.hold({}, () => this.deps.config.update(CONFIG_LIVENESS_NS, 0n));
    } catch (e) {
      this.deps.log.warn({ err: describeError(e) }, 'clearing the liveness stamp failed');
    }
  }

  /** Re-verifies ownership with the store without falling silent meanwhile (before defending an IP). */
  recheck(why: string): Promise<void> {
    return (this.deps.gate ?? openGate).recheck(why);
  }

  /**
   * Falls silent for good, now: no stamp is written again and the current one
   * is cleared, so the program answers nothing from this moment on (one map
   * write), whatever its tables still hold. True once silent; false when the
   * stamp could not be cleared (the caller must then withdraw entry by entry
   * and wait for it before letting anyone else answer).
   */
  silence(): boolean {
    try {
      this.state.hold({ stop: true }, () => this.deps.config.update(CONFIG_LIVENESS_NS, 0n));
      return true;
    } catch (e) {
      this.deps.log.warn({ err: describeError(e) }, 'clearing the liveness stamp failed');
      return false;
    } finally {
      this.dispose();
    }
  }

  /** Stops stamping; the stamp goes stale by itself and the program falls silent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.timer?.cancel();
    // Stopped under the lock first: whatever the thread does next, it writes no stamp.
    if (!this.state.stopped) this.state.hold({ stop: true }, () => {});
    void this.thread?.terminate();
    this.thread = undefined;
  }
}

/** Age of the current stamp, for status output. undefined = never written. */
export function livenessAge(config: BpfMap<number, bigint>, nowNs: bigint): { ageMs?: number; maxAgeMs: number } {
  const stamp = config.lookup(CONFIG_LIVENESS_NS) ?? 0n;
  const maxAge = config.lookup(CONFIG_MAX_AGE_NS) ?? 0n;
  return {
    ...(stamp === 0n ? {} : { ageMs: Number(nowNs - stamp) / 1e6 }),
    maxAgeMs: Number(maxAge) / 1e6,
  };
}
