/**
 * The liveness heartbeat with its thread, against real BPF maps shaped like
 * runtime_config (bpf_map_create: root): the agent thread leaves stamping to
 * the thread, and what the thread reports — a failing stamp and its recovery,
 * a late wake-up, a validity that ran out — reaches the agent thread as log
 * lines and re-checks. (liveness-survivors.test.ts: the same rules without a thread.)
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import { BpfMap } from '../../src/os/bpf-map.js';
import { libbpf } from '../../src/os/libbpf.js';
import { LivenessWriter } from '../../src/datapath/l2-responder/liveness.js';
import { CONFIG_LIVENESS_NS, CONFIG_MAX_AGE_NS, runtimeConfigCodec } from '../../src/datapath/l2-responder/layout.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { fakeConfig, testGate } from '../helpers/liveness-fakes.js';

const ns = (ms: number) => BigInt(ms) * 1_000_000n;

const skip = process.getuid?.() !== 0 ? 'needs root (BPF)' : false;
const BPF_MAP_TYPE_ARRAY = 2;
const BPF_MAP_TYPE_HASH = 1;
const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

function realMap(type: number, maxEntries: number): BpfMap<number, bigint> {
  const fd = libbpf().mapCreate(type, 'hb_surv', 4, 8, maxEntries);
  assert.ok(fd >= 0, `bpf_map_create: ${fd}`);
  const map = BpfMap.fromOwnedFd('runtime_config (test)', fd, runtimeConfigCodec);
  cleanup.push(() => map.dispose());
  return map;
}

const waitFor = async (cond: () => boolean, what: string, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

test('with a thread, the agent thread stamps only at start: its own timer leaves the stamping to the thread', { skip }, async () => {
  const map = realMap(BPF_MAP_TYPE_ARRAY, 4);
  const clock = new ManualClock();
  clock.advance(1000);
  const w = new LivenessWriter({ config: map, clock, log: silentLogger, gate: testGate().gate }, { intervalMs: 100, maxAgeMs: 400, thread: true });
  cleanup.push(() => w.dispose());
  w.start();
  assert.equal(w.threaded, true);
  assert.equal(map.lookup(CONFIG_LIVENESS_NS), ns(1000), 'the first stamp, written before the thread runs');
  assert.equal(map.lookup(CONFIG_MAX_AGE_NS), ns(400));
  await waitFor(() => map.lookup(CONFIG_LIVENESS_NS) !== ns(1000), 'the thread to stamp');
  for (let i = 0; i < 5; i++) {
    clock.advance(100);
    // The manual clock's time would be a stamp of 1.1 s, 1.2 s …; the thread writes the real monotonic clock.
    assert.ok(map.lookup(CONFIG_LIVENESS_NS)! > ns(60_000), 'stamped by the thread only');
  }
});

test('the thread reports a failing stamp (errno) and its recovery; the agent thread logs both', { skip }, async () => {
  // The thread writes into a hash map of one entry that another key fills: E2BIG until it is removed.
  const full = realMap(BPF_MAP_TYPE_HASH, 1);
  full.update(7, 1n);
  const mem = fakeConfig();
  const config = Object.assign(Object.create(null) as object, { fd: full.fd, update: mem.map.update, lookup: mem.map.lookup }) as BpfMap<number, bigint>;
  const log = recordingLogger();
  const w = new LivenessWriter({ config, clock: new ManualClock(), log, gate: testGate().gate }, { intervalMs: 50, maxAgeMs: 400, thread: true });
  cleanup.push(() => w.dispose());
  w.start();
  await waitFor(() => log.lines.some((l) => l.msg === 'writing the liveness stamp failed'), 'the failure report');
  assert.deepEqual(log.lines.find((l) => l.msg === 'writing the liveness stamp failed'), { level: 'error', msg: 'writing the liveness stamp failed', obj: { errno: 7 } });
  full.delete(7);
  await waitFor(() => log.lines.some((l) => l.msg === 'liveness stamp written again'), 'the recovery report');
  assert.deepEqual(log.lines.find((l) => l.msg === 'liveness stamp written again'), { level: 'info', msg: 'liveness stamp written again', obj: {} });
  assert.equal(log.lines.filter((l) => l.level === 'error').length, 1, 'one report per streak');
});

test('the thread held up past the limit reports a late wake-up: the agent thread warns and re-checks', { skip }, async () => {
  const map = realMap(BPF_MAP_TYPE_ARRAY, 4);
  let block = 0;
  // The stamp's clear runs under the lock the thread's tick takes: a slow one holds the thread up.
  const config = Object.assign(Object.create(null) as object, {
    fd: map.fd,
    update: (k: number, v: bigint) => {
      const end = performance.now() + block;
      while (performance.now() < end) {
        /* a slow map write */
      }
      map.update(k, v);
    },
    lookup: (k: number) => map.lookup(k),
  }) as BpfMap<number, bigint>;
  const log = recordingLogger();
  const { gate, asked } = testGate({ autoAnswer: true });
  const w = new LivenessWriter({ config, clock: new ManualClock(), log, gate }, { intervalMs: 100, maxAgeMs: 400, thread: true });
  cleanup.push(() => w.dispose());
  w.start();
  await new Promise((r) => setTimeout(r, 300));
  block = 700;
  await w.holdAndRecheck('eth0 regained carrier');
  block = 0;
  await waitFor(() => asked.some((a) => /^woke up \d+ ms late$/.test(a.why)), 'the late re-check');
  const warn = log.lines.find((l) => l.level === 'warn')!;
  assert.equal(warn.msg, 'heartbeat woke up late: re-checking ownership before answering again');
  assert.ok((warn.obj.sleptMs as number) > 400, `slept ${String(warn.obj.sleptMs)} ms`);
  assert.equal(warn.obj.limitMs, 400);
  assert.ok(w.lateWakeups >= 1);
});

test('the thread validity lapse reaches the agent thread as a re-check', { skip }, async () => {
  const map = realMap(BPF_MAP_TYPE_ARRAY, 4);
  const { gate, asked } = testGate();
  const w = new LivenessWriter({ config: map, clock: new ManualClock(), log: silentLogger, gate }, { intervalMs: 50, maxAgeMs: 400, thread: true });
  cleanup.push(() => w.dispose());
  gate.until = 1; // SleepyClock starts at 0: the first stamp is allowed, the thread's (real monotonic ms) is not
  w.start();
  await waitFor(() => asked.length > 0, 'a re-check');
  assert.deepEqual(asked.map((a) => a.why), ['our lease validity ran out before it was renewed']);
});
