/**
 * Issue 17: the peers BIRD gets from the BGP intent (control plane) and the
 * bird.conf rendered from them (datapath). Every rendered config is checked
 * by BIRD's own parser (`bird -p`), the real tool.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { birdPeers } from '../../src/controlplane/bgp/peers.js';
import { renderBirdConfig } from '../../src/datapath/bird/render.js';
import type { BgpRouteRow } from '../../src/datapath/tables/bgp-routes.js';
import type { BirdPeer } from '../../src/datapath/tables/bird-config.js';
import { parseManifests } from '../../src/intent/index.js';
import { computeBgpDesired } from '../../src/controlplane/bgp/desired.js';
import { explainRefusal } from '../../src/os/bird.js';

const dir = mkdtempSync(join(tmpdir(), 'herald-bird-render-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function birdParses(text: string): { ok: boolean; output: string } {
  const file = join(dir, 'bird.conf');
  writeFileSync(file, text);
  const r = spawnSync('bird', ['-p', '-c', file], { encoding: 'utf8' });
  assert.notEqual(r.error?.message.includes('ENOENT'), true, 'bird (Debian bird2) must be installed');
  return { ok: r.status === 0, output: `${r.stdout}${r.stderr}` };
}

const intent = `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec:
  nodeSelector: { matchLabels: { bgp: "on" } }
  bgpInstances:
  - name: i65000
    localASN: 4200000000
    peers:
    - { name: tor-a, peerAddress: 198.51.100.1, peerASN: 65001, peerConfigRef: { name: fast } }
    - { name: tor-b, peerAddress: "2001:db8::1", peerASN: 65002, peerConfigRef: { name: multihop } }
    - { name: default-peer, peerAddress: 198.51.100.3, peerASN: 65003 }
    - { name: any-asn, peerAddress: 198.51.100.4 }
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: fast }
spec:
  transport: { peerPort: 1179 }
  timers: { holdTimeSeconds: 9, keepAliveTimeSeconds: 3, connectRetryTimeSeconds: 5 }
  gracefulRestart: { enabled: true, restartTimeSeconds: 30 }
  families: [{ afi: ipv4, safi: unicast }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: multihop }
spec:
  ebgpMultihop: 3
`;

const node = { name: 'node-a', labels: { bgp: 'on' } };

test('peers of the instances selecting this node, with their peer config (peerASN 0: any AS from the OPEN)', () => {
  const snapshot = parseManifests(intent, 'f.yaml').snapshot!;
  const { peers, skipped } = birdPeers(snapshot, node);
  assert.deepEqual(peers.map((p) => [p.id, p.protocol, p.localAsn, p.address, p.asn, p.port, p.holdSeconds, p.keepaliveSeconds, p.connectRetrySeconds, p.multihop, p.families]), [
    ['bgp/i65000/tor-a', 'herald_peer1', 4200000000, '198.51.100.1', 65001, 1179, 9, 3, 5, 1, ['ipv4']],
    ['bgp/i65000/tor-b', 'herald_peer2', 4200000000, '2001:db8::1', 65002, 179, 90, 30, 120, 3, ['ipv4', 'ipv6']],
    ['bgp/i65000/default-peer', 'herald_peer3', 4200000000, '198.51.100.3', 65003, 179, 90, 30, 120, 1, ['ipv4', 'ipv6']],
    ['bgp/i65000/any-asn', 'herald_peer4', 4200000000, '198.51.100.4', 0, 179, 90, 30, 120, 1, ['ipv4', 'ipv6']],
  ]);
  assert.deepEqual(peers.map((p) => p.gracefulRestart), [{ restartSeconds: 30 }, undefined, undefined, undefined], 'graceful restart from the peer config');
  assert.deepEqual(skipped, []);
  assert.deepEqual(birdPeers(snapshot, { name: 'node-b', labels: {} }).peers, [], 'node selector');
});

const route = (prefix: string, peers: string[]): BgpRouteRow => ({ ip: prefix.split('/')[0]!, prefix, nextHops: ['192.0.2.10'], services: ['default/web'], peers });

test('the rendered config is accepted by BIRD, learns herald routes by krt_source and exports them to peers', () => {
  const ids = ['bgp/i65000/tor-a', 'bgp/i65000/tor-b', 'bgp/i65000/default-peer', 'bgp/i65000/any-asn'];
  const routes = [route('203.0.113.10/32', ids), route('2001:db8:2::10/128', ['bgp/i65000/tor-b', 'bgp/i65000/default-peer', 'bgp/i65000/any-asn'])];
  const { peers } = birdPeers(parseManifests(intent, 'f.yaml').snapshot!, node, routes);
  assert.deepEqual(peers.map((p) => p.prefixes), [undefined, undefined, undefined, undefined], 'each peer is owed every route of its families');
  const text = renderBirdConfig({ name: 'bird', peers, routerId: '192.0.2.2', bfd: { intervalMs: 100, multiplier: 3 } });
  const parsed = birdParses(text);
  assert.ok(parsed.ok, `${parsed.output}\n${text}`);
  assert.match(text, /protocol kernel herald_kernel_4 \{\n {2}learn;\n[^}]*ipv4 \{ import where krt_source = 250; export none; \};/);
  // peerASN 0: BIRD's `external` (any AS in the peer's OPEN but our own), as Cilium skips the OPEN's AS check.
  assert.match(text, /neighbor 198\.51\.100\.4 port 179 external;/);
  assert.match(text, /neighbor 198\.51\.100\.1 port 1179 as 65001;\n {2}hold time 9;\n {2}keepalive time 3;\n {2}connect retry time 5;\n {2}bfd on;/);
  assert.match(text, /protocol bfd herald_bfd \{\n {2}interface "\*" \{ min rx interval 100 ms; min tx interval 100 ms; multiplier 3; \};/);
  // Every peer wants every route of its families: the filter is by source only (a route change needs no reload).
  assert.match(text, /herald_peer1 \{[^}]*ipv4 \{ import none; next hop self; export where source = RTS_INHERIT && krt_source = 250; \};/);
  // BIRD refuses BFD on multihop sessions without a local address: left off there.
  assert.doesNotMatch(text.split('protocol bgp herald_peer2')[1]!.split('}\n')[0]!, /bfd on/);
  assert.match(text, /multihop 3;/);
  // Graceful restart only where the peer config enables it.
  assert.match(text.split('protocol bgp herald_peer1')[1]!.split('}\n')[0]!, /graceful restart on;\n {2}graceful restart time 30;/);
  assert.doesNotMatch(text.split('protocol bgp herald_peer2')[1]!, /graceful restart/);
});

test('a peer that selects fewer prefixes than the node advertises gets its own prefix set', () => {
  const routes = [route('203.0.113.10/32', ['bgp/i65000/tor-a']), route('203.0.113.11/32', ['bgp/i65000/tor-a', 'bgp/i65000/tor-b'])];
  const { peers } = birdPeers(parseManifests(intent, 'f.yaml').snapshot!, node, routes);
  assert.deepEqual(peers.map((p) => p.prefixes), [undefined, ['203.0.113.11/32'], [], []]);
  const text = renderBirdConfig({ name: 'bird', peers, routerId: '192.0.2.2' });
  assert.ok(birdParses(text).ok, text);
  const peer2 = text.split('protocol bgp herald_peer2')[1]!;
  assert.match(peer2, /ipv4 \{ import none; next hop self; export where source = RTS_INHERIT && krt_source = 250 && net ~ \[ 203\.0\.113\.11\/32 \]; \};/);
  assert.match(peer2, /ipv6 \{ [^}]*krt_source = 250 && false; \};/, 'no IPv6 prefix for it: nothing exported');
  assert.match(text.split('protocol bgp herald_peer1')[1]!, /ipv4 \{ import none; next hop self; export where source = RTS_INHERIT && krt_source = 250; \};/);
});

test('values that are not what they claim are refused before they reach the file', () => {
  const peer: BirdPeer = { id: 'x', protocol: 'herald_peer1', localAsn: 65000, address: '198.51.100.1 }; protocol static {', asn: 65001, port: 179, holdSeconds: 9, keepaliveSeconds: 3, connectRetrySeconds: 1, multihop: 1, families: ['ipv4'] };
  const row = (peers: BirdPeer[], routerId = '192.0.2.2') => ({ name: 'bird' as const, peers, routerId });
  assert.throws(() => renderBirdConfig(row([peer])), /peer address .* is not an IP address/);
  assert.throws(() => renderBirdConfig(row([{ ...peer, address: '198.51.100.1', asn: -1 }])), /peer ASN -1 out of range/);
  assert.throws(() => renderBirdConfig(row([{ ...peer, address: '198.51.100.1', protocol: 'p { }' }])), /protocol name .* is not a plain identifier/);
  assert.throws(() => renderBirdConfig(row([{ ...peer, address: '198.51.100.1', prefixes: ['203.0.113.1/32 ]; }'] }])), /prefix .* is not an IP address/);
  assert.throws(() => renderBirdConfig(row([], '2001:db8::1')), /router id .* must be an IPv4 address/);
});

test('CiliumBGPNodeConfigOverride: this node\'s router ID, local ASN and a peer\'s local address (which also allows multihop BFD)', () => {
  const override = `---
apiVersion: cilium.io/v2
kind: CiliumBGPNodeConfigOverride
metadata: { name: node-a }
spec:
  bgpInstances:
  - name: i65000
    routerID: 192.0.2.77
    localASN: 65010
    peers: [{ name: tor-b, localAddress: "2001:db8::2" }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPNodeConfigOverride
metadata: { name: node-b }
spec:
  bgpInstances: [{ name: i65000, routerID: 192.0.2.88 }]
`;
  const snapshot = parseManifests(intent + override, 'f.yaml').snapshot!;
  const { peers } = birdPeers(snapshot, node);
  assert.deepEqual(peers.map((p) => [p.id, p.routerId, p.localAsn, p.localAddress]), [
    ['bgp/i65000/tor-a', '192.0.2.77', 65010, undefined],
    ['bgp/i65000/tor-b', '192.0.2.77', 65010, '2001:db8::2'],
    ['bgp/i65000/default-peer', '192.0.2.77', 65010, undefined],
    ['bgp/i65000/any-asn', '192.0.2.77', 65010, undefined],
  ]);
  const text = renderBirdConfig({ name: 'bird', peers, routerId: '192.0.2.2', bfd: { intervalMs: 100, multiplier: 3 } });
  const parsed = birdParses(text);
  assert.ok(parsed.ok, `${parsed.output}\n${text}`);
  const peer2 = text.split('protocol bgp herald_peer2')[1]!.split('}\n')[0]!;
  assert.match(peer2, /router id 192\.0\.2\.77;\n {2}local 2001:db8::2 as 65010;/);
  assert.match(peer2, /multihop 3;\n {2}bfd on;/);
});

test('advertisement attributes: communities (standard, well-known, large) and local preference per group of prefixes, accepted by BIRD', () => {
  const text = `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec: { bgpInstances: [{ name: i, localASN: 65000, peers: [{ name: r, peerAddress: 198.51.100.1, peerASN: 65000, peerConfigRef: { name: p } }] }] }
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: p }
spec: { families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { a: b } } }, { afi: ipv6, safi: unicast, advertisements: { matchLabels: { a: b } } }] }
---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: tagged, labels: { a: b } }
spec:
  advertisements:
  - advertisementType: Service
    service: { addresses: [LoadBalancerIP] }
    selector: { matchLabels: { tier: gold } }
    attributes: { communities: { standard: ["65000:100", "4259840001"], wellKnown: [no-export], large: ["65000:1:2"] }, localPreference: 150 }
  - advertisementType: Service
    service: { addresses: [LoadBalancerIP] }
    selector: { matchLabels: { tier: gold } }
    attributes: { communities: { standard: ["65000:100"] }, localPreference: 200 }
  - advertisementType: Service
    service: { addresses: [LoadBalancerIP] }
    selector: { matchLabels: { tier: plain } }
---
apiVersion: v1
kind: Service
metadata: { name: gold, namespace: default, labels: { tier: gold } }
spec: { type: LoadBalancer, ports: [{ port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: plain, namespace: default, labels: { tier: plain } }
spec: { type: LoadBalancer, ports: [{ port: 80 }] }
`;
  const snapshot = parseManifests(text, 'f.yaml').snapshot!;
  const ingress = new Map([['default/gold', ['203.0.113.10', '2001:db8::10']], ['default/plain', ['203.0.113.11']]]);
  // No endpoint is ready: attributes follow the selection, so bird.conf does not change with readiness.
  const desired = computeBgpDesired({ snapshot, ingress, node: { name: 'n', labels: {} } });
  assert.equal(desired.routes.size, 0);
  assert.deepEqual(desired.attributes.get('bgp/i/r'), [
    // Union of communities (4259840001 = 65000:1), the highest local preference.
    { prefixes: ['2001:db8::10/128', '203.0.113.10/32'], communities: [[65000, 1], [65000, 100], [65535, 65281]], largeCommunities: [[65000, 1, 2]], localPreference: 200 },
  ]);
  const { peers } = birdPeers(snapshot, { name: 'n', labels: {} }, [], desired.attributes);
  const conf = renderBirdConfig({ name: 'bird', peers, routerId: '192.0.2.2' });
  const parsed = birdParses(conf);
  assert.ok(parsed.ok, `${parsed.output}\n${conf}`);
  assert.match(conf, /if net ~ \[ 203\.0\.113\.10\/32 \] then \{ bgp_community\.add\(\(65000, 1\)\); bgp_community\.add\(\(65000, 100\)\); bgp_community\.add\(\(65535, 65281\)\); bgp_large_community\.add\(\(65000, 1, 2\)\); bgp_local_pref = 200; \}/);
  assert.match(conf, /ipv6 \{[^]*if net ~ \[ 2001:db8::10\/128 \] then/);
  assert.doesNotMatch(conf, /203\.0\.113\.11/, 'the plain service carries no attributes');
});

test('--bird-socket: the include fragment, inside an operator bird.conf with its own kernel protocols, is accepted by BIRD', () => {
  const routes = [route('203.0.113.10/32', ['bgp/i65000/tor-a', 'bgp/i65000/any-asn']), route('203.0.113.11/32', ['bgp/i65000/any-asn']), route('2001:db8:2::10/128', ['bgp/i65000/any-asn'])];
  const { peers } = birdPeers(parseManifests(intent, 'f.yaml').snapshot!, node, routes);
  const text = renderBirdConfig({ name: 'bird', peers, routerId: '192.0.2.2', fragment: { prefixes: routes.map((r) => r.prefix) } });
  writeFileSync(join(dir, 'herald.conf'), text);
  // The operator's: its own router ID, device and kernel protocols on the main tables (one per kernel table in BIRD).
  const operator = `router id 192.0.2.250;\nprotocol device {}\nprotocol kernel { ipv4 { export all; }; }\nprotocol kernel { ipv6 { export all; }; }\ninclude "${join(dir, 'herald.conf')}";\n`;
  const parsed = birdParses(operator);
  assert.ok(parsed.ok, `${parsed.output}\n${text}`);
  assert.doesNotMatch(text, /protocol (kernel|device)|^router id/m, 'nothing of the operator\'s');
  assert.match(text, /protocol static herald_static_4 \{\n {2}ipv4 \{ table herald4; \};\n {2}route 203\.0\.113\.10\/32 blackhole;\n {2}route 203\.0\.113\.11\/32 blackhole;\n\}/);
  assert.match(text, /route 2001:db8:2::10\/128 blackhole;/);
  assert.match(text, /protocol bgp herald_peer1 \{\n {2}router id 192\.0\.2\.2;/);
  assert.match(text.split('protocol bgp herald_peer1')[1]!, /ipv4 \{ table herald4; import none; next hop self; export where source = RTS_STATIC && net ~ \[ 203\.0\.113\.10\/32 \]; \};/);
  // Without the fragment form the same peers clash with the operator's kernel protocols.
  writeFileSync(join(dir, 'herald.conf'), renderBirdConfig({ name: 'bird', peers, routerId: '192.0.2.2' }));
  assert.equal(birdParses(operator).ok, false);
});

test('a BIRD that lacks `neighbor … external` (peerASN 0) is told apart in the refusal', () => {
  const config = 'router id 192.0.2.2;\nprotocol bgp herald_peer1 {\n  local as 65000;\n  neighbor 198.51.100.4 port 179 external;\n}\n';
  assert.match(explainRefusal(config, '/x/bird.conf.next:4:40 syntax error, unexpected EXTERNAL'), /syntax error, unexpected EXTERNAL — peerASN 0 .* give the peer's ASN/);
  assert.equal(explainRefusal(config, '/x/bird.conf.next:3:3 syntax error'), '/x/bird.conf.next:3:3 syntax error', 'other lines: BIRD\'s words only');
  assert.equal(explainRefusal(config, '/etc/bird/bird.conf:4:3 syntax error', '/x/herald.conf'), '/etc/bird/bird.conf:4:3 syntax error', 'another file (the operator\'s)');
});
