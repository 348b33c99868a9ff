/**
 * Load-balancing desired state: the edges desired.test.ts leaves open —
 * empty and explicit annotation values, how a backend port is chosen from a
 * slice's ports, Kubernetes' defaults for absent endpoint conditions, an
 * address listed twice, the order services are considered in, and services
 * that have no allocated IP yet.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeLbDesired, lbAlgorithm, lbMode, type LbDesired } from '../../../src/controlplane/lb/desired.js';
import type { IntentSnapshot } from '../../../src/intent/index.js';
import { snap } from '../bgp/fixtures.js';

const VIP = '198.51.100.10';

/** A LoadBalancer Service in namespace default; `ports` and `extra` are spec lines (2-space indented), `annotations` flow-style map entries. */
const svc = (name: string, o: { ports?: string; annotations?: string; extra?: string } = {}) => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default${o.annotations ? `, annotations: { ${o.annotations} }` : ''} }
spec:
  type: LoadBalancer
  ports:
${o.ports ?? '  - { name: http, port: 80, targetPort: 8080 }\n'}${o.extra ?? ''}`;

/** An IPv4 EndpointSlice `name` of Service `service`; `ports` a flow-style list, `endpoints` flow-style entries (one per line). */
const slice = (name: string, service: string, ports: string, endpoints: string[]) => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}, namespace: default, labels: { kubernetes.io/service-name: ${service} } }
addressType: IPv4
ports: ${ports}
endpoints:
${endpoints.map((e) => `- ${e}\n`).join('')}`;

const active = (ip: string) => `{ addresses: ["${ip}"], conditions: { ready: true } }`;

function desired(snapshot: IntentSnapshot, ingress: ReadonlyMap<string, readonly string[]> = new Map([['default/web', [VIP]]])): LbDesired {
  return computeLbDesired({ snapshot, ingress });
}

const backendsOf = (d: LbDesired, key = `${VIP}:80/TCP`) => {
  const row = d.rows.get(key);
  assert.ok(row, `a row ${key}`);
  return row.backends.map((b) => `${b.ip}:${b.port}${b.terminating ? ' terminating' : ''}`);
};

test('lb-mode: an empty value and an explicit "dnat" both mean dnat; none opts out without a warning; every accepted word is accepted silently', () => {
  for (const annotations of ['herald.io/lb-mode: ""', 'herald.io/lb-mode: dnat']) {
    const d = desired(snap(svc('web', { annotations })));
    assert.deepEqual([...d.rows.values()].map((r) => r.mode), ['dnat'], annotations);
    assert.deepEqual(d.warnings, [], annotations);
  }
  const none = desired(snap(svc('web', { annotations: 'herald.io/lb-mode: none' })));
  assert.equal(none.rows.size, 0);
  assert.deepEqual(none.warnings, [], 'none is a choice, not a mistake');

  const manifest = (value: string) => snap(svc('web', { annotations: `herald.io/lb-mode: "${value}"` })).services.get('default/web')!;
  assert.equal(lbMode(manifest('')), 'dnat');
  for (const mode of ['dnat', 'none', 'snat', 'dsr']) assert.equal(lbMode(manifest(mode)), mode);
  assert.deepEqual(lbMode(manifest('DNAT')), { invalid: 'DNAT' }, 'words are case-sensitive');
  assert.equal(lbMode(snap(svc('web')).services.get('default/web')!), 'dnat', 'absent: dnat');
});

test('lb-algorithm: herald\'s maglev and random win over Cilium\'s; an empty value of either is as if absent', () => {
  const algo = (annotations: string) => lbAlgorithm(snap(svc('web', { annotations })).services.get('default/web')!);
  assert.equal(algo('herald.io/lb-algorithm: maglev, service.cilium.io/lb-algorithm: random'), 'maglev');
  assert.equal(algo('herald.io/lb-algorithm: random, service.cilium.io/lb-algorithm: maglev'), 'random');
  assert.equal(algo('herald.io/lb-algorithm: round-robin'), 'round-robin');
  assert.equal(algo('herald.io/lb-algorithm: "", service.cilium.io/lb-algorithm: random'), 'random', 'an empty herald value defers to Cilium\'s');
  assert.equal(algo('service.cilium.io/lb-algorithm: ""'), 'maglev', 'an empty Cilium value is the default');
  assert.equal(algo('herald.io/lb-algorithm: "", service.cilium.io/lb-algorithm: ""'), 'maglev');

  // The same through computeLbDesired: carried on the row, no warning.
  for (const [annotations, want] of [
    ['herald.io/lb-algorithm: maglev, service.cilium.io/lb-algorithm: random', 'maglev'],
    ['herald.io/lb-algorithm: random', 'random'],
    ['herald.io/lb-algorithm: "", service.cilium.io/lb-algorithm: random', 'random'],
    ['service.cilium.io/lb-algorithm: ""', 'maglev'],
  ] as const) {
    const d = desired(snap(svc('web', { annotations })));
    assert.deepEqual([...d.rows.values()].map((r) => r.algorithm), [want], annotations);
    assert.deepEqual(d.warnings, [], annotations);
  }
});

test('backend port: the slice port of the same name AND protocol; a same-named port of another protocol does not count and the slice is skipped', () => {
  const d = desired(
    snap(
      svc('web'),
      slice('web-udp', 'web', '[{ name: http, protocol: UDP, port: 9999 }]', [active('203.0.113.130')]),
      slice('web-tcp', 'web', '[{ name: metrics, port: 9090 }, { name: http, port: 8443 }]', [active('203.0.113.131')]),
    ),
  );
  // web-udp lists its ports and none is http/TCP: it serves nothing on this port (not the targetPort either).
  // web-tcp: not the first TCP port (metrics), the one named http.
  assert.deepEqual(backendsOf(d), ['203.0.113.131:8443']);
});

test('backend port: an unnamed service port matches the unnamed slice port', () => {
  const d = desired(snap(svc('web', { ports: '  - { port: 80, targetPort: 8080 }\n' }), slice('web-x', 'web', '[{ port: 8443 }]', [active('203.0.113.130')])));
  assert.deepEqual(backendsOf(d), ['203.0.113.130:8443']);
});

test('backend port: a slice without ports falls back to a numeric targetPort, else (named or absent targetPort) the service port', () => {
  const ports = '  - { name: http, port: 80, targetPort: 8080 }\n  - { name: https, port: 443, targetPort: tls }\n  - { name: alt, port: 8000 }\n';
  const d = desired(snap(svc('web', { ports }), slice('web-x', 'web', '[]', [active('203.0.113.130')])));
  assert.deepEqual(backendsOf(d, `${VIP}:80/TCP`), ['203.0.113.130:8080']);
  assert.deepEqual(backendsOf(d, `${VIP}:443/TCP`), ['203.0.113.130:443']);
  assert.deepEqual(backendsOf(d, `${VIP}:8000/TCP`), ['203.0.113.130:8000']);
});

test('backend port: a matching slice port without a number falls back to the numeric targetPort', () => {
  const d = desired(snap(svc('web'), slice('web-x', 'web', '[{ name: http }]', [active('203.0.113.130')])));
  assert.deepEqual(backendsOf(d), ['203.0.113.130:8080']);
});

test('endpoint conditions as Kubernetes reads absent ones: no conditions is ready, serving and not terminating; serving defaults to ready', () => {
  const d = desired(
    snap(
      svc('web'),
      slice('web-x', 'web', '[{ name: http, port: 8080 }]', [
        '{ addresses: ["203.0.113.130"] }',
        '{ addresses: ["203.0.113.131"], conditions: {} }',
        '{ addresses: ["203.0.113.132"], conditions: { serving: true, terminating: true } }',
        '{ addresses: ["203.0.113.133"], conditions: { ready: false } }',
        '{ addresses: ["203.0.113.134"], conditions: { terminating: false } }',
      ]),
    ),
  );
  assert.deepEqual(backendsOf(d), ['203.0.113.130:8080', '203.0.113.131:8080', '203.0.113.132:8080 terminating', '203.0.113.134:8080']);
});

test('an address listed in two slices: the active listing wins over the terminating one, whichever slice comes first', () => {
  const terminating = '{ addresses: ["203.0.113.130"], conditions: { ready: false, serving: true, terminating: true } }';
  const ports = '[{ name: http, port: 8080 }]';
  for (const order of [
    [slice('web-a', 'web', ports, [active('203.0.113.130')]), slice('web-b', 'web', ports, [terminating])],
    [slice('web-a', 'web', ports, [terminating]), slice('web-b', 'web', ports, [active('203.0.113.130')])],
  ]) {
    assert.deepEqual(backendsOf(desired(snap(svc('web'), ...order))), ['203.0.113.130:8080']);
  }
  const both = desired(snap(svc('web'), slice('web-a', 'web', ports, [terminating]), slice('web-b', 'web', ports, [terminating])));
  assert.deepEqual(backendsOf(both), ['203.0.113.130:8080 terminating'], 'terminating in both: terminating');
});

test('backends are sorted by address, then by port when one address serves on two ports (two slices)', () => {
  const d = desired(
    snap(
      svc('web'),
      slice('web-a', 'web', '[{ name: http, port: 8081 }]', [active('203.0.113.131'), active('203.0.113.130')]),
      slice('web-b', 'web', '[{ name: http, port: 8080 }]', [active('203.0.113.131'), active('203.0.113.130')]),
    ),
  );
  assert.deepEqual(backendsOf(d), ['203.0.113.130:8080', '203.0.113.130:8081', '203.0.113.131:8080', '203.0.113.131:8081']);
});

test('two services given the same VIP and port: the first by name is balanced whatever the manifest order, the other gets a warning', () => {
  const ingress = new Map([['default/b', [VIP]], ['default/a', [VIP]]]);
  const d = desired(snap(svc('b'), svc('a', { ports: '  - { name: http, port: 80, targetPort: 8080 }\n  - { name: other, port: 81 }\n' })), ingress);
  assert.deepEqual([...d.rows.keys()], [`${VIP}:80/TCP`, `${VIP}:81/TCP`], 'rows in service-name order');
  assert.equal(d.rows.get(`${VIP}:80/TCP`)!.service, 'default/a');
  assert.deepEqual(d.warnings, [{ service: 'default/b', message: `${VIP}:80/TCP is also default/a's; the first (by name) is balanced` }]);
});

test('a service without an allocated IP yields neither rows nor warnings, however it is annotated', () => {
  const snapshot = snap(
    svc('web', { annotations: 'herald.io/lb-mode: fast' }),
    svc('alg', { annotations: 'herald.io/lb-algorithm: wrr' }),
    svc('sctp', { ports: '  - { name: s, port: 9, protocol: SCTP }\n' }),
  );
  for (const ingress of [new Map<string, string[]>(), new Map([['default/web', []], ['default/alg', []], ['default/sctp', []]])]) {
    const d = computeLbDesired({ snapshot, ingress });
    assert.equal(d.rows.size, 0);
    assert.deepEqual(d.warnings, [], 'nothing to balance yet: nothing to report');
  }
});

test('sessionAffinity None: no affinity timeout, even with a sessionAffinityConfig written', () => {
  for (const extra of ['', '  sessionAffinity: None\n  sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } }\n']) {
    const d = desired(snap(svc('web', { extra })));
    assert.deepEqual([...d.rows.values()].map((r) => [r.affinity, r.affinityTimeoutS]), [['None', 0]]);
  }
});
