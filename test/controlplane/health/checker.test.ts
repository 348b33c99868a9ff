/**
 * HealthChecker: one probe loop per target (probe, rise/fall, wait the
 * interval), loops started and stopped as the targets change, a callback on
 * every up/down transition, and the down set / view its consumers read.
 * Probes go to an in-memory prober whose answers the test gives one by one;
 * time is a manual clock, so nothing here waits.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HealthChecker } from '../../../src/controlplane/health/checker.js';
import type { HealthTarget } from '../../../src/controlplane/health/targets.js';
import type { HealthCheckSpec } from '../../../src/intent/health-check.js';
import type { BackendProber, ProbeRequest, ProbeResult } from '../../../src/os/health-probe.js';
import { ManualClock } from '../../helpers/manual-clock.js';
import { recordingLogger } from '../../helpers/recording-logger.js';

/** A prober whose probes stay in flight until the test answers them. */
class HeldProber implements BackendProber {
  readonly requests: ProbeRequest[] = [];
  private readonly inFlight: Array<{ req: ProbeRequest; resolve: (r: ProbeResult) => void; reject: (e: unknown) => void }> = [];
  probe(req: ProbeRequest): Promise<ProbeResult> {
    this.requests.push(req);
    return new Promise((resolve, reject) => this.inFlight.push({ req, resolve, reject }));
  }
  get pending(): string[] {
    return this.inFlight.map((p) => `${p.req.address}:${p.req.port}`);
  }
  /** Answers the oldest probe in flight to `address` and lets the checker take the result in. */
  async answer(address: string, ok: boolean, detail = ok ? 'connected' : 'ECONNREFUSED'): Promise<void> {
    this.take(address).resolve({ ok, detail });
    await settle();
  }
  async fail(address: string, error: unknown): Promise<void> {
    this.take(address).reject(error);
    await settle();
  }
  private take(address: string) {
    const i = this.inFlight.findIndex((p) => p.req.address === address);
    assert.ok(i >= 0, `no probe of ${address} in flight (in flight: ${this.pending.join(', ') || 'none'})`);
    return this.inFlight.splice(i, 1)[0]!;
  }
}

/** Lets promise continuations run (one macrotask turn; no time passes on any clock). */
const settle = () => new Promise<void>((r) => setImmediate(r));

const spec = (over: Partial<HealthCheckSpec> = {}): HealthCheckSpec => ({ type: 'tcp', path: '/', intervalMs: 1000, timeoutMs: 500, rise: 2, fall: 2, ...over });

const target = (service: string, address: string, port = 8080, s: HealthCheckSpec = spec()): HealthTarget => ({
  key: `${service}|${address}|${port}`,
  service,
  address,
  port,
  spec: s,
});

const targets = (...ts: HealthTarget[]) => new Map(ts.map((t) => [t.key, t]));

function setup() {
  const prober = new HeldProber();
  const clock = new ManualClock();
  const log = recordingLogger();
  const changes: number[] = [];
  const checker = new HealthChecker({ prober, clock, log, onChange: () => changes.push(clock.now()) });
  return { prober, clock, log, changes, checker };
}

test('a new target is probed at once with its check (type, address, port, path, timeout), then again every interval after each result', async () => {
  const { prober, clock, checker } = setup();
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8081, spec({ type: 'http', path: '/healthz', intervalMs: 2000, timeoutMs: 700 }))));
  assert.deepEqual(prober.requests, [{ type: 'http', address: '192.0.2.21', port: 8081, path: '/healthz', timeoutMs: 700 }]);
  await prober.answer('192.0.2.21', true, 'HTTP 200');
  // The next probe waits the interval after the result, not before.
  assert.equal(clock.pending, 1);
  clock.advance(1999);
  assert.equal(prober.requests.length, 1);
  clock.advance(1);
  assert.equal(prober.requests.length, 2);
  assert.deepEqual(prober.requests[1], prober.requests[0]);
  // While a probe is in flight no other probe of that target starts, however long it takes.
  clock.advance(10_000);
  assert.equal(prober.requests.length, 2);
  await prober.answer('192.0.2.21', true, 'HTTP 200');
  clock.advance(2000);
  assert.equal(prober.requests.length, 3);
  checker.dispose();
});

test('a backend starts up, goes down after `fall` failed probes in a row and up again after `rise` passes; each transition is reported once, with its time', async () => {
  const { prober, clock, changes, checker } = setup();
  clock.advance(5000);
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8080, spec({ rise: 2, fall: 2 }))));
  const view = () => checker.view().map((v) => [v.up, v.since, v.probes, v.lastResult]);
  // Before any result: up (an agent restart must not withdraw a healthy backend), no probes counted, no result yet.
  assert.deepEqual(checker.view(), [{ service: 'default/web', address: '192.0.2.21', port: 8080, type: 'tcp', up: true, since: 5000, probes: 0 }]);
  assert.deepEqual([...checker.down()], []);

  await prober.answer('192.0.2.21', true, 'connected');
  assert.deepEqual(view(), [[true, 5000, 1, 'connected']]);
  assert.deepEqual(changes, [], 'a pass while up is no transition');

  clock.advance(1000);
  await prober.answer('192.0.2.21', false, 'ECONNREFUSED');
  assert.deepEqual(view(), [[true, 5000, 2, 'ECONNREFUSED']], 'one failure of fall=2 is not down yet');
  assert.deepEqual(changes, []);

  clock.advance(1000);
  await prober.answer('192.0.2.21', false, 'ECONNREFUSED');
  assert.deepEqual(view(), [[false, 7000, 3, 'ECONNREFUSED']]);
  assert.deepEqual(changes, [7000], 'down: reported once');
  assert.deepEqual([...checker.down()], ['default/web|192.0.2.21']);

  clock.advance(1000);
  await prober.answer('192.0.2.21', false, 'ECONNREFUSED');
  assert.deepEqual(changes, [7000], 'still down: no new report');
  assert.deepEqual(view(), [[false, 7000, 4, 'ECONNREFUSED']]);

  clock.advance(1000);
  await prober.answer('192.0.2.21', true, 'connected');
  assert.deepEqual(view(), [[false, 7000, 5, 'connected']], 'one pass of rise=2 is not up yet');
  clock.advance(1000);
  await prober.answer('192.0.2.21', true, 'connected');
  assert.deepEqual(view(), [[true, 10_000, 6, 'connected']]);
  assert.deepEqual(changes, [7000, 10_000]);
  assert.deepEqual([...checker.down()], []);
  checker.dispose();
});

test('each transition is logged at info with the service, the backend address:port, the new state and the probe result', async () => {
  const { prober, clock, log, checker } = setup();
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8080, spec({ rise: 1, fall: 1 }))));
  await prober.answer('192.0.2.21', true, 'connected');
  assert.deepEqual(log.lines, [], 'no transition, no log');
  clock.advance(1000);
  await prober.answer('192.0.2.21', false, 'no answer within 500ms');
  clock.advance(1000);
  await prober.answer('192.0.2.21', true, 'connected');
  assert.deepEqual(log.lines, [
    { level: 'info', msg: 'backend failed its health check: not ready', obj: { service: 'default/web', backend: '192.0.2.21:8080', up: false, result: 'no answer within 500ms' } },
    { level: 'info', msg: 'backend passed its health check: ready', obj: { service: 'default/web', backend: '192.0.2.21:8080', up: true, result: 'connected' } },
  ]);
  checker.dispose();
});

test('a prober that throws counts as a failed probe, its error as the result, and the loop goes on', async () => {
  const { prober, clock, changes, checker } = setup();
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8080, spec({ fall: 1 }))));
  await prober.fail('192.0.2.21', new Error('EPERM: socket'));
  assert.deepEqual(checker.view().map((v) => [v.up, v.probes, v.lastResult]), [[false, 1, 'Error: EPERM: socket']]);
  assert.deepEqual(changes, [0]);
  clock.advance(1000);
  assert.deepEqual(prober.pending, ['192.0.2.21:8080'], 'probed again after the interval');
  checker.dispose();
});

test('down() and view() cover every loop: only the down backends ("service|address") in down(), all of them in view() sorted by service then address', async () => {
  const { prober, checker } = setup();
  const fall1 = spec({ fall: 1 });
  // Given out of order; view() sorts.
  checker.setTargets(
    targets(target('default/web', '192.0.2.22', 8080, fall1), target('default/api', '192.0.2.30', 9000, fall1), target('default/web', '192.0.2.21', 8080, fall1), target('default/db', '192.0.2.40', 5432, fall1)),
  );
  assert.deepEqual(
    checker.view().map((v) => `${v.service} ${v.address}:${v.port}`),
    ['default/api 192.0.2.30:9000', 'default/db 192.0.2.40:5432', 'default/web 192.0.2.21:8080', 'default/web 192.0.2.22:8080'],
  );
  await prober.answer('192.0.2.22', false);
  await prober.answer('192.0.2.30', false);
  await prober.answer('192.0.2.21', true);
  assert.deepEqual([...checker.down()].sort(), ['default/api|192.0.2.30', 'default/web|192.0.2.22']);
  assert.deepEqual(
    checker.view().map((v) => [v.address, v.up, v.probes, v.lastResult ?? '-']),
    [
      ['192.0.2.30', false, 1, 'ECONNREFUSED'],
      ['192.0.2.40', true, 0, '-'],
      ['192.0.2.21', true, 1, 'connected'],
      ['192.0.2.22', false, 1, 'ECONNREFUSED'],
    ],
  );
  checker.dispose();
});

test('view() orders by service, then address, then port — not by the joined text', () => {
  const { checker } = setup();
  const s = spec({ fall: 1 });
  checker.setTargets(targets(target('default/a1', '192.0.2.1', 80, s), target('default/a', '192.0.2.9', 8080, s), target('default/a', '192.0.2.9', 443, s)));
  assert.deepEqual(
    checker.view().map((v) => `${v.service} ${v.address}:${v.port}`),
    ['default/a 192.0.2.9:443', 'default/a 192.0.2.9:8080', 'default/a1 192.0.2.1:80'],
  );
  checker.dispose();
});

test('setting the same targets again (equal checks, new objects) keeps each loop and its state: no restart, no second probe', async () => {
  const { prober, clock, changes, checker } = setup();
  const make = () => targets(target('default/web', '192.0.2.21', 8080, spec({ fall: 1 })), target('default/web', '192.0.2.22', 8080, spec({ fall: 1 })));
  checker.setTargets(make());
  await prober.answer('192.0.2.21', false);
  await prober.answer('192.0.2.22', true);
  clock.advance(500);
  checker.setTargets(make());
  assert.deepEqual(prober.pending, [], 'no new probe: the loops wait out their interval');
  assert.deepEqual(checker.view().map((v) => [v.address, v.up, v.since, v.probes]), [
    ['192.0.2.21', false, 0, 1],
    ['192.0.2.22', true, 0, 1],
  ]);
  assert.deepEqual([...checker.down()], ['default/web|192.0.2.21'], 'a down backend stays down');
  clock.advance(500);
  assert.deepEqual(prober.pending.sort(), ['192.0.2.21:8080', '192.0.2.22:8080'], 'one loop per target, on its old schedule');
  assert.deepEqual(changes, [0]);
  checker.dispose();
});

test('a target whose check changed restarts: the old loop stops, a new one probes with the new check from the initial state', async () => {
  const { prober, clock, checker } = setup();
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8080, spec({ fall: 1 }))));
  await prober.answer('192.0.2.21', false);
  assert.deepEqual([...checker.down()], ['default/web|192.0.2.21']);
  clock.advance(300);
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8080, spec({ fall: 1, type: 'http', path: '/ready' }))));
  assert.deepEqual(prober.requests.slice(1), [{ type: 'http', address: '192.0.2.21', port: 8080, path: '/ready', timeoutMs: 500 }], 'the new check probes at once');
  assert.deepEqual(checker.view().map((v) => [v.type, v.up, v.since, v.probes]), [['http', true, 300, 0]]);
  assert.deepEqual([...checker.down()], [], 'a restarted loop starts up again');
  await prober.answer('192.0.2.21', true, 'HTTP 200');
  // Only the new loop's timer remains (due at 1300): the old one (due at 1000) was cancelled.
  assert.equal(clock.pending, 1);
  clock.advance(700);
  assert.deepEqual(prober.pending, [], 'the old loop does not probe at its old time');
  clock.advance(300);
  assert.deepEqual(prober.requests.slice(2), [{ type: 'http', address: '192.0.2.21', port: 8080, path: '/ready', timeoutMs: 500 }]);
  checker.dispose();
});

test('a target no longer given stops: it leaves down() and view(), its timer is cancelled, and it is not probed again', async () => {
  const { prober, clock, changes, checker } = setup();
  const a = target('default/web', '192.0.2.21', 8080, spec({ fall: 1 }));
  const b = target('default/web', '192.0.2.22', 8080, spec({ fall: 1 }));
  checker.setTargets(targets(a, b));
  await prober.answer('192.0.2.21', false);
  await prober.answer('192.0.2.22', true);
  checker.setTargets(targets(b));
  assert.deepEqual(checker.view().map((v) => v.address), ['192.0.2.22']);
  assert.deepEqual([...checker.down()], []);
  assert.equal(clock.pending, 1);
  clock.advance(1000);
  assert.deepEqual(prober.pending, ['192.0.2.22:8080']);
  assert.deepEqual(changes, [0]);
  checker.dispose();
});

test('a result that arrives after its target was removed is dropped: no transition, no report, no further probe', async () => {
  const { prober, clock, changes, log, checker } = setup();
  const a = target('default/web', '192.0.2.21', 8080, spec({ fall: 1 }));
  const b = target('default/web', '192.0.2.22', 8080, spec({ fall: 1 }));
  checker.setTargets(targets(a, b));
  // Removed while its first probe is in flight (no timer yet).
  checker.setTargets(targets(b));
  await prober.answer('192.0.2.21', false);
  assert.deepEqual(changes, [], 'the late failure is no transition');
  assert.deepEqual(log.lines, []);
  assert.equal(clock.pending, 0, 'no next probe scheduled');
  clock.advance(10_000);
  assert.deepEqual(prober.pending, ['192.0.2.22:8080']);
  checker.dispose();
});

test('dispose stops every loop (timers and probes in flight) and later targets are ignored', async () => {
  const { prober, clock, changes, checker } = setup();
  checker.setTargets(targets(target('default/web', '192.0.2.21', 8080, spec({ fall: 1 })), target('default/web', '192.0.2.22', 8080, spec({ fall: 1 }))));
  await prober.answer('192.0.2.21', true);
  checker.dispose();
  assert.deepEqual(checker.view(), []);
  assert.deepEqual([...checker.down()], []);
  assert.equal(clock.pending, 0, 'the waiting loop\'s timer is cancelled');
  await prober.answer('192.0.2.22', false);
  assert.deepEqual(changes, [], 'a probe in flight at dispose is dropped');
  assert.equal(clock.pending, 0);
  checker.setTargets(targets(target('default/web', '192.0.2.23')));
  assert.deepEqual(prober.pending, []);
  assert.deepEqual(checker.view(), []);
  clock.advance(10_000);
  assert.deepEqual(prober.pending, []);
});
