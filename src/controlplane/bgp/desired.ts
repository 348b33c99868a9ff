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
import type { AttributeGroup } from '../../datapath/tables/bird-config.js';
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
  /** Per peer id: the attribute groups of its selected IPs (peers without attributes absent). */
  readonly attributes: ReadonlyMap<string, readonly AttributeGroup[]>;
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
type Attributes = NonNullable<BgpAdvertisementManifest['spec']['advertisements'][number]['attributes']>;
interface Selection {
  services: Set<string>;
  peers: Set<string>;
  /** peer id → the attributes of every advertisement entry that selected this IP for it. */
  attributes: Map<string, Attributes[]>;
}

function selectedIps(input: BgpDesiredInput, warnings: BgpPolicyWarning[]): Map<string, Selection> {
  const { snapshot, node } = input;
  const out = new Map<string, Selection>();
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
              for (const [ip, attrs] of advertisedIps(advert, svc, input.ingress.get(svcKey) ?? [])) {
                if (familyOf(ip) !== ipFamily) continue;
                let e = out.get(ip);
                if (!e) out.set(ip, (e = { services: new Set(), peers: new Set(), attributes: new Map() }));
                e.services.add(svcKey);
                e.peers.add(peerId);
                if (attrs.length > 0) e.attributes.set(peerId, [...(e.attributes.get(peerId) ?? []), ...attrs]);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

/** The IPs of `svc` that one CiliumBGPAdvertisement object selects, with the attributes of the entries that selected each. */
function advertisedIps(advert: BgpAdvertisementManifest, svc: ServiceManifest, ingress: readonly string[]): Map<string, Attributes[]> {
  const ips = new Map<string, Attributes[]>();
  const add = (ip: string, attrs: Attributes | undefined) => {
    const list = ips.get(ip) ?? [];
    if (attrs !== undefined) list.push(attrs);
    ips.set(ip, list);
  };
  for (const a of advert.spec.advertisements) {
    if (a.advertisementType !== 'Service' || a.service === undefined || a.selector === undefined) continue;
    if (!matchesSelector(a.selector, serviceSelectorLabels(svc))) continue;
    const cls = svc.spec.loadBalancerClass;
    if (a.service.addresses.includes('LoadBalancerIP') && svc.spec.type === 'LoadBalancer' && (cls === undefined || cls === BGP_CONTROL_PLANE_CLASS)) {
      for (const ip of ingress) add(ip, a.attributes);
    }
    if (a.service.addresses.includes('ExternalIP')) for (const ip of svc.spec.externalIPs) add(ip, a.attributes);
  }
  return ips;
}

/** RFC 1997 / RFC 7999 / RFC 8326 values of the well-known communities Cilium names. */
const WELL_KNOWN: Readonly<Record<string, number>> = {
  internet: 0x00000000,
  'planned-shut': 0xffff0000,
  'accept-own': 0xffff0001,
  'route-filter-translated-v4': 0xffff0002,
  'route-filter-v4': 0xffff0003,
  'route-filter-translated-v6': 0xffff0004,
  'route-filter-v6': 0xffff0005,
  'llgr-stale': 0xffff0006,
  'no-llgr': 0xffff0007,
  blackhole: 0xffff029a,
  'no-export': 0xffffff01,
  'no-advertise': 0xffffff02,
  'no-export-subconfed': 0xffffff03,
  'no-peer': 0xffffff04,
};

const split32 = (n: number): [number, number] => [Math.floor(n / 65536), n % 65536];

/**
 * Several advertisement entries selecting one IP for one peer: communities
 * are the union, local preference the highest (the most preferred wins).
 */
function mergeAttributes(list: readonly Attributes[]): Omit<AttributeGroup, 'prefixes'> {
  const std = new Map<string, [number, number]>();
  const large = new Map<string, [number, number, number]>();
  let localPreference: number | undefined;
  for (const a of list) {
    for (const s of a.communities?.standard ?? []) {
      const v = s.includes(':') ? (s.split(':').map(Number) as [number, number]) : split32(Number(s));
      std.set(v.join(':'), v);
    }
    for (const w of a.communities?.wellKnown ?? []) {
      const v = split32(WELL_KNOWN[w]!);
      std.set(v.join(':'), v);
    }
    for (const l of a.communities?.large ?? []) {
      const v = l.split(':').map(Number) as [number, number, number];
      large.set(v.join(':'), v);
    }
    if (a.localPreference !== undefined) localPreference = Math.max(localPreference ?? 0, a.localPreference);
  }
  const byValue = <T extends readonly number[]>(m: Map<string, T>) => [...m.values()].sort((x, y) => x.reduce((d, v, i) => d || v - y[i]!, 0));
  return { communities: byValue(std), largeCommunities: byValue(large), ...(localPreference !== undefined ? { localPreference } : {}) };
}

/** Per peer, its selected IPs grouped by identical merged attributes. */
function attributeGroups(selected: ReadonlyMap<string, Selection>): Map<string, AttributeGroup[]> {
  const perPeer = new Map<string, Map<string, { attrs: Omit<AttributeGroup, 'prefixes'>; prefixes: string[] }>>();
  for (const [ip, sel] of [...selected].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    for (const [peer, list] of sel.attributes) {
      const attrs = mergeAttributes(list);
      if (attrs.communities.length === 0 && attrs.largeCommunities.length === 0 && attrs.localPreference === undefined) continue;
      const key = JSON.stringify(attrs);
      const groups = perPeer.get(peer) ?? perPeer.set(peer, new Map()).get(peer)!;
      const g = groups.get(key) ?? groups.set(key, { attrs, prefixes: [] }).get(key)!;
      g.prefixes.push(`${ip}/${familyOf(ip) === 'IPv4' ? 32 : 128}`);
    }
  }
  return new Map([...perPeer].map(([peer, groups]) => [peer, [...groups.values()].map((g) => ({ prefixes: g.prefixes, ...g.attrs }))]));
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
  return { routes, withheld, warnings, attributes: attributeGroups(selected) };
}
