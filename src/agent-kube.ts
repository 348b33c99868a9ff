/**
 * Kubernetes mode's part of the composition root (agent.ts), imported only
 * with `--kubernetes`: @kubernetes/client-node stays out of other starts.
 */
export { KubeClient } from './intent/sources/kube-client.js';
export { KubernetesIntentSource } from './intent/sources/kubernetes.js';
export { LeaseOwnership, leaseOwnershipDefaults } from './store/kubernetes/lease-ownership.js';
export { ServiceStatusWriter } from './store/kubernetes/service-status.js';
export { KubeIpamCoordinator, IPAM_ELECTION } from './store/kubernetes/ipam.js';

export type KubeModules = typeof import('./agent-kube.js');
