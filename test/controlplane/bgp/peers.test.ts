/**
 * Issue 17: the BGP peers this node gets from intent (birdPeers) — which
 * cluster configs select the node, each peer's CiliumBGPPeerConfig (port,
 * timers, multihop, graceful restart, families) with Cilium's defaults when
 * it is absent or leaves a field out, this node's CiliumBGPNodeConfigOverride,
 * and the prefixes a peer is owed when it selects fewer routes than the node
 * advertises (AdvertisedRoutes).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AdvertisedRoutes, birdPeers } from '../../../src/controlplane/bgp/peers.js';
import type { BgpRouteRow } from '../../../src/datapath/tables/bgp-routes.js';
import type { AttributeGroup } from '../../../src/datapath/tables/bird-config.js';
import { cluster, peerConfig, snap } from './fixtures.js';

const node = { name: 'node-a', labels: { rack: 'r1' } };

/** Peer tor of cluster config bgp with its CiliumBGPPeerConfig `spec`. */
const torWith = (spec: string) => snap(cluster('bgp', '{ name: tor, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: tor } }'), peerConfig('tor', spec));

const route = (ip: string, peers: string[]): BgpRouteRow => ({
  ip,
  prefix: `${ip}/${ip.includes(':') ? 128 : 32}`,
  nextHops: ['198.51.100.10'],
  services: ['default/web'],
  peers,
});

test('a peer without peerConfigRef gets Cilium\'s defaults: port 179, default timers, multihop 1, IPv4 and IPv6 unicast, no graceful restart', () => {
  const s = snap(cluster('bgp', '{ name: tor, peerAddress: 192.0.2.1, peerASN: 65100 }'));
  const { peers, skipped } = birdPeers(s, node);
  assert.deepEqual(skipped, []);
  assert.deepEqual(peers, [
    {
      id: 'bgp/i/tor',
      protocol: 'herald_peer1',
      localAsn: 65000,
      address: '192.0.2.1',
      asn: 65100,
      port: 179,
      holdSeconds: 90,
      keepaliveSeconds: 30,
      connectRetrySeconds: 120,
      multihop: 1,
      families: ['ipv4', 'ipv6'],
    },
  ]);
});

test('a peerConfigRef naming no CiliumBGPPeerConfig falls back to the same defaults', () => {
  const s = snap(cluster('bgp', '{ name: tor, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: missing } }'));
  const [p] = birdPeers(s, node).peers;
  assert.deepEqual(
    [p?.port, p?.holdSeconds, p?.keepaliveSeconds, p?.connectRetrySeconds, p?.multihop, p?.families, p?.gracefulRestart],
    [179, 90, 30, 120, 1, ['ipv4', 'ipv6'], undefined],
  );
});

test('a CiliumBGPPeerConfig\'s port, timers, multihop and graceful restart are taken as written', () => {
  const s = torWith(
    `{ transport: { peerPort: 1179 }, timers: { holdTimeSeconds: 9, keepAliveTimeSeconds: 3, connectRetryTimeSeconds: 7 }, ebgpMultihop: 4, gracefulRestart: { enabled: true, restartTimeSeconds: 45 }, families: [{ afi: ipv4, safi: unicast }] }`,
  );
  const [p] = birdPeers(s, node).peers;
  assert.equal(p?.port, 1179);
  assert.equal(p?.holdSeconds, 9);
  assert.equal(p?.keepaliveSeconds, 3);
  assert.equal(p?.connectRetrySeconds, 7);
  assert.equal(p?.multihop, 4);
  assert.deepEqual(p?.gracefulRestart, { restartSeconds: 45 });
  assert.deepEqual(p?.families, ['ipv4']);
});

test('a CiliumBGPPeerConfig that leaves fields out gets the CRD defaults; graceful restart written but disabled stays off', () => {
  const s = torWith('{ gracefulRestart: { enabled: false, restartTimeSeconds: 45 } }');
  const [p] = birdPeers(s, node).peers;
  assert.deepEqual(
    [p?.port, p?.holdSeconds, p?.keepaliveSeconds, p?.connectRetrySeconds, p?.multihop, p?.families],
    [179, 90, 30, 120, 1, ['ipv4', 'ipv6']],
  );
  assert.equal(p !== undefined && 'gracefulRestart' in p, false);
});

test('graceful restart enabled without a restart time uses the CRD default of 120 s', () => {
  const s = torWith('{ gracefulRestart: { enabled: true } }');
  assert.deepEqual(birdPeers(s, node).peers[0]?.gracefulRestart, { restartSeconds: 120 });
});

test('families: only IPv4/IPv6 unicast are kept, each once, sorted', () => {
  const s = torWith(
    `{ families: [{ afi: ipv6, safi: unicast }, { afi: l2vpn, safi: evpn }, { afi: ipv4, safi: multicast }, { afi: ipv4, safi: unicast, advertisements: { matchLabels: { a: b } } }, { afi: ipv4, safi: unicast }] }`,
  );
  assert.deepEqual(birdPeers(s, node).peers[0]?.families, ['ipv4', 'ipv6']);
});

test('a peer config with only non-unicast families leaves the peer with no family (not the defaults)', () => {
  const s = torWith('{ families: [{ afi: l2vpn, safi: evpn }] }');
  assert.deepEqual(birdPeers(s, node).peers[0]?.families, []);
});

test('a peer without peerAddress (auto-discovery) is skipped and reported, the others are kept', () => {
  const s = snap(
    cluster('bgp', '{ name: auto, autoDiscovery: { mode: DefaultGateway } }, { name: tor, peerAddress: 192.0.2.1, peerASN: 65100 }'),
  );
  const { peers, skipped } = birdPeers(s, node);
  assert.deepEqual(peers.map((p) => [p.id, p.protocol, p.address]), [['bgp/i/tor', 'herald_peer1', '192.0.2.1']]);
  assert.equal(skipped.length, 1);
  assert.equal(skipped[0]?.peer, 'bgp/i/auto');
  assert.match(skipped[0]?.message ?? '', /peerAddress/);
});

test('a cluster config whose nodeSelector does not select this node gives it none of its peers', () => {
  const s = snap(
    cluster('here', '{ name: tor, peerAddress: 192.0.2.1, peerASN: 65100 }', '\n  nodeSelector: { matchLabels: { rack: r1 } }'),
    cluster('there', '{ name: tor, peerAddress: 192.0.2.9, peerASN: 65100 }', '\n  nodeSelector: { matchLabels: { rack: r2 } }'),
  );
  assert.deepEqual(birdPeers(s, node).peers.map((p) => p.id), ['here/i/tor']);
  assert.deepEqual(birdPeers(s, { name: 'node-b', labels: { rack: 'r2' } }).peers.map((p) => p.id), ['there/i/tor']);
});

test('peers are ordered by cluster config name whatever the order of the intent, and their protocols numbered in that order', () => {
  const s = snap(
    cluster('zeta', '{ name: z1, peerAddress: 192.0.2.3, peerASN: 65103 }'),
    cluster('alpha', '{ name: a1, peerAddress: 192.0.2.1, peerASN: 65101 }, { name: a2, peerAddress: 192.0.2.2, peerASN: 65102 }'),
    cluster('mid', '{ name: m1, peerAddress: 192.0.2.4, peerASN: 65104 }'),
  );
  const want = [
    ['alpha/i/a1', 'herald_peer1'],
    ['alpha/i/a2', 'herald_peer2'],
    ['mid/i/m1', 'herald_peer3'],
    ['zeta/i/z1', 'herald_peer4'],
  ];
  assert.deepEqual(birdPeers(s, node).peers.map((p) => [p.id, p.protocol]), want);
  // The same configs in the opposite map order give the same peers.
  const reversed = { ...s, bgpClusterConfigs: new Map([...s.bgpClusterConfigs].reverse()) };
  assert.deepEqual(birdPeers(reversed, node).peers.map((p) => [p.id, p.protocol]), want);
});

const twoInstances = `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec:
  bgpInstances:
  - { name: red, localASN: 65000, peers: [{ name: tor1, peerAddress: 192.0.2.1, peerASN: 65100 }, { name: tor2, peerAddress: 192.0.2.2, peerASN: 65100 }] }
  - { name: blue, localASN: 65001, peers: [{ name: tor1, peerAddress: 192.0.2.5, peerASN: 65200 }] }
`;

/** node-a's CiliumBGPNodeConfigOverride with the given instances. */
const override = (...instances: string[]) => `apiVersion: cilium.io/v2
kind: CiliumBGPNodeConfigOverride
metadata: { name: node-a }
spec:
  bgpInstances:
${instances.map((i) => `  - ${i}`).join('\n')}
`;

test('a CiliumBGPNodeConfigOverride sets router ID, local ASN and local addresses per instance and per peer of this node', () => {
  const s = snap(
    twoInstances,
    override(
      '{ name: blue, routerID: 10.0.0.2, localASN: 65011, peers: [{ name: tor1, localAddress: 10.1.0.2 }] }',
      '{ name: red, routerID: 10.0.0.1, peers: [{ name: tor2, localAddress: 10.1.0.1 }, { name: tor1, localAddress: 10.1.0.9 }] }',
    ),
  );
  const out = birdPeers(s, node).peers.map((p) => ({ id: p.id, localAsn: p.localAsn, routerId: p.routerId, localAddress: p.localAddress }));
  assert.deepEqual(out, [
    { id: 'bgp/red/tor1', localAsn: 65000, routerId: '10.0.0.1', localAddress: '10.1.0.9' },
    { id: 'bgp/red/tor2', localAsn: 65000, routerId: '10.0.0.1', localAddress: '10.1.0.1' },
    { id: 'bgp/blue/tor1', localAsn: 65011, routerId: '10.0.0.2', localAddress: '10.1.0.2' },
  ]);
  // Another node's override does not apply here.
  const other = birdPeers(s, { name: 'node-b', labels: {} }).peers;
  assert.deepEqual(other.map((p) => [p.localAsn, 'routerId' in p, 'localAddress' in p]), [[65000, false, false], [65000, false, false], [65001, false, false]]);
});

test('an override that lists an instance but not a peer leaves that peer without a local address (and no routerId key when it sets none)', () => {
  const s = snap(twoInstances, override('{ name: red, peers: [{ name: tor2 }] }'));
  const peers = birdPeers(s, node).peers;
  assert.deepEqual(peers.map((p) => [p.id, p.localAsn]), [['bgp/red/tor1', 65000], ['bgp/red/tor2', 65000], ['bgp/blue/tor1', 65001]]);
  for (const p of peers) {
    assert.equal('localAddress' in p, false, p.id);
    assert.equal('routerId' in p, false, p.id);
  }
});

test('attributes are attached to the peer they were computed for only', () => {
  const s = snap(cluster('bgp', '{ name: a, peerAddress: 192.0.2.1, peerASN: 65100 }, { name: b, peerAddress: 192.0.2.2, peerASN: 65100 }'));
  const groups: AttributeGroup[] = [{ prefixes: ['203.0.113.10/32'], communities: [[65000, 7]], largeCommunities: [], localPreference: 200 }];
  const peers = birdPeers(s, node, [], new Map([['bgp/i/b', groups]])).peers;
  assert.equal('attributes' in peers[0]!, false);
  assert.deepEqual(peers[1]?.attributes, groups);
});

test('a peer owed every route of its families gets no prefix list; one owed fewer gets exactly its prefixes, sorted', () => {
  const s = snap(
    cluster('bgp', '{ name: all, peerAddress: 192.0.2.1, peerASN: 65100 }, { name: some, peerAddress: 192.0.2.2, peerASN: 65100 }, { name: v4, peerAddress: 192.0.2.3, peerASN: 65100, peerConfigRef: { name: v4 } }'),
    peerConfig('v4', '{ families: [{ afi: ipv4, safi: unicast }] }'),
  );
  const rows = [
    route('203.0.113.20', ['bgp/i/all', 'bgp/i/some', 'bgp/i/v4']),
    route('2001:db8::1', ['bgp/i/all']),
    route('203.0.113.3', ['bgp/i/all', 'bgp/i/some', 'bgp/i/v4']),
    route('2001:db8::2', ['bgp/i/all', 'bgp/i/some']),
  ];
  const peers = birdPeers(s, node, rows).peers;
  assert.equal('prefixes' in peers[0]!, false, 'all: every route');
  assert.deepEqual(peers[1]?.prefixes, ['2001:db8::2/128', '203.0.113.20/32', '203.0.113.3/32']);
  assert.equal('prefixes' in peers[2]!, false, 'v4: every IPv4 route (the IPv6 ones are not its family)');
});

test('a peer owed one IPv6 route of two is told which one (IPv6 routes are counted as IPv6)', () => {
  const s = snap(
    cluster('bgp', '{ name: v6, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: v6 } }'),
    peerConfig('v6', '{ families: [{ afi: ipv6, safi: unicast }] }'),
  );
  const rows = [route('2001:db8::1', ['bgp/i/v6']), route('2001:db8::2', []), route('203.0.113.1', ['bgp/i/v6'])];
  assert.deepEqual(birdPeers(s, node, rows).peers[0]?.prefixes, ['2001:db8::1/128']);
});

test('AdvertisedRoutes counts per family and per peer, and follows removals', () => {
  const a = AdvertisedRoutes.of([route('203.0.113.1', ['p', 'q']), route('2001:db8::1', ['p'])]);
  assert.equal(a.count(['ipv4']), 1);
  assert.equal(a.count(['ipv6']), 1);
  assert.equal(a.count(['ipv4', 'ipv6']), 2);
  assert.equal(a.countFor('p', ['ipv4', 'ipv6']), 2);
  assert.equal(a.countFor('q', ['ipv6']), 0);
  assert.deepEqual(a.prefixesFor('p', ['ipv6']), ['2001:db8::1/128']);
  assert.deepEqual(a.prefixesFor('q', ['ipv4', 'ipv6']), ['203.0.113.1/32']);
  a.remove(route('2001:db8::1', ['p']));
  assert.equal(a.count(['ipv6']), 0);
  assert.equal(a.countFor('p', ['ipv4', 'ipv6']), 1);
});

test('no cluster config: no peers and nothing skipped', () => {
  assert.deepEqual(birdPeers(snap(peerConfig('tor', '{}')), node), { peers: [], skipped: [] });
});
