/**
 * The heartbeat thread's end as the agent thread learns of it: a thread that
 * fails, or ends by itself (its state stopped), is reported once, with why;
 * one terminated on purpose is not reported. The map is never written here
 * (the state forbids it or the thread fails first): no root needed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HeartbeatState } from '../../src/datapath/l2-responder/heartbeat-state.js';
import { startHeartbeatThread } from '../../src/datapath/l2-responder/heartbeat-thread.js';
import type { HeartbeatMessage } from '../../src/datapath/l2-responder/heartbeat-worker.js';

function start(state: HeartbeatState) {
  const exits: string[] = [];
  const messages: HeartbeatMessage[] = [];
  let ended: () => void = () => {};
  const done = new Promise<void>((r) => (ended = r));
  const thread = startHeartbeatThread({
    state,
    mapFd: -1,
    key: 0,
    intervalMs: 20,
    maxAgeMs: 10_000,
    onMessage: (m) => messages.push(m),
    onExit: (why) => {
      exits.push(why);
      ended();
    },
  });
  return { thread, exits, messages, done };
}

/** Waits for `p` (the thread is unref'd: this timer keeps the test alive meanwhile). */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

test('a thread that fails is reported once, with its error', async () => {
  // A shared buffer too small for the state: the thread throws while starting.
  const t = start({ buffer: new SharedArrayBuffer(8) } as HeartbeatState);
  await within(t.done, 20_000, 'the failure');
  await new Promise((r) => setTimeout(r, 200)); // the exit that follows the error
  assert.equal(t.exits.length, 1, `one report: ${JSON.stringify(t.exits)}`);
  assert.match(t.exits[0]!, /^heartbeat thread failed: .+/);
});

test('a thread whose state is stopped ends by itself (exit code 0), reported once; nothing was posted', async () => {
  const state = new HeartbeatState();
  state.hold({ stop: true }, () => {});
  const t = start(state);
  await within(t.done, 20_000, 'the exit');
  assert.deepEqual(t.exits, ['heartbeat thread exited (code 0)']);
  assert.deepEqual(t.messages, []);
});

test('a thread terminated on purpose is not reported as ended', async () => {
  const state = new HeartbeatState();
  state.answerUntilMs = 0; // held: it ticks and writes nothing
  const t = start(state);
  await new Promise((r) => setTimeout(r, 1500)); // running (booting tsx in the thread takes a moment)
  await t.thread.terminate();
  const held = state.counters.held;
  assert.ok(held > 0, 'it was ticking');
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(t.exits, []);
  assert.equal(state.counters.held, held, 'and ticks no more');
});
