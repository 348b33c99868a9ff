/**
 * healthTargets edges: which slices give no targets (FQDN slices, no port to
 * probe) and one target per address of this node, keyed by service, address
 * and port.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { healthTargets } from '../../../src/controlplane/health/targets.js';
import { parseManifests } from '../../../src/intent/index.js';

const service = (ports: string) => `apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, annotations: { "herald.io/health-check": tcp } }
spec: { type: ClusterIP, ports: ${ports} }
`;

const slice = (addressType: string, endpoints: string, ports = '') => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-${addressType.toLowerCase()}, namespace: default, labels: { kubernetes.io/service-name: web } }
addressType: ${addressType}
${ports}
endpoints:
${endpoints}
`;

const snapshot = (...docs: string[]) => {
  const load = parseManifests(docs.join('---\n'), 'f.yaml');
  assert.deepEqual(load.errors, []);
  return load.snapshot!;
};

test('every address of this node\'s endpoints is its own target, keyed "service|address|port"', () => {
  const snap = snapshot(
    service('[{ port: 80, targetPort: 8080 }]'),
    slice('IPv4', `- { addresses: [192.0.2.21, 192.0.2.23], nodeName: node-a }
- { addresses: [192.0.2.22], nodeName: node-b }
- { addresses: [192.0.2.24], nodeName: node-a }`),
  );
  const got = healthTargets(snap, 'node-a');
  assert.deepEqual([...got.keys()], ['default/web|192.0.2.21|8080', 'default/web|192.0.2.23|8080', 'default/web|192.0.2.24|8080']);
  for (const [key, t] of got) assert.equal(t.key, key, 'a target carries its own key');
});

test('an FQDN slice of a checked Service gives no targets: its addresses are names, not backends to probe', () => {
  const snap = snapshot(service('[{ port: 80, targetPort: 8080 }]'), slice('FQDN', '- { addresses: [backend.example.com], nodeName: node-a }'));
  assert.deepEqual([...healthTargets(snap, 'node-a').keys()], []);
});

test('with no port anywhere (no annotation port, no slice port, a Service without ports) there is nothing to probe: no target, no error', () => {
  const snap = snapshot(service('[]'), slice('IPv4', '- { addresses: [192.0.2.21], nodeName: node-a }'));
  assert.deepEqual([...healthTargets(snap, 'node-a').keys()], []);
  // A UDP-only slice port is not probed either: the Service's port is the fallback, and there is none.
  const udp = snapshot(service('[]'), slice('IPv4', '- { addresses: [192.0.2.21], nodeName: node-a }', 'ports: [{ port: 53, protocol: UDP }]'));
  assert.deepEqual([...healthTargets(udp, 'node-a').keys()], []);
});

test('a Service whose first port names its targetPort falls back to the Service port', () => {
  const snap = snapshot(service('[{ port: 80, targetPort: http }]'), slice('IPv4', '- { addresses: [192.0.2.21], nodeName: node-a }'));
  assert.deepEqual([...healthTargets(snap, 'node-a').keys()], ['default/web|192.0.2.21|80']);
});
