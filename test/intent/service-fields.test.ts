/**
 * Service fields Kubernetes removed or deprecated (issue 18). herald reads a
 * subset of Service, so unknown fields are not refused in general; the removed
 * ones people still write are, with the path and what to write instead (as
 * the API server's strict field validation refuses them), and the deprecated
 * spec.loadBalancerIP is still honoured, with a warning pointing at the
 * annotation Cilium's documentation recommends.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatErrors, parseManifests } from '../../src/intent/index.js';

const service = (spec: string) => `apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]
${spec}`;

test('spec.loadBalancerIP is accepted and honoured, with a deprecation warning naming the annotation', () => {
  const load = parseManifests(service('  loadBalancerIP: 198.51.100.5\n'), 'f.yaml');
  assert.equal(formatErrors(load.errors), '');
  assert.equal(load.snapshot?.services.get('default/web')?.spec.loadBalancerIP, '198.51.100.5');
  assert.deepEqual(
    load.warnings.map((w) => [w.path, w.message, w.line]),
    [['spec.loadBalancerIP', 'deprecated: use the lbipam.cilium.io/ips annotation (still honoured)', 7]],
  );
});

test('spec.ipFamily (removed in Kubernetes 1.20) is refused with the path and what to write instead', () => {
  const load = parseManifests(service('  ipFamily: IPv6\n'), 'f.yaml');
  assert.equal(load.snapshot, undefined, 'the file changes nothing');
  assert.deepEqual(load.errors.map((e) => [e.path, e.message]), [
    ['spec.ipFamily', 'unknown field "spec.ipFamily": removed in Kubernetes 1.20; write spec.ipFamilies (e.g. [IPv6]) and spec.ipFamilyPolicy (the API server\'s strict field validation refuses it too)'],
  ]);
});

test('spec.topologyKeys (removed in Kubernetes 1.22) is refused, alongside the other errors of the object', () => {
  const load = parseManifests(service('  topologyKeys: ["kubernetes.io/hostname"]\n  externalTrafficPolicy: Global\n'), 'f.yaml');
  assert.equal(load.snapshot, undefined);
  const paths = load.errors.map((e) => e.path).sort();
  assert.deepEqual(paths, ['spec.externalTrafficPolicy', 'spec.topologyKeys']);
  assert.match(load.errors.find((e) => e.path === 'spec.topologyKeys')!.message, /removed in Kubernetes 1\.22; use spec\.internalTrafficPolicy or spec\.trafficDistribution/);
});

test('fields of Service herald does not read, but Kubernetes serves, stay accepted without a word', () => {
  const load = parseManifests(service('  sessionAffinity: ClientIP\n  loadBalancerSourceRanges: [198.51.100.0/24]\n  allocateLoadBalancerNodePorts: false\n'), 'f.yaml');
  assert.equal(formatErrors(load.errors), '');
  assert.deepEqual(load.warnings, []);
});
