/**
 * The etcd store's part of the composition root (agent.ts), in a module of
 * its own so the agent imports it only with `--store etcd`: etcd3, gRPC and
 * cockatiel (a quarter of a second to load) stay out of a local-store start.
 */
export { EtcdIntentSource } from './intent/sources/etcd.js';
export { EtcdIpamCoordinator } from './store/etcd/ipam.js';
export { EtcdOwnership, etcdOwnershipDefaults } from './store/etcd/ownership.js';
export { EtcdSession, etcdSessionDefaults } from './store/etcd/session.js';
export { EtcdViewStore } from './store/etcd/view-store.js';
export { NodeClaim, nodeClaimWait } from './store/etcd/node-claim.js';
export { PacketOwnerWatch, ownerWatchDefaults } from './datapath/owner-watch.js';

export type EtcdModules = typeof import('./agent-etcd.js');
