/**
 * The liveness heartbeat's rules, case by case (written against the mutation
 * run's survivors): option checks, what start() writes, when `answering` is
 * true (the same test as the program's agent_alive()), late wake-ups, lapsed
 * validities, failed stamps and their log lines, re-checks that fail or
 * overlap, holds while links are dark, dispose, livenessAge, a thread that
 * cannot start — on a manual clock with an in-memory runtime_config
 * (liveness-thread-survivors.test.ts: with the thread, on real maps).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import type { BpfMap } from '../../src/os/bpf-map.js';
import { LOCAL_STORE_LIVENESS_MAX_AGE_MS, LivenessWriter, livenessAge, livenessDefaults } from '../../src/datapath/l2-responder/liveness.js';
import { CONFIG_LIVENESS_NS, CONFIG_MAX_AGE_NS } from '../../src/datapath/l2-responder/layout.js';
import type { LivenessGate } from '../../src/controlplane/ownership/edges.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { fakeConfig, settled, testGate } from '../helpers/liveness-fakes.js';

const ns = (ms: number) => BigInt(ms) * 1_000_000n;

/** A writer at t = 1 s, stamping every 200 ms with an 800 ms limit, on this thread. */
function started(opts: { gate?: LivenessGate; noGate?: boolean } = {}) {
  const clock = new ManualClock();
  clock.advance(1000);
  const cfg = fakeConfig();
  const log = recordingLogger();
  const g = testGate({ autoAnswer: true });
  const gate = opts.gate ?? g.gate;
  const w = new LivenessWriter({ config: cfg.map, clock, log, ...(opts.noGate ? {} : { gate }) }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  return { clock, ...cfg, log, w, asked: g.asked };
}

test('the options: interval and limit must be positive and the interval shorter than the limit', () => {
  const make = (intervalMs: number, maxAgeMs: number) =>
    new LivenessWriter({ config: fakeConfig().map, clock: new ManualClock(), log: silentLogger }, { intervalMs, maxAgeMs });
  for (const [i, m] of [[0, 800], [-1, 800], [200, 0], [200, -5]] as const) {
    assert.throws(() => make(i, m), { message: 'liveness interval and max age must be > 0' }, `${i}/${m}`);
  }
  assert.throws(() => make(800, 800), { message: 'liveness interval (800 ms) must be shorter than its limit (800 ms)' });
  assert.throws(() => make(900, 800), { message: 'liveness interval (900 ms) must be shorter than its limit (800 ms)' });
  assert.doesNotThrow(() => make(1, 2));
  assert.deepEqual(livenessDefaults, { intervalMs: 200, maxAgeMs: 800, thread: true });
  assert.equal(LOCAL_STORE_LIVENESS_MAX_AGE_MS, 3000);
});

test('start() writes the limit in ns and a first stamp; without a gate the heartbeat runs unbounded', () => {
  const { m, clock, w } = started({ noGate: true });
  assert.equal(m.get(CONFIG_MAX_AGE_NS), ns(800));
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1000));
  assert.equal(w.threaded, false, 'no thread unless asked for');
  clock.advance(10_000);
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(11_000), 'stamping on, with no validity to run out');
  assert.equal(w.answering, true);
  w.dispose();
});

test('answering mirrors the program: a stamp exactly the limit old still answers, one ms more does not', () => {
  const { m, ctl, clock, w, log } = started();
  clock.advance(200);
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1200));
  ctl.fail = true; // every stamp from now on fails; nothing holds the heartbeat
  clock.advance(800);
  assert.equal(w.answering, true, `stamp ${800} ms old = the limit: agent_alive() still answers`);
  clock.advance(1);
  assert.equal(w.answering, false, 'older than the limit: silent');
  assert.equal(w.held, 0, 'nothing held it back: the stamps failed');
  assert.equal(w.failures, 4);
  // One error line per streak, debug lines for the rest; one info line when a stamp lands again.
  assert.deepEqual(log.lines.map((l) => `${l.level} ${l.msg}`), ['error writing the liveness stamp failed', 'debug writing the liveness stamp failed', 'debug writing the liveness stamp failed', 'debug writing the liveness stamp failed']);
  assert.ok(log.lines.every((l) => l.obj.err === 'EPERM'), 'each line says why');
  ctl.fail = false;
  clock.advance(199);
  assert.equal(w.answering, true);
  assert.deepEqual(log.lines.at(-1), { level: 'info', msg: 'liveness stamp written again', obj: { failedTicks: 4 } });
  clock.advance(2000);
  assert.equal(log.lines.length, 5, 'healthy stamps log nothing');
  // A second streak starts its own count.
  ctl.fail = true;
  clock.advance(400);
  ctl.fail = false;
  clock.advance(200);
  assert.equal(log.lines.at(-3)?.level, 'error');
  assert.deepEqual(log.lines.at(-1), { level: 'info', msg: 'liveness stamp written again', obj: { failedTicks: 2 } });
  // A streak interrupted by a hold: held ticks are not a recovery.
  ctl.fail = true;
  clock.advance(200);
  w.holdWhileLinksDown();
  const n = log.lines.length;
  clock.advance(1000);
  assert.equal(log.lines.slice(n).filter((l) => l.msg === 'liveness stamp written again').length, 0, 'no recovery while held');
  w.dispose();
});

test('a validity that ran out: silent at exactly its end, one re-check per validity, answering again after it only within a new validity', async () => {
  const clock = new ManualClock();
  clock.advance(1000);
  const { map, m } = fakeConfig();
  const { gate, asked } = testGate({ autoAnswer: true });
  const w = new LivenessWriter({ config: map, clock, log: silentLogger, gate }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  clock.advance(200);
  gate.until = 1400;
  clock.advance(200); // the tick at 1400 finds the validity ended
  assert.deepEqual(asked.map((a) => a.why), ['our lease validity ran out before it was renewed']);
  await settled();
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1200), 'no stamp at or after the end of the validity');
  assert.equal(w.answering, false, 'now = the end of the validity: silent (a stamp 200 ms old does not matter)');
  clock.advance(400);
  assert.equal(asked.length, 1, 'the same validity: no second re-check');
  gate.until = 5000; // renewed
  clock.advance(200);
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(2000));
  assert.equal(w.answering, true);
  w.dispose();
});

test('a late wake-up (the process was stopped): no stamp, a re-check that says how late, stamps again once answered', async () => {
  const { clock, m, w, log, asked } = started();
  clock.advance(200);
  clock.sleep(1300); // stopped: the 1400 tick runs at 2500
  clock.advance(0);
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1200), 'the late tick writes nothing');
  assert.equal(w.lateWakeups, 1);
  assert.deepEqual(asked.map((a) => a.why), ['woke up 1300 ms late']);
  assert.deepEqual(log.lines[0], {
    level: 'warn',
    msg: 'heartbeat woke up late: re-checking ownership before answering again',
    obj: { sleptMs: 1300, limitMs: 800 },
  });
  await settled();
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(2500), 'stamped as soon as the re-check answered');
  assert.equal(w.answering, true);
  w.dispose();
});

test('one re-check at a time: a late wake-up while a re-check is in flight joins it', async () => {
  const clock = new ManualClock();
  clock.advance(1000);
  const { map, m } = fakeConfig();
  const { gate, asked } = testGate();
  const w = new LivenessWriter({ config: map, clock, log: silentLogger, gate }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  gate.until = 1200;
  clock.advance(200); // lapsed: a re-check, unanswered
  assert.equal(asked.length, 1);
  gate.until = Infinity;
  clock.sleep(1000);
  clock.advance(0); // late, while the first re-check is still out
  assert.equal(w.lateWakeups, 1);
  assert.equal(asked.length, 1, 'no second question to the store');
  asked[0]!.done();
  await settled();
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(2200));
  w.dispose();
});

test('a re-check that fails is logged and the gate decides: the hold is released', async () => {
  const clock = new ManualClock();
  clock.advance(1000);
  const { map, m } = fakeConfig();
  const log = recordingLogger();
  const { gate, asked } = testGate({ reject: true });
  const w = new LivenessWriter({ config: map, clock, log, gate }, { intervalMs: 200, maxAgeMs: 800 });
  w.start();
  await w.holdAndRecheck('eth0 regained carrier');
  assert.deepEqual(asked.map((a) => a.why), ['eth0 regained carrier']);
  assert.deepEqual(log.lines.find((l) => l.level === 'warn'), { level: 'warn', msg: 'ownership re-check failed; the gate decides', obj: { err: 'store unreachable' } });
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1000), 'stamped again at once');
  assert.equal(w.answering, true);
  w.dispose();
});

test('recheck() asks the gate without falling silent', async () => {
  const { w, asked, m } = started();
  await w.recheck('a foreign MAC claims 192.0.2.10');
  assert.deepEqual(asked.map((a) => a.why), ['a foreign MAC claims 192.0.2.10']);
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1000));
  assert.equal(w.answering, true);
  w.dispose();
});

test('links dark: one hold and one warning however often it is reported; a failed clear is logged and still holds', () => {
  const { w, log, m } = started();
  w.holdWhileLinksDown();
  w.holdWhileLinksDown();
  assert.deepEqual(log.lines.map((l) => `${l.level} ${l.msg}`), ['warn every served link lost carrier: silent until one regains it and ownership is re-checked']);
  assert.equal(w.held, 1);
  assert.equal(m.get(CONFIG_LIVENESS_NS), 0n);
  w.dispose();

  const s = started();
  s.ctl.fail = true;
  s.w.holdWhileLinksDown();
  assert.deepEqual(s.log.lines[0], { level: 'warn', msg: 'clearing the liveness stamp failed', obj: { err: 'EPERM' } });
  assert.equal(s.w.linksDark, true);
  assert.equal(s.w.answering, false, 'held, though the stamp could not be cleared');
  s.ctl.fail = false;
  s.clock.advance(1000);
  assert.equal(s.m.get(CONFIG_LIVENESS_NS), ns(1000), 'no stamp while held');
  s.w.dispose();
});

test('silence(): one hold in the counters; a failed clear is logged', () => {
  const { w } = started();
  assert.equal(w.silence(), true);
  assert.equal(w.held, 1, 'silence is one hold (dispose after it adds none)');
  const s = started();
  s.ctl.fail = true;
  assert.equal(s.w.silence(), false);
  assert.deepEqual(s.log.lines.at(-1), { level: 'warn', msg: 'clearing the liveness stamp failed', obj: { err: 'EPERM' } });
  assert.equal(s.w.answering, false, 'stopped all the same: nothing stamps again');
});

test('dispose: stops answering at once, touches neither map nor store afterwards, and is safe before start', async () => {
  const { w, m, ctl, clock, asked } = started();
  const writes = ctl.writes;
  w.dispose();
  assert.equal(w.answering, false, 'a disposed heartbeat does not answer, though its stamp is fresh');
  assert.equal(m.get(CONFIG_LIVENESS_NS), ns(1000), 'the stamp is left to go stale by itself');
  await w.holdAndRecheck('eth0 regained carrier');
  w.holdWhileLinksDown();
  clock.advance(5000);
  assert.equal(ctl.writes, writes, 'no write after dispose');
  assert.equal(asked.length, 0, 'no re-check after dispose');
  assert.equal(w.linksDark, false);
  assert.equal(clock.pending, 0);
  w.dispose();
  assert.equal(w.held, 1, 'a second dispose holds nothing more');

  const never = new LivenessWriter({ config: fakeConfig().map, clock: new ManualClock(), log: silentLogger }, { intervalMs: 200, maxAgeMs: 800 });
  assert.doesNotThrow(() => never.dispose());
});

test('livenessAge: the stamp age and the limit in ms; no age for a stamp never written or cleared', () => {
  const { map, m } = fakeConfig();
  assert.deepEqual(livenessAge(map, ns(5000)), { maxAgeMs: 0 });
  m.set(CONFIG_MAX_AGE_NS, ns(800));
  m.set(CONFIG_LIVENESS_NS, 0n);
  assert.deepEqual(livenessAge(map, ns(5000)), { maxAgeMs: 800 });
  m.set(CONFIG_LIVENESS_NS, ns(4750));
  assert.deepEqual(livenessAge(map, ns(5000)), { ageMs: 250, maxAgeMs: 800 });
});

test('a heartbeat thread that cannot start is logged, and the agent thread stamps instead', () => {
  const clock = new ManualClock();
  clock.advance(1000);
  const cfg = fakeConfig();
  // A descriptor the thread cannot be given (not cloneable): the Worker refuses to start.
  const config = Object.assign(Object.create(null) as object, { fd: Symbol('fd'), update: cfg.map.update, lookup: cfg.map.lookup }) as unknown as BpfMap<number, bigint>;
  const log = recordingLogger();
  const w = new LivenessWriter({ config, clock, log, gate: testGate().gate }, { intervalMs: 200, maxAgeMs: 800, thread: true });
  w.start();
  assert.equal(w.threaded, false);
  assert.equal(log.lines[0]?.level, 'error');
  assert.equal(log.lines[0]?.msg, 'the heartbeat thread could not start: stamping from the agent thread');
  assert.equal(typeof log.lines[0]?.obj.err, 'string');
  clock.advance(200);
  assert.equal(cfg.m.get(CONFIG_LIVENESS_NS), ns(1200), 'stamped by the agent thread');
  w.dispose();
});
