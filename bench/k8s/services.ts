/**
 * bench/k8s/services — N LoadBalancer Services applied through a real
 * kube-apiserver with three herald control planes (test/helpers/
 * kube-control-plane.ts: informers, Leases, LB-IPAM under the herald-ipam
 * election, status write-back; no datapath), each in its own worker thread
 * as each node runs its own agent: time from the first apply to
 *   - allocated: the leader's LB-IPAM result satisfies every Service,
 *   - status:    every Service shows its IP in status.loadBalancer.ingress
 *                with IPAMRequestSatisfied True (the leader's writes),
 *   - followers: both other nodes' results satisfy every Service (they
 *                follow the written status, so this is what they may announce),
 * and the API writes it took. Cilium's operator writes the same statuses
 * through one client limited to 100 QPS (anchors §1): N / 100 s at best.
 *
 *   node --import tsx bench/k8s/services.ts [--services 1000] [--qps 20] [--burst 50]
 */
import { readFileSync } from 'node:fs';
import { kubernetesSourceDefaults } from '../../src/intent/sources/kubernetes.js';
import { KubeApiError, KubeClient } from '../../src/intent/sources/kube-client.js';
import { serviceStatusDefaults } from '../../src/store/kubernetes/service-status.js';
import { leaseOwnershipDefaults } from '../../src/store/kubernetes/lease-ownership.js';
import { applyObject, applyYaml, requestTotal, startKube, KUBE_SERVICE_CIDR } from '../../test/helpers/kube.js';
import { Worker } from 'node:worker_threads';

interface Poll {
  leader: boolean;
  satisfied: number;
  pending: number;
  writes: number;
  recomputes: number;
  /** LB-IPAM runs: full, incremental, and Services the incremental ones reconsidered. */
  ipam: { full: number; incremental: number; reconsidered: number };
  source: { passes: number; looked: number; validated: number };
}

/** A control plane in its own thread (control-plane-worker.ts), as each node runs its own agent. */
async function startWorker(node: string, kubeconfig: string, opts: unknown) {
  const tsx = import.meta.resolve('tsx/esm/api');
  const file = new URL('./control-plane-worker.ts', import.meta.url).href;
  const boot = `import(${JSON.stringify(tsx)}).then((m) => m.tsImport(${JSON.stringify(file)}, ${JSON.stringify(import.meta.url)}))`;
  const worker = new Worker(boot, { eval: true, workerData: { node, kubeconfig, opts } });
  const next = (type: string) => new Promise<any>((resolve, reject) => {
    const onMessage = (m: any) => {
      if (m.type !== type) return;
      worker.off('message', onMessage);
      worker.off('error', reject);
      resolve(m);
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
  });
  await next('ready');
  return {
    node,
    poll: (): Promise<Poll> => {
      const p = next('poll');
      worker.postMessage({ type: 'poll' });
      return p;
    },
    stop: async (): Promise<void> => {
      const p = next('stopped');
      worker.postMessage({ type: 'stop' });
      await Promise.race([p, new Promise((r) => setTimeout(r, 2000))]);
      await worker.terminate();
    },
  };
}

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const N = Number(opt('services', '1000'));
const QPS = Number(opt('qps', String(serviceStatusDefaults.qps)));
const BURST = Number(opt('burst', String(serviceStatusDefaults.burst)));
const WRITE_VERBS = ['POST', 'PUT', 'PATCH', 'DELETE', 'APPLY'];

async function main(): Promise<void> {
  const kube = await startKube({ serviceCidrs: `${KUBE_SERVICE_CIDR},2001:db8:ffff::/108` });
  const nodes: Awaited<ReturnType<typeof startWorker>>[] = [];
  let admin: KubeClient | undefined;
  try {
    const root = new URL('../../', import.meta.url);
    await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/crds.yaml', root), 'utf8'));
    await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/rbac.yaml', root), 'utf8'));
    const subjects = [{ kind: 'Group', name: 'herald:agents', apiGroup: 'rbac.authorization.k8s.io' }];
    await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'herald-agent-bench' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'herald-agent' }, subjects });
    await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'herald-leases-bench', namespace: 'herald-system' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'herald-leases' }, subjects });
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'bench' }, spec: { blocks: [{ cidr: '2001:db8:1::/112' }] } });
    const opts = { lease: leaseOwnershipDefaults, status: { ...serviceStatusDefaults, qps: QPS, burst: BURST }, resyncMs: 5000, debounceMs: kubernetesSourceDefaults.debounceMs };
    for (const name of ['node-0', 'node-1', 'node-2']) nodes.push(await startWorker(name, kube.kubeconfig(`herald:${name}`, ['herald:agents']), opts));
    let polls = await Promise.all(nodes.map((n) => n.poll()));
    while (!polls.some((p) => p.leader)) {
      await new Promise((r) => setTimeout(r, 50));
      polls = await Promise.all(nodes.map((n) => n.poll()));
    }
    const leaderIndex = polls.findIndex((p) => p.leader);
    const satisfied = (p: Poll) => p.satisfied >= N;
    // Creates over one keep-alive client (as kubectl or a controller would), not a TLS handshake each.
    admin = await KubeClient.create({ kubeconfig: kube.kubeconfig('admin', ['system:masters']), keepAlive: true });
    const m0 = await kube.metrics();
    const t0 = Date.now();
    // Applied 10 at a time, as a controller or kubectl apply of a big file would.
    const svc = (i: number) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: `svc-${i}`, namespace: 'default' }, spec: { type: 'LoadBalancer', allocateLoadBalancerNodePorts: false, ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack', ports: [{ port: 80, protocol: 'TCP' }] } });
    const apply = async (i: number): Promise<void> => {
      for (let attempt = 0; ; attempt++) {
        try {
          await admin!.request('POST', '/api/v1/namespaces/default/services', svc(i));
          return;
        } catch (e) {
          if (e instanceof KubeApiError && e.status === 409) return; // a slow answer on a loaded machine: the first create was stored
          if (attempt >= 3) throw e;
        }
      }
    };
    for (let i = 0; i < N; i += 10) await Promise.all(Array.from({ length: Math.min(10, N - i) }, (_, k) => apply(i + k)));
    const applied = Date.now() - t0;
    const at: Record<string, number> = {};
    const deadline = Date.now() + 600_000;
    while (Object.keys(at).length < 3 && Date.now() < deadline) {
      polls = await Promise.all(nodes.map((n) => n.poll()));
      const leader = polls[leaderIndex]!;
      const followers = polls.filter((_, i) => i !== leaderIndex);
      if (at.allocated === undefined && satisfied(leader)) at.allocated = Date.now() - t0;
      if (at.status === undefined && leader.pending === 0 && at.allocated !== undefined) {
        const list = await kube.api('GET', '/api/v1/namespaces/default/services');
        const done = (list.body.items as any[]).filter((s) => (s.status?.loadBalancer?.ingress ?? []).length === 1 && (s.status?.conditions ?? []).some((c: any) => c.type === 'cilium.io/IPAMRequestSatisfied' && c.status === 'True')).length;
        if (done >= N) at.status = Date.now() - t0;
      }
      if (at.followers === undefined && followers.every(satisfied)) at.followers = Date.now() - t0;
      await new Promise((r) => setTimeout(r, N >= 5000 ? 500 : 100)); // a full Service list each time: coarser at 10,000
    }
    const m1 = await kube.metrics();
    const statusWrites = requestTotal(m1, (l) => l.verb === 'PUT' && l.resource === 'services' && l.subresource === 'status') - requestTotal(m0, (l) => l.verb === 'PUT' && l.resource === 'services' && l.subresource === 'status');
    const writes = requestTotal(m1, (l) => WRITE_VERBS.includes(l.verb ?? '')) - requestTotal(m0, (l) => WRITE_VERBS.includes(l.verb ?? ''));
    const byKind: Record<string, number> = {};
    for (const verb of WRITE_VERBS) {
      for (const resource of ['services', 'leases', 'events', 'ciliumloadbalancerippools']) {
        for (const sub of ['', 'status']) {
          const n = requestTotal(m1, (l) => l.verb === verb && l.resource === resource && (l.subresource ?? '') === sub) - requestTotal(m0, (l) => l.verb === verb && l.resource === resource && (l.subresource ?? '') === sub);
          if (n > 0) byKind[`${verb} ${resource}${sub ? '/status' : ''}`] = n;
        }
      }
    }
    const after = Object.fromEntries(Object.entries(at).map(([k, v]) => [k, v - applied]));
    polls = await Promise.all(nodes.map((n) => n.poll()));
    const sourceStats = polls.map((p) => p.source);
    const r = { services: N, qps: QPS, burst: BURST, appliedMs: applied, ...at, afterLastCreate: after, statusWrites, writes, leaderWrites: polls[leaderIndex]!.writes, followerWrites: polls.reduce((a, p, i) => a + (i === leaderIndex ? 0 : p.writes), 0), recomputes: polls.map((p) => p.recomputes), ipam: polls.map((p) => p.ipam), source: sourceStats };
    if (args.includes('--json')) console.log(JSON.stringify(r));
    else {
      console.log(`${N} Services, 3 nodes, status writes at ${QPS} QPS (burst ${BURST}); applied in ${applied} ms`);
      console.log(`allocated (leader) ${at.allocated} ms · status written ${at.status} ms · followers follow ${at.followers} ms`);
      console.log(`after the last create: allocated +${after.allocated} ms · status +${after.status} ms · followers +${after.followers} ms`);
      console.log(`per node: ${r.recomputes.join('/')} recomputes; intent passes ${sourceStats.map((s) => s.passes).join('/')}, objects looked at ${sourceStats.map((s) => s.looked).join('/')}, validated ${sourceStats.map((s) => s.validated).join('/')}`);
      console.log(`LB-IPAM per node (full/incremental runs, Services reconsidered): ${r.ipam.map((s) => `${s.full}/${s.incremental}/${s.reconsidered}`).join(' · ')}`);
      console.log(`status PUTs ${statusWrites} (leader ${r.leaderWrites}, followers ${r.followerWrites}); all API writes ${writes} incl. the ${N} creates: ${JSON.stringify(byKind)}`);
      console.log(`Cilium's operator, same statuses through its 100 QPS client: ≥ ${(N / 100).toFixed(1)} s for the status writes alone`);
    }
  } finally {
    await Promise.all(nodes.map((n) => n.stop()));
    admin?.close();
    await kube.stop();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
