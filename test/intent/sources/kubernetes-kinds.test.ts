/**
 * Kubernetes mode reads what file mode reads: the Cilium BGP kinds and the
 * policy kinds (CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, CiliumCIDRGroup,
 * NetworkPolicy) come through informers into the same snapshot, validated
 * like files, against a real kube-apiserver with the generated CRDs and the
 * shipped RBAC. A kind whose CRD is not installed (an optional feature)
 * reads as empty and does not hold intent back; once its CRD appears, its
 * objects flow in.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { silentLogger } from '../../../src/core/logger.js';
import type { IntentSnapshot } from '../../../src/intent/snapshot.js';
import { KubeClient } from '../../../src/intent/sources/kube-client.js';
import { KubernetesIntentSource } from '../../../src/intent/sources/kubernetes.js';
import { applyObject, applyYaml, startKube, type KubeServer } from '../../helpers/kube.js';

let kube: KubeServer;
const ROOT = new URL('../../../', import.meta.url);
const crds = parseAllDocuments(readFileSync(new URL('deploy/kubernetes/crds.yaml', ROOT), 'utf8')).map((d) => d.toJS() as any).filter(Boolean);
const CCNP_CRD = 'ciliumclusterwidenetworkpolicies.cilium.io';

before(async () => {
  kube = await startKube();
  // Every CRD but the clusterwide policy's: that kind starts out "not installed".
  for (const crd of crds) if (crd.metadata.name !== CCNP_CRD) await applyObject(kube, crd);
  await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/rbac.yaml', ROOT), 'utf8'));
  const subjects = [{ kind: 'Group', name: 'herald:agents', apiGroup: 'rbac.authorization.k8s.io' }];
  await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'herald-agent-test' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'herald-agent' }, subjects });
});
after(async () => {
  await kube?.stop();
});

async function waitFor(what: string, fn: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('BGP and policy kinds through informers, validated like files; a kind without its CRD reads as empty and flows in once installed', { timeout: 120_000 }, async () => {
  // The real-world BGP fixture, as the v2 kinds herald reads.
  const bgp = parseAllDocuments(readFileSync(new URL('test/fixtures/real-world/02-bgp-kinds.yaml', ROOT), 'utf8'))
    .map((d) => d.toJS() as any)
    .filter((o) => o?.kind?.startsWith('CiliumBGP'))
    .map((o) => ({ ...o, apiVersion: 'cilium.io/v2' }));
  for (const o of bgp) await applyObject(kube, o);
  await applyObject(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shop' } });
  await applyObject(kube, {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumNetworkPolicy',
    metadata: { name: 'web-from-office', namespace: 'shop' },
    spec: { endpointSelector: { matchLabels: { app: 'web' } }, ingress: [{ fromCIDR: ['192.0.2.0/24'], toPorts: [{ ports: [{ port: '443', protocol: 'TCP' }] }] }] },
  });
  await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumCIDRGroup', metadata: { name: 'office' }, spec: { externalCIDRs: ['203.0.113.0/28'] } });
  await applyObject(kube, {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: 'web-in', namespace: 'shop' },
    spec: { podSelector: { matchLabels: { app: 'web' } }, ingress: [{ from: [{ ipBlock: { cidr: '198.51.100.0/24' } }] }] },
  });

  const client = await KubeClient.create({ kubeconfig: kube.kubeconfig('herald:kinds', ['herald:agents']) });
  const snapshots: IntentSnapshot[] = [];
  const errors: unknown[] = [];
  const source = new KubernetesIntentSource({ client, log: silentLogger, debounceMs: 20, missingRecheckMs: 300 });
  try {
    await source.start({ onSnapshot: (s) => snapshots.push(s), onError: (p) => errors.push(p) });
    await waitFor('a snapshot', () => snapshots.length > 0);
    const s = snapshots.at(-1)!;
    assert.deepEqual(errors, []);
    assert.deepEqual([...s.bgpClusterConfigs.keys()], ['cilium-bgp']);
    assert.deepEqual([...s.bgpPeerConfigs.keys()], ['cilium-peer']);
    assert.deepEqual([...s.bgpAdvertisements.keys()], ['bgp-advertisements']);
    assert.deepEqual([...s.bgpNodeOverrides.keys()], ['node-a']);
    assert.equal(s.bgpClusterConfigs.get('cilium-bgp')!.spec.bgpInstances[0]!.localASN, 65000);
    assert.deepEqual([...s.networkPolicies.keys()], ['shop/web-from-office']);
    assert.deepEqual([...s.k8sNetworkPolicies.keys()], ['shop/web-in']);
    assert.deepEqual(s.cidrGroups.get('office')?.spec.externalCIDRs, ['203.0.113.0/28'], 'CiliumCIDRGroup through its informer (generated CRD, shipped RBAC)');
    assert.equal(s.clusterwideNetworkPolicies.size, 0);
    const ccnp = source.status().informers.find((i) => i.kind === 'CiliumClusterwideNetworkPolicy')!;
    assert.equal(ccnp.synced, true);
    assert.equal(ccnp.missing, true, 'not served: read as empty, not an error');

    // The CRD is installed later: its objects flow in without a restart.
    await applyObject(kube, crds.find((c) => c.metadata.name === CCNP_CRD));
    await applyObject(kube, {
      apiVersion: 'cilium.io/v2',
      kind: 'CiliumClusterwideNetworkPolicy',
      metadata: { name: 'dns' },
      specs: [{ endpointSelector: { matchLabels: { 'k8s:role': 'dns' } }, ingress: [{ toPorts: [{ ports: [{ port: '53', protocol: 'UDP' }] }] }] }],
    });
    await waitFor('the clusterwide policy', () => snapshots.at(-1)!.clusterwideNetworkPolicies.has('dns'));
    assert.equal(source.status().informers.find((i) => i.kind === 'CiliumClusterwideNetworkPolicy')!.missing, undefined);

    // A watch change of a BGP kind flows like any other.
    const cur = await kube.api('GET', '/apis/cilium.io/v2/ciliumbgppeerconfigs/cilium-peer');
    cur.body.spec.timers.holdTimeSeconds = 30;
    assert.equal((await kube.api('PUT', '/apis/cilium.io/v2/ciliumbgppeerconfigs/cilium-peer', cur.body)).status, 200);
    await waitFor('the peer config change', () => snapshots.at(-1)!.bgpPeerConfigs.get('cilium-peer')!.spec.timers?.holdTimeSeconds === 30);
  } finally {
    source.dispose();
  }
});
