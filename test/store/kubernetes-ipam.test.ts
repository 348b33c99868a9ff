/**
 * LB-IPAM under leader election against a real kube-apiserver: three
 * control planes (intent from informers, ownership on Leases, the
 * KubeIpamCoordinator, the status writer; no datapath) → exactly one, the
 * holder of Lease `herald-ipam`, allocates and writes
 * `status.loadBalancer.ingress`; the others follow the written status.
 * The leader stops dead (no release, no more renewals: what kill -9 leaves)
 * → another node takes the Lease over once the leader's node Lease expired,
 * imports the statuses, and no IP changes; a new Service is then allocated
 * by the new leader.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import { KubeClient } from '../../src/intent/sources/kube-client.js';
import { EventRecorder } from '../../src/store/kubernetes/events.js';
import { IPAM_ELECTION } from '../../src/store/kubernetes/ipam.js';
import { applyObject, applyYaml, startKube, type KubeServer } from '../helpers/kube.js';
import { kubeControlPlane, type KubeControlPlane } from '../helpers/kube-control-plane.js';

let kube: KubeServer;
const ROOT = new URL('../../', import.meta.url);
const NS = 'herald-system';
const DURATION_S = 3;
const OPTS = { namespace: NS, durationS: DURATION_S, renewMs: 500, safetyMs: 300, contendDelayMs: 200, handoverHoldMs: 1000, skipPreferredMs: 10_000 };

before(async () => {
  kube = await startKube();
  await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/crds.yaml', ROOT), 'utf8'));
  await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/rbac.yaml', ROOT), 'utf8'));
  const subjects = [{ kind: 'Group', name: 'herald:agents', apiGroup: 'rbac.authorization.k8s.io' }];
  await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'herald-agent-test' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'herald-agent' }, subjects });
  await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'herald-leases-test', namespace: NS }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'herald-leases' }, subjects });
});
after(async () => {
  await kube?.stop();
});

async function waitFor(what: string, fn: () => boolean | Promise<boolean>, timeoutMs = 30_000, onTimeout?: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${onTimeout ? `: ${onTimeout()}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const controlPlane = (node: string) => kubeControlPlane(kube, node, { lease: OPTS });

const SERVICES = ['web', 'api', 'db', 'cache'];
const ingressOf = async (name: string): Promise<string[]> => {
  const r = await kube.api('GET', `/api/v1/namespaces/default/services/${name}`);
  return ((r.body?.status?.loadBalancer?.ingress ?? []) as { ip: string }[]).map((i) => i.ip);
};
const leaseHolder = async (): Promise<string | undefined> => (await kube.api('GET', `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${IPAM_ELECTION}`)).body?.spec?.holderIdentity;

test('LB-IPAM under leader election: only the herald-ipam leader allocates and writes status; a dead leader is replaced within the Lease duration and no IP changes', { timeout: 120_000 }, async () => {
  await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'ipam-pool' }, spec: { blocks: [{ start: '198.51.100.100', stop: '198.51.100.119' }], serviceSelector: { matchLabels: { test: 'one' } } } });
  for (const name of SERVICES) await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default', labels: { test: 'one' } }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
  const alive = new Set<KubeControlPlane>();
  try {
    for (const name of ['node-1', 'node-2', 'node-3']) alive.add(await controlPlane(name));
    const nodes = [...alive];
    let before = new Map<string, string[]>();
    await waitFor('status.loadBalancer.ingress on every Service', async () => {
      before = new Map(await Promise.all(SERVICES.map(async (s) => [s, await ingressOf(s)] as const)));
      return [...before.values()].every((ips) => ips.length === 1);
    });
    assert.equal(new Set([...before.values()].flat()).size, SERVICES.length, 'distinct IPs');

    // One leader, named by the Lease; every node agrees; only it wrote.
    const holder = await leaseHolder();
    assert.ok(holder, 'the herald-ipam Lease names a holder');
    await waitFor('every node sees the same allocator', () => nodes.every((n) => n.election.leader() === holder && n.cp.status().allocator === holder));
    const leader = nodes.find((n) => n.node === holder)!;
    assert.equal(nodes.filter((n) => n.election.isLeader()).length, 1, 'exactly one leader');
    assert.ok(leader.writer.stats.writes >= SERVICES.length, `the leader wrote (${leader.writer.stats.writes})`);
    for (const n of nodes) if (n !== leader) assert.equal(n.writer.stats.writes, 0, `${n.node} wrote nothing`);
    // Followers announce what the leader wrote: their LB-IPAM result has the same IPs, satisfied.
    for (const n of nodes) {
      await waitFor(`${n.node} follows the written status`, () =>
        SERVICES.every((s) => {
          const svc = n.cp.status().ipam?.services.get(`default/${s}`);
          return svc?.condition.status === 'True' && JSON.stringify(svc.ingress) === JSON.stringify(before.get(s));
        }),
      );
    }

    // The leader dies without a word.
    const t0 = Date.now();
    leader.crash();
    alive.delete(leader);
    const rest = nodes.filter((n) => n !== leader);
    // Expiry is judged from when each follower saw the last renewal, plus a pass and a claim: generous for a loaded machine (the gap is logged).
    await waitFor('another node leads', () => rest.some((n) => n.election.isLeader()), DURATION_S * 1000 + 10_000);
    const gap = Date.now() - t0;
    const successor = rest.find((n) => n.election.isLeader())!;
    console.log(`k8s ipam: ${successor.node} leads ${gap} ms after ${leader.node} stopped dead (Lease duration ${DURATION_S} s, renew ${OPTS.renewMs} ms)`);
    assert.equal(await leaseHolder(), successor.node);
    assert.equal(rest.filter((n) => n.election.isLeader()).length, 1, 'still one leader');

    // A new Service is allocated by the successor; nothing that was written moved.
    await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'late', namespace: 'default', labels: { test: 'one' } }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
    await waitFor('the new Service gets an IP', async () => (await ingressOf('late')).length === 1);
    for (const s of SERVICES) assert.deepEqual(await ingressOf(s), before.get(s), `${s} kept its IP across the leader change`);
    assert.ok(!new Set([...before.values()].flat()).has((await ingressOf('late'))[0]!), 'a free IP, not a taken one');
    for (const n of rest) if (n !== successor) assert.equal(n.writer.stats.writes, 0, `${n.node} still wrote nothing`);
  } finally {
    for (const n of alive) n.crash();
  }
});

const condition = async (name: string) => {
  const r = await kube.api('GET', `/api/v1/namespaces/default/services/${name}`);
  return ((r.body?.status?.conditions ?? []) as { type: string; status: string; reason: string; message: string; lastTransitionTime: string }[]).find((c) => c.type === 'cilium.io/IPAMRequestSatisfied');
};
const eventsFor = async (name: string) => {
  const r = await kube.api('GET', `/api/v1/namespaces/default/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`);
  return (r.body?.items ?? []) as { reason: string; type: string; message: string; source: { host: string }; involvedObject: { kind: string } }[];
};

test('conditions and Events as Cilium writes them: IPAMRequestSatisfied with its reason, pool counts, a Warning Event per failure (not repeated); only the leader writes', { timeout: 120_000 }, async () => {
  await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'tiny' }, spec: { blocks: [{ start: '198.51.100.130' }], serviceSelector: { matchLabels: { test: 'two' } } } });
  const svc = (name: string, labels: Record<string, string>) => applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default', labels }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
  await svc('two-a', { test: 'two' });
  await new Promise((r) => setTimeout(r, 1100)); // older: creationTimestamp has whole seconds, and the oldest is served first
  await svc('two-b', { test: 'two' });
  await svc('two-c', { test: 'three' });
  const alive = new Set<KubeControlPlane>();
  try {
    for (const name of ['node-4', 'node-5']) alive.add(await controlPlane(name));
    const nodes = [...alive];
    await waitFor('conditions on every Service', async () => (await condition('two-a'))?.status === 'True' && (await condition('two-b'))?.status === 'False' && (await condition('two-c'))?.status === 'False');
    const a = (await condition('two-a'))!;
    assert.equal(a.reason, 'satisfied');
    assert.deepEqual(await ingressOf('two-a'), ['198.51.100.130']);
    const b = (await condition('two-b'))!;
    assert.equal(b.reason, 'out_of_ips', b.message);
    assert.ok(b.lastTransitionTime, 'a metav1.Condition carries lastTransitionTime');
    assert.deepEqual(await ingressOf('two-b'), []);
    const c = (await condition('two-c'))!;
    assert.ok(['no_pool', 'pool_selector_mismatch'].includes(c.reason), `${c.reason}: ${c.message}`);

    // Pool conditions, as Cilium's operator writes them.
    let poolConds: { type: string; status: string; reason: string; message: string }[] = [];
    await waitFor('pool conditions', async () => {
      const r = await kube.api('GET', '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools/tiny');
      poolConds = r.body?.status?.conditions ?? [];
      return poolConds.some((x) => x.type === 'cilium.io/IPsUsed' && x.message === '1');
    });
    const by = new Map(poolConds.map((x) => [x.type, x] as const));
    assert.equal(by.get('cilium.io/IPsTotal')?.message, '1');
    assert.equal(by.get('cilium.io/IPsAvailable')?.message, '0');
    assert.equal(by.get('cilium.io/IPsUsed')?.status, 'Unknown');
    assert.equal(by.get('cilium.io/IPsUsed')?.reason, 'noreason');
    assert.equal(by.get('cilium.io/PoolConflict')?.status, 'False');

    // One Warning Event per failure, from the leader, not repeated by resyncs.
    const leader = nodes.find((n) => n.election.isLeader())!;
    assert.ok(leader, 'a leader');
    await waitFor('Events for two-b and two-c', async () => (await eventsFor('two-b')).length > 0 && (await eventsFor('two-c')).length > 0);
    await new Promise((r) => setTimeout(r, 1500)); // several resyncs (500 ms)
    const evB = await eventsFor('two-b');
    assert.equal(evB.length, 1, JSON.stringify(evB));
    assert.equal(evB[0]!.type, 'Warning');
    assert.equal(evB[0]!.reason, 'IPAMRequestNotSatisfied');
    assert.match(evB[0]!.message, /^out_of_ips: /);
    assert.equal(evB[0]!.source.host, leader.node);
    for (const n of nodes) if (n !== leader) assert.equal(n.writer.stats.writes + n.pools.stats.writes + n.events.stats.sent, 0, `${n.node} wrote nothing`);

    // The IP is freed: two-b gets it; its condition turns True with a new transition time.
    await kube.api('DELETE', '/api/v1/namespaces/default/services/two-a');
    await waitFor('two-b satisfied', async () => (await condition('two-b'))?.status === 'True');
    const b2 = (await condition('two-b'))!;
    assert.equal(b2.reason, 'satisfied');
    assert.notEqual(b2.lastTransitionTime, undefined);
    assert.deepEqual(await ingressOf('two-b'), ['198.51.100.130']);
    assert.equal((await eventsFor('two-b')).length, 1, 'no Event for a satisfied request');
  } finally {
    for (const n of alive) n.crash();
  }
});

test('Events are rate-limited: the same one is not repeated, and a burst beyond the bucket is dropped and counted', { timeout: 60_000 }, async () => {
  const obj = await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'flappy', namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
  const client = await KubeClient.create({ kubeconfig: kube.kubeconfig('herald:node-ev', ['herald:agents']) });
  const events = new EventRecorder({ client, node: 'node-ev', log: silentLogger }, { qps: 0.001, burst: 3, repeatMs: 60_000 });
  const target = { ...obj, apiVersion: 'v1', kind: 'Service' };
  events.warn(target, 'IPAMRequestNotSatisfied', 'out_of_ips: one');
  events.warn(target, 'IPAMRequestNotSatisfied', 'out_of_ips: one'); // the same: not repeated
  for (let i = 0; i < 10; i++) events.warn(target, 'IPAMRequestNotSatisfied', `out_of_ips: flap ${i}`);
  await waitFor('the Events sent', () => events.stats.sent + events.stats.failures >= 3);
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual({ ...events.stats }, { sent: 3, repeats: 1, dropped: 8, failures: 0 });
  // This recorder's Events only: an agent of an earlier test still winding down may warn about the new Service too.
  assert.equal((await eventsFor('flappy')).filter((e) => e.source.host === 'node-ev').length, 3);
});
