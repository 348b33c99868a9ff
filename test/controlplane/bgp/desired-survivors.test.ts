/**
 * BGP desired state, the cases the first tests left open: attribute merging
 * and grouping per peer (standard, well-known and large communities, local
 * preference), the orders that leave the function, the per-object memos
 * (the same objects with a changed input must not give the last result),
 * advertisement entry selection, and the incremental engine's change
 * detection (node, labels, health, policy, services, ingress, slices).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BgpDesiredEngine, computeBgpDesired, type BgpDesiredInput } from '../../../src/controlplane/bgp/desired.js';
import { BGP_ON, bgpNode as node, peersAB, snap } from './fixtures.js';

/** Peer a: IPv4 and IPv6, advertisements labelled bgp; peer b: IPv4 only, advertisements labelled gold. */
const peers = peersAB(BGP_ON);

const advert = (name: string, label: string, entries: string[]) => `apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: ${name}, labels: { advertise: ${label} } }
spec:
  advertisements:
${entries.map((e) => `  - ${e}`).join('\n')}
`;
const lbEntry = (extra = '') => `{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { anycast: "yes" } }${extra} }`;
const plain = advert('lb', 'bgp', [lbEntry()]);

const service = (name: string, etp: 'Local' | 'Cluster', labels = '', extra = '') => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, labels: { anycast: "yes"${labels} } }
spec: { type: LoadBalancer, externalTrafficPolicy: ${etp}, ports: [{ port: 80 }]${extra} }
`;

type Ep = [address: string, node: string, ready?: boolean];
const slice = (svc: string, name: string, eps: Ep[], family: 'IPv4' | 'IPv6' | 'FQDN' = 'IPv4') => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}, namespace: default, labels: { kubernetes.io/service-name: ${svc} } }
addressType: ${family}
endpoints:
${eps.map(([a, n, r = true]) => `- { addresses: ["${a}"], nodeName: ${n}, conditions: { ready: ${r} } }`).join('\n')}
`;

const A = 'bgp/i/a';
const B = 'bgp/i/b';

/** The pure function's result for web (Local, one ready backend on this node) at 203.0.113.10, under peers a and b and the given advertisements. */
const webUnder = (...adverts: string[]) =>
  computeBgpDesired({
    snapshot: snap(peers, ...adverts, service('web', 'Local'), slice('web', 'web-a', [['192.0.2.10', 'node-a']])),
    ingress: new Map([['default/web', ['203.0.113.10']]]),
    node,
  });

test('attributes of several entries selecting one IP for one peer: communities the sorted union (numeric and well-known resolved), local preference the highest', () => {
  const d = webUnder(
    advert('lb', 'bgp', [
      lbEntry(', attributes: { communities: { standard: ["65000:9", "1:23", "4259840007"], large: ["7:1:1", "1:2:34"] }, localPreference: 100 }'),
      lbEntry(', attributes: { communities: { standard: ["12:3", "65000:9", "64512:100"], wellKnown: [no-export], large: ["1:23:4", "1:2:34"] }, localPreference: 200 }'),
    ]),
  );
  assert.deepEqual([...d.attributes.keys()], [A]);
  assert.deepEqual(d.attributes.get(A), [
    {
      prefixes: ['203.0.113.10/32'],
      communities: [[1, 23], [12, 3], [64512, 100], [65000, 7], [65000, 9], [65535, 65281]],
      largeCommunities: [[1, 2, 34], [1, 23, 4], [7, 1, 1]],
      localPreference: 200,
    },
  ]);
});

test('communities sort by their first value, then the second: [2,3] before [9,1]; large ones likewise', () => {
  const d = webUnder(
    advert('lb', 'bgp', [lbEntry(', attributes: { communities: { standard: ["9:1", "2:3", "1:5"], large: ["9:1:1", "2:3:3", "2:2:9"] } }')]),
  );
  assert.deepEqual(d.attributes.get(A), [
    { prefixes: ['203.0.113.10/32'], communities: [[1, 5], [2, 3], [9, 1]], largeCommunities: [[2, 2, 9], [2, 3, 3], [9, 1, 1]] },
  ]);
});

test('one well-known community alone and one local preference alone each make a group; a well-known community and its numeric spelling are one community', () => {
  const d = webUnder(
    advert('lb', 'bgp', [
      lbEntry(', attributes: { communities: { wellKnown: [blackhole] } }'),
      lbEntry(', attributes: { communities: { wellKnown: [no-peer, internet, blackhole], standard: ["65535:666"] } }'),
    ]),
    advert('gold', 'gold', [lbEntry(', attributes: { localPreference: 0 }')]),
  );
  assert.deepEqual(d.attributes.get(A), [{ prefixes: ['203.0.113.10/32'], communities: [[0, 0], [65535, 666], [65535, 65284]], largeCommunities: [] }]);
  assert.deepEqual(d.attributes.get(B), [{ prefixes: ['203.0.113.10/32'], communities: [], largeCommunities: [], localPreference: 0 }]);
});

test('a local preference alone (no communities) keeps it; an entry with communities only has no local preference key', () => {
  const d = webUnder(
    advert('lb', 'bgp', [lbEntry(', attributes: { communities: { large: ["65000:1:2"] } }')]),
    advert('gold', 'gold', [lbEntry(', attributes: { localPreference: 150 }'), lbEntry(', attributes: { communities: { standard: ["65000:1"] } }')]),
  );
  const a = d.attributes.get(A)!;
  assert.deepEqual(a, [{ prefixes: ['203.0.113.10/32'], communities: [], largeCommunities: [[65000, 1, 2]] }]);
  assert.equal(Object.hasOwn(a[0]!, 'localPreference'), false);
  assert.deepEqual(d.attributes.get(B), [{ prefixes: ['203.0.113.10/32'], communities: [[65000, 1]], largeCommunities: [], localPreference: 150 }]);
});

test('attribute groups per peer: IPs with identical merged attributes share a group, prefixes /32 and /128 in address order, IPs without attributes absent', () => {
  const s = snap(
    peers,
    advert('lb', 'bgp', [lbEntry(', attributes: { communities: { standard: [] } }')]),
    advert('tagged', 'bgp', [`{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { tier: gold } }, attributes: { communities: { large: ["65000:1:2"] } } }`]),
    advert('gold', 'gold', [
      `{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { tier: gold } }, attributes: { localPreference: 300 } }`,
      `{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { io.kubernetes.service.name: api } }, attributes: { communities: { wellKnown: [blackhole] } } }`,
    ]),
    service('web', 'Cluster', ', tier: gold'),
    service('api', 'Cluster'),
    slice('web', 'web-a', [['192.0.2.10', 'node-a']]),
    slice('web', 'web-b', [['2001:db8:1::10', 'node-a']], 'IPv6'),
    slice('api', 'api-a', [['192.0.2.11', 'node-a']]),
  );
  const ingress = new Map([
    ['default/web', ['203.0.113.10', '203.0.113.9', '2001:db8::9']],
    ['default/api', ['203.0.113.11']],
  ]);
  const d = computeBgpDesired({ snapshot: s, ingress, node });
  assert.deepEqual([...d.attributes.keys()], [A, B]);
  assert.deepEqual(d.attributes.get(A), [{ prefixes: ['2001:db8::9/128', '203.0.113.10/32', '203.0.113.9/32'], communities: [], largeCommunities: [[65000, 1, 2]] }]);
  assert.deepEqual(d.attributes.get(B), [
    { prefixes: ['203.0.113.10/32', '203.0.113.9/32'], communities: [], largeCommunities: [], localPreference: 300 },
    { prefixes: ['203.0.113.11/32'], communities: [[65535, 666]], largeCommunities: [] },
  ]);
  // Routes leave in address order too, whatever order the IPs were selected in.
  assert.deepEqual([...d.routes.keys()], ['2001:db8::9/128', '203.0.113.10/32', '203.0.113.11/32', '203.0.113.9/32']);
  assert.deepEqual(d.routes.get('203.0.113.11/32')!.peers, [A, B]);
  assert.deepEqual(d.routes.get('2001:db8::9/128')!.peers, [A], 'peer b has no IPv6 family');
  // The same result from the engine's full pass.
  const e = new BgpDesiredEngine().compute({ snapshot: s, ingress, node });
  assert.deepEqual([...e.routes.keys()], [...d.routes.keys()]);
  assert.deepEqual([...e.attributes.entries()], [...d.attributes.entries()]);
});

test('an IP with attributes does not lend them to another IP selected without any', () => {
  const s = snap(
    peers,
    plain,
    advert('tagged', 'bgp', [`{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { tier: gold } }, attributes: { communities: { standard: ["65000:5"] } } }`]),
    service('web', 'Cluster', ', tier: gold'),
    service('api', 'Cluster'),
    slice('web', 'web-a', [['192.0.2.10', 'node-a']]),
    slice('api', 'api-a', [['192.0.2.11', 'node-a']]),
  );
  const ingress = new Map([
    ['default/api', ['203.0.113.1']],
    ['default/web', ['203.0.113.2']],
  ]);
  for (let i = 0; i < 2; i++) {
    const d = computeBgpDesired({ snapshot: s, ingress, node });
    assert.deepEqual([...d.attributes.entries()], [[A, [{ prefixes: ['203.0.113.2/32'], communities: [[65000, 5]], largeCommunities: [] }]]]);
  }
  const none = computeBgpDesired({ snapshot: snap(peers, plain, service('web', 'Cluster'), slice('web', 'web-a', [['192.0.2.10', 'node-a']])), ingress, node });
  assert.equal(none.attributes.size, 0);
  assert.equal(none.routes.size, 1);
});

test('routes and withheld IPs leave in address order whatever order they were selected in', () => {
  const s = snap(peers, plain, service('web', 'Local'), service('api', 'Local'), slice('web', 'web-a', [['192.0.2.10', 'node-a']]));
  const ingress = new Map([
    ['default/web', ['203.0.113.2', '203.0.113.3', '203.0.113.1']],
    ['default/api', ['203.0.113.6', '203.0.113.7', '203.0.113.5']],
  ]);
  const d = computeBgpDesired({ snapshot: s, ingress, node });
  assert.deepEqual([...d.routes.keys()], ['203.0.113.1/32', '203.0.113.2/32', '203.0.113.3/32']);
  assert.deepEqual(d.withheld.map((w) => w.ip), ['203.0.113.5', '203.0.113.6', '203.0.113.7']);
  const e = new BgpDesiredEngine().compute({ snapshot: s, ingress, node });
  assert.deepEqual([...e.routes.keys()], ['203.0.113.1/32', '203.0.113.2/32', '203.0.113.3/32']);
  assert.deepEqual(e.withheld.map((w) => w.ip), ['203.0.113.5', '203.0.113.6', '203.0.113.7']);
});

test('policy warnings come in cluster config name order, not manifest order', () => {
  const cfg = (name: string) => `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: ${name} }
spec: { bgpInstances: [{ name: i, localASN: 65000, peers: [{ name: t, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: missing-${name} } }] }] }
`;
  const d = computeBgpDesired({ snapshot: snap(cfg('mid'), cfg('zeta'), cfg('alpha')), ingress: new Map(), node });
  assert.deepEqual(d.warnings.map((w) => w.peer), ['alpha/i/t', 'mid/i/t', 'zeta/i/t']);
  const e = new BgpDesiredEngine().compute({ snapshot: snap(cfg('mid'), cfg('zeta'), cfg('alpha')), ingress: new Map(), node });
  assert.deepEqual(e.warnings.map((w) => w.peer), ['alpha/i/t', 'mid/i/t', 'zeta/i/t']);
});

test('a peer without peerConfigRef advertises nothing and is not warned about at compute time', () => {
  const s = snap(
    `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec: { bgpInstances: [{ name: i, localASN: 65000, peers: [{ name: bare, peerAddress: 192.0.2.1, peerASN: 65100 }] }] }
`,
    plain,
    service('web', 'Cluster'),
    slice('web', 'web-a', [['192.0.2.10', 'node-a']]),
  );
  const input = { snapshot: s, ingress: new Map([['default/web', ['203.0.113.10']]]), node };
  const d = computeBgpDesired(input);
  assert.deepEqual(d.warnings, []);
  assert.equal(d.routes.size, 0);
  const e = new BgpDesiredEngine().compute(input);
  assert.deepEqual(e.warnings, []);
  assert.equal(e.routes.size, 0);
});

test('advertisement entries: only type Service with a selector selects; LoadBalancerIP and ExternalIP each select only their own addresses', () => {
  const docs = [service('web', 'Cluster', '', ', externalIPs: ["198.51.100.50"]'), slice('web', 'web-a', [['192.0.2.10', 'node-a']])];
  const ingress = new Map([['default/web', ['203.0.113.10']]]);
  const routes = (...entries: string[]) => [...computeBgpDesired({ snapshot: snap(peers, advert('lb', 'bgp', entries), ...docs), ingress, node }).routes.keys()];
  assert.deepEqual(routes(`{ advertisementType: PodCIDR, service: { addresses: [LoadBalancerIP, ExternalIP] }, selector: { matchLabels: { anycast: "yes" } } }`), []);
  assert.deepEqual(routes(`{ advertisementType: PodCIDR, selector: { matchLabels: { anycast: "yes" } } }`), []);
  assert.deepEqual(routes(`{ advertisementType: Service, service: { addresses: [LoadBalancerIP, ExternalIP] } }`), [], 'no selector selects none');
  assert.deepEqual(routes(`{ advertisementType: Service, service: { addresses: [ExternalIP] }, selector: { matchLabels: { anycast: "yes" } } }`), ['198.51.100.50/32']);
  assert.deepEqual(routes(`{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { anycast: "yes" } } }`), ['203.0.113.10/32']);
  assert.deepEqual(routes(`{ advertisementType: Service, service: { addresses: [ClusterIP] }, selector: { matchLabels: { anycast: "yes" } } }`), []);
  const clusterIp = `apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, labels: { anycast: "yes" } }
spec: { type: ClusterIP, ports: [{ port: 80 }] }
`;
  const d = computeBgpDesired({ snapshot: snap(peers, plain, clusterIp, docs[1]!), ingress, node });
  assert.equal(d.routes.size, 0, 'an allocation of a service that is not of type LoadBalancer is not its LoadBalancerIP');
});

test('the same service and advertisement objects with a changed ingress list give the new IPs, not the remembered ones', () => {
  const s = snap(peers, plain, service('web', 'Cluster'), slice('web', 'web-a', [['192.0.2.10', 'node-a']]));
  const run = (ips: string[] | undefined) => [...computeBgpDesired({ snapshot: s, ingress: new Map(ips ? [['default/web', ips]] : []), node }).routes.keys()];
  assert.deepEqual(run(['203.0.113.1']), ['203.0.113.1/32']);
  assert.deepEqual(run(['203.0.113.1']), ['203.0.113.1/32']);
  assert.deepEqual(run(['203.0.113.2']), ['203.0.113.2/32'], 'same length, another IP');
  assert.deepEqual(run(['203.0.113.2', '203.0.113.3']), ['203.0.113.2/32', '203.0.113.3/32'], 'one more');
  assert.deepEqual(run(['203.0.113.2', '203.0.113.4']), ['203.0.113.2/32', '203.0.113.4/32'], 'the first the same, the second not');
  assert.deepEqual(run(['203.0.113.2']), ['203.0.113.2/32'], 'one fewer');
  assert.deepEqual(run(undefined), [], 'no allocation');
  assert.deepEqual(run(['203.0.113.5']), ['203.0.113.5/32']);
});

test('the same EndpointSlice objects on another node or with other unhealthy backends give that node\'s and that health\'s result', () => {
  const s = snap(peers, plain, service('web', 'Local'), slice('web', 'web-a', [['192.0.2.10', 'node-a'], ['192.0.2.11', 'node-a']]));
  const ingress = new Map([['default/web', ['203.0.113.10']]]);
  const hops = (input: Partial<BgpDesiredInput>) => {
    const d = computeBgpDesired({ snapshot: s, ingress, node, ...input });
    return [[...d.routes.values()].map((r) => r.nextHops), d.withheld.map((w) => w.reason)];
  };
  assert.deepEqual(hops({}), [[['192.0.2.10', '192.0.2.11']], []]);
  assert.deepEqual(hops({ node: { name: 'node-b', labels: { bgp: 'on' } } }), [[], ['no-local-ready-backend']]);
  assert.deepEqual(hops({}), [[['192.0.2.10', '192.0.2.11']], []]);
  assert.deepEqual(hops({ unhealthy: new Set(['default/web|192.0.2.10']) }), [[['192.0.2.11']], []]);
  assert.deepEqual(hops({ unhealthy: new Set(['default/web|192.0.2.10', 'default/web|192.0.2.11']) }), [[], ['no-ready-backend']]);
  assert.deepEqual(hops({ unhealthy: new Set(['default/other|192.0.2.10']) }), [[['192.0.2.10', '192.0.2.11']], []], 'another service\'s health');
  assert.deepEqual(hops({ unhealthy: new Set() }), [[['192.0.2.10', '192.0.2.11']], []]);
});

test('Cluster with two slices and no local backend: next hops are the ready backends of both slices', () => {
  const s = snap(
    peers,
    plain,
    service('web', 'Cluster'),
    slice('web', 'web-a', [['192.0.2.20', 'node-b']]),
    slice('web', 'web-b', [['192.0.2.21', 'node-c'], ['192.0.2.22', 'node-c', false]]),
    slice('web', 'web-c', [['www.example.com', 'node-c']], 'FQDN'),
  );
  const d = computeBgpDesired({ snapshot: s, ingress: new Map([['default/web', ['203.0.113.10']]]), node });
  assert.deepEqual([...d.routes.values()].map((r) => r.nextHops), [['192.0.2.20', '192.0.2.21']]);
});

test('an IPv6 IP whose service has only IPv4 backends ready is withheld for no ready backend, not for no local one', () => {
  const s = snap(peers, plain, service('web', 'Cluster'), slice('web', 'web-a', [['192.0.2.20', 'node-b']]));
  const d = computeBgpDesired({ snapshot: s, ingress: new Map([['default/web', ['2001:db8::10', '203.0.113.10']]]), node });
  assert.deepEqual([...d.routes.keys()], ['203.0.113.10/32']);
  assert.deepEqual(d.withheld, [{ ip: '2001:db8::10', services: ['default/web'], reason: 'no-ready-backend' }]);
});

// ---- the incremental engine ----------------------------------------------

const engineDocs = () =>
  snap(
    peers,
    plain,
    advert('gold', 'gold', [lbEntry()]),
    service('web', 'Local'),
    service('api', 'Cluster'),
    service('db', 'Local'),
    slice('web', 'web-a', [['192.0.2.10', 'node-a']]),
    slice('api', 'api-a', [['192.0.2.20', 'node-b']]),
  );
const engineIngress = new Map([
  ['default/web', ['203.0.113.10', '2001:db8::10']],
  ['default/api', ['203.0.113.20']],
  ['default/db', ['203.0.113.30']],
]);

/** routes as prefix → next hops, for comparing with the pure function. */
const view = (d: { routes: ReadonlyMap<string, { nextHops: readonly string[]; peers: readonly string[] }>; withheld: readonly { ip: string; reason: string }[] }) => ({
  routes: [...d.routes].map(([p, r]) => [p, r.nextHops, r.peers]).sort(),
  withheld: d.withheld.map((w) => [w.ip, w.reason]),
});

function step(engine: BgpDesiredEngine, input: BgpDesiredInput) {
  const got = engine.compute(input);
  assert.deepEqual(view(got), view(computeBgpDesired(input)));
  return got;
}

test('engine: another node name, other node labels or other unhealthy backends are followed even when nothing else changed', () => {
  const snapshot = engineDocs();
  const engine = new BgpDesiredEngine();
  const base = step(engine, { snapshot, ingress: engineIngress, node });
  assert.deepEqual(base.warnings, []);
  assert.ok(base.routes.has('203.0.113.10/32'));
  const onB = step(engine, { snapshot, ingress: engineIngress, node: { name: 'node-b', labels: { bgp: 'on' } } });
  assert.equal(onB.routes.has('203.0.113.10/32'), false, 'web is Local and has no backend on node-b');
  step(engine, { snapshot, ingress: engineIngress, node });
  const unlabelled = step(engine, { snapshot, ingress: engineIngress, node: { name: 'node-a', labels: {} } });
  assert.equal(unlabelled.routes.size, 0);
  step(engine, { snapshot, ingress: engineIngress, node });
  const sick = step(engine, { snapshot, ingress: engineIngress, node, unhealthy: new Set(['default/web|192.0.2.10']) });
  assert.equal(sick.routes.has('203.0.113.10/32'), false);
});

test('engine: a changed, added or removed policy object is followed', () => {
  const snapshot = engineDocs();
  const engine = new BgpDesiredEngine();
  assert.equal(step(engine, { snapshot, ingress: engineIngress, node }).routes.size, 2);
  const lbKey = [...snapshot.bgpAdvertisements.keys()].find((k) => snapshot.bgpAdvertisements.get(k)!.metadata.name === 'lb')!;
  const other = snap(advert('lb', 'bgp', [`{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { anycast: "no" } } }`])).bgpAdvertisements.get(lbKey)!;
  const adverts = new Map(snapshot.bgpAdvertisements);
  adverts.set(lbKey, other);
  const changed = step(engine, { snapshot: { ...snapshot, bgpAdvertisements: adverts }, ingress: engineIngress, node });
  assert.deepEqual([...changed.routes.values()].map((r) => r.peers), [[B], [B]], 'same key, another object: peer a no longer selects them');
  assert.equal(step(engine, { snapshot, ingress: engineIngress, node }).routes.size, 2);
  const removed = step(engine, { snapshot: { ...snapshot, bgpAdvertisements: new Map() }, ingress: engineIngress, node });
  assert.equal(removed.routes.size, 0, 'one fewer');
  assert.equal(step(engine, { snapshot, ingress: engineIngress, node }).routes.size, 2, 'back again');
  const noPeerConfigs = step(engine, { snapshot: { ...snapshot, bgpPeerConfigs: new Map() }, ingress: engineIngress, node });
  assert.equal(noPeerConfigs.routes.size, 0);
  assert.equal(noPeerConfigs.warnings.length, 2);
});

test('engine: with the policy unchanged it answers incrementally, naming only the prefixes of the services that changed', () => {
  const snapshot = engineDocs();
  const engine = new BgpDesiredEngine();
  step(engine, { snapshot, ingress: engineIngress, node });
  // Equal copies of every map: nothing changed.
  const same = step(engine, { snapshot: { ...snapshot, services: new Map(snapshot.services), endpointSlices: new Map(snapshot.endpointSlices), bgpAdvertisements: new Map(snapshot.bgpAdvertisements) }, ingress: new Map(engineIngress), node: { ...node, labels: { ...node.labels } } });
  assert.deepEqual(same.changed, new Set());
  // One service object replaced: only its prefix.
  const services = new Map(snapshot.services);
  services.set('default/api', { ...services.get('default/api')! });
  const one = step(engine, { snapshot: { ...snapshot, services }, ingress: engineIngress, node });
  assert.deepEqual(one.changed, new Set(['203.0.113.20/32']));
  // One slice object replaced: only its service's prefixes.
  const slices = new Map(snapshot.endpointSlices);
  const webKey = [...slices.keys()].find((k) => k.endsWith('/web-a'))!;
  slices.set(webKey, { ...slices.get(webKey)! });
  const sl = step(engine, { snapshot: { ...snapshot, services, endpointSlices: slices }, ingress: engineIngress, node });
  assert.deepEqual(sl.changed, new Set(['203.0.113.10/32']));
  // One ingress entry changed: only that service's old and new prefixes.
  const ingress = new Map(engineIngress);
  ingress.set('default/api', ['203.0.113.21']);
  const ing = step(engine, { snapshot: { ...snapshot, services, endpointSlices: slices }, ingress, node });
  assert.deepEqual(ing.changed, new Set(['203.0.113.20/32', '203.0.113.21/32']));
  assert.ok(ing.routes.has('203.0.113.21/32'));
});

test('engine: a removed service, a removed ingress entry and a removed slice withdraw their routes', () => {
  const snapshot = engineDocs();
  const engine = new BgpDesiredEngine();
  step(engine, { snapshot, ingress: engineIngress, node });
  const services = new Map(snapshot.services);
  services.delete('default/api');
  const noApi = step(engine, { snapshot: { ...snapshot, services }, ingress: engineIngress, node });
  assert.equal(noApi.routes.has('203.0.113.20/32'), false);
  assert.deepEqual(noApi.changed, new Set(['203.0.113.20/32']));
  step(engine, { snapshot, ingress: engineIngress, node });
  const ingress = new Map(engineIngress);
  ingress.delete('default/api');
  const noIngress = step(engine, { snapshot, ingress, node });
  assert.equal(noIngress.routes.has('203.0.113.20/32'), false);
  assert.deepEqual(noIngress.changed, new Set(['203.0.113.20/32']));
  step(engine, { snapshot, ingress: engineIngress, node });
  const slices = new Map(snapshot.endpointSlices);
  slices.delete([...slices.keys()].find((k) => k.endsWith('/web-a'))!);
  const noSlice = step(engine, { snapshot: { ...snapshot, endpointSlices: slices }, ingress: engineIngress, node });
  assert.equal(noSlice.routes.has('203.0.113.10/32'), false);
  assert.deepEqual(noSlice.changed, new Set(['203.0.113.10/32']));
});

test('engine: a slice added for a service without one, and a changed slice, keep local backends and health exclusions', () => {
  const snapshot = engineDocs();
  const unhealthy = new Set(['default/db|192.0.2.31']);
  const engine = new BgpDesiredEngine();
  step(engine, { snapshot, ingress: engineIngress, node, unhealthy });
  const extra = snap(slice('db', 'db-a', [['192.0.2.30', 'node-a'], ['192.0.2.31', 'node-a'], ['192.0.2.32', 'node-b']]), slice('db', 'db-f', [['db.example.com', 'node-a']], 'FQDN'));
  const slices = new Map([...snapshot.endpointSlices, ...extra.endpointSlices]);
  const added = step(engine, { snapshot: { ...snapshot, endpointSlices: slices }, ingress: engineIngress, node, unhealthy });
  assert.deepEqual(added.routes.get('203.0.113.30/32')?.nextHops, ['192.0.2.30']);
  // A second slice of web, and web's first slice changed.
  const web2 = snap(slice('web', 'web-b', [['192.0.2.12', 'node-a']])).endpointSlices;
  const slices2 = new Map([...slices, ...web2]);
  const webKey = [...slices2.keys()].find((k) => k.endsWith('/web-a'))!;
  slices2.set(webKey, { ...slices2.get(webKey)! });
  const more = step(engine, { snapshot: { ...snapshot, endpointSlices: slices2 }, ingress: engineIngress, node, unhealthy });
  assert.deepEqual(more.routes.get('203.0.113.10/32')?.nextHops, ['192.0.2.10', '192.0.2.12']);
  // The FQDN slice replaced: no hostname becomes a next hop.
  const fqdnKey = [...slices2.keys()].find((k) => k.endsWith('/db-f'))!;
  const slices3 = new Map(slices2);
  slices3.set(fqdnKey, { ...slices3.get(fqdnKey)! });
  const fq = step(engine, { snapshot: { ...snapshot, endpointSlices: slices3 }, ingress: engineIngress, node, unhealthy });
  assert.deepEqual(fq.routes.get('203.0.113.30/32')?.nextHops, ['192.0.2.30']);
  // An FQDN slice present at the full pass, then its service changed.
  const fresh = new BgpDesiredEngine();
  step(fresh, { snapshot: { ...snapshot, endpointSlices: slices3 }, ingress: engineIngress, node, unhealthy });
  const services = new Map(snapshot.services);
  services.set('default/db', { ...services.get('default/db')! });
  const after = step(fresh, { snapshot: { ...snapshot, services, endpointSlices: slices3 }, ingress: engineIngress, node, unhealthy });
  assert.deepEqual(after.changed, new Set(['203.0.113.30/32']));
  assert.deepEqual(after.routes.get('203.0.113.30/32')?.nextHops, ['192.0.2.30']);
});

test('engine: an IPv6 change is a /128 prefix and reaches only the peers with an IPv6 family', () => {
  const snapshot = engineDocs();
  const engine = new BgpDesiredEngine();
  const full = step(engine, { snapshot, ingress: engineIngress, node });
  assert.deepEqual(full.withheld.map((w) => w.ip), ['2001:db8::10', '203.0.113.30'], 'web has no IPv6 backend yet; db none at all');
  const slices = new Map(snapshot.endpointSlices);
  const v6 = snap(slice('web', 'web-6', [['2001:db8:1::10', 'node-a']], 'IPv6')).endpointSlices;
  const withV6 = new Map([...slices, ...v6]);
  const d = step(engine, { snapshot: { ...snapshot, endpointSlices: withV6 }, ingress: engineIngress, node });
  assert.deepEqual(d.changed, new Set(['203.0.113.10/32', '2001:db8::10/128']));
  assert.deepEqual(d.routes.get('2001:db8::10/128')?.nextHops, ['2001:db8:1::10']);
  assert.deepEqual(d.routes.get('2001:db8::10/128')?.peers, [A], 'peer b selects web too, but only for IPv4');
  assert.deepEqual(d.routes.get('203.0.113.10/32')?.peers, [A, B]);
});

test('engine: a LoadBalancer service without an allocation advertises nothing, in the full pass and after a change', () => {
  const s = snap(peers, plain, service('web', 'Cluster'), service('api', 'Cluster'), slice('web', 'web-a', [['192.0.2.10', 'node-a']]), slice('api', 'api-a', [['192.0.2.11', 'node-a']]));
  const ingress = new Map([['default/api', ['203.0.113.11']]]);
  const engine = new BgpDesiredEngine();
  assert.deepEqual([...step(engine, { snapshot: s, ingress, node }).routes.keys()], ['203.0.113.11/32']);
  const services = new Map(s.services);
  services.set('default/web', { ...services.get('default/web')! });
  assert.deepEqual([...step(engine, { snapshot: { ...s, services }, ingress, node }).routes.keys()], ['203.0.113.11/32']);
});

test('engine: withheld IPs stay in address order after one of them is re-evaluated, and a withheld IP that stays withheld is no changed prefix', () => {
  const s = snap(
    peers,
    plain,
    service('w1', 'Local'),
    service('w2', 'Local'),
    service('w3', 'Local'),
    slice('w1', 'w1-a', [['192.0.2.1', 'node-b']]),
    slice('w2', 'w2-a', [['192.0.2.2', 'node-b']]),
    slice('w3', 'w3-a', [['192.0.2.3', 'node-b']]),
  );
  const ingress = new Map([
    ['default/w1', ['203.0.113.1']],
    ['default/w2', ['203.0.113.2']],
    ['default/w3', ['203.0.113.3']],
  ]);
  const engine = new BgpDesiredEngine();
  assert.deepEqual(step(engine, { snapshot: s, ingress, node }).withheld.map((w) => w.ip), ['203.0.113.1', '203.0.113.2', '203.0.113.3']);
  const slices = new Map(s.endpointSlices);
  const k1 = [...slices.keys()].find((k) => k.endsWith('/w1-a'))!;
  slices.set(k1, { ...slices.get(k1)! });
  const d = step(engine, { snapshot: { ...s, endpointSlices: slices }, ingress, node });
  assert.deepEqual(d.withheld.map((w) => w.ip), ['203.0.113.1', '203.0.113.2', '203.0.113.3']);
  assert.deepEqual(d.changed, new Set());
});

test('engine: attributes follow an incremental change (a new IP of an attributed service joins its group)', () => {
  const s = snap(
    peers,
    advert('lb', 'bgp', [lbEntry(', attributes: { communities: { standard: ["65000:5"] } }')]),
    service('web', 'Cluster'),
    service('api', 'Cluster'),
    slice('web', 'web-a', [['192.0.2.10', 'node-a']]),
    slice('api', 'api-a', [['192.0.2.11', 'node-a']]),
  );
  const engine = new BgpDesiredEngine();
  const first = step(engine, { snapshot: s, ingress: new Map([['default/web', ['203.0.113.10']]]), node });
  assert.deepEqual(first.attributes.get(A), [{ prefixes: ['203.0.113.10/32'], communities: [[65000, 5]], largeCommunities: [] }]);
  const input = { snapshot: s, ingress: new Map([['default/web', ['203.0.113.10']], ['default/api', ['203.0.113.11']]]), node };
  const d = step(engine, input);
  assert.deepEqual(d.changed, new Set(['203.0.113.11/32']));
  assert.deepEqual([...d.attributes.entries()], [...computeBgpDesired(input).attributes.entries()]);
  assert.deepEqual(d.attributes.get(A), [{ prefixes: ['203.0.113.10/32', '203.0.113.11/32'], communities: [[65000, 5]], largeCommunities: [] }]);
});
