/**
 * Kubernetes Events for ownership moves and refused objects, against a real
 * kube-apiserver (control planes as agent.ts composes them, no datapath):
 *
 * - A Service with a bad annotation, a pool and a policy herald refuses
 *   (each accepted by the API server: its CRD schema cannot tell) → one
 *   Warning Event `InvalidIntent` on each, with the field path and herald's
 *   message, sent by the LB-IPAM leader alone; later changes re-reject the
 *   same objects without repeating the Events.
 * - Ownership: the node that claims an IP says so on the Service (Normal
 *   `IPOwnerChanged`, "node-x now announces <ip>: …"); its holder stops dead
 *   → the node that takes over after the node Lease expired records who had
 *   it and why.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { EVENT_REASONS } from '../../src/store/kubernetes/events.js';
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

async function waitFor(what: string, fn: () => boolean | Promise<boolean>, timeoutMs = 30_000, onTimeout?: () => string | Promise<string>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${onTimeout ? `: ${await onTimeout()}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

type KubeEvent = { reason: string; type: string; message: string; count: number; source: { host: string }; involvedObject: { kind: string; name: string; apiVersion: string } };
const eventsFor = async (name: string, reason: string, namespace = 'default'): Promise<KubeEvent[]> => {
  const r = await kube.api('GET', `/api/v1/namespaces/${namespace}/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`);
  return ((r.body?.items ?? []) as KubeEvent[]).filter((e) => e.reason === reason);
};

test('a refused Service, pool and policy each get one Warning Event InvalidIntent with the precise error, from the leader only, not repeated', { timeout: 120_000 }, async () => {
  await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'ev-good' }, spec: { blocks: [{ cidr: '198.51.100.64/28' }] } });
  const nodes: KubeControlPlane[] = [];
  try {
    for (const name of ['node-r1', 'node-r2']) nodes.push(await kubeControlPlane(kube, name, { lease: OPTS }));
    await waitFor('a leader', () => nodes.some((n) => n.election.isLeader()));
    const leader = nodes.find((n) => n.election.isLeader())!;

    await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'ev-bad-svc', namespace: 'default', annotations: { 'lbipam.cilium.io/ips': 'not-an-ip' } }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'ev-bad-pool' }, spec: { blocks: [{ start: '198.51.100.90', stop: '198.51.100.80' }] } });
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'ev-bad-policy' }, spec: { interfaces: ['(['], loadBalancerIPs: true } });

    await waitFor('Events on the three refused objects', async () => (await eventsFor('ev-bad-svc', EVENT_REASONS.rejected)).length > 0 && (await eventsFor('ev-bad-pool', EVENT_REASONS.rejected)).length > 0 && (await eventsFor('ev-bad-policy', EVENT_REASONS.rejected)).length > 0, 30_000, () => JSON.stringify(nodes.map((n) => n.rejected.at(-1)?.map((e) => `${e.file} ${e.path}: ${e.message}`))));
    // Each Event carries what the rejection says about that object: its field path and message.
    const last = leader.rejected.at(-1)!;
    for (const [name, kind, key] of [
      ['ev-bad-svc', 'Service', 'kubernetes/Service/default/ev-bad-svc'],
      ['ev-bad-pool', 'CiliumLoadBalancerIPPool', 'kubernetes/CiliumLoadBalancerIPPool/_cluster/ev-bad-pool'],
      ['ev-bad-policy', 'CiliumL2AnnouncementPolicy', 'kubernetes/CiliumL2AnnouncementPolicy/_cluster/ev-bad-policy'],
    ] as const) {
      const [ev, ...more] = await eventsFor(name, EVENT_REASONS.rejected);
      assert.equal(more.length, 0, `one Event on ${name}`);
      assert.equal(ev!.type, 'Warning');
      assert.equal(ev!.involvedObject.kind, kind);
      assert.equal(ev!.source.host, leader.node, 'sent by the leader');
      const errors = last.filter((e) => e.file === key);
      assert.ok(errors.length > 0, `${key} is among the rejection's errors`);
      for (const e of errors) assert.ok(ev!.message.includes(e.path ? `${e.path}: ${e.message}` : e.message), `${name}: ${ev!.message} names ${e.path}: ${e.message}`);
    }
    assert.match((await eventsFor('ev-bad-svc', EVENT_REASONS.rejected))[0]!.message, /lbipam\.cilium\.io\/ips/);
    for (const n of nodes) if (n !== leader) assert.equal(n.events.stats.sent, 0, `${n.node} sent no Event`);

    // Another change: rejected again (the bad objects are still there), no repeated Event.
    const sentBefore = leader.events.stats.sent;
    const rejectionsBefore = leader.rejected.length;
    await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'ev-good-svc', namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
    await waitFor('the next change rejected too', () => leader.rejected.length > rejectionsBefore);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(leader.events.stats.sent, sentBefore, 'no Event repeated');
    assert.ok(leader.events.stats.repeats >= 3, `repeats counted (${leader.events.stats.repeats})`);
    for (const name of ['ev-bad-svc', 'ev-bad-pool', 'ev-bad-policy']) assert.equal((await eventsFor(name, EVENT_REASONS.rejected)).length, 1, name);
  } finally {
    for (const n of nodes) n.crash();
    // Everything this test made goes (the next test's Service must draw from its own pool only).
    for (const path of ['/api/v1/namespaces/default/services/ev-bad-svc', '/api/v1/namespaces/default/services/ev-good-svc', '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools/ev-bad-pool', '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools/ev-good', '/apis/cilium.io/v2alpha1/ciliuml2announcementpolicies/ev-bad-policy']) await kube.api('DELETE', path);
  }
});

test('a CiliumNetworkPolicy naming a CiliumCIDRGroup that does not exist gets a Warning Event IntentWarning naming rule and group, from the leader only', { timeout: 120_000 }, async () => {
  const nodes: KubeControlPlane[] = [];
  try {
    for (const name of ['node-w1', 'node-w2']) nodes.push(await kubeControlPlane(kube, name, { lease: OPTS }));
    await waitFor('a leader', () => nodes.some((n) => n.election.isLeader()));
    const leader = nodes.find((n) => n.election.isLeader())!;
    await applyObject(kube, {
      apiVersion: 'cilium.io/v2',
      kind: 'CiliumNetworkPolicy',
      metadata: { name: 'ev-cidr-group', namespace: 'default' },
      spec: { endpointSelector: { matchLabels: { app: 'web' } }, ingress: [{ fromCIDRSet: [{ cidrGroupRef: 'office' }] }] },
    });
    await waitFor('the IntentWarning Event', async () => (await eventsFor('ev-cidr-group', EVENT_REASONS.warning)).length > 0, 30_000);
    const [ev, ...more] = await eventsFor('ev-cidr-group', EVENT_REASONS.warning);
    assert.equal(more.length, 0);
    assert.equal(ev!.type, 'Warning');
    assert.equal(ev!.involvedObject.kind, 'CiliumNetworkPolicy');
    assert.equal(ev!.source.host, leader.node, 'sent by the leader');
    assert.equal(ev!.message, 'spec.ingress[0].fromCIDRSet[0].cidrGroupRef: CiliumCIDRGroup "office" does not exist: this rule allows from none of its CIDRs until it is created (as Cilium)');
    for (const n of nodes) if (n !== leader) assert.equal(n.events.stats.sent, 0, `${n.node} sent no Event`);
  } finally {
    for (const n of nodes) n.crash();
    await kube.api('DELETE', '/apis/cilium.io/v2/namespaces/default/ciliumnetworkpolicies/ev-cidr-group');
  }
});

test('ownership moves are Events on the Service: who announces the IP now and why (claimed while free; taken over after the holder\'s node Lease expired)', { timeout: 120_000 }, async () => {
  await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'ev-moves' }, spec: { blocks: [{ cidr: '203.0.113.16/29' }], serviceSelector: { matchLabels: { ev: 'moves' } } } });
  await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'ev-moves' }, spec: { interfaces: ['^eth0$'], loadBalancerIPs: true, serviceSelector: { matchLabels: { ev: 'moves' } } } });
  await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'ev-move', namespace: 'default', labels: { ev: 'moves' } }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
  const alive = new Set<KubeControlPlane>();
  try {
    for (const name of ['node-m1', 'node-m2', 'node-m3']) alive.add(await kubeControlPlane(kube, name, { lease: OPTS, links: ['eth0'] }));
    const nodes = [...alive];
    let ip = '';
    await waitFor('the Service has an IP', async () => {
      const r = await kube.api('GET', '/api/v1/namespaces/default/services/ev-move');
      ip = r.body?.status?.loadBalancer?.ingress?.[0]?.ip ?? '';
      return ip !== '';
    });
    const owners = () => nodes.filter((n) => alive.has(n) && n.ownership.view().owned.has(ip));
    await waitFor('one node owns the IP', () => owners().length === 1, 30_000);
    // Spreading may hand the IP on once: wait until it settles on its preferred node.
    await new Promise((r) => setTimeout(r, OPTS.handoverHoldMs + 1500));
    const holder = owners()[0]!;
    await waitFor('an Event names the holder', async () => (await eventsFor('ev-move', EVENT_REASONS.moved)).some((e) => e.message.startsWith(`${holder.node} now announces ${ip}: `)), 15_000, async () => JSON.stringify(await eventsFor('ev-move', EVENT_REASONS.moved)));
    const first = await eventsFor('ev-move', EVENT_REASONS.moved);
    for (const e of first) {
      assert.equal(e.type, 'Normal');
      assert.match(e.message, /now announces 203\.0\.113\.\d+: (claimed it while free \(no node held it\)|handed over by node-m\d \(node-m\d is its preferred node\))$/);
    }

    // The holder stops dead: another node takes over once its node Lease expired, and says so.
    holder.crash();
    alive.delete(holder);
    await waitFor('another node owns the IP', () => owners().length === 1, DURATION_S * 1000 + 15_000);
    const successor = owners()[0]!;
    const expected = `${successor.node} now announces ${ip}: took it over from ${holder.node}, whose node Lease expired`;
    await waitFor('the take-over Event', async () => (await eventsFor('ev-move', EVENT_REASONS.moved)).some((e) => e.message === expected), 15_000, async () => JSON.stringify(await eventsFor('ev-move', EVENT_REASONS.moved)));
    const ev = (await eventsFor('ev-move', EVENT_REASONS.moved)).find((e) => e.message === expected)!;
    assert.equal(ev.source.host, successor.node, 'recorded by the node that took over');
    assert.equal(ev.involvedObject.kind, 'Service');
  } finally {
    for (const n of alive) n.crash();
  }
});
