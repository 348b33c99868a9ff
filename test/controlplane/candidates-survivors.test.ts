/**
 * Announcement policy: the edges candidates.test.ts leaves open — which
 * policies selected an IP, output order independent of declaration order,
 * services that are not (or no longer) LoadBalancers, patterns that do not
 * compile, and unmatchedInterfaces(): the explanation of a policy that selects
 * this node but whose interface regexes match none of its eligible links.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeCandidates, nodeIdentity, unmatchedInterfaces } from '../../src/controlplane/announce/candidates.js';
import { parseManifests } from '../../src/intent/parse.js';
import { buildSnapshot, type IntentSnapshot } from '../../src/intent/snapshot.js';
import type { IntentObject } from '../../src/intent/kinds.js';
import type { LinkInfo } from '../../src/os/links.js';

// Manifests as plain objects (JSON is YAML), parsed by the real manifest parser.
type Obj = Record<string, unknown>;

const service = (name: string, spec: Obj = {}, ns = 'default'): Obj => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name, namespace: ns, labels: { app: name } },
  spec: { type: 'LoadBalancer', ports: [{ port: 80 }], ...spec },
});
const l2policy = (name: string, spec: Obj): Obj => ({
  apiVersion: 'cilium.io/v2alpha1',
  kind: 'CiliumL2AnnouncementPolicy',
  metadata: { name },
  spec,
});
const nodeManifest = (name: string, labels: Record<string, string>): Obj => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels } });

function load(...objs: Obj[]): IntentSnapshot {
  const res = parseManifests(objs.map((o) => JSON.stringify(o)).join('\n---\n'), 'survivors.yaml');
  assert.deepEqual(res.errors, []);
  return res.snapshot!;
}

/**
 * The same snapshot with one policy's interface patterns replaced, bypassing
 * the parser's regex validation (which would reject an uncompilable pattern).
 */
function withPatterns(snap: IntentSnapshot, policyName: string, interfaces: string[]): IntentSnapshot {
  const objects: IntentObject[] = [...snap.services.values(), ...snap.nodes.values()];
  for (const [name, p] of snap.policies) objects.push(name === policyName ? { ...p, spec: { ...p.spec, interfaces } } : p);
  return buildSnapshot(objects);
}

const link = (name: string, over: Partial<LinkInfo> = {}): LinkInfo => ({
  name,
  ifindex: 1,
  mac: '02:00:5e:00:53:02',
  ethernet: true,
  up: true,
  carrier: true,
  arp: true,
  ...over,
});

const WEB = '198.51.100.10';
const DB = '198.51.100.11';
const INGRESS = new Map([
  ['default/web', [WEB]],
  ['default/db', [DB]],
]);

function candidates(snap: IntentSnapshot, links: LinkInfo[], ingress: ReadonlyMap<string, readonly string[]> = INGRESS, nodeName = 'n1') {
  return computeCandidates({ snapshot: snap, ingress, node: nodeIdentity(snap, nodeName), links });
}

// ---------------------------------------------------------------- computeCandidates

test('a candidate names every policy that selected its IP, sorted', () => {
  const snap = load(
    service('web'),
    l2policy('zeta', { loadBalancerIPs: true, interfaces: ['eth0'] }),
    l2policy('alpha', { loadBalancerIPs: true, interfaces: ['eth1'] }),
    l2policy('other', { loadBalancerIPs: true, serviceSelector: { matchLabels: { app: 'db' } } }),
  );
  const out = candidates(snap, [link('eth0'), link('eth1')]);
  assert.deepEqual(out.get(WEB), { ip: WEB, interfaces: ['eth0', 'eth1'], services: ['default/web'], policies: ['alpha', 'zeta'] });
});

test('the order of the candidates does not depend on the order the policies were declared in', () => {
  // Policy "a" selects db, policy "b" selects web: whichever is declared first,
  // the policies are visited by name, so db's IP comes first both times.
  const pa = l2policy('a', { loadBalancerIPs: true, serviceSelector: { matchLabels: { app: 'db' } } });
  const pb = l2policy('b', { loadBalancerIPs: true, serviceSelector: { matchLabels: { app: 'web' } } });
  const links = [link('eth0')];
  const forward = candidates(load(service('web'), service('db'), pa, pb), links);
  const backward = candidates(load(service('web'), service('db'), pb, pa), links);
  assert.deepEqual([...forward.keys()], [DB, WEB]);
  assert.deepEqual([...backward.keys()], [DB, WEB]);
  assert.deepEqual([...backward.values()], [...forward.values()]);
});

test('a LoadBalancer service with no ingress IP allocated yet has nothing to announce', () => {
  const snap = load(service('pending'), l2policy('p', { loadBalancerIPs: true }));
  assert.deepEqual([...candidates(snap, [link('eth0')]).keys()], []);
});

test('a service that is not a LoadBalancer never has an ingress IP announced, even if LB-IPAM still lists one', () => {
  // A stale allocation (the service was turned into a ClusterIP) must not be
  // announced; its spec.externalIPs still are, under an externalIPs policy.
  const snap = load(
    service('web', { type: 'ClusterIP', externalIPs: ['203.0.113.7'] }),
    l2policy('lb', { loadBalancerIPs: true, interfaces: ['eth0'] }),
    l2policy('ext', { externalIPs: true, interfaces: ['eth1'] }),
  );
  const out = candidates(snap, [link('eth0'), link('eth1')]);
  assert.deepEqual([...out.keys()], ['203.0.113.7']);
  assert.deepEqual(out.get('203.0.113.7')!.interfaces, ['eth1']);
});

test('an interface pattern that does not compile is ignored; the policy\'s other patterns still apply', () => {
  const base = load(service('web'), l2policy('p', { loadBalancerIPs: true, interfaces: ['^eth1$'] }));
  const snap = withPatterns(base, 'p', ['^eth1$', '(?x)eth0']);
  const out = candidates(snap, [link('eth0'), link('eth1'), link('eth2')]);
  assert.deepEqual(out.get(WEB)?.interfaces, ['eth1']);
});

test('a policy none of whose interface patterns compiles matches no interface (fails closed), as unmatchedInterfaces reports it', () => {
  const base = load(service('web'), l2policy('p', { loadBalancerIPs: true, interfaces: ['^eth1$'] }));
  const snap = withPatterns(base, 'p', ['(?x)eth0', '[eth1']);
  const links = [link('eth0'), link('eth1')];
  assert.equal(candidates(snap, links).size, 0);
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), links).map((u) => u.policy), ['p']);
});

// ---------------------------------------------------------------- unmatchedInterfaces

const N1 = (snap: IntentSnapshot) => nodeIdentity(snap, 'n1');

test('a policy whose interface regexes match no eligible link is reported with its patterns and the links seen, sorted', () => {
  const snap = load(service('web'), l2policy('p', { loadBalancerIPs: true, interfaces: ['^wlan', 'ens9$'] }));
  // Unsorted on purpose; eth2 and wlan0 are not eligible (no carrier, NOARP), so
  // a pattern matching only them still matches nothing that can answer ARP.
  const links = [link('eth1'), link('wlan0', { arp: false }), link('bond0'), link('eth2', { carrier: false }), link('eth0')];
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), links), [
    { policy: 'p', patterns: ['^wlan', 'ens9$'], eligible: ['bond0', 'eth0', 'eth1'], seen: ['bond0', 'eth0', 'eth1', 'eth2', 'wlan0'] },
  ]);
});

test('unmatched policies are reported in policy-name order, whatever order they were declared in', () => {
  const snap = load(
    l2policy('zeta', { loadBalancerIPs: true, interfaces: ['^wlan'] }),
    l2policy('beta', { externalIPs: true, interfaces: ['^wlan'] }),
    l2policy('alpha', { loadBalancerIPs: true, externalIPs: true, interfaces: ['^wlan'] }),
  );
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth0')]).map((u) => u.policy), ['alpha', 'beta', 'zeta']);
});

test('a policy announcing only externalIPs or only LB IPs is still reported when its regexes match nothing', () => {
  const snap = load(
    l2policy('ext-only', { externalIPs: true, interfaces: ['^wlan'] }),
    l2policy('lb-only', { loadBalancerIPs: true, interfaces: ['^wlan'] }),
  );
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth0')]).map((u) => u.policy), ['ext-only', 'lb-only']);
});

test('a policy without interface patterns is never reported: it means every eligible interface', () => {
  const snap = load(l2policy('all', { loadBalancerIPs: true, externalIPs: true }));
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth0')]), []);
});

test('a policy announcing neither LB IPs nor externalIPs is not reported: it announces nothing anywhere', () => {
  const snap = load(l2policy('idle', { interfaces: ['^wlan'] }));
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth0')]), []);
});

test('a policy whose node selector does not select this node is not reported here', () => {
  const snap = load(
    nodeManifest('n1', { rack: 'r1' }),
    l2policy('r1', { loadBalancerIPs: true, interfaces: ['^wlan'], nodeSelector: { matchLabels: { rack: 'r1' } } }),
    l2policy('r2', { loadBalancerIPs: true, interfaces: ['^wlan'], nodeSelector: { matchLabels: { rack: 'r2' } } }),
  );
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth0')]).map((u) => u.policy), ['r1']);
});

test('a policy is not reported when one of its patterns matches one eligible link, even if others match nothing', () => {
  const snap = load(
    l2policy('one-of-two', { loadBalancerIPs: true, interfaces: ['^wlan', '^eth1$'] }),
    l2policy('some-links', { loadBalancerIPs: true, interfaces: ['^bond'] }),
  );
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth0'), link('eth1'), link('bond0')]), []);
});

test('an uncompilable pattern is skipped when explaining; the other patterns are still tried', () => {
  const base = load(
    l2policy('ok', { loadBalancerIPs: true, interfaces: ['^wlan'] }),
    l2policy('none', { loadBalancerIPs: true, interfaces: ['^wlan'] }),
  );
  const snap = withPatterns(withPatterns(base, 'ok', ['^wlan', '(?x)eth', '^eth0$']), 'none', ['^wlan', '(?x)eth']);
  const out = unmatchedInterfaces(snap, N1(snap), [link('eth0')]);
  assert.deepEqual(out.map((u) => [u.policy, u.patterns]), [['none', ['^wlan', '(?x)eth']]]);
});

test('with no eligible link at all, every policy with patterns is reported, and the ineligible links are listed as seen', () => {
  const snap = load(l2policy('p', { loadBalancerIPs: true, interfaces: ['eth'] }));
  assert.deepEqual(unmatchedInterfaces(snap, N1(snap), [link('eth1', { up: false }), link('eth0', { ethernet: false })]), [
    { policy: 'p', patterns: ['eth'], eligible: [], seen: ['eth0', 'eth1'] },
  ]);
});
