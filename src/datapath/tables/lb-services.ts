/**
 * The lb-services table: one row per service frontend (VIP, port, protocol)
 * with its backends — the contract between the load-balancing control plane
 * (which derives it from Services and EndpointSlices) and the LB reconciler
 * (which writes the services, backends and Maglev maps).
 */
import { defineTable } from '../../core/statedb/index.js';

export interface LbBackendRow {
  readonly ip: string;
  readonly port: number;
  /** Terminating: keeps its connections, gets no new ones. */
  readonly terminating: boolean;
}

export interface LbServiceRow {
  /** "198.51.100.10:80/TCP" ("[2001:db8::1]:80/TCP" for IPv6). */
  readonly key: string;
  /** "namespace/name". */
  readonly service: string;
  readonly vip: string;
  readonly port: number;
  readonly proto: 'TCP' | 'UDP';
  /**
   * dnat: backends route replies back through this node; snat: the node's address is the
   * source (remote backends); dsr: only the MAC changes, the backend holds the VIP and replies directly.
   */
  readonly mode: 'dnat' | 'snat' | 'dsr';
  /**
   * How a new flow picks its backend: maglev (the flow's hash, consistent across
   * nodes and backend changes), random, or round-robin. Absent: maglev.
   */
  readonly algorithm?: LbAlgorithm;
  readonly affinity: 'None' | 'ClientIP';
  readonly affinityTimeoutS: number;
  /** Sorted by (ip, port). */
  readonly backends: readonly LbBackendRow[];
}

export type LbAlgorithm = 'maglev' | 'random' | 'round-robin';

export function lbFrontendKey(vip: string, port: number, proto: string): string {
  return `${vip.includes(':') ? `[${vip}]` : vip}:${port}/${proto}`;
}

export const lbServicesTable = defineTable<LbServiceRow, 'service'>({
  name: 'lb-services',
  primaryKey: (r) => r.key,
  indexes: { service: (r) => r.service },
columns: ['FRONTEND', 'SERVICE', 'MODE', 'ALGORITHM', 'BACKENDS'],
  toColumns: (r) => [r.key, r.service, r.mode, r.algorithm ?? 'maglev', r.backends.map((b) => `${b.ip}:${b.port}${b.terminating ? '(terminating)' : ''}`).join(',')],
});
