/**
 * Issue 12: load-balancing desired state as a pure function of allocated
 * service IPs × Service ports × EndpointSlices.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeLbDesired } from '../../../src/controlplane/lb/desired.js';
import { parseManifests, type IntentSnapshot } from '../../../src/intent/index.js';

const service = (name: string, extra = '', annotations = '') => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default${annotations ? `, annotations: { ${annotations} }` : ''} }
spec:
  type: LoadBalancer
  ports:
  - { name: http, port: 80, targetPort: 8080 }
  - { name: dns, port: 53, protocol: UDP, targetPort: 5353 }
${extra}`;

type Ep = [address: string, ready?: boolean, terminating?: boolean, serving?: boolean];
const slice = (svc: string, eps: Ep[], ports = '[{ name: http, port: 8080 }, { name: dns, port: 5353, protocol: UDP }]') => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${svc}-x, namespace: default, labels: { kubernetes.io/service-name: ${svc} } }
addressType: IPv4
ports: ${ports}
endpoints:
${eps.map(([a, r = true, t = false, s]) => `- { addresses: ["${a}"], conditions: { ready: ${r}, terminating: ${t}${s === undefined ? '' : `, serving: ${s}`} } }`).join('\n')}
`;

function snap(...docs: string[]): IntentSnapshot {
  const load = parseManifests(docs.join('---\n'), 'f.yaml');
  assert.deepEqual(load.errors, []);
  return load.snapshot!;
}
const ingress = new Map([['default/web', ['198.51.100.10']]]);

test('one row per (VIP, port, protocol); backends from the slice port of the same name', () => {
  const d = computeLbDesired({ snapshot: snap(service('web'), slice('web', [['203.0.113.131'], ['203.0.113.130']])), ingress });
  assert.deepEqual([...d.rows.keys()], ['198.51.100.10:80/TCP', '198.51.100.10:53/UDP']);
  const http = d.rows.get('198.51.100.10:80/TCP')!;
  assert.deepEqual(http.backends, [
    { ip: '203.0.113.130', port: 8080, terminating: false },
    { ip: '203.0.113.131', port: 8080, terminating: false },
  ]);
  assert.equal(http.mode, 'dnat');
  assert.equal(d.rows.get('198.51.100.10:53/UDP')!.backends[0]!.port, 5353);
});

test('conditions: not serving left out; serving + terminating kept as terminating', () => {
  const d = computeLbDesired({
    snapshot: snap(service('web'), slice('web', [['203.0.113.130'], ['203.0.113.131', false], ['203.0.113.132', false, true, true], ['203.0.113.133', false, true, false]])),
    ingress,
  });
  assert.deepEqual(d.rows.get('198.51.100.10:80/TCP')!.backends, [
    { ip: '203.0.113.130', port: 8080, terminating: false },
    { ip: '203.0.113.132', port: 8080, terminating: true },
  ]);
});

test('no allocated IP: nothing; no slice: a frontend without backends (the datapath drops)', () => {
  assert.equal(computeLbDesired({ snapshot: snap(service('web')), ingress: new Map() }).rows.size, 0);
  const d = computeLbDesired({ snapshot: snap(service('web')), ingress });
  assert.deepEqual([...d.rows.values()].map((r) => r.backends.length), [0, 0]);
});

test('mode annotation: none opts out, snat and dsr are carried (dsr warns on a port change), unknown words are reported and not balanced', () => {
  assert.equal(computeLbDesired({ snapshot: snap(service('web', '', 'herald.io/lb-mode: none')), ingress }).rows.size, 0);
  const snat = computeLbDesired({ snapshot: snap(service('web', '', 'herald.io/lb-mode: snat')), ingress });
  assert.deepEqual([...snat.rows.values()].map((r) => r.mode), ['snat', 'snat']);
  const dsr = computeLbDesired({ snapshot: snap(service('web', '', 'herald.io/lb-mode: dsr'), slice('web', [['203.0.113.130']])), ingress });
  assert.deepEqual([...dsr.rows.values()].map((r) => r.mode), ['dsr', 'dsr']);
  assert.match(dsr.warnings[0]!.message, /dsr keeps the service port/);
  const bad = computeLbDesired({ snapshot: snap(service('web', '', 'herald.io/lb-mode: fast')), ingress });
  assert.match(bad.warnings[0]!.message, /"fast" is not one of/);
});

test('sessionAffinity ClientIP carries its timeout (default 10800 s)', () => {
  const d = computeLbDesired({ snapshot: snap(service('web', '  sessionAffinity: ClientIP\n  sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } }\n')), ingress });
  assert.deepEqual([...d.rows.values()].map((r) => [r.affinity, r.affinityTimeoutS]), [['ClientIP', 60], ['ClientIP', 60]]);
  const def = computeLbDesired({ snapshot: snap(service('web', '  sessionAffinity: ClientIP\n')), ingress });
  assert.equal([...def.rows.values()][0]!.affinityTimeoutS, 10800);
});

test('IPv6 VIPs are balanced over the IPv6 slices only, in every mode, with session affinity', () => {
  const slice6 = slice('web', [['2001:db8:1::11'], ['2001:db8:1::10']]).replace('addressType: IPv4', 'addressType: IPv6').replace('web-x', 'web-6');
  const both = new Map([['default/web', ['198.51.100.10', '2001:db8::10']]]);
  const d = computeLbDesired({ snapshot: snap(service('web'), slice('web', [['203.0.113.130']]), slice6), ingress: both });
  const v6 = d.rows.get('[2001:db8::10]:80/TCP')!;
  assert.deepEqual(v6.backends, [
    { ip: '2001:db8:1::10', port: 8080, terminating: false },
    { ip: '2001:db8:1::11', port: 8080, terminating: false },
  ]);
  assert.equal(d.rows.get('[2001:db8::10]:53/UDP')!.backends.length, 2);
  assert.deepEqual(d.rows.get('198.51.100.10:80/TCP')!.backends.map((b) => b.ip), ['203.0.113.130'], 'each family its own slices');
  assert.deepEqual(d.warnings, []);
  for (const mode of ['snat', 'dsr'] as const) {
    const m = computeLbDesired({ snapshot: snap(service('web', '', `herald.io/lb-mode: ${mode}`), slice6), ingress: both });
    assert.equal(m.rows.get('[2001:db8::10]:80/TCP')?.mode, mode, `${mode} on an IPv6 VIP`);
  }
  const aff = computeLbDesired({ snapshot: snap(service('web', '  sessionAffinity: ClientIP\n'), slice6), ingress: both });
  assert.equal(aff.rows.get('[2001:db8::10]:80/TCP')!.affinity, 'ClientIP');
  assert.equal(aff.rows.get('[2001:db8::10]:80/TCP')!.affinityTimeoutS, 10800);
  assert.equal(aff.rows.get('198.51.100.10:80/TCP')!.affinity, 'ClientIP');
  assert.ok(!aff.warnings.some((w) => /IPv4-only/.test(w.message)));
});

test('backend selection per service: Cilium\'s service.cilium.io/lb-algorithm, herald.io/lb-algorithm (adds round-robin) wins, a bad value is reported and not balanced', () => {
  const of = (annotations: string) => computeLbDesired({ snapshot: snap(service('web', '', annotations), slice('web', [['203.0.113.130']])), ingress });
  assert.equal(of('').rows.get('198.51.100.10:80/TCP')!.algorithm, 'maglev');
  assert.equal(of('service.cilium.io/lb-algorithm: random').rows.get('198.51.100.10:80/TCP')!.algorithm, 'random');
  assert.equal(of('service.cilium.io/lb-algorithm: maglev').rows.get('198.51.100.10:80/TCP')!.algorithm, 'maglev');
  assert.equal(of('herald.io/lb-algorithm: round-robin').rows.get('198.51.100.10:80/TCP')!.algorithm, 'round-robin');
  assert.equal(of('herald.io/lb-algorithm: round-robin, service.cilium.io/lb-algorithm: random').rows.get('198.51.100.10:80/TCP')!.algorithm, 'round-robin');
  const bad = of('service.cilium.io/lb-algorithm: round-robin');
  assert.equal(bad.rows.size, 0, 'Cilium has no round-robin: not balanced');
  assert.deepEqual(bad.warnings.map((w) => w.message), ['service.cilium.io/lb-algorithm: "round-robin" is not one of maglev, random; not balanced', 'service.cilium.io/lb-algorithm: "round-robin" is not one of maglev, random; not balanced'].slice(0, 1));
  const bad2 = of('herald.io/lb-algorithm: wrr');
  assert.equal(bad2.rows.size, 0);
  assert.match(bad2.warnings[0]!.message, /herald.io\/lb-algorithm: "wrr" is not one of maglev, random, round-robin/);
});

test('SCTP ports are reported, not balanced', () => {
  const d = computeLbDesired({ snapshot: snap(service('web').replace('protocol: UDP, targetPort: 5353', 'protocol: SCTP, targetPort: 5353')), ingress });
  assert.ok(![...d.rows.keys()].some((k) => k.endsWith('/SCTP')));
  assert.ok(d.warnings.some((w) => /SCTP/.test(w.message)));
});
