/** LB-IPAM: pure allocation of LoadBalancer IPs from CiliumLoadBalancerIPPools (no I/O). */
export { allocate } from './allocator.js';
export { addrOf, compareAddrs, formatAddr, type Addr } from '../../core/addr.js';
export { AddressSet, type Block } from './blocks.js';
export { HANDLED_LB_CLASSES, isHandledService, incompatibility, type ServiceView } from './service-view.js';
export { allocationStateSchema, EMPTY_ALLOCATION_STATE, type AllocationState } from './state.js';
export * from './types.js';
