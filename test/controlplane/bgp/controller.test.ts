/**
 * Issue 17: the BGP control plane writes the bgp-routes and bird-config
 * tables from intent, only where a row changed (a readiness change touches
 * one route row and never BIRD's row when the peers are unchanged), and marks
 * both tables initialized so the reconcilers may prune.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { birdConfigTable } from '../../../src/datapath/tables/bird-config.js';
import { bgpRoutesTable } from '../../../src/datapath/tables/bgp-routes.js';
import { parseManifests } from '../../../src/intent/index.js';
import { cluster, controlPlane, ipv4PeerConfig, lbAdvertisement, torEdgePolicy } from './fixtures.js';

const intent = (ready: boolean, holdTime = 9) => `${[
  cluster('bgp', '{ name: tor, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: tor } }'),
  ipv4PeerConfig('tor', 'bgp', `  timers: { holdTimeSeconds: ${holdTime}, keepAliveTimeSeconds: 3 }\n`),
  lbAdvertisement('lb', 'bgp', 'anycast: "yes"'),
].join('---\n')}---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, labels: { anycast: "yes" } }
spec: { type: LoadBalancer, externalTrafficPolicy: Local, ports: [{ port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: api, namespace: default, labels: { anycast: "yes" } }
spec: { type: LoadBalancer, externalTrafficPolicy: Local, ports: [{ port: 80 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-1, namespace: default, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints: [{ addresses: [198.51.100.10], nodeName: node-a, conditions: { ready: ${ready} } }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: api-1, namespace: default, labels: { kubernetes.io/service-name: api } }
addressType: IPv4
endpoints: [{ addresses: [198.51.100.11], nodeName: node-a }]
`;

const ingress = new Map([['default/web', ['203.0.113.10']], ['default/api', ['203.0.113.11']]]);
const node = { name: 'node-a', labels: {} };

const setup = () => controlPlane({ node, ingress });

test('routes and the BIRD row are written; the tables are initialized after the first update', () => {
  const { db, control, update } = setup();
  assert.equal(db.isInitialized(bgpRoutesTable), false, 'no pruning before intent is in');
  update(intent(true));
  assert.equal(db.isInitialized(bgpRoutesTable), true);
  assert.equal(db.isInitialized(birdConfigTable), true);
  const t = db.readTxn();
  assert.deepEqual(t.list(bgpRoutesTable).map((r) => [r.prefix, r.nextHops]), [['203.0.113.10/32', ['198.51.100.10']], ['203.0.113.11/32', ['198.51.100.11']]]);
  assert.deepEqual(t.get(birdConfigTable, 'bird')?.peers.map((p) => [p.id, p.holdSeconds, p.prefixes]), [['bgp/i/tor', 9, undefined]]);
  assert.deepEqual(control.status().withheld, []);
});

test('a readiness change rewrites only that route; BIRD\'s row is untouched (no reload)', () => {
  const { db, update, revisions } = setup();
  update(intent(true));
  const before = revisions();
  const api = db.readTxn().get(bgpRoutesTable, '203.0.113.11/32');
  update(intent(false));
  const after = revisions();
  assert.ok(after.routes > before.routes);
  assert.equal(after.bird, before.bird, 'the BIRD config did not change');
  assert.equal(db.readTxn().get(bgpRoutesTable, '203.0.113.10/32'), undefined, 'withdrawn');
  assert.equal(db.readTxn().get(bgpRoutesTable, '203.0.113.11/32'), api, 'the other route row is the same object');
  update(intent(false));
  assert.deepEqual(revisions(), after, 'the same input writes nothing');
});

test('a peer change rewrites BIRD\'s row; no peer left deletes it', () => {
  const { db, update, revisions } = setup();
  update(intent(true));
  const before = revisions();
  update(intent(true, 30));
  assert.ok(revisions().bird > before.bird);
  assert.equal(db.readTxn().get(birdConfigTable, 'bird')?.peers[0]?.holdSeconds, 30);
  update(intent(true).replace(/peers: \[\{[^\]]*\]/, 'peers: []'));
  assert.equal(db.readTxn().get(birdConfigTable, 'bird'), undefined);
});

test('a peer owed fewer routes than the node advertises: its prefixes follow readiness changes made one object at a time (counted, not re-listed)', () => {
  // Two peers: `tor` gets every route, `edge` only services labelled edge=yes (web-0, web-2, …).
  const n = 12;
  const docs = [torEdgePolicy().trimEnd()]; // no trailing newline: joined by '\n---\n' below
  const svcIngress = new Map<string, string[]>();
  for (let i = 0; i < n; i++) {
    svcIngress.set(`default/web-${i}`, [`203.0.113.${20 + i}`]);
    docs.push(`apiVersion: v1
kind: Service
metadata: { name: web-${i}, namespace: default, labels: { anycast: "yes", edge: "${i % 2 === 0 ? 'yes' : 'no'}" } }
spec: { type: LoadBalancer, externalTrafficPolicy: Local, ports: [{ port: 80 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-${i}, namespace: default, labels: { kubernetes.io/service-name: web-${i} } }
addressType: IPv4
endpoints: [{ addresses: [198.51.100.${10 + i}], nodeName: node-a }]`);
  }
  let snapshot = parseManifests(docs.join('\n---\n'), 'f.yaml').snapshot!;
  const { db, update, birdRow, peer, reference } = controlPlane({ node, ingress: svcIngress });
  const edgePrefixes = () => peer('bgp/i/edge')?.prefixes;
  update(snapshot);
  assert.deepEqual(edgePrefixes(), ['203.0.113.20/32', '203.0.113.22/32', '203.0.113.24/32', '203.0.113.26/32', '203.0.113.28/32', '203.0.113.30/32']);
  let rnd = 7;
  const next = () => (rnd = (rnd * 1103515245 + 12345) % 2 ** 31);
  for (let step = 0; step < 60; step++) {
    // One slice replaced by a new object (the rest shared): the incremental path.
    const key = `default/web-${next() % n}`;
    const slice = snapshot.endpointSlices.get(key)!;
    const ready = next() % 2 === 0;
    const endpoints = slice.endpoints.map((e) => ({ ...e, conditions: { ...e.conditions, ready } }));
    snapshot = { ...snapshot, endpointSlices: new Map(snapshot.endpointSlices).set(key, { ...slice, endpoints }) };
    update(snapshot);
    const want = reference(); // counted from the whole table
    assert.deepEqual(birdRow()?.peers ?? [], want, `step ${step}: ${key} ready=${ready}`);
  }
  // Every route withdrawn: both peers owed nothing, `edge` as much as `tor` (all of nothing).
  for (let i = 0; i < n; i++) {
    const key = `default/web-${i}`;
    const slice = snapshot.endpointSlices.get(key)!;
    snapshot = { ...snapshot, endpointSlices: new Map(snapshot.endpointSlices).set(key, { ...slice, endpoints: [] }) };
    update(snapshot);
  }
  assert.equal(db.readTxn().count(bgpRoutesTable), 0);
  assert.equal(edgePrefixes(), undefined);
});
