/**
 * Time, injected. Production uses the real clocks; component tests pass a
 * manual clock so leases, heartbeats and backoff run without real waiting.
 */
export interface Clock {
  /** Wall-clock milliseconds (for logs and status only, never for deadlines). */
  now(): number;
  /** CLOCK_MONOTONIC nanoseconds: the clock of bpf_ktime_get_ns(). */
  monotonicNs(): bigint;
  setTimeout(fn: () => void, ms: number): TimerHandle;
}

export interface TimerHandle {
  cancel(): void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  // libuv's hrtime reads CLOCK_MONOTONIC, the same clock as bpf_ktime_get_ns().
  monotonicNs: () => process.hrtime.bigint(),
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  },
};

/**
 * CLOCK_MONOTONIC in milliseconds: the clock for deadlines and for judging
 * how late a timer fired (it keeps running while the process is stopped, and
 * never jumps with the wall clock).
 */
export function monotonicMs(clock: Clock): number {
  return Number(clock.monotonicNs() / 1_000_000n);
}
