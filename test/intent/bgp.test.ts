/**
 * Issue 17: the BGP intent (Cilium's v2 BGP kinds) and EndpointSlices are
 * read, validated with precise errors (a bad file applies nothing), and
 * fields herald does not implement yet are reported, not dropped.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { endpointReady, parseManifests, sliceService } from '../../src/intent/index.js';

const cluster = (peer = '      peerAddress: 198.51.100.1\n      peerASN: 65001\n', localASN = '65000') => `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec:
  nodeSelector: { matchLabels: { rack: r0 } }
  bgpInstances:
  - name: i65000
    localASN: ${localASN}
    peers:
    - name: tor
${peer}      peerConfigRef: { name: peer }
`;
const peerConfig = (spec: string) => `apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: peer }
spec:
${spec}`;
const advert = `apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: lb, labels: { advertise: bgp } }
spec:
  advertisements:
  - advertisementType: Service
    service: { addresses: [LoadBalancerIP, ExternalIP] }
    selector: { matchLabels: { app: web } }
`;
const slice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-abc, namespace: default, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints:
- addresses: [192.0.2.10]
  conditions: { ready: true }
  nodeName: node-a
- addresses: [192.0.2.11]
  conditions: { ready: false, terminating: true }
  nodeName: node-a
- addresses: [192.0.2.12]
  nodeName: node-b
ports: [{ port: 8080 }]
`;

test('the three BGP kinds and an EndpointSlice load into the snapshot, with Cilium defaults', () => {
  const load = parseManifests([cluster(), peerConfig('  timers: { holdTimeSeconds: 9, keepAliveTimeSeconds: 3 }\n  families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }]\n'), advert, slice].join('---\n'), 'f.yaml');
  assert.deepEqual(load.errors, []);
  assert.deepEqual(load.ignored, []);
  const s = load.snapshot!;
  const c = s.bgpClusterConfigs.get('bgp')!;
  assert.equal(c.spec.bgpInstances[0]!.localASN, 65000);
  assert.equal(c.spec.bgpInstances[0]!.peers[0]!.peerAddress, '198.51.100.1');
  const p = s.bgpPeerConfigs.get('peer')!;
  assert.deepEqual(p.spec.timers, { connectRetryTimeSeconds: 120, holdTimeSeconds: 9, keepAliveTimeSeconds: 3 });
  assert.equal(p.spec.transport.peerPort, 179);
  assert.equal(p.spec.ebgpMultihop, 1);
  assert.deepEqual(s.bgpAdvertisements.get('lb')!.spec.advertisements[0]!.service!.addresses, ['LoadBalancerIP', 'ExternalIP']);
  const es = s.endpointSlices.get('default/web-abc')!;
  assert.equal(sliceService(es), 'default/web');
  assert.deepEqual(es.endpoints.map(endpointReady), [true, false, true], 'nil ready means ready; terminating is not ready');
});

test('a peer config without families gets IPv4 and IPv6 unicast, as Cilium', () => {
  const load = parseManifests(peerConfig('  ebgpMultihop: 2\n'), 'f.yaml');
  assert.deepEqual(load.snapshot!.bgpPeerConfigs.get('peer')!.spec.families, [
    { afi: 'ipv4', safi: 'unicast' },
    { afi: 'ipv6', safi: 'unicast' },
  ]);
});

const errorsOf = (text: string) => {
  const load = parseManifests(text, 'f.yaml');
  assert.equal(load.snapshot, undefined, 'nothing is applied from a file with errors');
  return load.errors.map((e) => [e.path, e.message, e.line]);
};

test('a bad local ASN is refused with the value and the range', () => {
  assert.deepEqual(errorsOf(cluster(undefined, '0')), [
    ['spec.bgpInstances[0].localASN', 'invalid ASN 0: must be an integer between 1 and 4294967295', 8],
  ]);
  assert.deepEqual(errorsOf(cluster(undefined, '4294967296')), [
    ['spec.bgpInstances[0].localASN', 'invalid ASN 4294967296: must be an integer between 1 and 4294967295', 8],
  ]);
  assert.deepEqual(errorsOf(cluster(undefined, '"65000"')), [
    ['spec.bgpInstances[0].localASN', 'invalid ASN string "65000": must be an integer between 1 and 4294967295', 8],
  ]);
});

test('a peer address that is not an IP (a CIDR, a brace) is refused', () => {
  assert.deepEqual(errorsOf(cluster('      peerAddress: 198.51.100.1/32\n      peerASN: 65001\n')), [
    ['spec.bgpInstances[0].peers[0].peerAddress', 'invalid peer address "198.51.100.1/32": expected an IP address (no prefix length)', 11],
  ]);
  assert.deepEqual(errorsOf(cluster('      peerAddress: "198.51.100.1 }"\n')), [
    ['spec.bgpInstances[0].peers[0].peerAddress', 'invalid peer address "198.51.100.1 }": expected an IP address (no prefix length)', 11],
  ]);
  assert.deepEqual(errorsOf(cluster('      peerASN: 65001\n')), [['spec.bgpInstances[0].peers[0].peerAddress', 'required (or autoDiscovery)', 10]]);
});

test('an unknown family is refused, naming the values Cilium accepts', () => {
  const errs = errorsOf(peerConfig('  families: [{ afi: ipv5, safi: unicast }]\n'));
  assert.equal(errs.length, 1);
  assert.equal(errs[0]![0], 'spec.families[0].afi');
  assert.match(String(errs[0]![1]), /^invalid value "ipv5": expected "ipv4", "ipv6", "l2vpn", "ls" or "opaque"$/);
  assert.equal(errorsOf(peerConfig('  families: [{ afi: ipv4, safi: anycast }]\n'))[0]![0], 'spec.families[0].safi');
});

test('timers out of range, or a keepalive above the hold time, are refused', () => {
  assert.deepEqual(errorsOf(peerConfig('  timers: { holdTimeSeconds: 2 }\n')), [['spec.timers.holdTimeSeconds', 'must be at least 3, got 2', 5]]);
  assert.deepEqual(errorsOf(peerConfig('  timers: { keepAliveTimeSeconds: 70000 }\n')), [['spec.timers.keepAliveTimeSeconds', 'must be at most 65535, got 70000', 5]]);
  assert.deepEqual(errorsOf(peerConfig('  timers: { holdTimeSeconds: 9, keepAliveTimeSeconds: 10 }\n')), [
    ['spec.timers.keepAliveTimeSeconds', 'keepAliveTimeSeconds 10 is above holdTimeSeconds 9: the session would expire between keepalives', 5],
  ]);
  assert.deepEqual(errorsOf(peerConfig('  ebgpMultihop: 0\n')), [['spec.ebgpMultihop', 'must be at least 1, got 0', 5]]);
});

test('an unknown field of a BGP kind is refused (read strictly, like the CRD)', () => {
  const errs = errorsOf(peerConfig('  holdTime: 9\n'));
  assert.equal(errs.length, 1);
  assert.equal(errs[0]![0], 'spec.holdTime');
});

test('one bad object among good ones applies nothing, and every error is listed', () => {
  const load = parseManifests([cluster(undefined, '-1'), advert, peerConfig('  timers: { holdTimeSeconds: 1 }\n')].join('---\n'), 'f.yaml');
  assert.equal(load.snapshot, undefined);
  assert.deepEqual(load.errors.map((e) => e.path), ['spec.bgpInstances[0].localASN', 'spec.timers.holdTimeSeconds']);
});

test('fields herald does not implement are reported as warnings, not dropped', () => {
  const load = parseManifests(
    [
      peerConfig('  authSecretRef: bgp-auth\n  gracefulRestart: { enabled: true }\n  families: [{ afi: l2vpn, safi: evpn }, { afi: ipv4, safi: unicast }]\n'),
      `apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: other }
spec:
  advertisements:
  - advertisementType: PodCIDR
  - advertisementType: Service
    service: { addresses: [ClusterIP] }
    attributes: { communities: { standard: ["65000:100"] }, localPreference: 200 }
`,
    ].join('---\n'),
    'f.yaml',
  );
  assert.deepEqual(load.errors, []);
  assert.deepEqual(load.warnings.map((w) => w.path), [
    'spec.authSecretRef',
    'spec.families[0]',
    'spec.advertisements[0].advertisementType',
    'spec.advertisements[1].service.addresses',
    'spec.advertisements[1].attributes.communities',
    'spec.advertisements[1].attributes.localPreference',
  ]);
  assert.match(load.warnings[1]!.message, /address family l2vpn\/evpn is not implemented by herald yet/);
});

test('a bad community is refused', () => {
  const errs = errorsOf(advert.replace('    selector:', '    attributes: { communities: { standard: ["70000:1"] } }\n    selector:'));
  assert.deepEqual(errs.map((e) => e[1]), ['invalid standard community "70000:1": expected <0-65535>:<0-65535> or a 32-bit decimal']);
});

test('an EndpointSlice address of the wrong family or not an IP is refused', () => {
  assert.deepEqual(errorsOf(slice.replace('[192.0.2.10]', '[2001:db8::1]')), [
    ['endpoints[0].addresses[0]', '"2001:db8::1" is not an IPv4 address (addressType IPv4)', 6],
  ]);
  assert.deepEqual(errorsOf(slice.replace('[192.0.2.10]', '[web-0]')).map((e) => e[1]), ['invalid IP address "web-0"']);
});

test('an EndpointSlice without the service-name label is warned about', () => {
  const load = parseManifests(slice.replace('labels: { kubernetes.io/service-name: web }', 'labels: {}'), 'f.yaml');
  assert.deepEqual(load.warnings.map((w) => w.message), ['no kubernetes.io/service-name label: this slice backs no Service, so it gates nothing']);
});

test('CiliumBGPNodeConfigOverride: a router ID that is not IPv4, or a bad local address, is refused', () => {
  const override = (instance: string) => `apiVersion: cilium.io/v2
kind: CiliumBGPNodeConfigOverride
metadata: { name: node-a }
spec:
  bgpInstances:
  - ${instance}
`;
  assert.deepEqual(errorsOf(override('{ name: i, routerID: "2001:db8::1" }')), [['spec.bgpInstances[0].routerID', 'invalid router ID "2001:db8::1": expected an IPv4 address', 6]]);
  assert.deepEqual(errorsOf(override('{ name: i, peers: [{ name: tor, localAddress: "192.0.2.1/24" }] }')).map((e) => e[1]), ['invalid local address "192.0.2.1/24": expected an IP address']);
  assert.deepEqual(errorsOf(override('{ name: i, localASN: 0 }')).map((e) => e[1]), ['invalid ASN 0: must be an integer between 1 and 4294967295']);
  const load = parseManifests(override('{ name: i, routerID: 192.0.2.9 }'), 'f.yaml');
  assert.equal(load.snapshot?.bgpNodeOverrides.get('node-a')?.spec.bgpInstances[0]?.routerID, '192.0.2.9');
});
