/**
 * The single-flight coalescing trigger (src/core/trigger.ts) that every
 * control loop runs its passes through: bursts coalesce, passes never
 * overlap, a request during a pass runs exactly one more, periodic and timed
 * passes, errors reported without stopping it, dispose and idle().
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { Trigger, type TriggerOptions } from '../../src/core/trigger.js';
import { ManualClock } from '../helpers/manual-clock.js';

/** Lets every queued promise continuation run. */
const turns = async (n = 5): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
};

interface Gate {
  wait: Promise<void>;
  open: () => void;
}
function gate(): Gate {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/** A trigger whose passes are counted and, while `hold` is set, block until released. */
function harness(opts: Partial<TriggerOptions> = {}) {
  const clock = new ManualClock();
  const state = { passes: 0, concurrent: 0, maxConcurrent: 0, hold: undefined as Gate | undefined, signals: [] as AbortSignal[] };
  const trigger = new Trigger({
    name: 'test',
    clock,
    log: silentLogger,
    run: async (signal) => {
      state.passes++;
      state.signals.push(signal);
      state.concurrent++;
      state.maxConcurrent = Math.max(state.maxConcurrent, state.concurrent);
      try {
        if (state.hold) await state.hold.wait;
      } finally {
        state.concurrent--;
      }
    },
    ...opts,
  });
  return { clock, state, trigger };
}

test('a burst of trigger() calls within the delay costs one pass, after the delay from the first', async () => {
  const { clock, state, trigger } = harness({ delayMs: 100 });
  for (let i = 0; i < 10; i++) {
    trigger.trigger();
    clock.advance(5); // later requests do not push the window back
  }
  await turns();
  assert.equal(state.passes, 0);
  clock.advance(49); // t = 99
  await turns();
  assert.equal(state.passes, 0);
  clock.advance(1); // t = 100
  await turns();
  assert.equal(state.passes, 1);
  clock.advance(1000);
  await turns();
  assert.equal(state.passes, 1, 'no pass without a request');
});

test('delay 0 still coalesces every request of the same turn into one pass', async () => {
  const { clock, state, trigger } = harness();
  for (let i = 0; i < 100; i++) trigger.trigger();
  clock.advance(0);
  await turns();
  assert.equal(state.passes, 1);
});

test('passes never overlap; requests during a pass run exactly one more pass, which the requests await', async () => {
  const { state, trigger } = harness();
  state.hold = gate();
  const first = trigger.triggerNow();
  await turns();
  assert.equal(state.passes, 1);
  const during = [trigger.triggerNow(), trigger.triggerNow(), trigger.triggerNow()];
  let resolved = false;
  void Promise.all(during).then(() => (resolved = true));
  await turns();
  assert.equal(state.passes, 1, 'no second pass while the first runs');
  const held = state.hold;
  state.hold = undefined;
  held.open();
  await first;
  await Promise.all(during);
  assert.ok(resolved);
  assert.equal(state.passes, 2, 'one rerun for all requests made during the pass');
  assert.equal(state.maxConcurrent, 1);
});

test('a pass may request another from inside itself (e.g. it found more work)', async () => {
  const clock = new ManualClock();
  let passes = 0;
  const trigger: Trigger = new Trigger({
    name: 'self',
    clock,
    log: silentLogger,
    run: async () => {
      passes++;
      if (passes < 3) void trigger.triggerNow();
    },
  });
  await trigger.triggerNow();
  assert.equal(passes, 3);
});

test('the periodic pass starts after the first pass, is not moved by event passes, and re-arms after each', async () => {
  const { clock, state, trigger } = harness({ periodicMs: 1000 });
  clock.advance(5000);
  await turns();
  assert.equal(state.passes, 0, 'nothing runs until something triggers the first pass');
  await trigger.triggerNow(); // t = 5000
  assert.equal(state.passes, 1);
  clock.advance(400);
  await trigger.triggerNow(); // an event pass at t = 5400
  assert.equal(state.passes, 2);
  clock.advance(599); // t = 5999
  await turns();
  assert.equal(state.passes, 2);
  clock.advance(1); // t = 6000: periodic
  await turns();
  assert.equal(state.passes, 3);
  clock.advance(1000); // t = 7000
  await turns();
  assert.equal(state.passes, 4);
  assert.equal(clock.pending, 1, 'one periodic timer armed at a time');
});

test('a slow periodic pass is not overlapped: the next period counts from its end', async () => {
  const { clock, state, trigger } = harness({ periodicMs: 1000 });
  await trigger.triggerNow();
  state.hold = gate();
  clock.advance(1000); // periodic pass starts and blocks
  await turns();
  assert.equal(state.passes, 2);
  clock.advance(5000);
  await turns();
  assert.equal(state.passes, 2);
  assert.equal(state.maxConcurrent, 1);
  const held = state.hold;
  state.hold = undefined;
  held.open();
  await turns();
  clock.advance(999);
  await turns();
  assert.equal(state.passes, 2);
  clock.advance(1);
  await turns();
  assert.equal(state.passes, 3);
});

test('triggerAt: the earliest pending time wins; a later request does not cancel it', async () => {
  const { clock, state, trigger } = harness();
  trigger.triggerAt(500);
  trigger.triggerAt(300);
  trigger.triggerAt(800);
  assert.equal(clock.pending, 1, 'one timer for the earliest time');
  clock.advance(299);
  await turns();
  assert.equal(state.passes, 0);
  clock.advance(1);
  await turns();
  assert.equal(state.passes, 1);
  clock.advance(1000);
  await turns();
  assert.equal(state.passes, 1, 'the later times were covered by the earliest');
  trigger.triggerAt(clock.now() - 10); // already due: runs on the next timer turn
  clock.advance(0);
  await turns();
  assert.equal(state.passes, 2);
});

test('a pass that throws is reported and the trigger keeps running passes', async () => {
  const clock = new ManualClock();
  const reported: unknown[] = [];
  let passes = 0;
  const trigger = new Trigger({
    name: 'flaky',
    clock,
    log: silentLogger,
    delayMs: 10,
    onError: (e) => reported.push(e),
    run: async () => {
      passes++;
      if (passes === 1) throw new Error('boom');
    },
  });
  await trigger.triggerNow();
  assert.equal(reported.length, 1);
  assert.match(String(reported[0]), /boom/);
  trigger.trigger();
  clock.advance(10);
  await turns();
  assert.equal(passes, 2);
  assert.deepEqual(trigger.stats, { passes: 2, failures: 1 });
});

test('without onError a failed pass is logged with the trigger name', async () => {
  const lines: Array<{ obj: object; msg?: string }> = [];
  const log: Logger = { ...silentLogger, error: (obj, msg) => lines.push({ obj, ...(msg ? { msg } : {}) }), child: () => log };
  const trigger = new Trigger({ name: 'named', clock: new ManualClock(), log, run: () => Promise.reject(new Error('broken')) });
  await trigger.triggerNow();
  assert.equal(lines.length, 1);
  assert.equal((lines[0]!.obj as { trigger: string }).trigger, 'named');
  assert.match((lines[0]!.obj as { err: string }).err, /broken/);
});

test('dispose cancels every timer, aborts the running pass and runs nothing more', async () => {
  const { clock, state, trigger } = harness({ delayMs: 50, periodicMs: 1000 });
  await trigger.triggerNow(); // arms the periodic timer
  state.hold = gate();
  const running = trigger.triggerNow();
  await turns();
  assert.equal(state.passes, 2);
  void trigger.triggerNow(); // a rerun requested...
  trigger.trigger();
  trigger.triggerAt(clock.now() + 10);
  trigger.dispose(); // ...and dropped by dispose
  assert.equal(state.signals.at(-1)!.aborted, true, 'the running pass sees its signal aborted');
  state.hold.open();
  await running;
  clock.advance(10_000);
  await turns();
  assert.equal(state.passes, 2, 'no pass after dispose');
  assert.equal(clock.pending, 0, 'no timer left');
  trigger.trigger();
  trigger.triggerAt(clock.now() + 1);
  await trigger.triggerNow();
  assert.equal(clock.pending, 0);
  assert.equal(state.passes, 2);
  trigger.dispose(); // idempotent
});

test('idle() resolves once no pass is running or waiting for its delay', async () => {
  const { clock, state, trigger } = harness({ delayMs: 100 });
  await trigger.idle(); // nothing requested: idle at once
  trigger.trigger();
  let idle = false;
  void trigger.idle().then(() => (idle = true));
  await turns();
  assert.equal(idle, false, 'a pass is waiting for its delay');
  state.hold = gate();
  clock.advance(100);
  await turns();
  assert.equal(state.passes, 1);
  void trigger.triggerNow(); // a rerun while running
  const held = state.hold;
  state.hold = undefined;
  held.open();
  await turns();
  assert.equal(state.passes, 2);
  assert.equal(idle, true);
  // dispose releases waiters even with a pass pending
  trigger.trigger();
  let released = false;
  void trigger.idle().then(() => (released = true));
  trigger.dispose();
  await turns();
  assert.equal(released, true);
});

test('negative delay or period is refused with a coded error', () => {
  assert.throws(
    () => new Trigger({ name: 'bad', clock: new ManualClock(), log: silentLogger, run: () => {}, delayMs: -1 }),
    (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'),
  );
  assert.throws(
    () => new Trigger({ name: 'bad', clock: new ManualClock(), log: silentLogger, run: () => {}, periodicMs: Number.NaN }),
    (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'),
  );
});

test('with delay 0, trigger() during a pass reruns right after it, without waiting for a timer', async () => {
  const { clock, state, trigger } = harness();
  state.hold = gate();
  const first = trigger.triggerNow();
  await turns();
  trigger.trigger();
  trigger.trigger();
  assert.equal(clock.pending, 0, 'no timer armed: the rerun covers it');
  const held = state.hold;
  state.hold = undefined;
  held.open();
  await first;
  assert.equal(state.passes, 2);
});

test('with a delay, trigger() during a pass still waits the delay (an editor may still be writing)', async () => {
  const { clock, state, trigger } = harness({ delayMs: 100 });
  state.hold = gate();
  const first = trigger.triggerNow();
  await turns();
  trigger.trigger();
  const held = state.hold;
  state.hold = undefined;
  held.open();
  await first;
  await turns();
  assert.equal(state.passes, 1, 'not rerun before the delay');
  clock.advance(100);
  await turns();
  assert.equal(state.passes, 2);
});

test('dispose during the first pass leaves no periodic timer behind; dispose of an idle trigger is safe', async () => {
  const { clock, state, trigger } = harness({ periodicMs: 1000 });
  assert.equal(trigger.isDisposed, false);
  state.hold = gate();
  const first = trigger.triggerNow();
  await turns();
  trigger.dispose();
  assert.equal(trigger.isDisposed, true);
  state.hold.open();
  await first;
  assert.equal(clock.pending, 0, 'the pass that ends after dispose arms no periodic timer');
  clock.advance(10_000);
  await turns();
  assert.equal(state.passes, 1);

  const fresh = harness({ delayMs: 10 }).trigger;
  assert.doesNotThrow(() => fresh.dispose(), 'nothing pending: nothing to cancel');
});

test('startPeriodic arms the period once, and not at all without a period', async () => {
  const periodic = harness({ periodicMs: 100 });
  periodic.trigger.startPeriodic();
  periodic.trigger.startPeriodic(); // already armed: no second timer
  assert.equal(periodic.clock.pending, 1);
  periodic.clock.advance(100);
  await turns();
  assert.equal(periodic.state.passes, 1);
  periodic.trigger.dispose();

  const none = harness();
  none.trigger.startPeriodic();
  assert.equal(none.clock.pending, 0, 'periodicMs 0: no periodic pass');
});

test('idle() waiting during a pass is not released when the pass ends with a delayed pass still pending', async () => {
  const { clock, state, trigger } = harness({ delayMs: 100 });
  state.hold = gate();
  const first = trigger.triggerNow();
  await turns();
  let idle = false;
  void trigger.idle().then(() => (idle = true));
  trigger.trigger(); // waits its delay after the running pass
  const held = state.hold;
  state.hold = undefined;
  held.open();
  await first;
  await turns();
  assert.equal(idle, false, 'the delayed pass is still pending');
  clock.advance(100);
  await turns();
  assert.equal(state.passes, 2);
  assert.equal(idle, true);
});

test('errors name the trigger: a bad argument, and the log line of a failed pass', async () => {
  assert.throws(
    () => new Trigger({ name: 'oddly-named', clock: new ManualClock(), log: silentLogger, run: () => {}, delayMs: -5 }),
    /trigger oddly-named: delayMs and periodicMs must be >= 0/,
  );
  const lines: Array<{ obj: object; msg?: string }> = [];
  const log: Logger = { ...silentLogger, error: (obj, msg) => lines.push({ obj, ...(msg ? { msg } : {}) }), child: () => log };
  const trigger = new Trigger({ name: 'named', clock: new ManualClock(), log, run: () => Promise.reject(new Error('broken')) });
  await trigger.triggerNow();
  assert.match(lines[0]?.msg ?? '', /pass failed/);
});
