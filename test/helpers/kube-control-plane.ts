/**
 * One node's control plane in Kubernetes mode, composed as agent.ts does it
 * (informers, Lease ownership, LB-IPAM under the herald-ipam election,
 * Service and pool status write-back, Events), without the datapath: for
 * tests and bench/k8s against a real kube-apiserver.
 */
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { ControlPlane } from '../../src/controlplane/controller.js';
import { l2AnnounceTable } from '../../src/datapath/tables/l2-announce.js';
import { KubeClient } from '../../src/intent/sources/kube-client.js';
import { KUBE_RESOURCES, KubernetesIntentSource } from '../../src/intent/sources/kubernetes.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { EventRecorder, KubeIntentEvents } from '../../src/store/kubernetes/events.js';
import type { ManifestDiagnostic } from '../../src/intent/diagnostics.js';
import type { IntentKind } from '../../src/intent/kinds.js';
import { IPAM_ELECTION, KubeIpamCoordinator } from '../../src/store/kubernetes/ipam.js';
import { LeaseOwnership, type LeaseOwnershipOptions } from '../../src/store/kubernetes/lease-ownership.js';
import { PoolStatusWriter, ServiceStatusWriter, serviceStatusDefaults, type ServiceStatusOptions } from '../../src/store/kubernetes/service-status.js';
import type { KubeServer } from './kube.js';

export type KubeControlPlane = Awaited<ReturnType<typeof kubeControlPlane>>;

export async function kubeControlPlane(kube: KubeServer, node: string, opts: { lease: LeaseOwnershipOptions; status?: ServiceStatusOptions; resyncMs?: number; debounceMs?: number; /** Fake Ethernet links (up, carrier): a policy naming them makes this node a candidate. */ links?: readonly string[] }) {
  const client = await KubeClient.create({ kubeconfig: kube.kubeconfig(`herald:${node}`, ['herald:agents']) });
  const log = silentLogger;
  const source = new KubernetesIntentSource({ client, log, debounceMs: opts.debounceMs ?? 20 });
  const ownership = new LeaseOwnership(client, node, { log }, opts.lease);
  const election = ownership.elect(IPAM_ELECTION);
  const active = () => election.isLeader();
  const events = new EventRecorder({ client, node, log });
  const resyncMs = opts.resyncMs ?? 500;
  const writer = new ServiceStatusWriter({ client, cached: (name, namespace) => source.cached('Service', name, namespace), events, log, active, resyncMs }, opts.status ?? serviceStatusDefaults);
  const poolRes = KUBE_RESOURCES.find((r) => r.kind === 'CiliumLoadBalancerIPPool')!;
  const pools = new PoolStatusWriter({ client, cached: (name) => source.cached('CiliumLoadBalancerIPPool', name), collection: poolRes.path, apiVersion: poolRes.apiVersion, log, active, resyncMs });
  const ipam = new KubeIpamCoordinator(election, () => source.objects('Service'));
  // As agent.ts wires it: ownership moves and refused objects as Events.
  const intentEvents = new KubeIntentEvents({ events, servicesOf: (ip) => cp.servicesFor(ip), cached: (kind, name, namespace) => source.cached(kind as IntentKind, name, namespace), resources: KUBE_RESOURCES, active });
  ownership.onMove((m) => intentEvents.moved(m));
  const links = new FakeLinks();
  for (const name of opts.links ?? []) links.add(name);
  const rejected: ManifestDiagnostic[][] = [];
  const cp = new ControlPlane({
    db: new StateDB([l2AnnounceTable]),
    nodeName: node,
    links,
    ownership,
    ipam,
    staticAnnouncements: [],
    // As agent.ts wires it.
    onServiceIps: (inputs) => {
      writer.update(inputs.ingress, new Map([...(inputs.ipam?.services ?? [])].map(([k, v]) => [k, v.condition] as const)));
      if (inputs.ipam && !inputs.ipam.dormant) pools.update(inputs.ipam.pools);
    },
    onIntentWarning: (w) => intentEvents.warned(w),
    clock: systemClock,
    log,
  });
  /** What kill -9 leaves: no release, no renewals, no writes. */
  const crash = (): void => {
    source.dispose();
    writer.dispose();
    pools.dispose();
    cp.dispose();
    ownership.dispose();
    client.close();
  };
  try {
    await cp.start();
    await source.start({
      onSnapshot: (s) => void cp.setSnapshot(s),
      onError: (problem) => {
        if ('errors' in problem) {
          rejected.push([...problem.errors]);
          intentEvents.rejected(problem.errors);
        }
      },
    });
  } catch (e) {
    crash();
    throw e;
  }
  return { node, client, source, ownership, election, writer, pools, events, rejected, cp, crash };
}
