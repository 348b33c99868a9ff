/**
 * The BGP routes table: the service IPs this node advertises, each with the
 * local next hops the kernel host route (/32, /128) sends its traffic to. The
 * contract between the BGP control plane (which writes it from intent and
 * readiness) and the host-route and BIRD reconcilers (which read it).
 */
import { defineTable } from '../../core/statedb/index.js';

export interface BgpRouteRow {
  /** IPv4 dotted quad or canonical IPv6. */
  readonly ip: string;
  /** `ip/32` or `ip/128`. */
  readonly prefix: string;
  /** Gateways (backend addresses) of the host route, sorted and unique; several → RTA_MULTIPATH. */
  readonly nextHops: readonly string[];
  /** Services ("namespace/name") that want it advertised, sorted. */
  readonly services: readonly string[];
  /** Peers it is exported to, as "clusterConfig/instance/peer", sorted. */
  readonly peers: readonly string[];
}

export const bgpRoutesTable = defineTable<BgpRouteRow>({
  name: 'bgp-routes',
  // No secondary index: nothing looks rows up by IP, and an index entry per row was a tenth of a 10,000-route write.
  primaryKey: (r) => r.prefix,
  columns: ['PREFIX', 'NEXT HOPS', 'SERVICES', 'PEERS'],
  toColumns: (r) => [r.prefix, r.nextHops.join(','), r.services.join(','), r.peers.join(',')],
});
