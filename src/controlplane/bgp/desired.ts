/**
 * BGP anycast desired state, a pure function of
 *   (allocated service IPs × endpoint readiness × advertisement policy × this node):
 * for each service IP this node should advertise, its host route's next hops.
 *
 * Policy, as Cilium's BGP control plane v2:
 *   CiliumBGPClusterConfig whose nodeSelector matches this node
 *     → bgpInstances → peers → peerConfigRef (CiliumBGPPeerConfig)
 *     → families (ipv4/ipv6 unicast) → `advertisements` selector over the
 *       labels of CiliumBGPAdvertisement objects (unset selects none)
 *     → advertisements of type Service: `selector` over the service's labels
 *       (plus the synthetic io.kubernetes.service.*; unset selects none) and
 *       the address kinds LoadBalancerIP (allocated ingress IPs of
 *       LoadBalancer services of class unset or io.cilium/bgp-control-plane)
 *       and ExternalIP (spec.externalIPs).
 *
 * Readiness (EndpointSlices of the service, ready and not terminating, and
 * passing herald's own health check where the service asks for one):
 *   externalTrafficPolicy Local   → advertised only with a ready backend on
 *                                    this node; next hops = those backends.
 *   externalTrafficPolicy Cluster → advertised while any backend is ready;
 *                                    next hops = the local ready backends, or
 *                                    every ready backend when none is local.
 * An IP several services share is advertised if any of them wants it, with
 * the union of their next hops.
 */
import { familyOf } from '../../core/addr.js';
import { healthKey } from '../health/targets.js';
import type { BgpRouteRow } from '../../datapath/tables/bgp-routes.js';
import { isUnicastIp, type BgpAdvertisementManifest } from '../../intent/bgp.js';
import { endpointReady, sliceService } from '../../intent/endpoint-slice.js';
import type { NodeIdentity } from '../../intent/node-labels.js';
import { matchesSelector } from '../../intent/selector.js';
import { serviceSelectorLabels, type ServiceManifest } from '../../intent/service.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';

export const BGP_CONTROL_PLANE_CLASS = 'io.cilium/bgp-control-plane';

export type WithheldReason = 'no-ready-backend' | 'no-local-ready-backend';

/** A service IP the policy selects on this node but that is not advertised, and why. */
export interface Withheld {
  readonly ip: string;
  readonly services: readonly string[];
  readonly reason: WithheldReason;
}

/** A peer whose configuration could not be followed (reported, never silent). */
export interface BgpPolicyWarning {
  readonly peer: string;
  readonly message: string;
}

export interface BgpDesired {
  readonly routes: ReadonlyMap<string, BgpRouteRow>;
  readonly withheld: readonly Withheld[];
  readonly warnings: readonly BgpPolicyWarning[];
}

export interface BgpDesiredInput {
  readonly snapshot: IntentSnapshot;
  /** Allocated ingress IPs per service key ("namespace/name"), from LB-IPAM. */
  readonly ingress: ReadonlyMap<string, readonly string[]>;
  readonly node: NodeIdentity;
  /** Backends ("namespace/name|address") failing herald's own health check: not ready whatever their slice says. */
  readonly unhealthy?: ReadonlySet<string>;
}

const sorted = (s: Iterable<string>): string[] => [...s].sort();
const byKey = <V>(m: ReadonlyMap<string, V>): [string, V][] => [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

/** The service IPs each peer family selects on this node: ip → {services, peers}. */
function selectedIps(input: BgpDesiredInput, warnings: BgpPolicyWarning[]): Map<string, { services: Set<string>; peers: Set<string> }> {
  const { snapshot, node } = input;
  const out = new Map<string, { services: Set<string>; peers: Set<string> }>();
  for (const [configName, config] of byKey(snapshot.bgpClusterConfigs)) {
    if (!matchesSelector(config.spec.nodeSelector, node.labels)) continue;
    for (const instance of config.spec.bgpInstances) {
      for (const peer of instance.peers) {
        const peerId = `${configName}/${instance.name}/${peer.name}`;
        const refName = peer.peerConfigRef?.name;
        if (refName === undefined) continue; // Cilium's defaults advertise nothing (warned at parse time)
        const peerConfig = snapshot.bgpPeerConfigs.get(refName);
        if (!peerConfig) {
          warnings.push({ peer: peerId, message: `CiliumBGPPeerConfig ${JSON.stringify(refName)} not found: nothing is advertised to this peer` });
          continue;
        }
        for (const family of peerConfig.spec.families) {
          if (!isUnicastIp(family) || family.advertisements === undefined) continue;
          const ipFamily = family.afi === 'ipv4' ? 'IPv4' : 'IPv6';
          for (const [, advert] of byKey(snapshot.bgpAdvertisements)) {
            if (!matchesSelector(family.advertisements, advert.metadata.labels)) continue;
            for (const [svcKey, svc] of byKey(snapshot.services)) {
              for (const ip of advertisedIps(advert, svc, input.ingress.get(svcKey) ?? [])) {
                if (familyOf(ip) !== ipFamily) continue;
                let e = out.get(ip);
                if (!e) out.set(ip, (e = { services: new Set(), peers: new Set() }));
                e.services.add(svcKey);
                e.peers.add(peerId);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

/** The IPs of `svc` that one CiliumBGPAdvertisement object selects. */
function advertisedIps(advert: BgpAdvertisementManifest, svc: ServiceManifest, ingress: readonly string[]): Set<string> {
  const ips = new Set<string>();
  for (const a of advert.spec.advertisements) {
    if (a.advertisementType !== 'Service' || a.service === undefined || a.selector === undefined) continue;
    if (!matchesSelector(a.selector, serviceSelectorLabels(svc))) continue;
    const cls = svc.spec.loadBalancerClass;
    if (a.service.addresses.includes('LoadBalancerIP') && svc.spec.type === 'LoadBalancer' && (cls === undefined || cls === BGP_CONTROL_PLANE_CLASS)) {
      for (const ip of ingress) ips.add(ip);
    }
    if (a.service.addresses.includes('ExternalIP')) for (const ip of svc.spec.externalIPs) ips.add(ip);
  }
  return ips;
}

/** Ready backend addresses per service: local (on this node) and all. */
function readyBackends(snapshot: IntentSnapshot, nodeName: string, unhealthy: ReadonlySet<string>): Map<string, { local: Set<string>; all: Set<string> }> {
  const out = new Map<string, { local: Set<string>; all: Set<string> }>();
  for (const [, slice] of byKey(snapshot.endpointSlices)) {
    const svc = sliceService(slice);
    if (svc === undefined || slice.addressType === 'FQDN') continue;
    let e = out.get(svc);
    if (!e) out.set(svc, (e = { local: new Set(), all: new Set() }));
    for (const ep of slice.endpoints) {
      if (!endpointReady(ep)) continue;
      for (const a of ep.addresses) {
        if (unhealthy.has(healthKey(svc, a))) continue;
        e.all.add(a);
        if (ep.nodeName === nodeName) e.local.add(a);
      }
    }
  }
  return out;
}

export function computeBgpDesired(input: BgpDesiredInput): BgpDesired {
  const warnings: BgpPolicyWarning[] = [];
  const selected = selectedIps(input, warnings);
  const backends = readyBackends(input.snapshot, input.node.name, input.unhealthy ?? new Set());
  const routes = new Map<string, BgpRouteRow>();
  const withheld: Withheld[] = [];
  for (const [ip, sel] of [...selected].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const family = familyOf(ip);
    const hops = new Set<string>();
    let anyReady = false;
    for (const svcKey of sel.services) {
      const svc = input.snapshot.services.get(svcKey);
      const b = backends.get(svcKey);
      const local = [...(b?.local ?? [])].filter((a) => familyOf(a) === family);
      const all = [...(b?.all ?? [])].filter((a) => familyOf(a) === family);
      if (all.length > 0) anyReady = true;
      const useHops = svc?.spec.externalTrafficPolicy === 'Local' ? local : local.length > 0 ? local : all;
      for (const h of useHops) hops.add(h);
    }
    if (hops.size === 0) {
      withheld.push({ ip, services: sorted(sel.services), reason: anyReady ? 'no-local-ready-backend' : 'no-ready-backend' });
      continue;
    }
    const prefix = `${ip}/${family === 'IPv4' ? 32 : 128}`;
    routes.set(prefix, { ip, prefix, nextHops: sorted(hops), services: sorted(sel.services), peers: sorted(sel.peers) });
  }
  return { routes, withheld, warnings };
}
