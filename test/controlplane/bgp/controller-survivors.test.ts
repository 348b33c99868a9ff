/**
 * Issue 17: the BGP control plane's writes, beyond controller.test.ts — a
 * route row is rewritten when its next hops, services or peers change and
 * left alone otherwise; BIRD's row follows peers, attributes and the
 * override's router ID; the operator-BIRD fragment lists the advertised
 * prefixes sorted; a write that failed is reconciled against the table at
 * the next pass, full or incremental (a bug the mutation run found: an
 * incremental retry left a withdrawn route in the table); health changes recompute; peer warnings are reported
 * in the status and logged once each.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger, type Logger } from '../../../src/core/logger.js';
import type { StateDB } from '../../../src/core/statedb/index.js';
import type { BirdSettings } from '../../../src/controlplane/bgp/controller.js';
import { birdConfigTable } from '../../../src/datapath/tables/bird-config.js';
import { bgpRoutesTable } from '../../../src/datapath/tables/bgp-routes.js';
import type { IntentSnapshot } from '../../../src/intent/index.js';
import { BGP_ON, bgpNode as node, controlPlane, torEdgePolicy, type TorEdgeOptions } from './fixtures.js';

const policy = (opts: TorEdgeOptions = {}) => torEdgePolicy({ nodeSelector: BGP_ON, ...opts });

const service = (name: string, labels: string) => `---
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, labels: { anycast: "yes"${labels} } }
spec: { type: LoadBalancer, externalTrafficPolicy: Local, ports: [{ port: 80 }] }
`;

const slice = (name: string, addresses: string[], ready = true) => `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}-1, namespace: default, labels: { kubernetes.io/service-name: ${name} } }
addressType: IPv4
endpoints: [${addresses.map((a) => `{ addresses: [${a}], nodeName: node-a, conditions: { ready: ${ready} } }`).join(', ')}]
`;

/** web (edge=yes) and api (edge=no) with their backends. */
const intent = (o: { web?: string[]; api?: string[]; webReady?: boolean; apiReady?: boolean; apiEdge?: boolean; policy?: TorEdgeOptions } = {}) =>
  policy(o.policy) +
  service('web', ', edge: "yes"') +
  service('api', `, edge: "${o.apiEdge ? 'yes' : 'no'}"`) +
  slice('web', o.web ?? ['198.51.100.10'], o.webReady ?? true) +
  slice('api', o.api ?? ['198.51.100.11'], o.apiReady ?? true);

const WEB = '203.0.113.20/32';
const API = '203.0.113.11/32';
const ingress = new Map([['default/web', ['203.0.113.20']], ['default/api', ['203.0.113.11']]]);

const setup = (bird?: BirdSettings, log?: Logger) => controlPlane({ node, ingress, bird, log });

/** The snapshot with one object replaced by a new one (the others shared): the incremental path. */
function withSlice(s: IntentSnapshot, svc: string, ready: boolean, addresses?: string[]): IntentSnapshot {
  const key = `default/${svc}-1`;
  const old = s.endpointSlices.get(key)!;
  const endpoints = (addresses ?? old.endpoints.flatMap((e) => e.addresses)).map((a) => ({ ...old.endpoints[0]!, addresses: [a], conditions: { ...old.endpoints[0]!.conditions, ready } }));
  return { ...s, endpointSlices: new Map(s.endpointSlices).set(key, { ...old, endpoints }) };
}

function withServiceLabels(s: IntentSnapshot, svc: string, labels: Record<string, string>): IntentSnapshot {
  const key = `default/${svc}`;
  const old = s.services.get(key)!;
  return { ...s, services: new Map(s.services).set(key, { ...old, metadata: { ...old.metadata, labels } }) };
}

test('before the first update: the status is empty and both tables wait for this control plane\'s initializer', () => {
  const { db, control } = setup();
  assert.deepEqual(control.status(), { routes: [], withheld: [], warnings: [] });
  assert.deepEqual(db.pendingInitializers(bgpRoutesTable), ['bgp-control-plane']);
  assert.deepEqual(db.pendingInitializers(birdConfigTable), ['bgp-control-plane']);
});

test('status() lists the routes written to the table', () => {
  const { control, update, rows } = setup();
  update(intent());
  assert.deepEqual(control.status().routes.map((r) => r.prefix).sort(), [API, WEB]);
  assert.deepEqual(control.status().routes.sort((a, b) => (a.prefix < b.prefix ? -1 : 1)), rows());
});

test('a change of next hops rewrites the route row, whichever way the list changes (added, replaced, removed)', () => {
  const { update, row } = setup();
  const steps = [
    ['198.51.100.10'],
    ['198.51.100.10', '198.51.100.12'], // one added after an unchanged one
    ['198.51.100.10', '198.51.100.13'], // the second replaced
    ['198.51.100.14', '198.51.100.13'], // the first replaced
    ['198.51.100.15'], // one, replacing both
    ['198.51.100.16'], // one replaced by another
  ];
  for (const web of steps) {
    update(intent({ web })); // re-parsed: the full pass
    assert.deepEqual(row(WEB)?.nextHops, [...web].sort(), `full pass: ${web}`);
  }
  // The same changes one slice at a time: the incremental pass.
  let s = update(intent({ web: ['198.51.100.20'] }));
  for (const web of steps) {
    s = update(withSlice(s, 'web', true, web));
    assert.deepEqual(row(WEB)?.nextHops, [...web].sort(), `incremental: ${web}`);
  }
});

test('a change of a route\'s peers rewrites its row; the same input again writes nothing to either table', () => {
  const { update, row, revisions } = setup();
  update(intent());
  assert.deepEqual(row(API)?.peers, ['bgp/i/tor']);
  update(intent({ apiEdge: true }));
  assert.deepEqual(row(API)?.peers, ['bgp/i/edge', 'bgp/i/tor']);
  const before = revisions();
  const web = row(WEB);
  update(intent({ apiEdge: true })); // re-parsed, equal: the full pass compares field by field
  assert.deepEqual(revisions(), before);
  assert.equal(row(WEB), web, 'the unchanged row is the same object');
});

test('a change of a route\'s services (a second service on the same IP) rewrites its row', () => {
  const { update, row } = setup();
  update(intent());
  assert.deepEqual(row(WEB)?.services, ['default/web']);
  update(intent(), node, new Map([['default/web', ['203.0.113.20']], ['default/api', ['203.0.113.20']]]));
  assert.deepEqual(row(WEB)?.services, ['default/api', 'default/web']);
  assert.deepEqual(row(WEB)?.nextHops, ['198.51.100.10', '198.51.100.11']);
  assert.equal(row(API), undefined);
});

test('a route that gains a peer, one object changed: the peer now owed every route gets no prefix list (counts follow the rewritten row)', () => {
  const { update, peer, reference } = setup();
  let s = update(intent());
  assert.deepEqual(peer('bgp/i/edge')?.prefixes, [WEB], 'edge is owed web only');
  assert.equal(peer('bgp/i/tor')?.prefixes, undefined);
  s = update(withServiceLabels(s, 'api', { anycast: 'yes', edge: 'yes' }));
  assert.equal(peer('bgp/i/edge')?.prefixes, undefined, 'edge is owed every route now');
  assert.deepEqual(peer('bgp/i/edge'), reference().find((p) => p.id === 'bgp/i/edge'));
  // And back: edge loses api again.
  update(withServiceLabels(s, 'api', { anycast: 'yes', edge: 'no' }));
  assert.deepEqual(peer('bgp/i/edge')?.prefixes, [WEB]);
  assert.deepEqual(peer('bgp/i/tor'), reference().find((p) => p.id === 'bgp/i/tor'));
});

test('a change of attributes rewrites BIRD\'s row and not the routes', () => {
  const { update, revisions, peer } = setup();
  update(intent({ policy: { community: '65000:1' } }));
  assert.deepEqual(peer('bgp/i/edge')?.attributes?.map((a) => a.communities), [[[65000, 1]]]);
  const before = revisions();
  update(intent({ policy: { community: '65000:2' } }));
  assert.equal(revisions().routes, before.routes);
  assert.ok(revisions().bird > before.bird);
  assert.deepEqual(peer('bgp/i/edge')?.attributes?.map((a) => a.communities), [[[65000, 2]]]);
});

test('an override\'s router ID rewrites BIRD\'s row; a node-label change that keeps the selection writes nothing, one that drops it clears both tables', () => {
  const override = `---
apiVersion: cilium.io/v2
kind: CiliumBGPNodeConfigOverride
metadata: { name: node-a }
spec: { bgpInstances: [{ name: i, routerID: 10.0.0.7 }] }
`;
  const { update, revisions, birdRow, rows } = setup();
  update(intent());
  assert.equal(birdRow()?.peers[0]?.routerId, undefined);
  update(intent({ policy: { override } }));
  assert.deepEqual(birdRow()?.peers.map((p) => p.routerId), ['10.0.0.7', '10.0.0.7']);
  const before = revisions();
  update(intent({ policy: { override } }), { name: 'node-a', labels: { bgp: 'on', extra: 'x' } });
  assert.deepEqual(revisions(), before, 'still selected: nothing written');
  update(intent({ policy: { override } }), { name: 'node-a', labels: { bgp: 'off' } });
  assert.equal(birdRow(), undefined);
  assert.deepEqual(rows(), []);
});

test('intent with no BGP peer at all: no BIRD row, no error, the tables are initialized', () => {
  const { db, update, birdRow, rows } = setup();
  update(service('web', '') + slice('web', ['198.51.100.10']));
  assert.equal(birdRow(), undefined);
  assert.deepEqual(rows(), []);
  assert.equal(db.isInitialized(birdConfigTable), true);
  update(service('web', '') + slice('web', ['198.51.100.10']));
  assert.equal(birdRow(), undefined);
});

test('an operator-run BIRD (fragment): the BIRD row lists the advertised prefixes, sorted, and follows readiness', () => {
  const { update, birdRow } = setup({ routerId: '192.0.2.2', fragment: true });
  let s = update(intent({ apiReady: false }));
  assert.deepEqual(birdRow()?.fragment, { prefixes: [WEB] });
  s = update(withSlice(s, 'api', true)); // api's route is added after web's
  assert.deepEqual(birdRow()?.fragment, { prefixes: [API, WEB] });
  update(withSlice(s, 'web', false));
  assert.deepEqual(birdRow()?.fragment, { prefixes: [API] });
});

test('without fragment the BIRD row has no prefixes of its own', () => {
  const { update, birdRow } = setup();
  update(intent());
  assert.equal(birdRow() !== undefined && 'fragment' in birdRow()!, false);
});

/** Runs `fn` while another write transaction holds the db: the control plane's write throws. */
function whileBusy(db: StateDB, fn: () => void): void {
  const txn = db.writeTxn([bgpRoutesTable]);
  try {
    assert.throws(fn);
  } finally {
    txn.abort();
  }
}

test('a first write that failed: the next full pass writes every route', () => {
  const { db, update, rows, birdRow } = setup();
  whileBusy(db, () => update(intent()));
  assert.deepEqual(rows(), []);
  update(intent()); // re-parsed: the full pass
  assert.deepEqual(rows().map((r) => r.prefix), [API, WEB]);
  assert.equal(birdRow()?.peers.length, 2);
});

test('a write that failed: the next full pass compares with the table, deletes what is no longer wanted and leaves unchanged rows alone', () => {
  const { db, update, rows, row } = setup();
  const s = update(intent());
  const api = row(API);
  whileBusy(db, () => update(withSlice(s, 'web', false))); // web withdrawn, not written
  assert.ok(row(WEB), 'still in the table');
  update(intent({ webReady: false })); // re-parsed: the full pass
  assert.deepEqual(rows().map((r) => r.prefix), [API]);
  assert.equal(row(API), api, 'the unchanged row was not rewritten');
});

test('a write that failed, retried with the same inputs (an incremental pass that changes nothing more): the withdrawn route leaves the table, and BIRD exports what the table holds', () => {
  const { db, update, rows, peer, reference } = setup();
  const s = update(intent());
  assert.deepEqual(rows().map((r) => r.prefix), [API, WEB]);
  const withdrawn = withSlice(s, 'web', false);
  whileBusy(db, () => update(withdrawn)); // the engine has taken web's withdrawal in; the table has not
  update(withdrawn); // the same snapshot again: nothing new for the engine to re-evaluate
  assert.deepEqual(rows().map((r) => r.prefix), [API], 'the route the failed write should have withdrawn is gone');
  assert.deepEqual(peer('edge'), reference().find((p) => p.id === 'edge'), "the peers' export counts are the table's, not the failed write's");
  assert.deepEqual(peer('tor'), reference().find((p) => p.id === 'tor'));
  // And from there on the incremental path is right again.
  update(withSlice(withdrawn, 'web', true));
  assert.deepEqual(rows().map((r) => r.prefix), [API, WEB]);
  assert.deepEqual(peer('edge'), reference().find((p) => p.id === 'edge'));
});

test('a route added by a write that failed and withdrawn before the next write: nothing to delete, nothing thrown', () => {
  const { db, update, rows } = setup();
  const s = update(intent({ webReady: false }));
  assert.deepEqual(rows().map((r) => r.prefix), [API]);
  const ready = withSlice(s, 'web', true);
  whileBusy(db, () => update(ready));
  update(withSlice(ready, 'web', false));
  assert.deepEqual(rows().map((r) => r.prefix), [API]);
});

test('healthChanged: nothing before the first update; afterwards an unhealthy local backend withdraws its route until it recovers', () => {
  const { db, control, update, row, revisions } = setup();
  control.healthChanged(new Set(['default/web|198.51.100.10']));
  assert.equal(db.isInitialized(bgpRoutesTable), false);
  assert.deepEqual(revisions(), { routes: 0, bird: 0 });
  update(intent());
  assert.ok(row(WEB));
  control.healthChanged(new Set(['default/web|198.51.100.10']));
  assert.equal(row(WEB), undefined);
  assert.ok(row(API));
  control.healthChanged(new Set());
  assert.deepEqual(row(WEB)?.nextHops, ['198.51.100.10']);
});

test('peers that cannot be configured are in the status warnings and logged once each, not at every update', () => {
  const warned: object[] = [];
  const log: Logger = { ...silentLogger, warn: (obj: object) => void warned.push(obj) };
  const extraPeers = ', { name: auto1, autoDiscovery: { mode: DefaultGateway } }, { name: auto2, autoDiscovery: { mode: DefaultGateway } }, { name: lost, peerAddress: 192.0.2.9, peerASN: 65300, peerConfigRef: { name: nowhere } }';
  const { control, update } = setup(undefined, log);
  update(intent({ policy: { extraPeers } }));
  const ids = (ws: readonly object[]) => ws.map((w) => (w as { peer: string }).peer).sort();
  const want = ['bgp/i/auto1', 'bgp/i/auto2', 'bgp/i/lost'];
  assert.deepEqual(ids(control.status().warnings), want);
  assert.deepEqual(ids(warned), want);
  update(intent({ policy: { extraPeers } }));
  update(intent({ policy: { extraPeers }, webReady: false }));
  assert.deepEqual(ids(control.status().warnings), want);
  assert.deepEqual(ids(warned), want, 'no repeat');
  assert.deepEqual(warned.slice().sort((a, b) => ((a as { peer: string }).peer < (b as { peer: string }).peer ? -1 : 1)), control.status().warnings.slice().sort((a, b) => (a.peer < b.peer ? -1 : 1)));
});
