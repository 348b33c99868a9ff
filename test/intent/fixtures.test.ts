/**
 * Realistic manifests (test/fixtures/manifests, documentation IP ranges
 * only) load unchanged, with Kubernetes' extra fields ignored.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { lbIpamRequest } from '../../src/intent/annotations.js';
import { formatErrors } from '../../src/intent/diagnostics.js';
import type { IntentObject } from '../../src/intent/kinds.js';
import { parseManifests, type ManifestLoad } from '../../src/intent/parse.js';
import { matchesSelector } from '../../src/intent/selector.js';
import { serviceSelectorLabels } from '../../src/intent/service.js';
import { buildSnapshot } from '../../src/intent/snapshot.js';

const DIR = new URL('../fixtures/manifests/', import.meta.url);

function load(name: string): ManifestLoad {
  const result = parseManifests(readFileSync(new URL(name, DIR), 'utf8'), name);
  assert.equal(formatErrors(result.errors), '', `errors in ${name}`);
  assert.ok(result.snapshot);
  return result;
}

function only<K extends IntentObject['kind']>(objects: readonly IntentObject[], kind: K): Extract<IntentObject, { kind: K }>[] {
  return objects.filter((o): o is Extract<IntentObject, { kind: K }> => o.kind === kind);
}

describe('fixtures', () => {
  it('pools-v2.yaml: three cilium.io/v2 pools, blocks canonical', () => {
    const { snapshot, warnings } = load('pools-v2.yaml');
    assert.deepEqual(warnings, []);
    assert.deepEqual([...snapshot!.pools.keys()], ['blue-pool', 'red-pool', 'tenant-a']);
    const blue = snapshot!.pools.get('blue-pool')!;
    assert.equal(blue.apiVersion, 'cilium.io/v2');
    assert.deepEqual(blue.spec.blocks, [
      { type: 'cidr', family: 'IPv4', cidr: '203.0.113.0/24' },
      { type: 'cidr', family: 'IPv6', cidr: '2001:db8:b1::/64' },
      { type: 'range', family: 'IPv4', start: '198.51.100.100', stop: '198.51.100.200' },
      { type: 'range', family: 'IPv4', start: '198.51.100.250', stop: '198.51.100.250' },
    ]);
    assert.equal(blue.spec.allowFirstLastIPs, 'Yes');
    assert.equal(blue.spec.disabled, false);
    assert.deepEqual(blue.source, { file: 'pools-v2.yaml', document: 1, line: 3, column: 1 });
    assert.equal(snapshot!.pools.get('red-pool')!.spec.allowFirstLastIPs, 'No');
    assert.equal(snapshot!.pools.get('tenant-a')!.spec.disabled, true);
  });

  it('pool-v2alpha1.yaml: kubectl output with managedFields and status', () => {
    const { objects } = load('pool-v2alpha1.yaml');
    const [pool] = only(objects, 'CiliumLoadBalancerIPPool');
    assert.ok(pool);
    assert.equal(pool.apiVersion, 'cilium.io/v2alpha1');
    assert.equal(pool.metadata.name, 'green-pool');
    assert.equal(pool.metadata.creationTimestamp, '2024-05-02T09:14:31Z');
    assert.deepEqual(pool.spec.blocks, [
      { type: 'cidr', family: 'IPv4', cidr: '192.0.2.64/27' },
      // `cidr: ""` (as Go clients write it) is unset; the range is canonicalised.
      { type: 'range', family: 'IPv6', start: '2001:db8:6::1', stop: '2001:db8:6::ff' },
    ]);
    assert.ok(!('uid' in pool.metadata) && !('managedFields' in pool.metadata) && !('status' in pool));
  });

  it('l2-policy.yaml: the documentation example', () => {
    const { snapshot, warnings } = load('l2-policy.yaml');
    assert.deepEqual(warnings, []);
    const policy = snapshot!.policies.get('policy1')!;
    assert.deepEqual(policy.spec, {
      serviceSelector: { matchLabels: { color: 'blue' }, matchExpressions: [] },
      nodeSelector: {
        matchLabels: {},
        matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' }],
      },
      interfaces: ['^eth[0-9]+'],
      externalIPs: true,
      loadBalancerIPs: true,
    });
  });

  it('service-annotated.yaml: annotations, dual stack, status', () => {
    const { snapshot } = load('service-annotated.yaml');
    const web = snapshot!.services.get('shop/web')!;
    assert.equal(web.spec.type, 'LoadBalancer');
    assert.equal(web.spec.externalTrafficPolicy, 'Local');
    assert.deepEqual(web.spec.ipFamilies, ['IPv4', 'IPv6']);
    assert.equal(web.spec.ipFamilyPolicy, 'PreferDualStack');
    assert.deepEqual(
      web.spec.ports.map((p) => [p.name, p.protocol, p.port, p.targetPort, p.nodePort]),
      [
        ['http', 'TCP', 80, 'http', 30080],
        ['https', 'TCP', 443, 8443, 30443],
      ],
    );
    assert.deepEqual(web.status.loadBalancer.ingress, [
      { ip: '203.0.113.10', ipMode: 'VIP' },
      { ip: '2001:db8:b1::10', ipMode: 'VIP' },
    ]);
    assert.deepEqual(web.status.conditions.map((c) => [c.type, c.status, c.reason]), [
      ['cilium.io/IPAMRequestSatisfied', 'True', 'satisfied'],
    ]);
    assert.deepEqual(lbIpamRequest(web), {
      requestedIPs: ['203.0.113.10', '2001:db8:b1::10'],
      sharingKey: 'shop-frontend',
      sharingCrossNamespace: ['shop-admin', 'monitoring'],
      sharingPermitDifferentPods: false,
    });
  });

  it('list.yaml: a kubectl List, items addressed by number', () => {
    const { objects, snapshot } = load('list.yaml');
    assert.deepEqual(
      objects.map((o) => [o.kind, o.metadata.name, o.source.document, o.source.item]),
      [
        ['Node', 'worker-1', 1, 1],
        ['Node', 'control-1', 1, 2],
        ['Service', 'dns', 1, 3],
      ],
    );
    assert.deepEqual(snapshot!.nodes.get('worker-1')!.metadata.labels['topology.kubernetes.io/zone'], 'rack-a');
    const dns = snapshot!.services.get('infra/dns')!;
    assert.deepEqual(dns.spec.externalIPs, ['198.51.100.53']);
    assert.deepEqual(dns.status.loadBalancer.ingress, []);
  });

  it('services.json: a typed ServiceList whose items omit kind and apiVersion, nulls as unset', () => {
    const { snapshot } = load('services.json');
    const api = snapshot!.services.get('shop/api')!;
    assert.equal(api.kind, 'Service');
    assert.equal(api.metadata.creationTimestamp, undefined);
    assert.equal(api.spec.loadBalancerClass, 'io.cilium/l2-announcer');
    assert.deepEqual(lbIpamRequest(api).requestedIPs, ['203.0.113.20']);
    assert.deepEqual(api.spec.ports, [{ protocol: 'TCP', port: 8080, targetPort: 8080 }]);
  });

  it('selectors from the fixtures select what the documentation says', () => {
    const pools = load('pools-v2.yaml').snapshot!.pools;
    const web = load('service-annotated.yaml').snapshot!.services.get('shop/web')!;
    const policy = load('l2-policy.yaml').snapshot!.policies.get('policy1')!;
    const nodes = load('list.yaml').snapshot!.nodes;
    const labels = serviceSelectorLabels(web);
    assert.equal(labels['io.kubernetes.service.namespace'], 'shop');
    assert.deepEqual(
      [...pools.values()].filter((p) => matchesSelector(p.spec.serviceSelector, labels)).map((p) => p.metadata.name),
      ['blue-pool'],
    );
    assert.ok(matchesSelector(policy.spec.serviceSelector, labels));
    assert.deepEqual(
      [...nodes.values()].filter((n) => matchesSelector(policy.spec.nodeSelector, n.metadata.labels)).map((n) => n.metadata.name),
      ['worker-1'],
    );
  });
});

describe('defaults, warnings and immutability', () => {
  it('a minimal Service gets Kubernetes defaults', () => {
    const text = 'apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ""}\nspec:\n  ports: [{port: 80, targetPort: "8080"}]\n';
    const { objects } = parseManifests(text, 'svc.yaml');
    const [svc] = only(objects, 'Service');
    assert.ok(svc);
    assert.equal(svc.metadata.namespace, 'default');
    assert.equal(svc.spec.type, 'ClusterIP');
    assert.equal(svc.spec.externalTrafficPolicy, 'Cluster');
    assert.deepEqual(svc.spec.externalIPs, []);
    assert.deepEqual(svc.spec.ports, [{ protocol: 'TCP', port: 80, targetPort: 8080 }]);
    assert.deepEqual(svc.status, { loadBalancer: { ingress: [] }, conditions: [] });
  });

  it('YAML 1.1 booleans (as Kubernetes reads them), and unquoted timestamps stay text', () => {
    const text =
      'apiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata:\n  name: p\n  creationTimestamp: 2024-05-02T09:14:31Z\nspec:\n  loadBalancerIPs: yes\n  externalIPs: off\n';
    const [policy] = only(parseManifests(text, 'p.yaml').objects, 'CiliumL2AnnouncementPolicy');
    assert.equal(policy?.spec.loadBalancerIPs, true);
    assert.equal(policy?.spec.externalIPs, false);
    assert.equal(policy?.metadata.creationTimestamp, '2024-05-02T09:14:31Z');
  });

  it('warns about a policy that announces nothing and a pool with no blocks', () => {
    const text =
      'apiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata: {name: quiet}\nspec:\n  interfaces: [eth0]\n---\napiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: {name: empty}\nspec: {}\n';
    const result = parseManifests(text, 'w.yaml');
    assert.deepEqual(result.errors, []);
    assert.ok(result.snapshot, 'warnings do not block the snapshot');
    assert.deepEqual(formatErrors(result.warnings).split('\n'), [
      'w.yaml:4:1: document 1 (CiliumL2AnnouncementPolicy "quiet"): warning: spec: neither loadBalancerIPs nor externalIPs is true, so this policy announces nothing',
      'w.yaml:10:1: document 2 (CiliumLoadBalancerIPPool "empty"): warning: spec.blocks: the pool has no blocks, so it allocates nothing',
    ]);
  });

  it('the snapshot and its objects are immutable', () => {
    const { snapshot } = load('pools-v2.yaml');
    const pool = snapshot!.pools.get('blue-pool')!;
    assert.ok(Object.isFrozen(snapshot) && Object.isFrozen(pool) && Object.isFrozen(pool.spec.blocks[0]));
    assert.throws(() => {
      (pool.spec.blocks as unknown as unknown[]).push({});
    }, TypeError);
    assert.equal('set' in snapshot!.pools, false);
    assert.throws(() => {
      (snapshot as { pools: unknown }).pools = new Map();
    }, TypeError);
  });

  it('empty documents and empty files are fine', () => {
    const result = parseManifests('---\n# nothing here\n---\n\n---\n', 'e.yaml');
    assert.deepEqual([result.objects, result.errors, result.warnings], [[], [], []]);
    assert.equal(parseManifests('', 'e.yaml').snapshot?.services.size, 0);
  });

  it('buildSnapshot rejects duplicates with HERALD_BAD_MANIFEST', () => {
    const { objects } = load('pools-v2.yaml');
    assert.throws(() => buildSnapshot([...objects, objects[0]!]), {
      name: 'HeraldError',
      code: 'HERALD_BAD_MANIFEST',
      message: 'duplicate CiliumLoadBalancerIPPool "blue-pool": in pools-v2.yaml document 1 (line 3) and pools-v2.yaml document 1 (line 3)',
    });
  });
});
