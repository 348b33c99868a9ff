/**
 * The liveness heartbeat's stop path: silence() clears the stamp in one map
 * write and nothing stamps it again, whatever the gate says — a stopping
 * agent relies on it to hand its IPs over before its tables are withdrawn.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import type { BpfMap } from '../../src/os/bpf-map.js';
import { LivenessWriter } from '../../src/datapath/l2-responder/liveness.js';
import { CONFIG_LIVENESS_NS } from '../../src/datapath/l2-responder/layout.js';
import { ManualClock } from '../helpers/manual-clock.js';

function fakeConfig(opts: { failWrites?: () => boolean } = {}) {
  const m = new Map<number, bigint>();
  const map = {
    update(k: number, v: bigint) {
      if (opts.failWrites?.()) throw new Error('EPERM');
      m.set(k, v);
    },
    lookup: (k: number) => m.get(k),
  } as unknown as BpfMap<number, bigint>;
  return { map, m };
}

const openGate = { answerUntilMs: () => Infinity, recheck: async () => {} };

test('silence() clears the stamp at once and the heartbeat never writes it again', () => {
  const clock = new ManualClock();
  clock.advance(1000);
  const { map, m } = fakeConfig();
  const w = new LivenessWriter({ config: map, clock, log: silentLogger, gate: openGate }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  assert.equal(m.get(CONFIG_LIVENESS_NS), 1000n * 1_000_000n);
  clock.advance(400);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 1400n * 1_000_000n, 'stamping every 200 ms');
  assert.equal(w.silence(), true);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'silent in the same call');
  assert.equal(w.answering, false);
  clock.advance(10_000);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'no tick stamps again, though the gate is open');
  assert.equal(clock.pending, 0, 'no timer left');
});

test('silence() reports false when the stamp cannot be cleared, so the caller withdraws the slow way', () => {
  const clock = new ManualClock();
  clock.advance(1000);
  let fail = false;
  const { map, m } = fakeConfig({ failWrites: () => fail });
  const w = new LivenessWriter({ config: map, clock, log: silentLogger, gate: openGate }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  fail = true;
  assert.equal(w.silence(), false);
  assert.notEqual(m.get(CONFIG_LIVENESS_NS), 0n);
});

/** A gate whose re-checks the test answers one by one. */
function manualGate() {
  const pending: Array<{ why: string; done: () => void }> = [];
  return {
    pending,
    gate: {
      answerUntilMs: () => Infinity,
      recheck: (why: string) => new Promise<void>((done) => pending.push({ why, done })),
    },
  };
}
const settled = () => new Promise((r) => setImmediate(r));

/** A started writer (200 ms stamps, 800 ms limit) at t = 1 s, its gate's re-checks answered by the test. */
function startedWithManualGate() {
  const clock = new ManualClock();
  clock.advance(1000);
  const { map, m } = fakeConfig();
  const { gate, pending } = manualGate();
  const w = new LivenessWriter({ config: map, clock, log: silentLogger, gate }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  return { clock, m, pending, w };
}

test('every served link dark: silent at once and through any re-check, until a link is back and a re-check begun after that answers', async () => {
  const { clock, m, pending, w } = startedWithManualGate();
  assert.equal(w.linksDark, false);
  w.holdWhileLinksDown();
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'silent in the same call');
  assert.equal(w.linksDark, true, 'status says why it is silent');
  clock.advance(2000);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'no tick stamps while the links are dark (the lease is still valid)');
  assert.equal(w.answering, false);
  // A store answer while still dark (a re-check for another reason) does not end the silence.
  const other = w.recheck('a foreign MAC claims an IP');
  void other;
  // The port comes back: a fresh re-check; only its answer releases the hold.
  const back = w.holdAndRecheck('eth0 regained carrier');
  assert.equal(w.linksDark, false);
  assert.equal(pending.at(-1)?.why, 'eth0 regained carrier');
  clock.advance(400);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'still silent while the store has not answered');
  pending.at(-1)!.done();
  await back;
  assert.ok(m.get(CONFIG_LIVENESS_NS)! > 0n, 'answering again once re-checked');
  assert.equal(w.answering, true);
  w.dispose();
});

test('a re-check in flight when a link regains carrier does not release the new hold: a fresh one is asked after it (hold generations)', async () => {
  const { m, pending, w } = startedWithManualGate();
  // A late wake-up's re-check is in flight (begun before the link came back: its answer may predate a fence).
  const first = w.holdAndRecheck('woke up late');
  assert.equal(pending.length, 1);
  const second = w.holdAndRecheck('eth0 regained carrier');
  assert.equal(pending.length, 1, 'one re-check at a time');
  pending[0]!.done();
  await first;
  await settled();
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'the older re-check did not release the newer hold');
  assert.equal(pending.length, 2, 'a fresh re-check was asked');
  assert.equal(pending[1]!.why, 'eth0 regained carrier');
  pending[1]!.done();
  await second;
  assert.ok(m.get(CONFIG_LIVENESS_NS)! > 0n);
  w.dispose();
});

test('dark links: a late wake-up re-check meanwhile leaves the node silent', async () => {
  const { clock, m, pending, w } = startedWithManualGate();
  const late = w.holdAndRecheck('woke up late');
  w.holdWhileLinksDown();
  pending[0]!.done();
  await late;
  await settled();
  clock.advance(1000);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n, 'silent while the links are dark');
  w.dispose();
});
