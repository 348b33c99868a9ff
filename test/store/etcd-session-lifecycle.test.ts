/**
 * The etcd session at the edges of its life, on a manual clock: before it
 * starts, disposed while its first grant is still retrying (no store at all:
 * a socket path nothing listens on), and a live session whose clients were
 * closed under it (real etcd). Kept apart from etcd-session.test.ts so that a
 * mutation rerun only retests what these cases reach.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { EtcdSession, etcdSessionDefaults, type EtcdSessionOptions } from '../../src/store/etcd/session.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

describe('etcd session: before start, disposed while granting, clients closed under it', () => {
  let etcd: EtcdServer;
  const dir = mkdtempSync(join(tmpdir(), 'herald-session-life-'));
  const open: Array<{ dispose(): void }> = [];
  let prefixN = 0;

  before(async () => {
    etcd = await startEtcd();
  });
  afterEach(() => {
    for (const d of open.splice(0).reverse()) d.dispose();
  });
  after(async () => {
    await etcd?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const session = (endpoint: string, o: Partial<EtcdSessionOptions> = {}) => {
    const clock = new ManualClock();
    clock.advance(10_000);
    const log = recordingLogger();
    const s = new EtcdSession({ endpoints: [endpoint], prefix: `/herald-session-life-${process.pid}-${prefixN++}/`, ...etcdSessionDefaults, ...o }, { clock, log });
    open.push(s);
    return { s, clock, log };
  };
  const nowhere = () => `unix://${join(dir, 'nothing-listens.sock')}`;

  test('the keep-alive call deadline is a third of TTL − margin, at least 250 ms', () => {
    assert.equal(session(nowhere()).s.keepaliveCallTimeoutMs, 833); // ⌊(3,000 − 500) / 3⌋
    assert.equal(session(nowhere(), { ttlSeconds: 10, marginMs: 1000, keepaliveMs: 1000 }).s.keepaliveCallTimeoutMs, 3000);
    assert.equal(session(nowhere(), { ttlSeconds: 1, marginMs: 500, keepaliveMs: 250 }).s.keepaliveCallTimeoutMs, 250); // ⌊500 / 3⌋ = 166 → 250
  });

  test('before start: connecting, no lease, no keep-alive age, valid for nothing', () => {
    const { s } = session(nowhere());
    assert.deepEqual(s.status(), { state: 'connecting', validForMs: 0, leasesGranted: 0, keepaliveFailures: 0 });
    assert.equal(s.leaseId, undefined);
    assert.equal(s.lostReason, undefined);
  });

  test('disposed while its first grant is retrying: start() resolves, no further attempt, nothing left scheduled', async () => {
    const { s, clock, log } = session(nowhere());
    const started = s.start();
    await waitFor(() => clock.pending === 1, { what: 'the first failed grant to wait for its retry' });
    assert.equal(s.requests, 1);
    assert.deepEqual(log.lines.map((l) => [l.level, l.msg]), [['warn', 'etcd lease grant failed; retrying']]);
    s.dispose();
    clock.advance(100);
    await started;
    assert.equal(s.requests, 1, 'no grant after dispose');
    assert.equal(clock.pending, 0, 'no keep-alive scheduled');
    assert.equal(s.state, 'connecting');
  });

  test('a listener that unsubscribed hears nothing; the others still do', async () => {
    const { s } = session(etcd.endpoint);
    const heard: string[] = [];
    const ghost: string[] = [];
    const gone = s.onState((st) => void ghost.push(st));
    s.onState((st) => void heard.push(st));
    gone.dispose();
    await s.start();
    assert.deepEqual(heard, ['live']);
    assert.deepEqual(ghost, [], 'unsubscribed');
  });

  test('after dispose, verify() asks nothing; a revoke the closed client cannot send is a warning (the lease expires by itself)', async () => {
    const { s, log } = session(etcd.endpoint);
    await s.start();
    s.dispose();
    assert.equal(await s.verify(), 'unreachable');
    assert.equal(s.requests, 1, 'only the grant');
    await s.revoke();
    assert.equal(s.state, 'lost');
    assert.equal(s.lostReason, 'released');
    const warn = log.lines.filter((l) => l.level === 'warn');
    assert.deepEqual(warn.map((l) => l.msg), ['etcd lease revoke failed; it expires by itself']);
    assert.equal(typeof warn[0]!.obj.err, 'string');
  });
});
