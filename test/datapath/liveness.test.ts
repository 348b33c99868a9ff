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
