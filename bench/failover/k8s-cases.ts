/**
 * The Kubernetes-store half of the failover benchmark: the same lab, probe and
 * service as herald-cases.ts, but intent from a real kube-apiserver
 * (test/helpers/kube.ts, on the root namespace's loopback, reached from each
 * node through lab/unix-bridge.ts) and ownership on Leases. The failures:
 *
 *   herald-k8s/crash        SIGKILL to the owner's agent process under its
 *                           supervisor (the default with --kubernetes), which
 *                           silences the datapath and deletes the node Lease.
 *   herald-k8s/crash-unsupervised
 *                           the same with --no-supervisor: bounded by the node
 *                           Lease duration (--kube-lease-duration, 6 s default).
 *   herald-k8s/node-loss    the owner's switch port goes down and its path to
 *                           the API server stalls (its bridge SIGSTOPped: as on
 *                           etcd, whose store host sits on the same segment, the
 *                           node loses its store with its link): silent at once,
 *                           fenced out by a candidate (its node Lease deleted).
 *   herald-k8s/power-loss   the same, and the owner's whole agent unit frozen.
 *
 * Each trial uses a fresh Lease namespace and fresh agents (the Service, pool
 * and policy stay: the Service keeps its IP, bench.vip); the owner is the
 * rendezvous-preferred node for the VIP, as on etcd. The agents authenticate
 * as members of system:masters (RBAC is tested elsewhere).
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor, type Host, type LabProcess } from '../../lab/lab.js';
import { startRootBridge } from '../../lab/unix-bridge.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { applyObject, applyYaml, startKube, type KubeServer } from '../../test/helpers/kube.js';
import { HERALD, startAgent } from '../../test/helpers/lab-tools.js';
import type { FailoverBench, FailoverCase, Setup, Trigger } from './harness.js';
import { crashAgentProcess, stopOwner, trace, type HeraldScenario } from './herald-cases.js';
import { ownerLinkDown } from './harness.js';

const BRIDGE = fileURLToPath(new URL('../../lab/unix-bridge.ts', import.meta.url));

let kube: KubeServer | undefined;
let bridge: { close(): void } | undefined;
let trial = 0;

async function cluster(): Promise<KubeServer> {
  if (kube) return kube;
  const k = await startKube();
  kube = k;
  const socket = join(k.dir, 'api.sock');
  const port = Number(new URL(k.server).port);
  bridge = await startRootBridge(socket, port);
  process.once('exit', () => {
    bridge?.close();
    rmSync(socket, { force: true });
  });
  await applyYaml(k, readFileSync(new URL('../../deploy/kubernetes/crds.yaml', import.meta.url), 'utf8'));
  return k;
}

/** Stops the API server and the bridge (after the last case). */
export async function stopK8s(): Promise<void> {
  bridge?.close();
  bridge = undefined;
  await kube?.stop();
  kube = undefined;
}

let intentApplied = false;
/** node → its bridge to the API server (started once, with the intent). */
const bridges = new Map<Host, LabProcess>();

export const k8sSetup = (extraArgs: readonly string[] = []): Setup => async (bench: FailoverBench): Promise<HeraldScenario> => {
  const k = await cluster();
  const nodes = bench.nodes;
  if (!intentApplied) {
    const port = Number(new URL(k.server).port);
    for (const n of nodes) {
      await applyObject(k, { apiVersion: 'v1', kind: 'Node', metadata: { name: n.netns, labels: { 'kubernetes.io/hostname': n.netns } } });
      const b = n.spawn('kube-bridge', process.execPath, ['--import', 'tsx', BRIDGE, '--port', String(port), '--socket', join(k.dir, 'api.sock')]);
      await b.waitForOutput('bridge listening', 15_000);
      bridges.set(n, b);
    }
    await applyObject(k, { apiVersion: 'cilium.io/v2', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'bench' }, spec: { blocks: [{ start: bench.vip }] } });
    await applyObject(k, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'bench' }, spec: { loadBalancerIPs: true, interfaces: ['^eth0$'] } });
    await applyObject(k, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bench' } });
    await applyObject(k, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'bench' }, spec: { type: 'LoadBalancer', ports: [{ port: bench.httpPort, protocol: 'TCP' }] } });
    intentApplied = true;
  }
  const leaseNs = `herald-fo-${++trial}`;
  await applyObject(k, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: leaseNs } });
  const agents = new Map<Host, LabProcess>();
  for (const n of nodes) {
    const kubeconfig = k.kubeconfig(`herald:${n.netns}`, ['system:masters']);
    agents.set(n, startAgent(n, ['--kubernetes', '--kubeconfig', kubeconfig, '--kube-namespace', leaseNs, '--local-routes', ...(process.env.HERALD_FAILOVER_TRACE ? ['--log-format', 'json'] : []), ...extraArgs], `k8s-agent-t${trial}`));
  }
  const owner = nodes.reduce((best, n) => (rendezvousScore(n.netns, bench.vip) > rendezvousScore(best.netns, bench.vip) ? n : best));
  const owns = (n: Host) => {
    const r = n.exec(HERALD, ['status', '--json', '--status-socket', n.statusSocket]);
    return r.code === 0 && (JSON.parse(r.stdout) as { owned: Array<{ ip: string }> }).owned.some((o) => o.ip === bench.vip);
  };
  const teardown = async () => {
    for (const b of bridges.values()) b.signal('SIGCONT');
    await Promise.all([...agents.values()].map((a) => a.stop('SIGKILL')));
    for (const n of nodes) {
      n.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', n.pinDir]);
      n.exec('ip', ['route', 'flush', 'table', 'local', 'proto', '250']);
    }
    await k.api('DELETE', `/api/v1/namespaces/${leaseNs}`).catch(() => undefined);
  };
  try {
    // The first agent up owns the VIP until the preferred node has been live for the hand-over hold (5 s).
    await waitFor(() => owns(owner) && nodes.every((n) => n === owner || !owns(n)), { timeoutMs: 60_000, intervalMs: 200, what: `${owner.name} to own ${bench.vip} (Kubernetes store)` });
  } catch (e) {
    await teardown();
    throw e;
  }
  const scenario: HeraldScenario = { owner, agents, logFiles: new Map(), teardown };
  if (process.env.HERALD_FAILOVER_TRACE) scenario.notes = () => ({ trace: trace(scenario) });
  return scenario;
};

export function k8sCases(): FailoverCase[] {
  return [
    { name: 'herald-k8s/crash', setup: k8sSetup(), trigger: crashAgentProcess, options: { postMs: 4000 } },
    // Without the supervisor: the node Lease must expire (6 s by default) on the candidates' clocks.
    { name: 'herald-k8s/crash-unsupervised', setup: k8sSetup(['--no-supervisor']), trigger: stopOwner('SIGKILL'), options: { postMs: 9000 } },
    { name: 'herald-k8s/node-loss', setup: k8sSetup(), trigger: nodeLoss(false), options: { postMs: 4000 } },
    { name: 'herald-k8s/power-loss', setup: k8sSetup(), trigger: nodeLoss(true), options: { postMs: 4000 } },
  ];
}

/** The owner's port down and its API path stalled at once; `frozen`: its whole agent unit SIGSTOPped too (power loss). */
function nodeLoss(frozen: boolean): Trigger {
  return async (bench, scenario) => {
    (scenario as HeraldScenario).triggeredAt = Date.now();
    await ownerLinkDown(bench, scenario);
    bridges.get(scenario.owner)?.signal('SIGSTOP');
    if (frozen) (scenario as HeraldScenario).agents.get(scenario.owner)!.signal('SIGSTOP');
  };
}
