/**
 * One way to run long-lived work (style.md practices 2 and 5; Cilium's hive
 * job groups and lifecycle): every job has a name, an owner (the composition
 * root holds one Jobs), an AbortSignal, and a health entry reported by name
 * to `herald status`.
 *
 *   oneShot(name, fn)           fn(signal, health) runs until it returns or
 *                               the signal aborts (cancellation is not failure)
 *   timer(name, fn, ms, opts)   fn runs every `ms` and whenever the returned
 *                               handle's trigger() is called (core/trigger.ts:
 *                               single flight, coalesced)
 *   hook(name, {start, stop})   a resource with a start and a stop (a server)
 *
 * start() starts the jobs added since the last start(), in order, awaiting
 * each hook's start; if one fails, what this call started is stopped again
 * (in reverse) and the job's own error is thrown. stop() stops everything started, in
 * reverse, once (later calls return the same promise), under one deadline: a
 * stop that does not finish in time is abandoned with an error log and a
 * failed health entry, and the remaining stops still run. Synchronous stops
 * run synchronously, so dispose() before process.exit() still closes them.
 */
import type { Clock } from './clock.js';
import type { Disposable } from './disposable.js';
import { HeraldError, describeError } from './errors.js';
import type { Logger } from './logger.js';
import { Trigger } from './trigger.js';

export type HealthLevel = 'ok' | 'degraded' | 'failed' | 'stopped';

export interface JobHealth {
  readonly level: HealthLevel;
  readonly message: string;
  /** ISO time since when the level and message are as they are. */
  readonly since: string;
}

/** What a job uses to say how it is doing. */
export interface HealthReporter {
  ok(message?: string): void;
  degraded(message: string): void;
  failed(message: string): void;
}

export interface TimerJobHandle {
  /** Run the timer's function soon (coalesced with a run in progress). */
  trigger(): void;
}

export interface JobsOptions {
  readonly clock: Clock;
  readonly log: Logger;
  /** Bound on the whole stop(); default one minute (hive's default stop timeout). */
  readonly stopDeadlineMs?: number;
}

export const jobsDefaults = { stopDeadlineMs: 60_000 } as const;

type JobFn = (signal: AbortSignal, health: HealthReporter) => Promise<void> | void;

interface Job {
  readonly name: string;
  readonly start: () => Promise<void> | void;
  readonly stop: () => Promise<void> | void;
}

export class Jobs implements Disposable {
  private readonly pending: Job[] = [];
  private readonly started: Job[] = [];
  private readonly names = new Set<string>();
  private readonly healths = new Map<string, JobHealth>();
  private readonly stopDeadlineMs: number;
  private stopping: Promise<void> | undefined;

  constructor(private readonly opts: JobsOptions) {
    this.stopDeadlineMs = opts.stopDeadlineMs ?? jobsDefaults.stopDeadlineMs;
    if (!(this.stopDeadlineMs > 0)) throw new HeraldError('HERALD_BAD_ARGUMENT', 'jobs: stopDeadlineMs must be > 0');
  }

  oneShot(name: string, fn: JobFn): void {
    const abort = new AbortController();
    const health = this.reporter(name);
    let done: Promise<void> = Promise.resolve();
    this.add({
      name,
      start: () => {
        health.ok('running');
        done = (async () => {
          try {
            await fn(abort.signal, health);
            if (!abort.signal.aborted) health.ok('done');
          } catch (e) {
            if (abort.signal.aborted) return; // cancellation is not failure
            health.failed(describeError(e));
            this.opts.log.error({ job: name, err: describeError(e) }, 'job failed');
          }
        })();
      },
      stop: () => {
        abort.abort();
        return done;
      },
    });
  }

  timer(name: string, fn: JobFn, intervalMs: number, opts: { triggerDelayMs?: number } = {}): TimerJobHandle {
    if (!(intervalMs > 0)) throw new HeraldError('HERALD_BAD_ARGUMENT', `job ${name}: intervalMs must be > 0`);
    const health = this.reporter(name);
    let reported = false;
    const tracking: HealthReporter = {
      ok: (m) => ((reported = true), health.ok(m)),
      degraded: (m) => ((reported = true), health.degraded(m)),
      failed: (m) => ((reported = true), health.failed(m)),
    };
    const trigger = new Trigger({
      name,
      clock: this.opts.clock,
      log: this.opts.log,
      periodicMs: intervalMs,
      ...(opts.triggerDelayMs !== undefined ? { delayMs: opts.triggerDelayMs } : {}),
      run: async (signal) => {
        reported = false;
        await fn(signal, tracking);
        if (!reported) health.ok();
      },
      onError: (e) => {
        health.degraded(describeError(e));
        this.opts.log.warn({ job: name, err: describeError(e) }, 'timer job run failed; retrying at the next interval');
      },
    });
    let running = false;
    this.add({
      name,
      start: () => {
        running = true;
        health.ok('waiting for the first run');
        trigger.startPeriodic();
      },
      stop: () => {
        trigger.dispose();
        return trigger.idle();
      },
    });
    return { trigger: () => (running ? trigger.trigger() : undefined) };
  }

  hook(name: string, h: { start?: (signal: AbortSignal, health: HealthReporter) => Promise<void> | void; stop?: () => Promise<void> | void }): void {
    const health = this.reporter(name);
    const abort = new AbortController();
    this.add({
      name,
      start: async () => {
        // The start signal is aborted when start returns (hive's start context).
        try {
          await h.start?.(abort.signal, health);
        } finally {
          abort.abort();
        }
        if (this.healths.get(name)?.level === 'stopped') health.ok();
      },
      stop: () => h.stop?.(),
    });
  }

  /** Starts the jobs added since the last start(), in order. */
  async start(): Promise<void> {
    if (this.stopping) throw new HeraldError('HERALD_STOPPED', 'jobs: start() after stop()');
    const batch = this.pending.splice(0);
    const startedHere: Job[] = [];
    for (const job of batch) {
      try {
        await job.start();
      } catch (e) {
        this.set(job.name, 'failed', `start failed: ${describeError(e)}`);
        for (const j of startedHere.reverse()) {
          try {
            await j.stop();
            this.set(j.name, 'stopped', 'stopped: a later job failed to start');
          } catch (err) {
            this.opts.log.error({ job: j.name, err: describeError(err) }, 'stopping a job after a failed start failed');
          }
          this.started.splice(this.started.indexOf(j), 1);
        }
        // The job's own error, unwrapped: its code is what the operator needs (e.g. a socket path refused).
        this.opts.log.error({ job: job.name, err: describeError(e) }, 'job failed to start');
        throw e;
      }
      startedHere.push(job);
      this.started.push(job);
    }
  }

  /** Stops every started job in reverse order, once, within the deadline. */
  stop(): Promise<void> {
    this.stopping ??= this.stopAll();
    return this.stopping;
  }

  dispose(): void {
    void this.stop();
  }

  /** Health of every job, by name, in the order added. */
  health(): ReadonlyMap<string, JobHealth> {
    return new Map(this.healths);
  }

  private async stopAll(): Promise<void> {
    this.pending.length = 0;
    const clock = this.opts.clock;
    let expired = false;
    let expire!: () => void;
    const deadline = new Promise<void>((r) => (expire = r)).then(() => (expired = true));
    const timer = clock.setTimeout(() => expire(), this.stopDeadlineMs);
    try {
      for (const job of this.started.splice(0).reverse()) {
        let result: Promise<void> | void;
        try {
          result = job.stop();
        } catch (e) {
          this.stopFailed(job.name, e);
          continue;
        }
        // Only wait when there is something to wait for: synchronous stops all run in this turn.
        if (!(result instanceof Promise)) {
          this.set(job.name, 'stopped', 'stopped');
          continue;
        }
        if (expired) {
          result.catch((e: unknown) => this.stopFailed(job.name, e));
          this.set(job.name, 'failed', 'not waited for: the stop deadline had passed');
          continue;
        }
        const outcome = await Promise.race([result.then(() => 'stopped' as const, (e: unknown) => (this.stopFailed(job.name, e), 'error' as const)), deadline.then(() => 'late' as const)]);
        if (outcome === 'stopped') this.set(job.name, 'stopped', 'stopped');
        else if (outcome === 'late') {
          this.set(job.name, 'failed', `did not stop within ${this.stopDeadlineMs} ms`);
          this.opts.log.error({ job: job.name, deadlineMs: this.stopDeadlineMs }, 'job did not stop within the deadline; abandoning it');
        }
      }
    } finally {
      timer.cancel();
    }
  }

  private stopFailed(name: string, e: unknown): void {
    this.set(name, 'failed', `stop failed: ${describeError(e)}`);
    this.opts.log.error({ job: name, err: describeError(e) }, 'stopping a job failed');
  }

  private add(job: Job): void {
    if (this.stopping) throw new HeraldError('HERALD_STOPPED', `jobs: ${job.name} added after stop()`);
    if (this.names.has(job.name)) throw new HeraldError('HERALD_BAD_ARGUMENT', `jobs: a job named ${job.name} exists already`);
    this.names.add(job.name);
    this.pending.push(job);
    this.set(job.name, 'stopped', 'not started');
  }

  private reporter(name: string): HealthReporter {
    return {
      ok: (message = 'ok') => this.set(name, 'ok', message),
      degraded: (message) => this.set(name, 'degraded', message),
      failed: (message) => this.set(name, 'failed', message),
    };
  }

  private set(name: string, level: HealthLevel, message: string): void {
    const old = this.healths.get(name);
    if (old && old.level === level && old.message === message) return;
    this.healths.set(name, { level, message, since: new Date(this.opts.clock.now()).toISOString() });
  }
}
