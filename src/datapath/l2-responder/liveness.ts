/**
 * The liveness gate's heartbeat: the agent stamps CLOCK_MONOTONIC nanoseconds
 * into the runtime_config map on its own timer; the BPF program stops answering
 * once the stamp is older than the configured limit. Independent of every other
 * loop, so a stuck reconciler does not silence a healthy node, while a stuck or
 * dead agent does.
 */
import { monotonicMs, type Clock, type TimerHandle } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import type { Logger } from '../../core/logger.js';
import { describeError } from '../../core/errors.js';
import type { BpfMap } from '../../os/bpf-map.js';
import { openGate, type LivenessGate } from '../../controlplane/ownership/edges.js';
import { CONFIG_LIVENESS_NS, CONFIG_MAX_AGE_NS } from './layout.js';

export interface LivenessOptions {
  /** How often the stamp is written. */
  intervalMs: number;
  /** The program goes silent when the stamp is older than this. */
  maxAgeMs: number;
}

// The limit is a trade-off. With a shared store it sits well below the etcd
// lease TTL (3 s): a crashed agent's node goes silent before anyone may take
// over, and candidates fence it out on the wire within ~1 s. With the local
// store nobody takes over, so it must outlast an agent restart instead.
export const livenessDefaults: LivenessOptions = { intervalMs: 200, maxAgeMs: 800 };
export const LOCAL_STORE_LIVENESS_MAX_AGE_MS = 3000;

export class LivenessWriter implements Disposable {
  private timer: TimerHandle | undefined;
  private disposed = false;
  /** Monotonic ms of the last tick (undefined before the first). */
  private lastTickAt: number | undefined;
  /** A re-check after a late wake-up is in flight: no stamps until it settles. */
  private rechecking = false;
  failures = 0;
  /** `failures` when the current streak of failed stamps began; undefined while stamps succeed. */
  private failingSince: number | undefined;
  /** False while the heartbeat is held back (the datapath is, or is about to be, silent). */
  answering = true;
  /** Times the heartbeat was held back (gate closed or re-checking), for status. */
  held = 0;
  lateWakeups = 0;

  constructor(
    private readonly deps: { config: BpfMap<number, bigint>; clock: Clock; log: Logger; gate?: LivenessGate },
    private readonly opts: LivenessOptions,
  ) {
    if (opts.intervalMs <= 0 || opts.maxAgeMs <= 0) throw new Error('liveness interval and max age must be > 0');
    if (opts.intervalMs >= opts.maxAgeMs) {
      throw new Error(`liveness interval (${opts.intervalMs} ms) must be shorter than its limit (${opts.maxAgeMs} ms)`);
    }
  }

  start(): void {
    this.deps.config.update(CONFIG_MAX_AGE_NS, BigInt(this.opts.maxAgeMs) * 1_000_000n);
    this.tick();
  }

  /** Writes a fresh stamp now. */
  stamp(): void {
    this.deps.config.update(CONFIG_LIVENESS_NS, this.deps.clock.monotonicNs());
  }

  private tick(): void {
    if (this.disposed) return;
    this.timer = this.deps.clock.setTimeout(() => this.tick(), this.opts.intervalMs);
    const gate = this.deps.gate ?? openGate;
    const now = monotonicMs(this.deps.clock);
    const sinceLastTick = this.lastTickAt === undefined ? 0 : now - this.lastTickAt;
    this.lastTickAt = now;
    if (this.rechecking) {
      this.held++;
      this.answering = false;
      return;
    }
    // This timer fired so late that our last stamp went stale (we were
    // stopped, starved or blocked): the datapath fell silent and a candidate
    // may have fenced us out meanwhile. Re-check with the store before
    // answering again, instead of resuming beside the new owner.
    if (sinceLastTick > this.opts.maxAgeMs) {
      this.lateWakeups++;
      this.held++;
      this.answering = false;
      this.rechecking = true;
      this.deps.log.warn({ sleptMs: sinceLastTick, limitMs: this.opts.maxAgeMs }, 'heartbeat woke up late: re-checking ownership before answering again');
      void this.runRecheck(gate, `woke up ${Math.round(sinceLastTick)} ms late`);
      return;
    }
    this.write(gate);
  }

  private recheckDone: Promise<void> | undefined;

  private runRecheck(gate: LivenessGate, why: string): Promise<void> {
    this.rechecking = true;
    this.recheckDone = gate
      .recheck(why)
      .catch((e: unknown) => this.deps.log.warn({ err: describeError(e) }, 'ownership re-check failed; the gate decides'))
      .finally(() => {
        this.rechecking = false;
        this.recheckDone = undefined;
        if (!this.disposed) this.write(gate);
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
    if (this.recheckDone) return this.recheckDone;
    this.held++;
    this.answering = false;
    try {
      this.deps.config.update(CONFIG_LIVENESS_NS, 0n);
    } catch (e) {
      this.deps.log.warn({ err: describeError(e) }, 'clearing the liveness stamp failed');
    }
    return this.runRecheck(this.deps.gate ?? openGate, why);
  }

  /** Re-verifies ownership with the store without falling silent meanwhile (before defending an IP). */
  recheck(why: string): Promise<void> {
    return (this.deps.gate ?? openGate).recheck(why);
  }

  private write(gate: LivenessGate): void {
    if (!gate.mayAnswer(monotonicMs(this.deps.clock))) {
      // Our lease may have lapsed: let the stamp go stale, the program falls silent.
      this.held++;
      this.answering = false;
      return;
    }
    try {
      this.stamp();
      this.answering = true;
      if (this.failingSince !== undefined) this.deps.log.info({ failedTicks: this.failures - this.failingSince }, 'liveness stamp written again');
      this.failingSince = undefined;
    } catch (e) {
      this.failures++;
      // One line per failure streak at error level, not one per tick (every few hundred ms).
      if (this.failingSince === undefined) {
        this.failingSince = this.failures - 1;
        this.deps.log.error({ err: describeError(e) }, 'writing the liveness stamp failed');
      } else this.deps.log.debug({ err: describeError(e) }, 'writing the liveness stamp failed');
    }
  }

  /**
   * Falls silent for good, now: no stamp is written again and the current one
   * is cleared, so the program answers nothing from this moment on (one map
   * write), whatever its tables still hold. True once silent; false when the
   * stamp could not be cleared (the caller must then withdraw entry by entry
   * and wait for it before letting anyone else answer).
   */
  silence(): boolean {
    this.dispose();
    this.answering = false;
    try {
      this.deps.config.update(CONFIG_LIVENESS_NS, 0n);
      return true;
    } catch (e) {
      this.deps.log.warn({ err: describeError(e) }, 'clearing the liveness stamp failed');
      return false;
    }
  }

  /** Stops stamping; the stamp goes stale by itself and the program falls silent. */
  dispose(): void {
    this.disposed = true;
    this.timer?.cancel();
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
