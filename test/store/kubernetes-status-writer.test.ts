/**
 * The status write-back's own logic on a manual clock, with the API server's
 * calls (`request`) answered by a small in-memory stand-in that checks
 * resourceVersions like the API server does: only a difference is written,
 * conditions keep their transition time, 409s re-read and retry, refusals are
 * not retried until the desired state changes, failures are, and the token
 * bucket, per-object interval and concurrency bound the writes. The
 * write-back against a real kube-apiserver is in kubernetes-store.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { IpamCondition } from '../../src/controlplane/ipam/types.js';
import { KubeApiError, type KubeClient, type KubeObject } from '../../src/intent/sources/kube-client.js';
import { EventRecorder } from '../../src/store/kubernetes/events.js';
import { PoolStatusWriter, ServiceStatusWriter, serviceStatusDefaults, type ServiceStatusOptions } from '../../src/store/kubernetes/service-status.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

type Obj = KubeObject & { status?: any };

/** Objects by path; PUT …/status checks resourceVersion (409 when stale) and bumps it. */
class FakeServer {
  objects = new Map<string, Obj>();
  calls: Array<{ method: string; path: string; body?: any }> = [];
  /** Answers the next calls with these errors (in order) instead. */
  failNext: Error[] = [];
  /** PUTs waiting for `release()` when `hold` is set. */
  hold = false;
  private held: Array<() => void> = [];
  inFlight = 0;
  maxInFlight = 0;

  put(path: string, obj: Obj): Obj {
    const o = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(Number(this.objects.get(path)?.metadata.resourceVersion ?? 0) + 1) } };
    this.objects.set(path, o);
    return o;
  }

  release(): void {
    for (const r of this.held.splice(0)) r();
  }

  client(): KubeClient {
    return {
      request: async (method: string, path: string, body?: any) => {
        this.calls.push({ method, path, body });
        const fail = this.failNext.shift();
        if (fail) throw fail;
        if (method === 'GET') {
          const o = this.objects.get(path);
          if (!o) throw new KubeApiError(404, 'NotFound', 'not found');
          return structuredClone(o);
        }
        assert.equal(method, 'PUT');
        const target = path.replace(/\/status$/, '');
        const cur = this.objects.get(target);
        if (!cur) throw new KubeApiError(404, 'NotFound', 'not found');
        if (cur.metadata.resourceVersion !== body.metadata.resourceVersion) throw new KubeApiError(409, 'Conflict', 'the object has been modified');
        this.inFlight++;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        if (this.hold) await new Promise<void>((r) => this.held.push(r));
        this.inFlight--;
        return this.put(target, { ...cur, status: body.status });
      },
    } as unknown as KubeClient;
  }
}

const flush = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
};
const svcPath = (ns: string, name: string) => `/api/v1/namespaces/${encodeURIComponent(ns)}/services/${encodeURIComponent(name)}`;
const OPTS: ServiceStatusOptions = { qps: 100, burst: 200, perServiceMs: 1000, conflictRetries: 5, concurrency: 8 };

function setup(opts: ServiceStatusOptions = OPTS, extra: { active?: () => boolean; events?: EventRecorder; cached?: (name: string, namespace: string) => KubeObject | undefined } = {}) {
  const server = new FakeServer();
  const clock = new ManualClock();
  clock.advance(1_000_000);
  const log = recordingLogger();
  /** The informer's cache: what the server had when it was last read (tests refresh it with sync()). */
  const cache = new Map<string, Obj>();
  const sync = () => {
    for (const [p, o] of server.objects) cache.set(p, structuredClone(o));
  };
  const writer = new ServiceStatusWriter({ client: server.client(), log, clock, resyncMs: 5000, cached: (name, ns) => cache.get(svcPath(ns, name)), ...extra }, opts);
  const add = (ns: string, name: string, status?: any, generation?: number) => {
    server.put(svcPath(ns, name), { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: ns, ...(generation ? { generation } : {}) }, spec: { type: 'LoadBalancer' }, ...(status ? { status } : {}) });
    sync();
  };
  return { server, clock, log, writer, cache, sync, add };
}

const satisfied = (status: 'True' | 'False', reason = status === 'True' ? 'satisfied' : 'no_pool', message = status === 'True' ? '' : 'no pool matches'): IpamCondition =>
  ({ type: 'cilium.io/IPAMRequestSatisfied', status, reason, message }) as IpamCondition;

test('only a difference is written: a PUT of the status subresource with the IPs (VIP) and the condition, other status fields and conditions kept', async () => {
  const { server, clock, writer, add, sync } = setup();
  add('team a', 'web', { other: 1, conditions: [{ type: 'x.io/Other', status: 'True' }] }, 4);
  add('default', 'same', { loadBalancer: { ingress: [{ ip: '192.0.2.2' }] } });
  writer.update(new Map([['team a/web', ['192.0.2.1', '2001:db8::1']], ['default/same', ['192.0.2.2']], ['default/absent', ['192.0.2.3']]]), new Map([['team a/web', satisfied('True')]]));
  assert.equal(writer.stats.pending, 1, 'one differs; one shows it already (ipMode VIP by default); one is not cached');
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => [c.method, c.path]), [['PUT', '/api/v1/namespaces/team%20a/services/web/status']]);
  const put = server.calls[0]!.body;
  assert.equal(put.apiVersion, 'v1');
  assert.equal(put.kind, 'Service');
  assert.equal(put.metadata.resourceVersion, '1');
  const [other, cond] = put.status.conditions;
  assert.deepEqual(put.status.loadBalancer, { ingress: [{ ip: '192.0.2.1', ipMode: 'VIP' }, { ip: '2001:db8::1', ipMode: 'VIP' }] });
  assert.equal(put.status.other, 1);
  assert.deepEqual(other, { type: 'x.io/Other', status: 'True' });
  assert.deepEqual({ ...cond, lastTransitionTime: undefined }, { ...satisfied('True'), lastTransitionTime: undefined, observedGeneration: 4 });
  assert.match(cond.lastTransitionTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.deepEqual(writer.stats, { writes: 1, conflicts: 0, refused: 0, failures: 0, pending: 0 });
  // Steady state: the cache shows it → nothing more, at a recheck or a resync.
  sync();
  writer.recheck();
  assert.equal(clock.pending, 1, 'nothing due: no pass armed, only the resync');
  clock.advance(10_000);
  await flush();
  assert.equal(server.calls.length, 1);
  writer.dispose();
});

test('a condition keeps its lastTransitionTime while its status stays, gets a new one when it changes; a different order of IPs is a difference', async () => {
  const { server, clock, writer, add, sync } = setup();
  const old = '2020-01-01T00:00:00Z';
  add('default', 'web', { loadBalancer: { ingress: [{ ip: '192.0.2.1', ipMode: 'VIP' }] }, conditions: [{ ...satisfied('True', 'old', 'old message'), lastTransitionTime: old }] });
  writer.update(new Map([['default/web', ['192.0.2.1']]]), new Map([['default/web', satisfied('True')]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.at(-1)!.body.status.conditions[0].lastTransitionTime, old, 'same status: the time stays');
  assert.equal(server.calls.at(-1)!.body.status.conditions[0].observedGeneration, undefined, 'no generation on the object: none written');
  sync();
  clock.advance(1000);
  writer.update(new Map([['default/web', ['192.0.2.1']]]), new Map([['default/web', satisfied('False')]]));
  clock.advance(0);
  await flush();
  assert.notEqual(server.calls.at(-1)!.body.status.conditions[0].lastTransitionTime, old, 'status changed: a new time');
  sync();
  clock.advance(1000);
  const before = server.calls.length;
  writer.update(new Map([['default/web', ['192.0.2.1']]])); // no condition given: left as it is
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, before);
  writer.update(new Map([['default/web', ['192.0.2.9', '192.0.2.1']]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.at(-1)!.body.status.loadBalancer.ingress.map((i: { ip: string }) => i.ip), ['192.0.2.9', '192.0.2.1']);
  assert.equal(server.calls.at(-1)!.body.status.conditions[0].status, 'False', 'the condition written before stays');
  sync();
  clock.advance(1000);
  const n = server.calls.length;
  writer.update(new Map([['default/web', ['192.0.2.1', '192.0.2.9']]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, n + 1, 'the other order is written');
  writer.dispose();
});

test('an ipMode other than VIP on the object is a difference', async () => {
  const { server, clock, writer, add } = setup();
  add('default', 'web', { loadBalancer: { ingress: [{ ip: '192.0.2.1', ipMode: 'Proxy' }] } });
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 1);
  writer.dispose();
});

test('a 409 re-reads the object and retries (up to conflictRetries times); what another writer changed meanwhile stays', async () => {
  const { server, clock, writer, add } = setup({ ...OPTS, conflictRetries: 2 });
  add('default', 'web');
  server.put(svcPath('default', 'web'), { ...server.objects.get(svcPath('default', 'web'))!, metadata: { name: 'web', namespace: 'default', labels: { touched: 'yes' } } }); // the cache is stale now
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => c.method), ['PUT', 'GET', 'PUT']);
  assert.equal(server.calls[1]!.path, svcPath('default', 'web'));
  assert.deepEqual(server.objects.get(svcPath('default', 'web'))!.metadata.labels, { touched: 'yes' });
  assert.deepEqual(writer.stats, { writes: 1, conflicts: 1, refused: 0, failures: 0, pending: 0 });
  // Always in conflict: 1 + conflictRetries PUTs, then it gives up (no failure counted: the next change or resync retries).
  add('default', 'busy');
  const conflict = () => new KubeApiError(409, 'Conflict', 'modified');
  server.failNext = [conflict(), undefined as never, conflict(), undefined as never, conflict()];
  server.calls.length = 0;
  writer.update(new Map([['default/busy', ['192.0.2.2']]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => c.method), ['PUT', 'GET', 'PUT', 'GET', 'PUT', 'GET']);
  assert.equal(writer.stats.conflicts, 4);
  assert.equal(writer.stats.writes, 1);
  writer.dispose();
});

test('a 409 whose re-read fails is a failure, retried later', async () => {
  const { server, clock, writer, add, log } = setup();
  add('default', 'web');
  server.failNext = [new KubeApiError(409, 'Conflict', 'modified'), new Error('connection reset')];
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => c.method), ['PUT', 'GET']);
  assert.equal(writer.stats.failures, 1);
  assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj]), [['warn', 'status write failed; retrying', { object: 'Service/default/web', err: 'connection reset' }]]);
  writer.dispose();
});

test('a refused write (403, 422, 404) is logged with the reason and not retried until the desired state changes', async () => {
  for (const status of [403, 422, 404]) {
    const { server, clock, writer, add, log } = setup();
    add('default', 'web');
    server.failNext = [new KubeApiError(status, 'Refused', `refused ${status}`)];
    writer.update(new Map([['default/web', ['192.0.2.1']]]));
    clock.advance(0);
    await flush();
    assert.deepEqual(writer.stats, { writes: 0, conflicts: 0, refused: 1, failures: 0, pending: 0 });
    assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj]), [['error', 'the API server refused the status write', { object: 'Service/default/web', status, reason: 'Refused', err: `refused ${status}` }]]);
    clock.advance(20_000); // resyncs
    writer.update(new Map([['default/web', ['192.0.2.1']]]));
    clock.advance(0);
    await flush();
    assert.equal(server.calls.length, 1, 'the same refused state is not asked again');
    writer.update(new Map([['default/web', ['192.0.2.2']]]));
    clock.advance(0);
    await flush();
    assert.equal(server.calls.length, 2, 'a new desired state is');
    assert.equal(writer.stats.writes, 1);
    writer.dispose();
  }
});

test('a failed write (not a refusal) is a warning and is retried after the per-object interval', async () => {
  const { server, clock, writer, add } = setup();
  add('default', 'web');
  server.failNext = [new KubeApiError(500, 'InternalError', 'etcd timeout')];
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  assert.equal(writer.stats.failures, 1);
  assert.equal(writer.stats.pending, 1);
  clock.advance(10); // the retry pass: too early for this object, it waits for the rest of its interval
  await flush();
  clock.advance(989);
  await flush();
  assert.equal(server.calls.length, 1, 'not before perServiceMs');
  clock.advance(1);
  await flush();
  assert.equal(server.calls.length, 2);
  assert.equal(writer.stats.writes, 1);
  writer.dispose();
});

test('one write per object per perServiceMs: a change within it is written at its end (the latest desired state only)', async () => {
  const { server, clock, writer, add, sync } = setup();
  add('default', 'web');
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  sync();
  clock.advance(300);
  writer.update(new Map([['default/web', ['192.0.2.2']]]));
  writer.update(new Map([['default/web', ['192.0.2.3']]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 1);
  clock.advance(699);
  await flush();
  assert.equal(server.calls.length, 1, 'one ms before the interval ends');
  clock.advance(1);
  await flush();
  assert.equal(server.calls.length, 2);
  assert.deepEqual(server.calls[1]!.body.status.loadBalancer.ingress, [{ ip: '192.0.2.3', ipMode: 'VIP' }]);
  writer.dispose();
});

test('a token bucket over all writes: burst at once, then qps per second', async () => {
  const { server, clock, writer, add } = setup({ qps: 2, burst: 3, perServiceMs: 1, conflictRetries: 5, concurrency: 8 });
  const want = new Map<string, string[]>();
  for (let i = 0; i < 6; i++) {
    add('default', `s${i}`);
    want.set(`default/s${i}`, [`192.0.2.${i + 1}`]);
  }
  writer.update(want);
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 3, 'the burst');
  assert.equal(writer.stats.pending, 3);
  clock.advance(499);
  await flush();
  assert.equal(server.calls.length, 3, 'half a second at 2/s makes the next token');
  clock.advance(1);
  await flush();
  assert.equal(server.calls.length, 4);
  clock.advance(500);
  await flush();
  clock.advance(500);
  await flush();
  assert.equal(server.calls.length, 6);
  assert.equal(writer.stats.pending, 0);
  writer.dispose();
});

test('at most `concurrency` writes in flight', async () => {
  const { server, clock, writer, add } = setup({ ...OPTS, concurrency: 2 });
  const want = new Map<string, string[]>();
  for (let i = 0; i < 5; i++) {
    add('default', `s${i}`);
    want.set(`default/s${i}`, [`192.0.2.${i + 1}`]);
  }
  server.hold = true;
  writer.update(want);
  clock.advance(0);
  await flush();
  assert.equal(server.inFlight, 2);
  writer.recheck(); // the rest is still due: a recheck while the pass runs starts no second pass beside it
  clock.advance(0);
  await flush();
  assert.equal(server.inFlight, 2);
  for (let i = 0; i < 5; i++) {
    server.release();
    await flush();
  }
  assert.equal(server.maxInFlight, 2);
  assert.equal(writer.stats.writes, 5);
  writer.dispose();
});

test('only the active writer writes; a resync restores a status someone overwrote; nothing after dispose', async () => {
  let active = false;
  const { server, clock, writer, add, sync } = setup(OPTS, { active: () => active });
  add('default', 'web');
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(10_000);
  await flush();
  assert.equal(server.calls.length, 0);
  assert.equal(writer.stats.pending, 0);
  active = true;
  clock.advance(5000); // the resync
  await flush();
  assert.equal(server.calls.length, 1);
  // Someone overwrites the status; the cache sees it.
  server.put(svcPath('default', 'web'), { ...server.objects.get(svcPath('default', 'web'))!, status: {} });
  sync();
  clock.advance(5000);
  await flush();
  assert.equal(server.calls.length, 2);
  sync();
  server.put(svcPath('default', 'web'), { ...server.objects.get(svcPath('default', 'web'))!, status: {} });
  sync();
  writer.dispose();
  clock.advance(60_000);
  writer.recheck();
  assert.equal(clock.pending, 0, 'disposed: a difference arms no pass');
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 2);
  assert.equal(clock.pending, 0);
});

test('a writer that stops being active mid-way writes no more', async () => {
  let active = true;
  const { server, clock, writer, add } = setup({ ...OPTS, concurrency: 1 }, { active: () => active });
  for (let i = 0; i < 3; i++) add('default', `s${i}`);
  server.hold = true;
  writer.update(new Map([0, 1, 2].map((i) => [`default/s${i}`, [`192.0.2.${i + 1}`]])));
  clock.advance(0);
  await flush();
  active = false;
  server.release();
  await flush();
  assert.equal(server.calls.length, 1);
  writer.dispose();
});

test('a condition turning False is a Warning Event IPAMRequestNotSatisfied, once', async () => {
  const sent: any[] = [];
  const evClient = { request: async (_m: string, _p: string, body: unknown) => void sent.push(body) } as unknown as KubeClient;
  const clock0 = new ManualClock();
  // The recorder's own repeat window off: every Event the writer asks for is sent, so "once" is the writer's doing.
  const events = new EventRecorder({ client: evClient, node: 'n1', log: recordingLogger(), clock: clock0 }, { qps: 100, burst: 100, repeatMs: 0 });
  const { clock, writer, add, sync } = setup(OPTS, { events });
  // A condition of another type ahead of ours, with the status, reason and message the False one will have: not ours.
  add('default', 'web', { conditions: [{ type: 'x.io/Other', status: 'False', reason: 'no_pool', message: 'no pool matches' }] });
  writer.update(new Map([['default/web', []]]), new Map([['default/web', satisfied('True')]]));
  clock.advance(0);
  await flush();
  assert.equal(sent.length, 0, 'True: no Event');
  sync();
  clock.advance(1000);
  writer.update(new Map([['default/web', []]]), new Map([['default/web', satisfied('False')]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(sent.map((e) => [e.type, e.reason, e.message, e.involvedObject]), [['Warning', 'IPAMRequestNotSatisfied', 'no_pool: no pool matches', { apiVersion: 'v1', kind: 'Service', name: 'web', namespace: 'default' }]]);
  /** The last status taken as written, a second later the IPs changed and `condition` wanted. */
  const rewrite = async (condition: ReturnType<typeof satisfied>) => {
    sync();
    clock.advance(1000);
    writer.update(new Map([['default/web', ['192.0.2.1']]]), new Map([['default/web', condition]]));
    clock.advance(0);
    await flush();
  };
  // The same False condition written again (the IPs changed): no second Event; another message: one more.
  await rewrite(satisfied('False'));
  assert.equal(sent.length, 1);
  await rewrite(satisfied('False', 'no_pool', 'other'));
  assert.equal(sent.length, 2);
  await rewrite(satisfied('False', 'other_reason', 'other'));
  assert.equal(sent.length, 3);
  // True, then False with the same reason and message: the status alone turning False is an Event.
  await rewrite(satisfied('True', 'other_reason', 'other'));
  assert.equal(sent.length, 3);
  await rewrite(satisfied('False', 'other_reason', 'other'));
  assert.equal(sent.length, 4);
  // A Service whose first condition is False (none before): an Event.
  sync();
  add('default', 'fresh');
  writer.update(new Map([['default/web', ['192.0.2.1']], ['default/fresh', []]]), new Map([['default/web', satisfied('False', 'other_reason', 'other')], ['default/fresh', satisfied('False')]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(sent.slice(4).map((e) => [e.reason, e.message, e.involvedObject.name]), [['IPAMRequestNotSatisfied', 'no_pool: no pool matches', 'fresh']]);
  writer.dispose();
});

test('pool conditions: PUT to the pool collection, only when they differ', async () => {
  const server = new FakeServer();
  const clock = new ManualClock();
  const collection = '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools';
  server.put(`${collection}/pool a`, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'pool a' }, status: { conditions: [{ type: 'cilium.io/IPsTotal', status: 'Unknown', reason: 'noreason', message: '4' }] } });
  const cache = (name: string) => structuredClone(server.objects.get(`${collection}/${name}`));
  const writer = new PoolStatusWriter({ client: server.client(), log: recordingLogger(), clock, resyncMs: 5000, cached: cache, collection, apiVersion: 'cilium.io/v2alpha1' }, OPTS);
  const conds = (total: string): IpamCondition[] => [{ type: 'cilium.io/IPsTotal', status: 'Unknown', reason: 'noreason', message: total } as IpamCondition];
  writer.update(new Map([['pool a', { conditions: conds('4') }]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 0, 'already shown');
  writer.update(new Map([['pool a', { conditions: conds('8') }]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => [c.method, c.path]), [['PUT', `${collection}/pool%20a/status`]]);
  assert.equal(server.calls[0]!.body.kind, 'CiliumLoadBalancerIPPool');
  assert.equal(server.calls[0]!.body.apiVersion, 'cilium.io/v2alpha1');
  assert.deepEqual(server.calls[0]!.body.status.conditions.map((c: { message: string }) => c.message), ['8']);
  writer.dispose();
});

test('the defaults: 8 writes in flight, a resync every 5 s', async () => {
  assert.deepEqual(serviceStatusDefaults, { qps: 100, burst: 200, perServiceMs: 1000, conflictRetries: 5, concurrency: 8 });
  const server = new FakeServer();
  const clock = new ManualClock();
  const cache = new Map<string, Obj>();
  const writer = new ServiceStatusWriter({ client: server.client(), log: recordingLogger(), clock, cached: (name, ns) => cache.get(svcPath(ns, name)) });
  const want = new Map<string, string[]>();
  for (let i = 0; i < 10; i++) {
    server.put(svcPath('default', `s${i}`), { apiVersion: 'v1', kind: 'Service', metadata: { name: `s${i}`, namespace: 'default' } });
    want.set(`default/s${i}`, [`192.0.2.${i + 1}`]);
  }
  for (const [p, o] of server.objects) cache.set(p, structuredClone(o));
  server.hold = true;
  writer.update(want);
  clock.advance(0);
  await flush();
  assert.equal(server.inFlight, 8);
  server.hold = false;
  server.release();
  await flush();
  assert.equal(writer.stats.writes, 10);
  // Someone empties a status; the cache sees it; the resync restores it, 5 s after the last one.
  server.put(svcPath('default', 's0'), { ...server.objects.get(svcPath('default', 's0'))!, status: {} });
  for (const [p, o] of server.objects) cache.set(p, structuredClone(o));
  clock.advance(4999);
  await flush();
  assert.equal(writer.stats.writes, 10);
  clock.advance(1);
  await flush();
  assert.equal(writer.stats.writes, 11);
  writer.dispose();
});

test('a Service without a status: no IPs and no condition to show is no write; otherwise exactly the IPs and the condition are written', async () => {
  const { server, clock, writer, add, log } = setup();
  add('default', 'bare');
  writer.update(new Map([['default/bare', []]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 0);
  writer.update(new Map([['default/bare', ['192.0.2.1']]]), new Map([['default/bare', satisfied('True')]]));
  clock.advance(0);
  await flush();
  const status = server.calls[0]!.body.status;
  assert.deepEqual(status, {
    loadBalancer: { ingress: [{ ip: '192.0.2.1', ipMode: 'VIP' }] },
    conditions: [{ ...satisfied('True'), lastTransitionTime: status.conditions[0].lastTransitionTime }],
  });
  assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj]), [['debug', 'status written', { object: 'Service/default/bare' }]]);
  writer.dispose();
});

test('IPs are compared one by one: the same first IP with another second one is a difference', async () => {
  const { server, clock, writer, add } = setup();
  add('default', 'web', { loadBalancer: { ingress: [{ ip: '192.0.2.1', ipMode: 'VIP' }, { ip: '192.0.2.2', ipMode: 'VIP' }] } });
  writer.update(new Map([['default/web', ['192.0.2.1', '192.0.2.3']]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 1);
  writer.dispose();
});

test('a condition is shown only by one of its type with the same status, reason and message (a missing message is an empty one)', async () => {
  const { server, clock, writer, add } = setup();
  const old = '2020-01-01T00:00:00Z';
  const ingress = { loadBalancer: { ingress: [{ ip: '192.0.2.1', ipMode: 'VIP' }] } };
  const type = 'cilium.io/IPAMRequestSatisfied';
  // Another type with our status, reason, message and an old transition time: not ours, and its time is not ours either.
  add('default', 'other', { ...ingress, conditions: [{ type: 'x.io/Other', status: 'True', reason: 'satisfied', message: '', lastTransitionTime: old }] });
  // Ours with only the status different.
  add('default', 'status', { ...ingress, conditions: [{ type, status: 'False', reason: 'satisfied', message: '' }] });
  // Ours without a message field: an empty message, shown.
  add('default', 'nomsg', { ...ingress, conditions: [{ type, status: 'True', reason: 'satisfied' }] });
  const keys = ['default/other', 'default/status', 'default/nomsg'];
  writer.update(new Map(keys.map((k) => [k, ['192.0.2.1']])), new Map(keys.map((k) => [k, satisfied('True')])));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => c.path), [`${svcPath('default', 'other')}/status`, `${svcPath('default', 'status')}/status`]);
  const [kept, ours] = server.calls[0]!.body.status.conditions;
  assert.equal(kept.lastTransitionTime, old);
  assert.equal(ours.type, type);
  assert.notEqual(ours.lastTransitionTime, old, 'a new condition: a new transition time');
  writer.dispose();
});

test('pool conditions: each wanted one must be shown; the written list replaces those types only and keeps other status fields', async () => {
  const server = new FakeServer();
  const clock = new ManualClock();
  const collection = '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools';
  const cond = (type: string, message: string) => ({ type, status: 'Unknown', reason: 'noreason', message }) as IpamCondition;
  server.put(`${collection}/p`, {
    apiVersion: 'cilium.io/v2alpha1',
    kind: 'CiliumLoadBalancerIPPool',
    metadata: { name: 'p' },
    status: { other: 1, conditions: [{ type: 'x.io/Foreign', status: 'True' }, cond('cilium.io/IPsTotal', '4'), cond('cilium.io/IPsAvailable', '4')] },
  });
  const cache = (name: string) => structuredClone(server.objects.get(`${collection}/${name}`));
  const writer = new PoolStatusWriter({ client: server.client(), log: recordingLogger(), clock, resyncMs: 5000, cached: cache, collection, apiVersion: 'cilium.io/v2alpha1' }, OPTS);
  writer.update(new Map([['p', { conditions: [cond('cilium.io/IPsTotal', '4'), cond('cilium.io/IPsAvailable', '3')] }]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 1, 'one of the two differs');
  const status = server.calls[0]!.body.status;
  assert.equal(status.other, 1);
  assert.deepEqual(status.conditions.map((c: { type: string; message?: string }) => [c.type, c.message]), [['x.io/Foreign', undefined], ['cilium.io/IPsTotal', '4'], ['cilium.io/IPsAvailable', '3']]);
  assert.deepEqual(writer.stats, { writes: 1, conflicts: 0, refused: 0, failures: 0, pending: 0 });
  writer.dispose();
});

test('a change for another object is written at once while one waits out its interval', async () => {
  const { server, clock, writer, add, sync } = setup();
  add('default', 'a');
  add('default', 'b');
  writer.update(new Map([['default/a', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  sync();
  clock.advance(300);
  writer.update(new Map([['default/a', ['192.0.2.2']]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 1, 'a waits 700 ms more');
  writer.update(new Map([['default/a', ['192.0.2.2']], ['default/b', ['192.0.2.3']]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => c.path), [`${svcPath('default', 'a')}/status`, `${svcPath('default', 'b')}/status`]);
  clock.advance(700);
  await flush();
  assert.equal(server.calls.length, 3);
  writer.dispose();
});

test('objects held by their interval are each written when theirs ends (the pass wakes for the earliest)', async () => {
  const { server, clock, writer, add, sync } = setup();
  for (const n of ['a', 'b', 'c']) add('default', n);
  const step = async (ms: number, want: Array<[string, string]>) => {
    clock.advance(ms);
    writer.update(new Map(want.map(([n, ip]) => [`default/${n}`, [ip]])));
    clock.advance(0);
    await flush();
    sync();
  };
  await step(3, [['b', '192.0.2.2']]); // b written at 3
  await step(102, [['a', '192.0.2.1'], ['b', '192.0.2.2']]); // a at 105
  await step(98, [['a', '192.0.2.1'], ['b', '192.0.2.2'], ['c', '192.0.2.3']]); // c at 203
  assert.equal(server.calls.length, 3);
  await step(197, [['a', '192.0.2.11'], ['b', '192.0.2.12'], ['c', '192.0.2.13']]); // at 400 all three wait: 705, 603, 803 ms
  const written = () => server.calls.slice(3).map((c) => c.path.split('/')[6]);
  for (const [ms, expect] of [[602, []], [1, ['b']], [101, ['b']], [1, ['b', 'a']], [97, ['b', 'a']], [1, ['b', 'a', 'c']]] as const) {
    clock.advance(ms);
    await flush();
    assert.deepEqual(written(), expect);
  }
  writer.dispose();
});

test('a pass that finds the token bucket part-full waits only for the rest of a token', async () => {
  const { server, clock, writer, add } = setup({ qps: 2, burst: 1, perServiceMs: 1, conflictRetries: 5, concurrency: 8 });
  add('default', 's0');
  add('default', 's1');
  writer.update(new Map([['default/s0', ['192.0.2.1']], ['default/s1', ['192.0.2.2']]]));
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 1);
  clock.advance(250);
  writer.recheck(); // half a token now: the pass waits 250 ms more
  clock.advance(0);
  await flush();
  clock.advance(249);
  await flush();
  assert.equal(server.calls.length, 1);
  clock.advance(1);
  await flush();
  assert.equal(server.calls.length, 2);
  writer.dispose();
});

test('an unexpected error in a write (the cache throws) is a failure, retried', async () => {
  let broken = false;
  const cacheOf = new Map<string, Obj>();
  const { server, clock, writer, add, cache, log } = setup(OPTS, {
    cached: (name, ns) => {
      if (broken) throw new Error('cache broken');
      return cacheOf.get(svcPath(ns, name));
    },
  });
  add('default', 'web');
  for (const [p, o] of cache) cacheOf.set(p, o);
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  broken = true;
  clock.advance(0);
  await flush();
  assert.equal(server.calls.length, 0);
  assert.equal(writer.stats.failures, 1);
  assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj]), [['warn', 'status write failed; retrying', { object: 'Service/default/web', err: 'cache broken' }]]);
  broken = false;
  clock.advance(10); // the retry pass: it waits out the rest of the object's interval
  await flush();
  clock.advance(990);
  await flush();
  assert.equal(server.calls.length, 1);
  assert.equal(writer.stats.writes, 1);
  writer.dispose();
});

test('an object no longer desired before its turn is not written', async () => {
  const { server, clock, writer, add, sync, log } = setup();
  add('default', 'web');
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  sync();
  clock.advance(300);
  writer.update(new Map([['default/web', ['192.0.2.2']]])); // waits for its interval
  writer.update(new Map());
  clock.advance(0);
  await flush();
  clock.advance(700);
  await flush();
  assert.equal(server.calls.length, 1);
  assert.deepEqual(writer.stats, { writes: 1, conflicts: 0, refused: 0, failures: 0, pending: 0 });
  assert.deepEqual(log.lines.map((l) => l.level), ['debug']);
  writer.dispose();
});

test('a 409 whose re-read already shows the desired status writes nothing more', async () => {
  const { server, clock, writer, add } = setup();
  add('default', 'web');
  // Another writer sets the same status; the cache has not seen it yet.
  server.put(svcPath('default', 'web'), { ...server.objects.get(svcPath('default', 'web'))!, status: { loadBalancer: { ingress: [{ ip: '192.0.2.1', ipMode: 'VIP' }] } } });
  writer.update(new Map([['default/web', ['192.0.2.1']]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(server.calls.map((c) => c.method), ['PUT', 'GET']);
  assert.deepEqual(writer.stats, { writes: 0, conflicts: 1, refused: 0, failures: 0, pending: 0 });
  writer.dispose();
});

test('a writer disposed while a pass runs writes no more', async () => {
  const { server, clock, writer, add } = setup({ ...OPTS, concurrency: 1 });
  for (let i = 0; i < 3; i++) add('default', `s${i}`);
  server.hold = true;
  writer.update(new Map([0, 1, 2].map((i) => [`default/s${i}`, [`192.0.2.${i + 1}`]])));
  clock.advance(0);
  await flush();
  writer.dispose();
  server.release();
  await flush();
  assert.equal(server.calls.length, 1);
});
