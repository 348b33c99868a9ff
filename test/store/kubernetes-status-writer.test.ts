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
import { PoolStatusWriter, ServiceStatusWriter, type ServiceStatusOptions } from '../../src/store/kubernetes/service-status.js';
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

function setup(opts: ServiceStatusOptions = OPTS, extra: { active?: () => boolean; events?: EventRecorder } = {}) {
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
  const events = new EventRecorder({ client: evClient, node: 'n1', log: recordingLogger(), clock: clock0 });
  const { clock, writer, add, sync } = setup(OPTS, { events });
  add('default', 'web');
  writer.update(new Map([['default/web', []]]), new Map([['default/web', satisfied('True')]]));
  clock.advance(0);
  await flush();
  assert.equal(sent.length, 0, 'True: no Event');
  sync();
  clock.advance(1000);
  writer.update(new Map([['default/web', []]]), new Map([['default/web', satisfied('False')]]));
  clock.advance(0);
  await flush();
  assert.deepEqual(sent.map((e) => [e.type, e.reason, e.message, e.involvedObject.name]), [['Warning', 'IPAMRequestNotSatisfied', 'no_pool: no pool matches', 'web']]);
  // The same False condition written again (the IPs changed): no second Event; another message: one more.
  sync();
  clock.advance(1000);
  writer.update(new Map([['default/web', ['192.0.2.1']]]), new Map([['default/web', satisfied('False')]]));
  clock.advance(0);
  await flush();
  assert.equal(sent.length, 1);
  sync();
  clock.advance(1000);
  writer.update(new Map([['default/web', ['192.0.2.1']]]), new Map([['default/web', satisfied('False', 'no_pool', 'other')]]));
  clock.advance(0);
  await flush();
  assert.equal(sent.length, 2);
  sync();
  clock.advance(1000);
  writer.update(new Map([['default/web', ['192.0.2.1']]]), new Map([['default/web', satisfied('False', 'other_reason', 'other')]]));
  clock.advance(0);
  await flush();
  assert.equal(sent.length, 3);
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
