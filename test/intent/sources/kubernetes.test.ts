/**
 * The Kubernetes intent source against a real kube-apiserver (built from
 * k8s.io/kubernetes, test/helpers/kube.ts): the CRDs generated from the zod
 * schemas are accepted by the API server, informers publish only once all
 * kinds have listed (an RBAC denial holds the first snapshot back, with a
 * clear error), watch changes flow, an API server restart withdraws nothing,
 * and a compacted resourceVersion (410 Gone) relists.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { silentLogger } from '../../../src/core/logger.js';
import type { ManifestDiagnostic } from '../../../src/intent/diagnostics.js';
import type { IntentSnapshot } from '../../../src/intent/snapshot.js';
import { KubeClient } from '../../../src/intent/sources/kube-client.js';
import { KubernetesIntentSource } from '../../../src/intent/sources/kubernetes.js';
import { renderCrds } from '../../../scripts/gen-crds.js';
import { TcpProxy, hostPort } from '../../helpers/etcd.js';
import { applyObject, applyYaml, deleteObject, startKube, type KubeServer } from '../../helpers/kube.js';

let kube: KubeServer;
const ROOT = new URL('../../../', import.meta.url);

before(async () => {
  kube = await startKube();
  await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/crds.yaml', ROOT), 'utf8'));
  await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/rbac.yaml', ROOT), 'utf8'));
});
after(async () => {
  await kube?.stop();
});

async function waitFor<T>(what: string, fn: () => T | undefined | false, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function recorder() {
  const snapshots: IntentSnapshot[] = [];
  const errors: (readonly ManifestDiagnostic[] | Error)[] = [];
  return {
    snapshots,
    errors,
    last: () => snapshots.at(-1),
    handlers: {
      onSnapshot: (s: IntentSnapshot) => snapshots.push(s),
      onError: (p: { errors: readonly ManifestDiagnostic[] } | { error: Error }) => errors.push('errors' in p ? p.errors : p.error),
    },
  };
}

const pool = (name: string, cidr: string) => ({
  apiVersion: 'cilium.io/v2alpha1',
  kind: 'CiliumLoadBalancerIPPool',
  metadata: { name },
  spec: { blocks: [{ cidr }] },
});
const service = (name: string) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name, namespace: 'default', labels: { app: name } },
  spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }], selector: { app: name } },
});
const node = (name: string, labels: Record<string, string>) => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels } });

async function bindAgents(group: string): Promise<void> {
  await applyObject(kube, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: `herald-agent-${group.replace(/[^a-z0-9-]/g, '-')}` },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'herald-agent' },
    subjects: [{ kind: 'Group', name: group, apiGroup: 'rbac.authorization.k8s.io' }],
  });
}

test('the generated CRDs are current, and the API server enforces them (strict fields refused, valid objects stored)', async () => {
  assert.equal(readFileSync(new URL('deploy/kubernetes/crds.yaml', ROOT), 'utf8'), renderCrds(), 'run node --import tsx scripts/gen-crds.ts');
  assert.equal(readFileSync(new URL('deploy/helm/herald/crds/crds.yaml', ROOT), 'utf8'), renderCrds(), 'the Helm chart\'s CRDs: run node --import tsx scripts/gen-crds.ts');
  const bad = await kube.api('POST', '/apis/cilium.io/v2alpha1/ciliumloadbalancerippools?fieldValidation=Strict', {
    apiVersion: 'cilium.io/v2alpha1',
    kind: 'CiliumLoadBalancerIPPool',
    metadata: { name: 'typo' },
    spec: { blocks: [{ cidr: '198.51.100.0/28' }], cidrs: [{ cidr: '198.51.100.0/28' }] },
  });
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.body.message, /unknown field "spec.cidrs"/);
  const v2 = await kube.api('POST', '/apis/cilium.io/v2/ciliumloadbalancerippools?fieldValidation=Strict', { ...pool('v2-pool', '198.51.100.16/28'), apiVersion: 'cilium.io/v2' });
  assert.equal(v2.status, 201, v2.text);
  await deleteObject(kube, { ...pool('v2-pool', ''), apiVersion: 'cilium.io/v2' });
});

test('informers: nothing is published before every kind has listed (RBAC denial: a clear error), then changes flow', async () => {
  const group = 'herald:agents-a';
  await applyObject(kube, pool('blue', '198.51.100.0/28'));
  await applyObject(kube, node('node-a', { zone: 'a' }));
  await applyObject(kube, service('web'));
  const client = await KubeClient.create({ kubeconfig: kube.kubeconfig('herald:node-a', [group]) });
  const source = new KubernetesIntentSource({ client, log: silentLogger, retryMinMs: 100, retryMaxMs: 400 });
  const rec = recorder();
  try {
    await source.start(rec.handlers); // resolves after the first attempt of every informer
    assert.equal(rec.snapshots.length, 0, 'no snapshot while a kind cannot be listed');
    const denial = rec.errors.find((e): e is Error => e instanceof Error);
    assert.ok(denial, 'the denial is reported');
    assert.match(denial.message, /403 Forbidden/);
    assert.match(denial.message, /cannot list/);
    assert.equal(source.synced, false);

    await bindAgents(group);
    const first = await waitFor('the first snapshot', () => rec.last());
    assert.ok(source.synced);
    assert.ok(first.pools.has('blue'));
    assert.ok(first.services.has('default/web'));
    assert.equal(first.nodes.get('node-a')?.metadata.labels.zone, 'a');

    // Watch: add, change and delete flow through.
    await applyObject(kube, service('api'));
    await waitFor('api added', () => rec.last()?.services.has('default/api'));
    // Incremental: a change validates that one object, not the whole set.
    const validated = source.stats.validated;
    await applyObject(kube, node('node-a', { zone: 'b' }));
    await waitFor('node relabelled', () => rec.last()?.nodes.get('node-a')?.metadata.labels.zone === 'b');
    assert.equal(source.stats.validated, validated + 1, 'only the changed Node was validated');
    // A status-only write to a Node (a heartbeat; status is not read) is looked at, not validated, and publishes nothing.
    const looked = source.stats.looked;
    const published = rec.snapshots.length;
    const cur = (await kube.api('GET', '/api/v1/nodes/node-a')).body;
    const put = await kube.api('PUT', '/api/v1/nodes/node-a/status', { ...cur, status: { ...cur.status, conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'heartbeat', lastHeartbeatTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), lastTransitionTime: '2026-01-01T00:00:00Z' }] } });
    assert.equal(put.status, 200, put.text);
    await waitFor('the heartbeat looked at', () => source.stats.looked > looked);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(source.stats.validated, validated + 1, 'a status-only change is not validated again');
    assert.equal(rec.snapshots.length, published, 'nor published');
    await deleteObject(kube, service('api'));
    await waitFor('api deleted', () => !rec.last()?.services.has('default/api'));
  } finally {
    source.dispose();
  }
});

test('incremental intent tables: one Service changed touches that Service only; the periodic full rebuild finds and repairs drift', async () => {
  const group = 'herald:agents-inc';
  await bindAgents(group);
  await applyObject(kube, pool('inc', '203.0.113.0/28'));
  const names = Array.from({ length: 40 }, (_, i) => `inc-${i}`);
  for (const n of names) await applyObject(kube, { ...service(n), metadata: { ...service(n).metadata, namespace: 'inc' } }).catch(async () => {
    await applyObject(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'inc' } });
    await applyObject(kube, { ...service(n), metadata: { ...service(n).metadata, namespace: 'inc' } });
  });
  const client = await KubeClient.create({ kubeconfig: kube.kubeconfig('herald:node-inc', [group]) });
  const source = new KubernetesIntentSource({ client, log: silentLogger, fullEveryMs: 600_000 });
  const rec = recorder();
  try {
    await source.start(rec.handlers);
    const first = await waitFor('all 40 Services', () => rec.last()?.services.size !== undefined && names.every((n) => rec.last()!.services.has(`inc/${n}`)) && rec.last());
    await new Promise((r) => setTimeout(r, 300)); // whatever else was pending has been published
    const before = rec.last()!;
    const stats = { ...source.stats };
    // One Service changed: one outcome applied, one table (Services) copied, every other map and object kept as is.
    await applyObject(kube, { ...service('inc-7'), metadata: { name: 'inc-7', namespace: 'inc', labels: { app: 'inc-7', tier: 'front' } } });
    const after = await waitFor('inc-7 relabelled', () => rec.last()?.services.get('inc/inc-7')?.metadata.labels.tier === 'front' && rec.last());
    assert.equal(source.stats.applied - stats.applied, 1, 'only the changed Service was applied to the tables');
    assert.equal(source.stats.validated - stats.validated, 1, 'and validated');
    assert.equal(source.stats.tablesMade - stats.tablesMade, 1, 'only the Services map was made again');
    assert.equal(source.stats.full, stats.full, 'no full rebuild for a change');
    assert.equal(after.pools, before.pools, 'the pools map is the one of the last snapshot');
    assert.equal(after.nodes, before.nodes);
    for (const n of names) if (n !== 'inc-7') assert.equal(after.services.get(`inc/${n}`), before.services.get(`inc/${n}`), `${n} is the same object`);
    assert.deepEqual([...after.services.keys()], [...before.services.keys()], 'same keys, same (sorted) order');
    assert.ok(first.services.size >= 40);
    // A deleted Service leaves the table in one step too.
    const s2 = { ...source.stats };
    await kube.api('DELETE', '/api/v1/namespaces/inc/services/inc-3');
    await waitFor('inc-3 gone', () => !rec.last()?.services.has('inc/inc-3'));
    assert.equal(source.stats.applied - s2.applied, 1);
    assert.deepEqual([...rec.last()!.services.keys()], [...after.services.keys()].filter((k) => k !== 'inc/inc-3'));
  } finally {
    source.dispose();
  }
  // The periodic full rebuild: a table that lost a row (drift, here made on purpose) is found and repaired.
  const source2 = new KubernetesIntentSource({ client, log: silentLogger, fullEveryMs: 500 });
  const rec2 = recorder();
  try {
    await source2.start(rec2.handlers);
    await waitFor('the first snapshot', () => rec2.last()?.services.has('inc/inc-9'));
    const fulls = source2.stats.full;
    await waitFor('a periodic full rebuild', () => source2.stats.full > fulls, 5000);
    assert.equal(source2.stats.drift, 0, 'nothing to repair');
    const tables = (source2 as unknown as { tables: Map<string, { objects: Map<string, unknown>; sorted: string[]; frozen: unknown }> }).tables;
    const svc = tables.get('services')!;
    const published = rec2.snapshots.length;
    svc.objects.delete('inc/inc-9');
    svc.sorted.splice(svc.sorted.indexOf('inc/inc-9'), 1);
    await waitFor('the drift repaired', () => source2.stats.drift === 1, 5000);
    await waitFor('the repaired tables published', () => rec2.snapshots.length > published && rec2.last()?.services.has('inc/inc-9'), 5000);
  } finally {
    source2.dispose();
  }
});

test('an API server restart withdraws nothing; a compacted resourceVersion (410 Gone) relists and catches up', async () => {
  const group = 'herald:agents-b';
  await bindAgents(group);
  await applyObject(kube, pool('green', '198.51.100.32/28'));
  await applyObject(kube, service('db'));
  const proxy = new TcpProxy(hostPort(kube.server.replace('https', 'http')));
  await proxy.start();
  const client = await KubeClient.create({ kubeconfig: kube.kubeconfig('herald:node-b', [group], proxy.endpoint.replace('http', 'https')) });
  const source = new KubernetesIntentSource({ client, log: silentLogger, retryMinMs: 100, retryMaxMs: 500 });
  const rec = recorder();
  try {
    await source.start(rec.handlers);
    await waitFor('synced', () => rec.last()?.services.has('default/db') && rec.last()?.pools.has('green'));

    // Restart: every watch breaks; no snapshot may lose an object.
    const before = rec.snapshots.length;
    await kube.restartApiserver();
    await applyObject(kube, service('cache'));
    await waitFor('a change after the restart', () => rec.last()?.services.has('default/cache'), 30_000);
    for (const s of rec.snapshots.slice(before)) {
      assert.ok(s.services.has('default/db') && s.pools.has('green'), 'no withdrawal across the restart');
    }

    // 410: this client is cut off; meanwhile objects change, etcd is compacted
    // and the API server restarted (its watch cache starts after our resourceVersion).
    const lists = source.status().informers.find((i) => i.kind === 'Service')!.lists;
    await proxy.cut();
    await deleteObject(kube, service('cache'));
    await applyObject(kube, service('late'));
    const status = await fetch(`${kube.etcd.endpoint}/v3/kv/range`, { method: 'POST', body: JSON.stringify({ key: Buffer.from('/').toString('base64') }) });
    const revision = ((await status.json()) as { header: { revision: string } }).header.revision;
    const compact = await fetch(`${kube.etcd.endpoint}/v3/kv/compaction`, { method: 'POST', body: JSON.stringify({ revision, physical: true }) });
    assert.equal(compact.status, 200);
    await kube.restartApiserver();
    await proxy.restore();
    await waitFor('relisted after 410', () => rec.last()?.services.has('default/late') && !rec.last()?.services.has('default/cache'), 40_000);
    assert.ok(rec.last()!.services.has('default/db'), 'objects that stayed are still there');
    assert.ok(source.status().informers.find((i) => i.kind === 'Service')!.lists > lists, 'the Service informer listed again');
  } finally {
    source.dispose();
    await proxy.close();
  }
});

test('the deployment manifests pass server-side dry-run with strict field validation', async () => {
  const { parseAllDocuments } = await import('yaml');
  const { objectPaths } = await import('../../helpers/kube.js');
  for (const file of ['deploy/kubernetes/daemonset.yaml', 'deploy/kubernetes/rbac.yaml', 'deploy/kubernetes/crds.yaml']) {
    for (const doc of parseAllDocuments(readFileSync(new URL(file, ROOT), 'utf8'))) {
      const obj = doc.toJS() as any;
      if (!obj) continue;
      const { collection, item } = objectPaths(obj);
      const exists = (await kube.api('GET', item)).status === 200;
      const res = exists
        ? await kube.api('PUT', `${item}?dryRun=All&fieldValidation=Strict`, { ...obj, metadata: { ...obj.metadata, resourceVersion: (await kube.api('GET', item)).body.metadata.resourceVersion } })
        : await kube.api('POST', `${collection}?dryRun=All&fieldValidation=Strict`, obj);
      assert.ok(res.status < 300, `${file} ${obj.kind}/${obj.metadata.name}: ${res.status} ${res.text}`);
    }
  }
});
