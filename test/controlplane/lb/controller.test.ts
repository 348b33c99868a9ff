/**
 * The load-balancing control plane on a real StateDB: desired rows written in
 * one transaction, unchanged rows left alone (the table's revision does not
 * move, so the LB reconciler is not woken for nothing), stale rows deleted,
 * the table's initializer held until the first update, and each warning
 * logged once per (service, message) while status() reports the current ones.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger, type Logger } from '../../../src/core/logger.js';
import { StateDB } from '../../../src/core/statedb/index.js';
import { LbControlPlane } from '../../../src/controlplane/lb/controller.js';
import { lbServicesTable } from '../../../src/datapath/tables/lb-services.js';
import type { IntentSnapshot } from '../../../src/intent/index.js';
import { snap } from '../bgp/fixtures.js';

const VIP = '198.51.100.10';

/** A LoadBalancer Service default/`name` with port http 80 → 8080; `annotations` flow-style map entries. */
const svc = (name: string, annotations = '') => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default${annotations ? `, annotations: { ${annotations} }` : ''} }
spec:
  type: LoadBalancer
  ports: [{ name: http, port: 80, targetPort: 8080 }]
`;

/** An IPv4 EndpointSlice of default/`service` on port http 8080 with ready endpoints at `ips`. */
const slice = (service: string, ips: string[]) => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${service}-x, namespace: default, labels: { kubernetes.io/service-name: ${service} } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [${ips.map((ip) => `{ addresses: ["${ip}"], conditions: { ready: true } }`).join(', ')}]
`;

interface Warned {
  obj: object;
  msg: string | undefined;
}

/** A control plane on a fresh StateDB with the lb-services table, its warnings captured. */
function setup() {
  const db = new StateDB([lbServicesTable]);
  const warned: Warned[] = [];
  const log: Logger = { ...silentLogger, warn: (obj: object, msg?: string) => void warned.push({ obj, msg }) };
  const control = new LbControlPlane({ db, log });
  const update = (snapshot: IntentSnapshot, ingress: Record<string, string[]>) => control.update({ snapshot, ingress: new Map(Object.entries(ingress)) });
  const revision = () => db.readTxn().revision(lbServicesTable);
  const rows = () => db.readTxn().list(lbServicesTable);
  const stored = (key: string) => db.readTxn().getWithRevision(lbServicesTable, key);
  return { db, control, warned, update, revision, rows, stored };
}

test('writes one row per frontend with its backends; nothing is written before the first update', () => {
  const { update, rows, revision } = setup();
  assert.equal(revision(), 0);
  update(snap(svc('web'), slice('web', ['203.0.113.131', '203.0.113.130'])), { 'default/web': [VIP] });
  assert.deepEqual(rows(), [
    {
      key: `${VIP}:80/TCP`,
      service: 'default/web',
      vip: VIP,
      port: 80,
      proto: 'TCP',
      mode: 'dnat',
      algorithm: 'maglev',
      affinity: 'None',
      affinityTimeoutS: 0,
      backends: [
        { ip: '203.0.113.130', port: 8080, terminating: false },
        { ip: '203.0.113.131', port: 8080, terminating: false },
      ],
    },
  ]);
  assert.ok(revision() > 0);
});

test('the lb-services table reads as initialized only once the control plane has written intent (nothing pruned before)', () => {
  const { db, update } = setup();
  assert.deepEqual(db.pendingInitializers(lbServicesTable), ['lb-control-plane']);
  assert.equal(db.isInitialized(lbServicesTable), false);
  update(snap(svc('web')), {}); // no row at all is still a complete listing
  assert.deepEqual(db.pendingInitializers(lbServicesTable), []);
  assert.equal(db.isInitialized(lbServicesTable), true);
});

test('an unchanged desired state rewrites nothing: the table revision and each row\'s revision stay put', () => {
  const { update, revision, stored } = setup();
  const ingress = { 'default/web': [VIP], 'default/api': ['198.51.100.11'] };
  update(snap(svc('web'), svc('api'), slice('web', ['203.0.113.130'])), ingress);
  const before = revision();
  // A fresh snapshot parsed from the same text: equal rows, not the same objects.
  update(snap(svc('web'), svc('api'), slice('web', ['203.0.113.130'])), ingress);
  assert.equal(revision(), before, 'no write for equal rows');

  // One row changes: only that row is rewritten.
  const api = stored('198.51.100.11:80/TCP')!.revision;
  update(snap(svc('web'), svc('api'), slice('web', ['203.0.113.130', '203.0.113.131'])), ingress);
  assert.ok(revision() > before);
  assert.deepEqual(stored(`${VIP}:80/TCP`)!.row.backends.map((b) => b.ip), ['203.0.113.130', '203.0.113.131']);
  assert.equal(stored(`${VIP}:80/TCP`)!.revision, revision(), 'the changed row is written');
  assert.equal(stored('198.51.100.11:80/TCP')!.revision, api, 'the unchanged row is not');
});

test('a changed row replaces the stored one (mode, algorithm, backends)', () => {
  const { update, stored } = setup();
  const ingress = { 'default/web': [VIP] };
  update(snap(svc('web'), slice('web', ['203.0.113.130'])), ingress);
  update(snap(svc('web', 'herald.io/lb-mode: snat, herald.io/lb-algorithm: random'), slice('web', ['203.0.113.130'])), ingress);
  const row = stored(`${VIP}:80/TCP`)!.row;
  assert.equal(row.mode, 'snat');
  assert.equal(row.algorithm, 'random');
});

test('rows no longer desired are deleted: an IP released, a service opted out, a service gone', () => {
  const { update, rows } = setup();
  update(snap(svc('web'), svc('api'), svc('old')), { 'default/web': [VIP, '198.51.100.20'], 'default/api': ['198.51.100.11'], 'default/old': ['198.51.100.12'] });
  assert.deepEqual(rows().map((r) => r.key), ['198.51.100.10:80/TCP', '198.51.100.11:80/TCP', '198.51.100.12:80/TCP', '198.51.100.20:80/TCP']);
  update(snap(svc('web'), svc('api', 'herald.io/lb-mode: none')), { 'default/web': [VIP], 'default/api': ['198.51.100.11'] });
  assert.deepEqual(rows().map((r) => r.key), [`${VIP}:80/TCP`]);
  update(snap(svc('web')), {});
  assert.deepEqual(rows(), []);
});

test('each warning is logged once per service and message, status() reports the current ones', () => {
  const { control, update, warned } = setup();
  assert.deepEqual(control.status(), { warnings: [] }, 'no warnings before the first update');
  const bad = snap(svc('a', 'herald.io/lb-mode: fast'), svc('b', 'herald.io/lb-mode: fast'), svc('c', 'herald.io/lb-algorithm: wrr'));
  const ingress = { 'default/a': [VIP], 'default/b': ['198.51.100.11'], 'default/c': ['198.51.100.12'] };
  update(bad, ingress);
  const expected = [
    { service: 'default/a', message: 'herald.io/lb-mode: "fast" is not one of dnat, none, snat, dsr; not balanced' },
    { service: 'default/b', message: 'herald.io/lb-mode: "fast" is not one of dnat, none, snat, dsr; not balanced' },
    { service: 'default/c', message: 'herald.io/lb-algorithm: "wrr" is not one of maglev, random, round-robin; not balanced' },
  ];
  assert.deepEqual(warned, expected.map((obj) => ({ obj, msg: 'service not load-balanced as written' })), 'the same message for two services: logged for each');
  assert.deepEqual(control.status().warnings, expected);

  update(bad, ingress);
  assert.equal(warned.length, 3, 'the same warnings again: not logged again');
  assert.deepEqual(control.status().warnings, expected, 'but still reported');

  // a is fixed, d newly broken: only d's warning is logged; status() has the current set.
  update(snap(svc('a'), svc('b', 'herald.io/lb-mode: fast'), svc('c', 'herald.io/lb-algorithm: wrr'), svc('d', 'herald.io/lb-mode: fast')), { ...ingress, 'default/d': ['198.51.100.13'] });
  assert.deepEqual(warned.slice(3).map((w) => w.obj), [{ service: 'default/d', message: expected[0]!.message }]);
  assert.deepEqual(control.status().warnings.map((w) => w.service), ['default/b', 'default/c', 'default/d']);

  update(snap(svc('a')), { 'default/a': [VIP] });
  assert.deepEqual(control.status(), { warnings: [] }, 'all fixed: none reported');
});
