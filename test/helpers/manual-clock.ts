/** A Clock whose time moves only when the test says so. */
import type { Clock, TimerHandle } from '../../src/core/clock.js';

export class ManualClock implements Clock {
  private ms = 0;
  private seq = 0;
  private timers: Array<{ at: number; seq: number; fn: () => void; cancelled: boolean }> = [];

  now(): number {
    return this.ms;
  }
  monotonicNs(): bigint {
    return BigInt(this.ms) * 1_000_000n;
  }
  setTimeout(fn: () => void, ms: number): TimerHandle {
    const t = { at: this.ms + ms, seq: this.seq++, fn, cancelled: false };
    this.timers.push(t);
    return { cancel: () => (t.cancelled = true) };
  }
  /** Runs every timer due within `ms`, in time order. */
  advance(ms: number): void {
    const end = this.ms + ms;
    for (;;) {
      const due = this.timers.filter((t) => !t.cancelled && t.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.ms = Math.max(this.ms, due.at); // a timer overdue after sleep() runs late, at the current time
      due.fn();
    }
    this.ms = end;
  }
  /** `ms` pass with no timer running (a stopped or starved process); the overdue ones run, late, at the next advance. */
  sleep(ms: number): void {
    this.ms += ms;
  }
  get pending(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }
}
