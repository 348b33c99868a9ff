/**
 * Single-flight, coalescing trigger: "run one pass at a time; a request during
 * a pass runs exactly one more pass after it; a burst of requests costs one
 * pass; and a periodic pass catches what the events missed". In the spirit of
 * Cilium's job.Timer with a trigger (hive job/timer.go), written once here
 * for every control loop (intent sources, IPAM, ownership, and what comes).
 *
 *   trigger()        a pass after `delayMs` (requests within it coalesce;
 *                    the window starts at the first request, it is not
 *                    pushed back by later ones)
 *   triggerNow()     a pass now, or one more after the running one; resolves
 *                    when a pass that started after the request has ended
 *   triggerAt(ms)    a pass at clock time `ms`; of several, the earliest wins
 *   idle()           resolves when no pass is running or requested
 *   dispose()        no new passes; the running one sees its signal aborted
 *                    (idle() then resolves when it has ended)
 *
 * A pass that throws is reported (onError, or the log) and the trigger keeps
 * going. The periodic timer starts when the first pass ends and is re-armed
 * when each periodic pass ends, so passes triggered by events do not delay it
 * and a slow pass never overlaps the next periodic one.
 */
import type { Clock, TimerHandle } from './clock.js';
import type { Disposable } from './disposable.js';
import { HeraldError, describeError } from './errors.js';
import type { Logger } from './logger.js';

export interface TriggerOptions {
  /** For logs and errors. */
  readonly name: string;
  /** One pass. Never runs concurrently with itself. */
  readonly run: (signal: AbortSignal) => Promise<void> | void;
  readonly clock: Clock;
  readonly log: Logger;
  /** Coalescing window of trigger(); 0 still coalesces every request made in the same turn. Default 0. */
  readonly delayMs?: number;
  /** A pass at least this often once the first has run; 0 or absent disables it. */
  readonly periodicMs?: number;
  /** Where a failed pass is reported; default an error log line naming the trigger. */
  readonly onError?: (err: unknown) => void;
}

export class Trigger implements Disposable {
  readonly name: string;
  private readonly delayMs: number;
  private readonly periodicMs: number;
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private again = false;
  private delayTimer: TimerHandle | undefined;
  private atTimer: { at: number; handle: TimerHandle } | undefined;
  /** 'unarmed' until the first pass ends; 'firing' while a periodic pass is due or running. */
  private periodic: 'unarmed' | 'armed' | 'firing' | 'off';
  private periodicTimer: TimerHandle | undefined;
  private idleWaiters: Array<() => void> = [];
  private disposed = false;
  private passCount = 0;
  private failureCount = 0;

  constructor(private readonly opts: TriggerOptions) {
    this.name = opts.name;
    this.delayMs = opts.delayMs ?? 0;
    this.periodicMs = opts.periodicMs ?? 0;
    if (!(this.delayMs >= 0) || !(this.periodicMs >= 0)) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `trigger ${opts.name}: delayMs and periodicMs must be >= 0`);
    }
    this.periodic = this.periodicMs > 0 ? 'unarmed' : 'off';
  }

  /** Passes run so far, and how many of them threw. */
  get stats(): { passes: number; failures: number } {
    return { passes: this.passCount, failures: this.failureCount };
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  trigger(): void {
    if (this.disposed || this.delayTimer) return;
    if (this.running && this.delayMs === 0) {
      // No window to wait for: the rerun after the running pass covers it.
      this.again = true;
      return;
    }
    this.delayTimer = this.opts.clock.setTimeout(() => {
      this.delayTimer = undefined;
      void this.triggerNow();
    }, this.delayMs);
  }

  triggerNow(): Promise<void> {
    if (this.disposed) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.loop();
    return this.running;
  }

  /** A pass at clock time `at` (clock.now() ms); an earlier request already pending wins. */
  triggerAt(at: number): void {
    if (this.disposed) return;
    if (this.atTimer && this.atTimer.at <= at) return;
    this.atTimer?.handle.cancel();
    const handle = this.opts.clock.setTimeout(
      () => {
        this.atTimer = undefined;
        void this.triggerNow();
      },
      Math.max(0, at - this.opts.clock.now()),
    );
    this.atTimer = { at, handle };
  }

  /**
   * Resolves once no pass is running or waiting for its delay (timed and
   * periodic passes do not count); after dispose(), once the running pass has ended.
   */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.abort.abort();
    this.delayTimer?.cancel();
    this.delayTimer = undefined;
    this.atTimer?.handle.cancel();
    this.atTimer = undefined;
    this.periodicTimer?.cancel();
    this.periodicTimer = undefined;
    this.settle();
  }

  private isIdle(): boolean {
    return !this.running && (this.disposed || !this.delayTimer);
  }

  private async loop(): Promise<void> {
    try {
      do {
        this.again = false;
        this.passCount++;
        try {
          await this.opts.run(this.abort.signal);
        } catch (e) {
          this.failureCount++;
          this.report(e);
        }
      } while (this.again && !this.disposed);
    } finally {
      this.running = undefined;
      if (this.periodic === 'unarmed' || this.periodic === 'firing') this.armPeriodic();
      this.settle();
    }
  }

  private report(e: unknown): void {
    if (this.opts.onError) {
      try {
        this.opts.onError(e);
        return;
      } catch {
        // a throwing reporter must not stop the trigger: fall back to the log
      }
    }
    this.opts.log.error({ trigger: this.name, err: describeError(e) }, 'pass failed; the next trigger runs it again');
  }

  /** Starts the periodic timer now instead of after the first pass (a timer job's first run is one period away). */
  startPeriodic(): void {
    if (this.periodic === 'unarmed') this.armPeriodic();
  }

  private armPeriodic(): void {
    if (this.disposed) return;
    this.periodic = 'armed';
    this.periodicTimer = this.opts.clock.setTimeout(() => {
      this.periodicTimer = undefined;
      this.periodic = 'firing';
      void this.triggerNow();
    }, this.periodicMs);
  }

  private settle(): void {
    if (!this.isIdle()) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
