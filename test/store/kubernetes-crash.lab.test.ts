/**
 * Crash failover on the Kubernetes store, with the supervisor (the default
 * with --kubernetes): a real kube-apiserver, two agents as processes in node
 * namespaces, kill -9 of the owner's agent process (its supervisor lives on).
 * The supervisor silences the dead agent's datapath and deletes its node
 * Lease; the other node, watching Leases, takes the IP Lease over and answers
 * ARP — well inside the node Lease duration (60 s here, so that a takeover
 * by expiry can never be mistaken for the supervised one; no tight timing is
 * asserted). Without the supervisor's release, the IP stays unanswered for
 * the whole Lease duration and the test fails.
 *
 * Then the node whose agent crashed starts again (a restarted agent on the
 * same node): it stamps a new incarnation on its node Lease, and a supervisor
 * release for the dead incarnation (late, as from a slow supervisor) leaves
 * that Lease alone.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { supervisedAgentPid, type Host, type Lab } from '../../lab/lab.js';
import { KubeClient } from '../../src/intent/sources/kube-client.js';
import { INCARNATION_ANNOTATION } from '../../src/supervisor/protocol.js';
import { releaseNodeLease } from '../../src/supervisor/supervisor.js';
import { applyObject, type KubeServer } from '../helpers/kube.js';
import { KUBE_LEASE_NS as NS, KubeLab } from '../helpers/kube-lab.js';
import { HERALD, arping, labSkipReason, waitFor } from '../helpers/lab-tools.js';

const DURATION_S = 60;

describe('Kubernetes store: a crashed agent is replaced at once through its supervisor (lab)', { skip: labSkipReason() }, () => {
  let k: KubeLab;
  let kube: KubeServer;
  let lab: Lab;
  let ip = '';
  let crashed: Host | undefined;

  const lease = async (name: string) => k.lease(name);
  const holderOf = async (addr: string) => (await lease(`ip-${addr.replace(/\./g, '-')}`)).body?.spec?.holderIdentity as string | undefined;
  const nodeByNs = (netns: string) => k.byName(netns);

  before(async () => {
    k = await KubeLab.create({ nodes: 2, tag: 'k8scrash', agentArgs: () => ['--kube-lease-duration', String(DURATION_S), '--kube-lease-renew', '2s', '--garp-interval', '200ms'] });
    ({ kube, lab } = k);
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'crash-pool' }, spec: { blocks: [{ start: '198.51.100.40', stop: '198.51.100.41' }] } });
    await applyObject(kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'crash-policy' }, spec: { loadBalancerIPs: true, interfaces: ['^eth0$'] } });
    await applyObject(kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'crash', namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
    for (const n of lab.nodes) await k.start(n);
  });

  after(async () => {
    await k?.destroy();
  });

  test('kill -9 of the owner: the supervisor deletes its node Lease and the other node takes over well inside the Lease duration', async () => {
    await waitFor(
      async () => {
        const r = await kube.api('GET', '/api/v1/namespaces/default/services/crash');
        ip = r.body?.status?.loadBalancer?.ingress?.[0]?.ip ?? '';
        return ip !== '';
      },
      { timeoutMs: 30_000, what: 'the Service gets its IP' },
    );
    let holder: string | undefined;
    await waitFor(async () => ((holder = await holderOf(ip)), holder !== undefined && nodeByNs(holder) !== undefined), { timeoutMs: 30_000, what: `${ip} held` });
    const owner = nodeByNs(holder!)!;
    const other = lab.nodes.find((n) => n !== owner)!;
    await waitFor(() => arping(lab.client, ip, { count: 1 }).macs.includes(owner.mac('eth0')), { timeoutMs: 15_000, what: `${ip} answered by ${owner.name}` });
    // Both node Leases carry an incarnation (what the supervisor checks before deleting).
    const ownerLease = await lease(`node-${owner.netns}`);
    assert.match(ownerLease.body.metadata.annotations?.[INCARNATION_ANNOTATION] ?? '', /^[0-9a-f-]{36}$/);

    const agent = k.agents.get(owner)!;
    const pid = supervisedAgentPid(agent);
    assert.ok(pid, 'the agent runs under its supervisor (the default with --kubernetes)');
    const t0 = Date.now();
    process.kill(pid, 'SIGKILL');
    crashed = owner;
    // Well inside the 60 s Lease: a takeover by expiry could not come before 60 s.
    await waitFor(async () => (await holderOf(ip)) === other.netns, { timeoutMs: 20_000, what: `${ip} taken over by ${other.name} (not waiting for the ${DURATION_S} s Lease)`, onTimeout: () => agent.text().slice(-1500) });
    await waitFor(() => arping(lab.client, ip, { count: 1 }).macs.includes(other.mac('eth0')), { timeoutMs: 10_000, what: `${ip} answered by ${other.name}` });
    assert.equal((await lease(`node-${owner.netns}`)).status, 404, "the dead agent's node Lease is gone");
    assert.match(agent.text(), /released node Lease/);
    console.log(`k8s supervised crash: ${ip} answered by ${other.name} ${Date.now() - t0} ms after kill -9 (node Lease ${DURATION_S} s)`);
    const r = arping(lab.client, ip, { count: 3 });
    assert.deepEqual(new Set(r.macs), new Set([other.mac('eth0')]), 'only the successor answers (the dead datapath was silenced)');
    // The supervisor stays with the pair's exit status (128 + 9), as on etcd.
    await waitFor(() => /agent exited \(SIGKILL\)/.test(agent.text()), { timeoutMs: 5000, what: 'the supervisor saw the crash' });
  });

  test("a restarted agent's node Lease is never released for the dead incarnation", async () => {
    assert.ok(crashed, 'the previous test crashed an agent');
    const node = crashed;
    const dead = k.agents.get(node)!;
    await dead.stop('SIGKILL');
    await k.start(node);
    let now: { metadata: { annotations?: Record<string, string>; resourceVersion: string } } | undefined;
    await waitFor(async () => ((now = (await lease(`node-${node.netns}`)).body), now?.metadata?.annotations?.[INCARNATION_ANNOTATION] !== undefined), { timeoutMs: 15_000, what: 'the restarted agent holds its node Lease' });
    const mine = now!.metadata.annotations![INCARNATION_ANNOTATION]!;
    // A late release for another incarnation (the crashed one's) leaves the live agent's Lease as it is.
    const client = await KubeClient.create({ kubeconfig: kube.kubeconfig(`herald:${node.netns}`, ['herald:agents']) });
    const outcome = await releaseNodeLease(client, { namespace: NS, name: `node-${node.netns}`, incarnation: '00000000-0000-4000-8000-000000000000' });
    assert.equal(outcome, 'other');
    const after = (await lease(`node-${node.netns}`)).body;
    assert.equal(after.metadata.annotations[INCARNATION_ANNOTATION], mine, 'the live agent still holds its node Lease');
    // The restarted node is live again for the other node (its Lease is watched and renewed).
    const other = lab.nodes.find((n) => n !== node)!;
    await waitFor(() => (JSON.parse(other.must(HERALD, ['status', '--json', '--status-socket', other.statusSocket])).kubernetes.leases.liveNodes as string[]).includes(node.netns), { timeoutMs: 15_000, what: 'the restarted node is live for the other' });
  });
});
