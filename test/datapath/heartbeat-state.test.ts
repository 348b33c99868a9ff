/**
 * The heartbeat's shared state and its one tick (HeartbeatState), as both
 * threads run it: what each tick decides and counts, what a stamp needs,
 * holds and stops, and that two views of one buffer see the same state.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HeartbeatState } from '../../src/datapath/l2-responder/heartbeat-state.js';

const MAX_AGE = 800;

function fresh(answerUntilMs = Infinity) {
  const s = new HeartbeatState();
  s.answerUntilMs = answerUntilMs;
  const writes: number[] = [];
  const write = (at: number) => () => void writes.push(at);
  return { s, writes, write };
}

test('a fresh state: nothing held, no stamp, no validity, zero counters; 48 bytes shared', () => {
  assert.equal(HeartbeatState.BYTES, 48);
  const s = new HeartbeatState();
  assert.equal(s.buffer.byteLength, 48);
  assert.equal(s.answerUntilMs, 0, 'may not answer until told');
  assert.equal(s.lastStampMs, 0);
  assert.deepEqual([s.held, s.stopped, s.rechecking], [false, false, false]);
  assert.deepEqual(s.counters, { lateWakeups: 0, held: 0, failures: 0, lapses: 0 });
});

test('tick: stamps within the validity and records when', () => {
  const { s, writes, write } = fresh(5000);
  assert.equal(s.tick(1000, 200, MAX_AGE, write(1000)), 'stamped');
  assert.equal(s.lastStampMs, 1000);
  assert.deepEqual(writes, [1000]);
  assert.equal(s.tick(1800, MAX_AGE, MAX_AGE, write(1800)), 'stamped', 'a tick exactly the limit after the last one is on time');
  assert.deepEqual(s.counters, { lateWakeups: 0, held: 0, failures: 0, lapses: 0 });
});

test('tick: later than the limit is late — no stamp, counted as late and held, recheck raised — and stays held until cleared', () => {
  const { s, writes, write } = fresh();
  assert.equal(s.tick(1000, MAX_AGE + 1, MAX_AGE, write(1000)), 'late');
  assert.deepEqual(writes, []);
  assert.equal(s.rechecking, true);
  assert.deepEqual(s.counters, { lateWakeups: 1, held: 1, failures: 0, lapses: 0 });
  assert.equal(s.tick(1200, 200, MAX_AGE, write(1200)), 'held', 'rechecking');
  assert.deepEqual(s.counters, { lateWakeups: 1, held: 2, failures: 0, lapses: 0 });
  s.clearRecheck();
  assert.equal(s.rechecking, false);
  assert.equal(s.tick(1400, 200, MAX_AGE, write(1400)), 'stamped');
  assert.deepEqual(writes, [1400]);
});

test('tick: a hold keeps it from stamping (counted) until released; late still wins over a hold', () => {
  const { s, writes, write } = fresh();
  let cleared = 0;
  s.hold({}, () => cleared++);
  assert.equal(cleared, 1, 'the clear runs inside the hold');
  assert.deepEqual([s.held, s.stopped], [true, false]);
  assert.equal(s.counters.held, 1);
  assert.equal(s.tick(1000, 200, MAX_AGE, write(1000)), 'held');
  assert.equal(s.counters.held, 2);
  assert.equal(s.tick(2000, 1000, MAX_AGE, write(2000)), 'late');
  s.clearRecheck();
  s.releaseHold();
  assert.equal(s.held, false);
  assert.equal(s.tick(2200, 200, MAX_AGE, write(2200)), 'stamped');
  assert.deepEqual(writes, [2200]);
  s.countHeld();
  assert.equal(s.counters.held, 4, "the hold, the held tick, the late tick, countHeld");
});

test('tick: a stop is final and comes first, even before a late tick; stampIfAllowed refuses too', () => {
  const { s, writes, write } = fresh();
  s.hold({ stop: true }, () => {});
  assert.deepEqual([s.held, s.stopped], [true, true]);
  assert.equal(s.tick(1000, 5000, MAX_AGE, write(1000)), 'stopped');
  assert.deepEqual(s.counters, { lateWakeups: 0, held: 1, failures: 0, lapses: 0 }, 'nothing counted');
  s.releaseHold();
  assert.equal(s.tick(1200, 200, MAX_AGE, write(1200)), 'stopped');
  assert.equal(s.stampIfAllowed(1200, write(1200)), false);
  assert.deepEqual(writes, []);
});

test('tick: a validity that ran out lapses once (recheck raised, counted); a validity of 0 is held without a recheck', () => {
  const { s, writes, write } = fresh(1000);
  assert.equal(s.tick(999, 200, MAX_AGE, write(999)), 'stamped');
  assert.equal(s.tick(1000, 200, MAX_AGE, write(1000)), 'lapsed', 'at the end of the validity');
  assert.equal(s.rechecking, true);
  assert.deepEqual(s.counters, { lateWakeups: 0, held: 1, failures: 0, lapses: 1 });
  s.clearRecheck();
  assert.equal(s.tick(1200, 200, MAX_AGE, write(1200)), 'held', 'the same validity: no second lapse');
  assert.equal(s.rechecking, false);
  assert.deepEqual(s.counters, { lateWakeups: 0, held: 2, failures: 0, lapses: 1 });
  s.answerUntilMs = 1300;
  assert.equal(s.tick(1400, 200, MAX_AGE, write(1400)), 'lapsed', 'a new validity that ran out: lapses again');
  assert.equal(s.counters.lapses, 2);
  s.clearRecheck();
  s.answerUntilMs = 0; // the agent says: do not answer
  assert.equal(s.tick(1600, 200, MAX_AGE, write(1600)), 'held');
  assert.equal(s.rechecking, false, 'not a lapse: nothing to re-check');
  assert.equal(s.counters.lapses, 2);
  assert.deepEqual(writes, [999]);
});

test('tick: a write that throws is a failure, counted, with its error kept; the stamp time is not moved', () => {
  const { s } = fresh();
  const boom = new Error('EPERM');
  assert.equal(s.tick(1000, 200, MAX_AGE, () => { throw boom; }), 'failed');
  assert.equal(s.lastError, boom);
  assert.equal(s.lastStampMs, 0);
  assert.deepEqual(s.counters, { lateWakeups: 0, held: 0, failures: 1, lapses: 0 });
  assert.equal(s.tick(1200, 200, MAX_AGE, () => {}), 'stamped');
  assert.equal(s.counters.failures, 1);
});

test('stampIfAllowed: only when not held, not stopped, not re-checking and within the validity', () => {
  const { s, writes, write } = fresh(1000);
  assert.equal(s.stampIfAllowed(1000, write(1000)), false, 'at the end of the validity');
  assert.equal(s.stampIfAllowed(999, write(999)), true);
  assert.equal(s.lastStampMs, 999);
  s.tick(2000, 2000, MAX_AGE, () => {}); // late: recheck raised
  assert.equal(s.stampIfAllowed(500, write(500)), false, 're-checking');
  s.clearRecheck();
  s.hold({}, () => {});
  assert.equal(s.stampIfAllowed(500, write(500)), false, 'held');
  s.releaseHold();
  assert.equal(s.stampIfAllowed(500, write(500)), true);
  assert.deepEqual(writes, [999, 500]);
});

test('two views of one buffer (the agent thread and the heartbeat thread) share every field', () => {
  const a = new HeartbeatState();
  const b = new HeartbeatState(a.buffer);
  a.answerUntilMs = 4242;
  assert.equal(b.answerUntilMs, 4242);
  b.tick(100, 10, MAX_AGE, () => {});
  assert.equal(a.lastStampMs, 100);
  a.hold({ stop: true }, () => {});
  assert.deepEqual([b.held, b.stopped], [true, true]);
  assert.equal(b.counters.held, 1);
  b.releaseHold();
  assert.equal(a.held, false);
});

test('the lock is released after a write that throws: the next call does not wait', () => {
  const s = new HeartbeatState();
  s.answerUntilMs = Infinity;
  assert.throws(() => s.hold({}, () => { throw new Error('EPERM'); }));
  const t0 = performance.now();
  assert.equal(s.stampIfAllowed(1, () => {}), false, 'still held: the hold was set before the clear failed');
  s.releaseHold();
  assert.equal(s.stampIfAllowed(1, () => {}), true);
  assert.ok(performance.now() - t0 < 50, 'no wait on a lock left taken');
});
