/** Intent manifests: the pure public surface of src/intent (file loading is in load.ts, which uses node:fs). */
export * from './annotations.js';
export * from './bgp.js';
export * from './diagnostics.js';
export * from './endpoint-slice.js';
export * from './ip.js';
export * from './kinds.js';
export * from './names.js';
export * from './node.js';
export * from './parse.js';
export * from './policy.js';
export * from './pool.js';
export * from './re2.js';
export * from './selector.js';
export * from './service.js';
export * from './snapshot.js';
