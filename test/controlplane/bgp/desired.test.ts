/**
 * Issue 17: BGP desired state as a pure function of allocated service IPs ×
 * endpoint readiness × advertisement selectors × externalTrafficPolicy.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeBgpDesired } from '../../../src/controlplane/bgp/desired.js';
import { bgpNode as node, snap } from './fixtures.js';

const policy = `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec:
  nodeSelector: { matchLabels: { bgp: "on" } }
  bgpInstances:
  - name: i65000
    localASN: 65000
    peers:
    - { name: tor, peerAddress: 198.51.100.1, peerASN: 65001, peerConfigRef: { name: peer } }
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: peer }
spec:
  families:
  - { afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }
  - { afi: ipv6, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }
---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: lb, labels: { advertise: bgp } }
spec:
  advertisements:
  - advertisementType: Service
    service: { addresses: [LoadBalancerIP] }
    selector: { matchLabels: { anycast: "yes" } }
`;

const service = (name: string, etp: 'Local' | 'Cluster', extra = '') => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, labels: { anycast: "yes" } }
spec: { type: LoadBalancer, externalTrafficPolicy: ${etp}, ports: [{ port: 80 }]${extra} }
`;

type Ep = [address: string, node: string, ready?: boolean, terminating?: boolean];
const slice = (svc: string, eps: Ep[], family: 'IPv4' | 'IPv6' = 'IPv4') => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${svc}-${family.toLowerCase()}, namespace: default, labels: { kubernetes.io/service-name: ${svc} } }
addressType: ${family}
endpoints:
${eps.map(([a, n, r = true, t = false]) => `- { addresses: ["${a}"], nodeName: ${n}, conditions: { ready: ${r}, terminating: ${t} } }`).join('\n')}
`;

const ingress = new Map([
  ['default/web', ['203.0.113.10']],
  ['default/api', ['203.0.113.11', '2001:db8::11']],
]);

test('Local: advertised with the local ready backends as next hops (two → multipath)', () => {
  const s = snap(policy, service('web', 'Local'), slice('web', [['192.0.2.10', 'node-a'], ['192.0.2.11', 'node-a'], ['192.0.2.20', 'node-b']]));
  const d = computeBgpDesired({ snapshot: s, ingress, node });
  assert.deepEqual([...d.routes.values()], [
    { ip: '203.0.113.10', prefix: '203.0.113.10/32', nextHops: ['192.0.2.10', '192.0.2.11'], services: ['default/web'], peers: ['bgp/i65000/tor'] },
  ]);
  assert.deepEqual(d.withheld, []);
});

test('Local: a node without a ready local backend withholds, naming why', () => {
  const s = snap(policy, service('web', 'Local'), slice('web', [['192.0.2.10', 'node-a', false], ['192.0.2.11', 'node-a', true, true], ['192.0.2.20', 'node-b']]));
  const d = computeBgpDesired({ snapshot: s, ingress, node });
  assert.equal(d.routes.size, 0, 'not ready and terminating backends are not routed to');
  assert.deepEqual(d.withheld, [{ ip: '203.0.113.10', services: ['default/web'], reason: 'no-local-ready-backend' }]);
});

test('Cluster: advertised from every selected node while any backend is ready; local backends preferred', () => {
  const remoteOnly = computeBgpDesired({ snapshot: snap(policy, service('web', 'Cluster'), slice('web', [['192.0.2.20', 'node-b']])), ingress, node });
  assert.deepEqual([...remoteOnly.routes.values()].map((r) => r.nextHops), [['192.0.2.20']]);
  const withLocal = computeBgpDesired({ snapshot: snap(policy, service('web', 'Cluster'), slice('web', [['192.0.2.10', 'node-a'], ['192.0.2.20', 'node-b']])), ingress, node });
  assert.deepEqual([...withLocal.routes.values()].map((r) => r.nextHops), [['192.0.2.10']]);
  const none = computeBgpDesired({ snapshot: snap(policy, service('web', 'Cluster'), slice('web', [['192.0.2.20', 'node-b', false]])), ingress, node });
  assert.deepEqual(none.withheld, [{ ip: '203.0.113.10', services: ['default/web'], reason: 'no-ready-backend' }]);
  const noSlice = computeBgpDesired({ snapshot: snap(policy, service('web', 'Cluster')), ingress, node });
  assert.deepEqual(noSlice.withheld.map((w) => w.reason), ['no-ready-backend']);
});

test('each family is routed to backends of its own family: /32 and /128', () => {
  const s = snap(
    policy,
    service('api', 'Local', ', ipFamilyPolicy: PreferDualStack, ipFamilies: [IPv4, IPv6]'),
    slice('api', [['192.0.2.30', 'node-a']]),
    slice('api', [['2001:db8:1::30', 'node-a']], 'IPv6'),
  );
  const d = computeBgpDesired({ snapshot: s, ingress, node });
  assert.deepEqual([...d.routes.values()].map((r) => [r.prefix, r.nextHops]), [
    ['2001:db8::11/128', ['2001:db8:1::30']],
    ['203.0.113.11/32', ['192.0.2.30']],
  ]);
});

test('selectors gate it: node selector, family advertisements, advertisement selector, service class', () => {
  const docs = [service('web', 'Local'), slice('web', [['192.0.2.10', 'node-a']])];
  const base = computeBgpDesired({ snapshot: snap(policy, ...docs), ingress, node });
  assert.equal(base.routes.size, 1);
  const otherNode = computeBgpDesired({ snapshot: snap(policy, ...docs), ingress, node: { name: 'node-a', labels: {} } });
  assert.equal(otherNode.routes.size, 0, 'node selector');
  const noFamilySel = computeBgpDesired({ snapshot: snap(policy.replace(/, advertisements: \{ matchLabels: \{ advertise: bgp \} \}/g, ''), ...docs), ingress, node });
  assert.equal(noFamilySel.routes.size, 0, 'a family without an advertisements selector advertises nothing');
  const v6Only = computeBgpDesired({ snapshot: snap(policy.replace('  - { afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }\n', ''), ...docs), ingress, node });
  assert.equal(v6Only.routes.size, 0, 'an IPv4 IP needs an ipv4 family');
  const unselected = computeBgpDesired({ snapshot: snap(policy.replace('anycast: "yes"', 'anycast: "no"'), ...docs), ingress, node });
  assert.equal(unselected.routes.size, 0, 'advertisement service selector');
  const l2Class = computeBgpDesired({ snapshot: snap(policy, service('web', 'Local', ', loadBalancerClass: io.cilium/l2-announcer'), docs[1]!), ingress, node });
  assert.equal(l2Class.routes.size, 0, 'LoadBalancerIP only for class unset or io.cilium/bgp-control-plane');
  const bgpClass = computeBgpDesired({ snapshot: snap(policy, service('web', 'Local', ', loadBalancerClass: io.cilium/bgp-control-plane'), docs[1]!), ingress, node });
  assert.equal(bgpClass.routes.size, 1);
});

test('ExternalIP advertisements route spec.externalIPs; LoadBalancerIP needs an allocation', () => {
  const ext = policy.replace('addresses: [LoadBalancerIP]', 'addresses: [ExternalIP]');
  const d = computeBgpDesired({
    snapshot: snap(ext, service('web', 'Local', ', externalIPs: [198.51.100.50]'), slice('web', [['192.0.2.10', 'node-a']])),
    ingress,
    node,
  });
  assert.deepEqual([...d.routes.keys()], ['198.51.100.50/32']);
  const unallocated = computeBgpDesired({ snapshot: snap(policy, service('web', 'Local'), slice('web', [['192.0.2.10', 'node-a']])), ingress: new Map(), node });
  assert.equal(unallocated.routes.size, 0);
});

test('a shared IP is advertised while any sharing service wants it, with the union of next hops', () => {
  const shared = new Map([['default/web', ['203.0.113.10']], ['default/api', ['203.0.113.10']]]);
  const d = computeBgpDesired({
    snapshot: snap(policy, service('web', 'Local'), service('api', 'Local'), slice('web', [['192.0.2.10', 'node-a']]), slice('api', [['192.0.2.12', 'node-a'], ['192.0.2.13', 'node-a', false]])),
    ingress: shared,
    node,
  });
  assert.deepEqual([...d.routes.values()].map((r) => [r.nextHops, r.services]), [[['192.0.2.10', '192.0.2.12'], ['default/api', 'default/web']]]);
});

test('a peer naming a missing peer config is warned about', () => {
  const d = computeBgpDesired({ snapshot: snap(policy.replace('peerConfigRef: { name: peer }', 'peerConfigRef: { name: nope }')), ingress, node });
  assert.deepEqual(d.warnings, [{ peer: 'bgp/i65000/tor', message: 'CiliumBGPPeerConfig "nope" not found: nothing is advertised to this peer' }]);
});
