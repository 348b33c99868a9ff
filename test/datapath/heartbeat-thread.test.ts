/**
 * The datapath heartbeat on a thread of its own, against a real BPF array map
 * laid out as runtime_config (root): it keeps the stamp fresh while the
 * agent's thread is blocked (the churn flake: a busy agent thread silenced a
 * healthy owner and a candidate fenced it), it stops at the lease validity
 * the agent thread published and waits for a re-check before stamping again,
 * and silence() is final whatever the thread was doing.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { systemClock, monotonicMs } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { BpfMap } from '../../src/os/bpf-map.js';
import { libbpf } from '../../src/os/libbpf.js';
import { LivenessWriter } from '../../src/datapath/l2-responder/liveness.js';
import { CONFIG_LIVENESS_NS, runtimeConfigCodec } from '../../src/datapath/l2-responder/layout.js';
import type { LivenessGate } from '../../src/controlplane/ownership/edges.js';

const BPF_MAP_TYPE_ARRAY = 2;
const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

function configMap(): BpfMap<number, bigint> {
  const fd = libbpf().mapCreate(BPF_MAP_TYPE_ARRAY, 'hb_test', 4, 8, 4);
  assert.ok(fd >= 0, `bpf_map_create: ${fd}`);
  const map = BpfMap.fromOwnedFd('runtime_config (test)', fd, runtimeConfigCodec);
  cleanup.push(() => map.dispose());
  return map;
}

/** Age of the stamp now, ms (Infinity: cleared). */
function stampAgeMs(map: BpfMap<number, bigint>): number {
  const stamp = map.lookup(CONFIG_LIVENESS_NS) ?? 0n;
  return stamp === 0n ? Infinity : Number(process.hrtime.bigint() - stamp) / 1e6;
}

/** Blocks this thread for `ms`, sampling the stamp's age every 20 ms; the oldest seen. */
function blockAndSample(map: BpfMap<number, bigint>, ms: number): number {
  const end = performance.now() + ms;
  let next = performance.now();
  let worst = 0;
  while (performance.now() < end) {
    if (performance.now() >= next) {
      worst = Math.max(worst, stampAgeMs(map));
      next += 20;
    }
  }
  return worst;
}

const waitUntil = async (cond: () => boolean, what: string, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

function writer(map: BpfMap<number, bigint>, gate: LivenessGate, thread: boolean): LivenessWriter {
  const w = new LivenessWriter({ config: map, clock: systemClock, log: silentLogger, gate }, { intervalMs: 100, maxAgeMs: 400, thread });
  cleanup.push(() => w.dispose());
  w.start();
  return w;
}

const open: LivenessGate = { answerUntilMs: () => Infinity, recheck: async () => {} };

test('with its own thread the stamp stays fresh while the agent thread is blocked for 1.5 s; without it, it goes stale', async () => {
  const map = configMap();
  const w = writer(map, open, true);
  await waitUntil(() => w.threaded && stampAgeMs(map) < 50, 'the thread to stamp');
  await new Promise((r) => setTimeout(r, 300)); // the thread is running its timer
  const worstThreaded = blockAndSample(map, 1500);
  assert.ok(worstThreaded <= 400, `stamp at most the limit old while blocked (worst ${worstThreaded.toFixed(0)} ms)`);
  assert.equal(w.lateWakeups, 0, 'the thread never woke late');
  w.dispose();

  const map2 = configMap();
  const w2 = writer(map2, open, false);
  await new Promise((r) => setTimeout(r, 300));
  const worstInline = blockAndSample(map2, 1500);
  assert.ok(worstInline > 1000, `the agent-thread heartbeat goes stale while blocked (worst ${worstInline.toFixed(0)} ms)`);
  w2.dispose();
});

test('stamps stop at the validity the agent thread published, and resume only after a re-check', async () => {
  const map = configMap();
  let until = monotonicMs(systemClock) + 500;
  let rechecks = 0;
  let finishRecheck: () => void = () => {};
  const gate: LivenessGate = {
    answerUntilMs: () => until,
    recheck: () => {
      rechecks++;
      return new Promise<void>((resolve) => (finishRecheck = resolve));
    },
  };
  const w = writer(map, gate, true);
  await waitUntil(() => rechecks === 1, 'a re-check once the validity ran out', 3000);
  const frozenAt = map.lookup(CONFIG_LIVENESS_NS);
  // The validity is extended meanwhile (a keep-alive that was in flight): still no stamp until the re-check answers.
  until = monotonicMs(systemClock) + 60_000;
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(map.lookup(CONFIG_LIVENESS_NS), frozenAt, 'no stamp while the re-check is pending');
  assert.equal(w.answering, false);
  finishRecheck();
  await waitUntil(() => stampAgeMs(map) < 150, 'stamps again after the re-check');
  assert.equal(w.answering, true);
  assert.equal(rechecks, 1, 'one re-check per validity that ran out');
});

test('silence() clears the stamp and the thread never writes it again', async () => {
  const map = configMap();
  const w = writer(map, open, true);
  await waitUntil(() => stampAgeMs(map) < 50, 'the thread to stamp');
  await new Promise((r) => setTimeout(r, 250));
  assert.equal(w.silence(), true);
  assert.equal(map.lookup(CONFIG_LIVENESS_NS), 0n, 'silent in the same call');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(map.lookup(CONFIG_LIVENESS_NS), 0n, 'no stamp after silence()');
});
