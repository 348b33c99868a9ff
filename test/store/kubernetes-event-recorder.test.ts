/**
 * The Event recorder's own logic on a manual clock, with the API server's
 * one call (`request`) recorded instead of sent: what an Event carries, the
 * message bound, the repeat window, the shared token bucket, failures; and
 * which objects KubeIntentEvents puts Events on. The Events reaching a real
 * kube-apiserver are tested in kubernetes-events.test.ts (slow: a real API
 * server per run).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubeClient, KubeObject } from '../../src/intent/sources/kube-client.js';
import type { KubeResource } from '../../src/intent/sources/kubernetes.js';
import { EVENT_REASONS, EventRecorder, KubeIntentEvents, eventDefaults, type EventOptions } from '../../src/store/kubernetes/events.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

interface Sent {
  method: string;
  path: string;
  body: Record<string, any>;
}

function recorder(opts: EventOptions = { qps: 1, burst: 20, repeatMs: 60_000 }, fail?: (n: number) => Error | undefined) {
  const sent: Sent[] = [];
  const client = {
    request: async (method: string, path: string, body: Record<string, any>) => {
      sent.push({ method, path, body });
      const e = fail?.(sent.length);
      if (e) throw e;
      return {};
    },
  } as unknown as KubeClient;
  const clock = new ManualClock();
  clock.advance(1_000_000);
  const log = recordingLogger();
  const events = new EventRecorder({ client, node: 'node-a', log, clock }, opts);
  return { events, sent, clock, log };
}

const settle = () => new Promise((r) => setImmediate(r));
const svc = (name: string, namespace = 'default', uid?: string): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace, ...(uid ? { uid } : {}) } });

test('an Event names its object (namespace and uid when it has them), comes from herald on this node, and is POSTed to its namespace', async () => {
  const { events, sent } = recorder();
  events.warn(svc('web', 'team a', 'u-1'), 'InvalidIntent', 'bad annotation');
  events.record({ apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'pool' } }, 'Normal', 'R', 'm');
  await settle();
  assert.equal(sent.length, 2);
  const [a, b] = sent as [Sent, Sent];
  assert.equal(a.method, 'POST');
  assert.equal(a.path, '/api/v1/namespaces/team%20a/events');
  const stamp = a.body.firstTimestamp as string;
  assert.match(stamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, 'whole seconds, as the API server stores them');
  assert.deepEqual(a.body, {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { generateName: 'web.', namespace: 'team a' },
    involvedObject: { apiVersion: 'v1', kind: 'Service', name: 'web', namespace: 'team a', uid: 'u-1' },
    type: 'Warning',
    reason: 'InvalidIntent',
    message: 'bad annotation',
    source: { component: 'herald', host: 'node-a' },
    reportingComponent: 'herald',
    reportingInstance: 'node-a',
    firstTimestamp: stamp,
    lastTimestamp: stamp,
    count: 1,
  });
  // A cluster-scoped object: its Events live in `default` (where kubectl looks), its reference has no namespace.
  assert.equal(b.path, '/api/v1/namespaces/default/events');
  assert.deepEqual(b.body.metadata, { generateName: 'pool.', namespace: 'default' });
  assert.deepEqual(b.body.involvedObject, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', name: 'pool' });
  assert.equal(b.body.type, 'Normal');
});

test('a message up to 1,000 characters is kept whole; a longer one is cut to 999 and an ellipsis', async () => {
  const { events, sent } = recorder();
  events.warn(svc('a'), 'R', 'x'.repeat(1000));
  events.warn(svc('b'), 'R', `${'y'.repeat(999)}zz`);
  await settle();
  assert.equal(sent[0]!.body.message, 'x'.repeat(1000));
  assert.equal(sent[1]!.body.message, `${'y'.repeat(999)}…`);
});

test('the same Event is not repeated within repeatMs; another object, namespace, kind, reason or message is another Event', async () => {
  const { events, sent, clock } = recorder({ qps: 100, burst: 100, repeatMs: 60_000 });
  events.warn(svc('web'), 'R', 'm');
  events.warn(svc('web'), 'R', 'm');
  events.warn(svc('web2'), 'R', 'm');
  events.warn(svc('web', 'other'), 'R', 'm');
  events.warn({ ...svc('web'), kind: 'Pod' }, 'R', 'm');
  events.warn(svc('web'), 'R2', 'm');
  events.warn(svc('web'), 'R', 'm2');
  assert.deepEqual(events.stats, { sent: 0, repeats: 1, dropped: 0, failures: 0 });
  clock.advance(59_999);
  events.warn(svc('web'), 'R', 'm');
  assert.equal(events.stats.repeats, 2, 'one ms before the window ends');
  clock.advance(1);
  events.warn(svc('web'), 'R', 'm');
  await settle();
  assert.deepEqual(events.stats, { sent: 7, repeats: 2, dropped: 0, failures: 0 });
  assert.equal(sent.length, 7);
});

test('one token bucket for all Events: burst at once, then qps per second, never more than burst saved up', async () => {
  const { events, sent, clock } = recorder({ qps: 2, burst: 3, repeatMs: 60_000 });
  let n = 0;
  const one = () => events.warn(svc(`s${n++}`), 'R', 'm');
  for (let i = 0; i < 4; i++) one();
  assert.equal(events.stats.dropped, 1, 'three sent (the third on the last whole token), the fourth dropped');
  clock.advance(499);
  one();
  assert.equal(events.stats.dropped, 2, '499 ms at 2/s: not yet a token');
  clock.advance(1);
  one();
  one();
  assert.equal(events.stats.dropped, 3, '500 ms at 2/s: one token');
  clock.advance(60_000);
  for (let i = 0; i < 4; i++) one();
  assert.equal(events.stats.dropped, 4, 'a long quiet time saves up only burst tokens');
  await settle();
  assert.equal(sent.length, 3 + 1 + 3);
  assert.equal(events.stats.sent, 7);
});

test('the repeat memory is pruned of expired keys once it holds more than 10,000; keys still in their window stay', async () => {
  const { events, clock } = recorder({ qps: 1, burst: 20_000, repeatMs: 60_000 });
  // The bound is on memory only: the map's size is the one place it shows.
  const size = () => (events as unknown as { last: Map<string, number> }).last.size;
  for (let i = 0; i < 9_999; i++) events.warn(svc(`s${i}`), 'R', 'm');
  clock.advance(60_000);
  events.warn(svc('a'), 'R', 'm');
  assert.equal(size(), 10_000, 'at the bound: not pruned');
  events.warn(svc('b'), 'R', 'm');
  assert.equal(size(), 2, 'past it: every key as old as repeatMs goes');
  events.warn(svc('a'), 'R', 'm');
  events.warn(svc('s0'), 'R', 'm');
  assert.equal(events.stats.repeats, 1, 'a key in its window is still a repeat; an expired one is sent again');
  assert.equal(events.stats.dropped, 0);
  await settle();
  assert.equal(events.stats.sent, 10_002);
});

test('the defaults: a burst of 20 Events, then one a second; the same Event not repeated within 5 minutes', async () => {
  assert.deepEqual(eventDefaults, { qps: 1, burst: 20, repeatMs: 300_000 });
  const sent: unknown[] = [];
  const client = { request: async (_m: string, _p: string, body: unknown) => void sent.push(body) } as unknown as KubeClient;
  const clock = new ManualClock();
  const events = new EventRecorder({ client, node: 'node-a', log: recordingLogger(), clock });
  for (let i = 0; i < 21; i++) events.warn(svc(`s${i}`), 'R', 'm');
  assert.deepEqual(events.stats, { sent: 0, repeats: 0, dropped: 1, failures: 0 });
  clock.advance(999);
  events.warn(svc('t'), 'R', 'm');
  assert.equal(events.stats.dropped, 2, 'not yet a second');
  clock.advance(1);
  events.warn(svc('t'), 'R', 'm');
  clock.advance(299_999 - 1000); // 299,999 ms after s0
  events.warn(svc('s0'), 'R', 'm');
  assert.equal(events.stats.repeats, 1);
  clock.advance(1);
  events.warn(svc('s0'), 'R', 'm');
  await settle();
  assert.deepEqual(events.stats, { sent: 22, repeats: 1, dropped: 2, failures: 0 });
});

test('an Event the API server refuses is counted and logged, never thrown', async () => {
  const { events, log } = recorder(undefined, () => new Error('forbidden'));
  events.warn(svc('web'), 'InvalidIntent', 'm');
  await settle();
  assert.deepEqual(events.stats, { sent: 0, repeats: 0, dropped: 0, failures: 1 });
  assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj]), [['warn', 'kubernetes event not recorded', { object: 'Service/web', reason: 'InvalidIntent', err: 'forbidden' }]]);
});

const RESOURCES: KubeResource[] = [
  { kind: 'Service', apiVersion: 'v1', path: '/api/v1/services' },
  { kind: 'CiliumLoadBalancerIPPool', apiVersion: 'cilium.io/v2alpha1', path: '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools' },
] as KubeResource[];

const ANNOUNCED: Record<string, string[]> = { '192.0.2.10': ['default/web', 'team/api', 'gone/svc'] };

function intentEvents(active = true, announced: Record<string, string[]> = ANNOUNCED) {
  const r = recorder({ qps: 100, burst: 100, repeatMs: 60_000 });
  const cache = new Map<string, KubeObject>([
    ['Service/default/web', { metadata: { name: 'web', namespace: 'default', uid: 'u-web' } }],
    ['Service/team/api', { metadata: { name: 'api', namespace: 'team' } }],
    ['CiliumLoadBalancerIPPool//pool', { metadata: { name: 'pool' } }],
    // Cached, but of a kind that is not one of the intent resources: never an Event.
    ['Secret/default/s', { metadata: { name: 's', namespace: 'default' } }],
    ['Secret/default/web', { metadata: { name: 'web', namespace: 'default' } }],
  ]);
  const lookups: string[] = [];
  const ie = new KubeIntentEvents({
    events: r.events,
    servicesOf: (ip) => announced[ip] ?? [],
    cached: (kind, name, namespace) => {
      lookups.push(`${kind}/${namespace ?? ''}/${name}`);
      return cache.get(`${kind}/${namespace ?? ''}/${name}`);
    },
    resources: RESOURCES,
    active: () => active,
  });
  return { ...r, ie, lookups };
}

test('an ownership move is a Normal IPOwnerChanged Event on every cached Service the IP is announced for', async () => {
  const { ie, sent, lookups } = intentEvents();
  ie.moved({ ip: '192.0.2.10', to: 'node-b', from: 'node-a', cause: 'expired' });
  ie.moved({ ip: '198.51.100.1', to: 'node-b', cause: 'free' });
  await settle();
  assert.deepEqual(lookups, ['Service/default/web', 'Service/team/api', 'Service/gone/svc']);
  assert.deepEqual(sent.map((s) => [s.path, s.body.type, s.body.reason, s.body.involvedObject]), [
    ['/api/v1/namespaces/default/events', 'Normal', EVENT_REASONS.moved, { apiVersion: 'v1', kind: 'Service', name: 'web', namespace: 'default', uid: 'u-web' }],
    ['/api/v1/namespaces/team/events', 'Normal', EVENT_REASONS.moved, { apiVersion: 'v1', kind: 'Service', name: 'api', namespace: 'team' }],
  ]);
  assert.equal(sent[0]!.body.message, 'node-b now announces 192.0.2.10: took it over from node-a, whose node Lease expired');
});

test('a fence is a Warning OwnerFenced Event once on every cached Service of the silent IP and of every IP the node held', async () => {
  const announced = { '192.0.2.10': ['default/web', 'team/api', 'gone/svc'], '192.0.2.11': ['team/api'], '192.0.2.12': ['default/web'] };
  const { ie, sent, lookups } = intentEvents(true, announced);
  // The silent IP among those it held: the held IPs in their order, each Service looked up once.
  const held = { node: 'node-a', by: 'node-b', silentIp: '192.0.2.10', ips: ['192.0.2.11', '192.0.2.10'] };
  ie.fenced(held);
  await settle();
  assert.deepEqual(lookups, ['Service/team/api', 'Service/default/web', 'Service/gone/svc']);
  assert.deepEqual(sent.map((s) => [s.path, s.body.type, s.body.reason, s.body.involvedObject]), [
    ['/api/v1/namespaces/team/events', 'Warning', EVENT_REASONS.fenced, { apiVersion: 'v1', kind: 'Service', name: 'api', namespace: 'team' }],
    ['/api/v1/namespaces/default/events', 'Warning', EVENT_REASONS.fenced, { apiVersion: 'v1', kind: 'Service', name: 'web', namespace: 'default', uid: 'u-web' }],
  ]);
  assert.equal(
    sent[0]!.body.message,
    'node-b fenced out node-a: it stopped answering for 192.0.2.10 on the wire while its node Lease still ran (a lost link, a frozen agent); its node Lease was deleted, so its IPs move now instead of at Lease expiry',
  );
  // The silent IP not among them (the record keeps at most 100 of the IPs held): it comes first.
  lookups.length = 0;
  sent.length = 0;
  ie.fenced({ node: 'node-c', by: 'node-b', silentIp: '192.0.2.12', ips: ['192.0.2.11'] });
  await settle();
  assert.deepEqual(lookups, ['Service/default/web', 'Service/team/api']);
  assert.deepEqual(sent.map((s) => s.body.involvedObject.name), ['web', 'api']);
  assert.match(sent[0]!.body.message, /^node-b fenced out node-c: it stopped answering for 192\.0\.2\.12 /);
});

test('refused objects: one Warning InvalidIntent per object with all its errors, from the active node only; unknown or uncached objects skipped', async () => {
  const diag = (file: string, path: string, message: string) => ({ file, path, message, severity: 'error' as const });
  const errors = [
    diag('kubernetes/Service/default/web', 'metadata.annotations', 'bad IP'),
    diag('kubernetes/CiliumLoadBalancerIPPool/_cluster/pool', 'spec.blocks[0]', 'bad block'),
    diag('kubernetes/Service/default/web', '', 'also this'),
    diag('kubernetes/Service/default/missing', '', 'not cached'),
    diag('kubernetes/Secret/default/s', '', 'no such resource'),
    diag('kubernetes/Service/web', '', 'three parts'),
    diag('kubernetes/Service/default/web/extra', '', 'five parts'),
    diag('file/Service/default/web', '', 'not from kubernetes'),
  ];
  const passive = intentEvents(false);
  passive.ie.rejected(errors);
  passive.ie.warned({ kind: 'Service', name: 'web', namespace: 'default', message: 'w' });
  await settle();
  assert.equal(passive.sent.length, 0, 'not the LB-IPAM leader: no Events');
  const { ie, sent } = intentEvents();
  ie.rejected(errors);
  await settle();
  assert.deepEqual(sent.map((s) => [s.body.type, s.body.reason, s.body.involvedObject.kind, s.body.involvedObject.name, s.body.message]), [
    ['Warning', 'InvalidIntent', 'Service', 'web', 'herald refused this object (the intent in force before the change stays until it is fixed): metadata.annotations: bad IP; also this'],
    ['Warning', 'InvalidIntent', 'CiliumLoadBalancerIPPool', 'pool', 'herald refused this object (the intent in force before the change stays until it is fixed): spec.blocks[0]: bad block'],
  ]);
  assert.equal(sent[1]!.body.involvedObject.apiVersion, 'cilium.io/v2alpha1');
  assert.equal(sent[1]!.body.involvedObject.namespace, undefined, 'cluster-scoped: looked up without a namespace');
});

test('a warning on an accepted object is a Warning IntentWarning on it; unknown kinds and uncached objects get none', async () => {
  const { ie, sent } = intentEvents();
  ie.warned({ kind: 'Service', name: 'api', namespace: 'team', message: 'names a missing CiliumCIDRGroup' });
  ie.warned({ kind: 'Secret', name: 'web', namespace: 'default', message: 'unknown kind' });
  ie.warned({ kind: 'Service', name: 'nope', namespace: 'team', message: 'not cached' });
  await settle();
  assert.deepEqual(sent.map((s) => [s.body.type, s.body.reason, s.body.involvedObject, s.body.message]), [
    ['Warning', EVENT_REASONS.warning, { apiVersion: 'v1', kind: 'Service', name: 'api', namespace: 'team' }, 'names a missing CiliumCIDRGroup'],
  ]);
});
