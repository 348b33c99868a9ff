/**
 * The job registry of the composition root (src/core/jobs.ts): start in
 * order, stop in reverse, once, within a deadline; health by name.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { Jobs, type HealthReporter } from '../../src/core/jobs.js';
import { silentLogger } from '../../src/core/logger.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

const turns = async (n = 5): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
};

test('jobs start in the order added and stop in reverse', async () => {
  const clock = new ManualClock();
  const jobs = new Jobs({ clock, log: silentLogger });
  const events: string[] = [];
  jobs.hook('a', { start: () => void events.push('start a'), stop: () => void events.push('stop a') });
  jobs.hook('b', { start: async () => void events.push('start b'), stop: async () => void events.push('stop b') });
  jobs.oneShot('c', async (signal) => {
    events.push('start c');
    await new Promise<void>((r) => signal.addEventListener('abort', () => r()));
    events.push('stop c');
  });
  await jobs.start();
  assert.deepEqual(events, ['start a', 'start b', 'start c']);
  await jobs.stop();
  assert.deepEqual(events.slice(3), ['stop c', 'stop b', 'stop a']);
  assert.deepEqual([...jobs.health().values()].map((h) => [h.level, h.message]), [
    ['stopped', 'stopped'],
    ['stopped', 'stopped'],
    ['stopped', 'stopped'],
  ]);
});

test('stop is idempotent: every stop runs once, later calls return the same promise', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  let stops = 0;
  jobs.hook('x', { stop: () => void stops++ });
  await jobs.start();
  const p1 = jobs.stop();
  const p2 = jobs.stop();
  jobs.dispose();
  assert.equal(p1, p2);
  await p1;
  assert.equal(stops, 1);
  assert.throws(() => jobs.hook('late', {}), (e: unknown) => isHeraldError(e, 'HERALD_STOPPED'));
  await assert.rejects(jobs.start(), (e: unknown) => isHeraldError(e, 'HERALD_STOPPED'));
});

test('synchronous stops run within dispose() itself (the agent exits right after)', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  const stopped: string[] = [];
  jobs.hook('first', { stop: () => void stopped.push('first') });
  jobs.hook('second', { stop: () => void stopped.push('second') });
  await jobs.start();
  jobs.dispose();
  assert.deepEqual(stopped, ['second', 'first']);
});

test('a stop that hangs past the deadline is abandoned, reported failed, and the others still stop', async () => {
  const clock = new ManualClock();
  const jobs = new Jobs({ clock, log: silentLogger, stopDeadlineMs: 1000 });
  const stopped: string[] = [];
  jobs.hook('first', { stop: () => void stopped.push('first') });
  jobs.hook('stuck', { stop: () => new Promise<void>(() => {}) });
  jobs.hook('last', { stop: async () => void stopped.push('last') });
  await jobs.start();
  let done = false;
  const stopping = jobs.stop().then(() => (done = true));
  await turns();
  assert.equal(done, false, 'waits for the stuck stop until the deadline');
  assert.deepEqual(stopped, ['last']);
  clock.advance(1000);
  await stopping;
  assert.deepEqual(stopped, ['last', 'first']);
  const stuck = jobs.health().get('stuck')!;
  assert.equal(stuck.level, 'failed');
  assert.match(stuck.message, /did not stop within 1000 ms/);
  assert.equal(jobs.health().get('first')!.level, 'stopped');
  assert.equal(clock.pending, 0);
});

test('a failed start stops what that start() had started, in reverse, and throws', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  const events: string[] = [];
  jobs.hook('a', { start: () => void events.push('start a'), stop: () => void events.push('stop a') });
  jobs.hook('b', { start: () => void events.push('start b'), stop: () => void events.push('stop b') });
  jobs.hook('bad', { start: () => Promise.reject(new Error('port in use')), stop: () => void events.push('stop bad') });
  jobs.hook('never', { start: () => void events.push('start never') });
  await assert.rejects(jobs.start(), /^Error: port in use$/);
  assert.deepEqual(events, ['start a', 'start b', 'stop b', 'stop a']);
  assert.equal(jobs.health().get('bad')!.level, 'failed');
  await jobs.stop();
  assert.deepEqual(events, ['start a', 'start b', 'stop b', 'stop a'], 'nothing stopped twice');
});

test('start() can be called again for jobs added later; stop covers all of them', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  const events: string[] = [];
  jobs.hook('early', { start: () => void events.push('start early'), stop: () => void events.push('stop early') });
  await jobs.start();
  jobs.hook('late', { start: () => void events.push('start late'), stop: () => void events.push('stop late') });
  await jobs.start();
  await jobs.stop();
  assert.deepEqual(events, ['start early', 'start late', 'stop late', 'stop early']);
});

test('health by name: ok, degraded and failed with a message and since; since kept while unchanged', async () => {
  const clock = new ManualClock();
  clock.advance(1_000);
  const jobs = new Jobs({ clock, log: silentLogger });
  let report!: (level: 'ok' | 'degraded' | 'failed', msg: string) => void;
  jobs.hook('watch', {
    start: (_signal, health) => {
      report = (level, msg) => health[level](msg);
    },
  });
  jobs.oneShot('fails', async () => {
    throw new Error('cannot open socket');
  });
  assert.equal(jobs.health().get('watch')!.message, 'not started');
  await jobs.start();
  await turns();
  assert.equal(jobs.health().get('watch')!.level, 'ok');
  assert.deepEqual(jobs.health().get('fails'), { level: 'failed', message: 'cannot open socket', since: new Date(1000).toISOString() });
  clock.advance(500);
  report('degraded', 'watch disconnected');
  assert.deepEqual(jobs.health().get('watch'), { level: 'degraded', message: 'watch disconnected', since: new Date(1500).toISOString() });
  clock.advance(500);
  report('degraded', 'watch disconnected');
  assert.equal(jobs.health().get('watch')!.since, new Date(1500).toISOString(), 'unchanged health keeps its since');
  await jobs.stop();
});

test('a oneShot cancelled by stop is not a failure', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  jobs.oneShot('loop', (signal) => new Promise((_r, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')))));
  await jobs.start();
  await jobs.stop();
  assert.equal(jobs.health().get('loop')!.level, 'stopped');
});

test('timer: first run one interval after start, then every interval and on trigger; a failed run degrades health until the next good one', async () => {
  const clock = new ManualClock();
  const jobs = new Jobs({ clock, log: silentLogger });
  let runs = 0;
  let fail = false;
  const handle = jobs.timer(
    'gc',
    async () => {
      runs++;
      if (fail) throw new Error('map busy');
    },
    1000,
  );
  handle.trigger(); // before start: ignored
  clock.advance(0);
  await turns();
  assert.equal(runs, 0);
  await jobs.start();
  clock.advance(999);
  await turns();
  assert.equal(runs, 0);
  clock.advance(1);
  await turns();
  assert.equal(runs, 1);
  assert.equal(jobs.health().get('gc')!.level, 'ok');
  fail = true;
  handle.trigger();
  clock.advance(0);
  await turns();
  assert.equal(runs, 2);
  assert.deepEqual([jobs.health().get('gc')!.level, jobs.health().get('gc')!.message], ['degraded', 'map busy']);
  fail = false;
  clock.advance(1000);
  await turns();
  assert.equal(runs, 3);
  assert.equal(jobs.health().get('gc')!.level, 'ok');
  await jobs.stop();
  clock.advance(10_000);
  await turns();
  assert.equal(runs, 3, 'no run after stop');
  assert.equal(clock.pending, 0);
});

test('duplicate names and bad arguments are refused with coded errors', () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  jobs.hook('x', {});
  assert.throws(() => jobs.hook('x', {}), (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
  assert.throws(() => jobs.timer('t', async () => {}, 0), (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
  assert.throws(() => new Jobs({ clock: new ManualClock(), log: silentLogger, stopDeadlineMs: 0 }), (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
});

test('a oneShot reports running, then done; a failure is logged with its name; a cancelled one logs nothing', async () => {
  const log = recordingLogger();
  const jobs = new Jobs({ clock: new ManualClock(), log });
  let finish!: () => void;
  jobs.oneShot('load', () => new Promise<void>((r) => (finish = r)));
  jobs.oneShot('broken', async () => {
    throw new Error('no such file');
  });
  jobs.oneShot('cancelled', (signal) => new Promise((_r, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')))));
  await jobs.start();
  await turns();
  assert.deepEqual([jobs.health().get('load')!.level, jobs.health().get('load')!.message], ['ok', 'running']);
  finish();
  await turns();
  assert.deepEqual([jobs.health().get('load')!.level, jobs.health().get('load')!.message], ['ok', 'done']);
  assert.deepEqual(
    log.lines.map((l) => [l.level, l.msg, l.obj.job, l.obj.err]),
    [['error', 'job failed', 'broken', 'no such file']],
  );
  await jobs.stop();
  assert.equal(log.lines.length, 1, 'the cancelled oneShot is not logged as failed');
  assert.equal(jobs.health().get('cancelled')!.level, 'stopped');
});

test('timer: a run that reports its own health keeps it; a run that says nothing is ok; failures are logged as warnings', async () => {
  const clock = new ManualClock();
  const log = recordingLogger();
  const jobs = new Jobs({ clock, log });
  let say: ((h: HealthReporter) => void) | undefined;
  let fail = false;
  jobs.timer(
    'gc',
    async (_signal, health) => {
      if (fail) throw new Error('map busy');
      say?.(health);
    },
    1000,
  );
  await jobs.start();
  assert.deepEqual([jobs.health().get('gc')!.level, jobs.health().get('gc')!.message], ['ok', 'waiting for the first run']);
  const runOnce = async () => {
    clock.advance(1000);
    await turns();
    return [jobs.health().get('gc')!.level, jobs.health().get('gc')!.message];
  };
  assert.deepEqual(await runOnce(), ['ok', 'ok']);
  say = (h) => h.degraded('3 entries left');
  assert.deepEqual(await runOnce(), ['degraded', '3 entries left']);
  say = (h) => h.failed('map gone');
  assert.deepEqual(await runOnce(), ['failed', 'map gone']);
  say = (h) => h.ok('swept 12');
  assert.deepEqual(await runOnce(), ['ok', 'swept 12']);
  fail = true;
  assert.deepEqual(await runOnce(), ['degraded', 'map busy']);
  assert.deepEqual(
    log.lines.map((l) => [l.level, l.msg, l.obj.job, l.obj.err]),
    [['warn', 'timer job run failed; retrying at the next interval', 'gc', 'map busy']],
  );
  await jobs.stop();
});

test('timer: triggerDelayMs coalesces trigger() calls over its window', async () => {
  const clock = new ManualClock();
  const jobs = new Jobs({ clock, log: silentLogger });
  let runs = 0;
  const handle = jobs.timer('sync', () => void runs++, 60_000, { triggerDelayMs: 50 });
  await jobs.start();
  handle.trigger();
  clock.advance(49);
  await turns();
  assert.equal(runs, 0, 'still within the window');
  handle.trigger();
  clock.advance(1);
  await turns();
  assert.equal(runs, 1);
  await jobs.stop();
});

test('hook: the start signal is aborted once start returns; health a hook set in start is kept; no stop() is fine', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  let signal!: AbortSignal;
  jobs.hook('server', {
    start: (s) => {
      signal = s;
      assert.equal(s.aborted, false, 'not aborted during start');
    },
  });
  jobs.hook('degraded-at-start', { start: (_s, health) => health.degraded('listening on one of two sockets') });
  await jobs.start();
  assert.equal(signal.aborted, true);
  assert.deepEqual([jobs.health().get('server')!.level, jobs.health().get('server')!.message], ['ok', 'ok']);
  assert.deepEqual(jobs.health().get('degraded-at-start')!.message, 'listening on one of two sockets');
  await jobs.stop();
  assert.deepEqual([...jobs.health().values()].map((h) => [h.level, h.message]), [
    ['stopped', 'stopped'],
    ['stopped', 'stopped'],
  ]);
});

test('a failed start: its health says why, earlier jobs of that start() are stopped (a failing stop is logged), earlier start()s are kept', async () => {
  const log = recordingLogger();
  const jobs = new Jobs({ clock: new ManualClock(), log });
  const stopped: string[] = [];
  jobs.hook('kept', { stop: () => void stopped.push('kept') });
  await jobs.start();
  jobs.hook('undone', { stop: () => void stopped.push('undone') });
  jobs.hook('stuck', {
    stop: () => {
      throw new Error('busy');
    },
  });
  jobs.hook('api', {
    start: () => {
      throw new Error('socket path refused');
    },
  });
  await assert.rejects(jobs.start(), /socket path refused/);
  assert.deepEqual(stopped, ['undone']);
  const h = (n: string) => [jobs.health().get(n)!.level, jobs.health().get(n)!.message];
  assert.deepEqual(h('api'), ['failed', 'start failed: socket path refused']);
  assert.deepEqual(h('undone'), ['stopped', 'stopped: a later job failed to start']);
  assert.deepEqual(
    log.lines.map((l) => [l.msg, l.obj.job, l.obj.err]),
    [
      ['stopping a job after a failed start failed', 'stuck', 'busy'],
      ['job failed to start', 'api', 'socket path refused'],
    ],
  );
  await jobs.stop();
  assert.deepEqual(stopped, ['undone', 'kept'], 'the job of the earlier start() is still stopped');
});

test('stop: a throwing or rejecting stop is reported failed and logged; stops after the deadline are not waited for', async () => {
  const clock = new ManualClock();
  const log = recordingLogger();
  const jobs = new Jobs({ clock, log, stopDeadlineMs: 100 });
  let rejectLast!: (e: Error) => void;
  jobs.hook('last-stopped', { stop: () => new Promise<void>((_r, reject) => (rejectLast = reject)) });
  jobs.hook('after-deadline', { stop: () => Promise.reject(new Error('closed twice')) });
  jobs.hook('hangs', { stop: () => new Promise<void>(() => {}) });
  jobs.hook('rejects', { stop: () => Promise.reject(new Error('socket busy')) });
  jobs.hook('throws', {
    stop: () => {
      throw new Error('no handle');
    },
  });
  await jobs.start();
  const stopping = jobs.stop();
  await turns();
  clock.advance(100);
  await stopping;
  const h = (n: string) => [jobs.health().get(n)!.level, jobs.health().get(n)!.message];
  assert.deepEqual(h('throws'), ['failed', 'stop failed: no handle']);
  assert.deepEqual(h('rejects'), ['failed', 'stop failed: socket busy']);
  assert.deepEqual(h('hangs'), ['failed', 'did not stop within 100 ms']);
  await turns();
  assert.deepEqual(h('after-deadline'), ['failed', 'stop failed: closed twice'], 'its late rejection is still reported');
  assert.deepEqual(h('last-stopped'), ['failed', 'not waited for: the stop deadline had passed']);
  rejectLast(new Error('late'));
  await turns();
  assert.deepEqual(h('last-stopped'), ['failed', 'stop failed: late']);
  assert.deepEqual(
    log.lines.map((l) => [l.msg, l.obj.job]),
    [
      ['stopping a job failed', 'throws'],
      ['stopping a job failed', 'rejects'],
      ['job did not stop within the deadline; abandoning it', 'hangs'],
      ['stopping a job failed', 'after-deadline'],
      ['stopping a job failed', 'last-stopped'],
    ],
  );
  assert.equal(log.lines[2]!.obj.deadlineMs, 100);
});

test('health: a new message at the same level, or a new level with the same message, is a change', async () => {
  const clock = new ManualClock();
  const jobs = new Jobs({ clock, log: silentLogger });
  let health!: HealthReporter;
  jobs.hook('h', { start: (_s, r) => void (health = r) });
  await jobs.start();
  health.degraded('x');
  clock.advance(10);
  health.failed('x');
  assert.deepEqual(jobs.health().get('h'), { level: 'failed', message: 'x', since: new Date(10).toISOString() });
  clock.advance(10);
  health.failed('y');
  assert.deepEqual(jobs.health().get('h'), { level: 'failed', message: 'y', since: new Date(20).toISOString() });
  await jobs.stop();
});

test('coded errors say what is wrong and name the job', async () => {
  const jobs = new Jobs({ clock: new ManualClock(), log: silentLogger });
  assert.throws(() => new Jobs({ clock: new ManualClock(), log: silentLogger, stopDeadlineMs: -1 }), /jobs: stopDeadlineMs must be > 0/);
  assert.throws(() => jobs.timer('gc', () => {}, -5), /job gc: intervalMs must be > 0/);
  jobs.hook('api', {});
  assert.throws(() => jobs.hook('api', {}), /jobs: a job named api exists already/);
  await jobs.stop();
  assert.throws(() => jobs.hook('late', {}), /jobs: late added after stop\(\)/);
  await assert.rejects(jobs.start(), /jobs: start\(\) after stop\(\)/);
});
