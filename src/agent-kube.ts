/**
 * Kubernetes mode's part of the composition root (agent.ts), imported only
 * with `--kubernetes`: @kubernetes/client-node stays out of other starts.
 */
export { KubeClient } from './intent/sources/kube-client.js';
export { KUBE_RESOURCES, KubernetesIntentSource } from './intent/sources/kubernetes.js';
export { LeaseOwnership, leaseOwnershipDefaults } from './store/kubernetes/lease-ownership.js';
export { PoolStatusWriter, ServiceStatusWriter } from './store/kubernetes/service-status.js';
export { EventRecorder, KubeIntentEvents } from './store/kubernetes/events.js';
export { KubeIpamCoordinator, IPAM_ELECTION } from './store/kubernetes/ipam.js';
export { PacketOwnerWatch, ownerWatchDefaults } from './datapath/owner-watch.js';

export type KubeModules = typeof import('./agent-kube.js');
