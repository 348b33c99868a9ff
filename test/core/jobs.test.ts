/**
 * The job registry of the composition root (src/core/jobs.ts): start in
 * order, stop in reverse, once, within a deadline; health by name.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { Jobs } from '../../src/core/jobs.js';
import { silentLogger } from '../../src/core/logger.js';
import { ManualClock } from '../helpers/manual-clock.js';

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
  assert.deepEqual([...jobs.health().values()].map((h) => h.level), ['stopped', 'stopped', 'stopped']);
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
