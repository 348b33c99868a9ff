/**
 * One Kubernetes control plane (test/helpers/kube-control-plane.ts) in its own
 * worker thread, for bench/k8s/services: each node's agent has its own event
 * loop in a real cluster, so three control planes sharing one thread (and the
 * bench's own client) would measure the bench, not herald. Answers `poll`
 * with what the bench waits for.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { kubeControlPlane } from '../../test/helpers/kube-control-plane.js';
import type { KubeServer } from '../../test/helpers/kube.js';

const { node, kubeconfig, opts } = workerData as { node: string; kubeconfig: string; opts: Parameters<typeof kubeControlPlane>[2] };
const kube = { kubeconfig: () => kubeconfig } as unknown as KubeServer;
const cp = await kubeControlPlane(kube, node, opts);
parentPort!.on('message', (m: { type: 'poll' | 'stop' }) => {
  if (m.type === 'stop') {
    cp.crash();
    parentPort!.postMessage({ type: 'stopped' });
    return;
  }
  const services = cp.cp.status().ipam?.services;
  let satisfied = 0;
  for (const s of services?.values() ?? []) if (s.condition.status === 'True') satisfied++;
  parentPort!.postMessage({ type: 'poll', leader: cp.election.isLeader(), satisfied, pending: cp.writer.stats.pending, writes: cp.writer.stats.writes, recomputes: cp.cp.stats.recomputes, ipam: { ...cp.cp.stats.ipam }, source: { ...cp.source.stats } });
});
parentPort!.postMessage({ type: 'ready' });
