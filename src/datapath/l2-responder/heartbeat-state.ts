/**
 * The datapath heartbeat's state, shared between the agent's thread and the
 * heartbeat thread (heartbeat-thread.ts) in one SharedArrayBuffer, and the
 * one tick both run (`heartbeatTick`).
 *
 * The split: the agent's thread says until when we may answer (our lease's
 * validity by our own clock, `answerUntilMs`) and when we must not (a hold:
 * stopping, a link that regained carrier); the heartbeat thread stamps while
 * both allow it. A tick that comes late (the process was stopped or starved)
 * or finds the validity run out raises `recheck`: no stamp until the agent's
 * thread has asked the store (that flag is cleared only there).
 */

/** Float64 slots. */
const ANSWER_UNTIL = 0;
const LAST_STAMP = 1;
/** Int32 slots (after the two float64s). */
const LOCK = 0;
const HOLD = 1;
const STOPPED = 2;
const RECHECK = 3;
const LATE_WAKEUPS = 4;
const HELD = 5;
const FAILURES = 6;
const LAPSES = 7;
const INT_SLOTS = 8;

export type TickOutcome = 'stamped' | 'held' | 'late' | 'lapsed' | 'stopped' | 'failed';

export class HeartbeatState {
  static readonly BYTES = 16 + INT_SLOTS * 4;
  private readonly f64: Float64Array;
  private readonly i32: Int32Array;
  /** The validity we last reported as run out (one recheck per validity, not one per tick). */
  private lapsedUntil = -1;
  /** Why the last stamp of this side failed. */
  lastError: unknown;

  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(HeartbeatState.BYTES)) {
    this.f64 = new Float64Array(buffer, 0, 2);
    this.i32 = new Int32Array(buffer, 16, INT_SLOTS);
  }

  /** Monotonic ms until which we may answer (Infinity: no limit; 0: not at all). */
  get answerUntilMs(): number {
    return this.f64[ANSWER_UNTIL]!;
  }
  set answerUntilMs(ms: number) {
    this.f64[ANSWER_UNTIL] = ms;
  }

  /** Monotonic ms of the last stamp written (0: none yet). */
  get lastStampMs(): number {
    return this.f64[LAST_STAMP]!;
  }

  get held(): boolean {
    return Atomics.load(this.i32, HOLD) !== 0;
  }
  get stopped(): boolean {
    return Atomics.load(this.i32, STOPPED) !== 0;
  }
  get rechecking(): boolean {
    return Atomics.load(this.i32, RECHECK) !== 0;
  }
  clearRecheck(): void {
    Atomics.store(this.i32, RECHECK, 0);
  }
  releaseHold(): void {
    Atomics.store(this.i32, HOLD, 0);
  }

  get counters(): { lateWakeups: number; held: number; failures: number; lapses: number } {
    return {
      lateWakeups: Atomics.load(this.i32, LATE_WAKEUPS),
      held: Atomics.load(this.i32, HELD),
      failures: Atomics.load(this.i32, FAILURES),
      lapses: Atomics.load(this.i32, LAPSES),
    };
  }
  countHeld(): void {
    Atomics.add(this.i32, HELD, 1);
  }

  /**
   * Holds (or, with `stop`, stops for good) and runs `clear` — the stamp's
   * removal — so that no stamp lands after it: a tick checks its flags and
   * writes under the same lock.
   */
  hold(opts: { stop?: boolean }, clear: () => void): void {
    this.locked(() => {
      Atomics.store(this.i32, HOLD, 1);
      if (opts.stop) Atomics.store(this.i32, STOPPED, 1);
      Atomics.add(this.i32, HELD, 1);
      clear();
    });
  }

  /** A stamp now, when nothing holds it back (the agent's thread, right after a recheck). */
  stampIfAllowed(nowMs: number, write: () => void): boolean {
    return this.locked(() => {
      if (this.held || this.stopped || this.rechecking || nowMs >= this.answerUntilMs) return false;
      write();
      this.f64[LAST_STAMP] = nowMs;
      return true;
    });
  }

  /**
   * One heartbeat tick at `nowMs`, `sinceLastTickMs` after the previous one.
   * A tick later than the liveness limit means our stamp went stale — the
   * datapath fell silent and a candidate may have fenced us meanwhile — and
   * so does a validity that ran out: both raise `recheck` and write nothing.
   */
  tick(nowMs: number, sinceLastTickMs: number, maxAgeMs: number, write: () => void): TickOutcome {
    return this.locked(() => {
      if (this.stopped) return 'stopped';
      if (sinceLastTickMs > maxAgeMs) {
        Atomics.add(this.i32, LATE_WAKEUPS, 1);
        Atomics.add(this.i32, HELD, 1);
        Atomics.store(this.i32, RECHECK, 1);
        return 'late';
      }
      if (this.held || this.rechecking) {
        Atomics.add(this.i32, HELD, 1);
        return 'held';
      }
      const until = this.answerUntilMs;
      if (nowMs >= until) {
        Atomics.add(this.i32, HELD, 1);
        // A validity that ran out (not a 0 the agent set on purpose): once per validity.
        if (until > 0 && until !== this.lapsedUntil) {
          this.lapsedUntil = until;
          Atomics.add(this.i32, LAPSES, 1);
          Atomics.store(this.i32, RECHECK, 1);
          return 'lapsed';
        }
        return 'held';
      }
      try {
        write();
      } catch (e) {
        this.lastError = e;
        Atomics.add(this.i32, FAILURES, 1);
        return 'failed';
      }
      this.f64[LAST_STAMP] = nowMs;
      return 'stamped';
    });
  }

  /** A spin lock around a map write or two (microseconds); waits in 1 ms steps if the holder was descheduled. */
  private locked<T>(fn: () => T): T {
    while (Atomics.compareExchange(this.i32, LOCK, 0, 1) !== 0) Atomics.wait(this.i32, LOCK, 1, 1);
    try {
      return fn();
    } finally {
      Atomics.store(this.i32, LOCK, 0);
      Atomics.notify(this.i32, LOCK, 1);
    }
  }
}
