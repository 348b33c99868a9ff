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
/** sorted() without the sort for one element (nearly every route: one next hop, one service, one peer). */
const sortedList = (s: ReadonlySet<string>): string[] => (s.size === 1 ? [...s] : [...s].sort());
/**
 * The family of an address intent or LB-IPAM already validated: a colon is
 * IPv6. (Parsing each address again cost more than the rest of a pass at
 * 10,000 IPs.)
 */
const fam = (ip: string): 'IPv4' | 'IPv6' => (ip.includes(':') ? 'IPv6' : 'IPv4');

/**
 * Per-object memo of the per-service work, so that one change among 10,000
 * services recomputes one service, not all: keyed by the (immutable) intent
 * objects, so an unchanged Service / advertisement / EndpointSlice object
 * reuses its last result. Objects are never mutated; a new object is a miss.
 */
const advertMemo = new WeakMap<ServiceManifest, WeakMap<BgpAdvertisementManifest, { ingress: readonly string[]; ips: Map<string, Attributes[]> }>>();
const sliceMemo = new WeakMap<object, { nodeName: string; unhealthy: ReadonlySet<string>; svc: string | undefined; local: string[]; all: string[] }>();
const sameList = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);
const byKey = <V>(m: ReadonlyMap<string, V>): [string, V][] => [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

/** The service IPs each peer family selects on this node: ip → {services, peers}. */
type Attributes = NonNullable<BgpAdvertisementManifest['spec']['advertisements'][number]['attributes']>;
interface Selection {
  services: Set<string>;
  peers: Set<string>;
  /** peer id → the attributes of every advertisement entry that selected this IP for it (NO_ATTRIBUTES, shared, until one has some). */
  attributes: Map<string, Attributes[]>;
}

/** The attributes of a selection without any: one shared empty map, replaced by the selection's own on the first entry with attributes. */
const NO_ATTRIBUTES: ReadonlyMap<string, Attributes[]> = new Map();
const newSelection = (): Selection => ({ services: new Set(), peers: new Set(), attributes: NO_ATTRIBUTES as Map<string, Attributes[]> });
function addSelectionAttributes(sel: Selection, peerId: string, attrs: readonly Attributes[]): void {
  if (attrs.length === 0) return;
  if (sel.attributes === NO_ATTRIBUTES) sel.attributes = new Map();
  sel.attributes.set(peerId, [...(sel.attributes.get(peerId) ?? []), ...attrs]);
}

/** Every (peer, family, advertisement object) the policy gives this node: what a service's IPs are matched against. */
function policyPairs(input: BgpDesiredInput, warnings: BgpPolicyWarning[]): { peerId: string; ipFamily: 'IPv4' | 'IPv6'; advert: BgpAdvertisementManifest }[] {
  const { snapshot, node } = input;
  const pairs: { peerId: string; ipFamily: 'IPv4' | 'IPv6'; advert: BgpAdvertisementManifest }[] = [];
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
            if (matchesSelector(family.advertisements, advert.metadata.labels)) pairs.push({ peerId, ipFamily, advert });
          }
        }
      }
    }
  }
  return pairs;
}

function selectedIps(input: BgpDesiredInput, warnings: BgpPolicyWarning[]): Map<string, Selection> {
  const out = new Map<string, Selection>();
  const pairs = policyPairs(input, warnings);
  for (const pair of pairs) {
    // Services in any order: the results are sets, sorted where they leave.
    for (const [svcKey, svc] of input.snapshot.services) {
      for (const [ip, attrs] of memoAdvertisedIps(pair.advert, svc, input.ingress.get(svcKey) ?? [])) {
        if (fam(ip) !== pair.ipFamily) continue;
        let e = out.get(ip);
        if (!e) out.set(ip, (e = newSelection()));
        e.services.add(svcKey);
        e.peers.add(pair.peerId);
        addSelectionAttributes(e, pair.peerId, attrs);
      }
    }
  }
  return out;
}

function memoAdvertisedIps(advert: BgpAdvertisementManifest, svc: ServiceManifest, ingress: readonly string[]): Map<string, Attributes[]> {
  let perAdvert = advertMemo.get(svc);
  if (!perAdvert) advertMemo.set(svc, (perAdvert = new WeakMap()));
  const hit = perAdvert.get(advert);
  if (hit && sameList(hit.ingress, ingress)) return hit.ips;
  const ips = advertisedIps(advert, svc, ingress);
  perAdvert.set(advert, { ingress: [...ingress], ips });
  return ips;
}

function addAttributes(ips: Map<string, Attributes[]>, ip: string, attrs: Attributes | undefined): void {
  let list = ips.get(ip);
  if (list === undefined) ips.set(ip, (list = []));
  if (attrs !== undefined) list.push(attrs);
}

/** The IPs of `svc` that one CiliumBGPAdvertisement object selects, with the attributes of the entries that selected each. */
function advertisedIps(advert: BgpAdvertisementManifest, svc: ServiceManifest, ingress: readonly string[]): Map<string, Attributes[]> {
  const ips = new Map<string, Attributes[]>();
  let labels: ReturnType<typeof serviceSelectorLabels> | undefined;
  for (const a of advert.spec.advertisements) {
    if (a.advertisementType !== 'Service' || a.service === undefined || a.selector === undefined) continue;
    if (!matchesSelector(a.selector, (labels ??= serviceSelectorLabels(svc)))) continue;
    const cls = svc.spec.loadBalancerClass;
    if (a.service.addresses.includes('LoadBalancerIP') && svc.spec.type === 'LoadBalancer' && (cls === undefined || cls === BGP_CONTROL_PLANE_CLASS)) {
      for (const ip of ingress) addAttributes(ips, ip, a.attributes);
    }
    if (a.service.addresses.includes('ExternalIP')) for (const ip of svc.spec.externalIPs) addAttributes(ips, ip, a.attributes);
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
  let any = false;
  for (const sel of selected.values()) if (sel.attributes.size > 0) any = true;
  if (!any) return new Map(); // the common case: no sort of every selected IP
  const perPeer = new Map<string, Map<string, { attrs: Omit<AttributeGroup, 'prefixes'>; prefixes: string[] }>>();
  for (const [ip, sel] of [...selected].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    for (const [peer, list] of sel.attributes) {
      const attrs = mergeAttributes(list);
      if (attrs.communities.length === 0 && attrs.largeCommunities.length === 0 && attrs.localPreference === undefined) continue;
      const key = JSON.stringify(attrs);
      const groups = perPeer.get(peer) ?? perPeer.set(peer, new Map()).get(peer)!;
      const g = groups.get(key) ?? groups.set(key, { attrs, prefixes: [] }).get(key)!;
      g.prefixes.push(`${ip}/${fam(ip) === 'IPv4' ? 32 : 128}`);
    }
  }
  return new Map([...perPeer].map(([peer, groups]) => [peer, [...groups.values()].map((g) => ({ prefixes: g.prefixes, ...g.attrs }))]));
}

/** A service's ready backend addresses: on this node, and all. (The slice memo's arrays for a service with one slice: no copy.) */
interface Backends {
  readonly local: Iterable<string>;
  readonly all: Iterable<string>;
}

/** Ready backend addresses per service: local (on this node) and all. */
function readyBackends(snapshot: IntentSnapshot, nodeName: string, unhealthy: ReadonlySet<string>): Map<string, Backends> {
  const out = new Map<string, Backends>();
  for (const slice of snapshot.endpointSlices.values()) {
    let m = sliceMemo.get(slice);
    if (!m || m.nodeName !== nodeName || m.unhealthy !== unhealthy) {
      const svc = sliceService(slice);
      const local: string[] = [];
      const all: string[] = [];
      if (svc !== undefined && slice.addressType !== 'FQDN') {
        for (const ep of slice.endpoints) {
          if (!endpointReady(ep)) continue;
          for (const a of ep.addresses) {
            if (unhealthy.size > 0 && unhealthy.has(healthKey(svc, a))) continue;
            all.push(a);
            if (ep.nodeName === nodeName) local.push(a);
          }
        }
      }
      sliceMemo.set(slice, (m = { nodeName, unhealthy, svc: slice.addressType === 'FQDN' ? undefined : svc, local, all }));
    }
    if (m.svc === undefined) continue;
    const e = out.get(m.svc);
    if (e === undefined) {
      out.set(m.svc, { local: m.local, all: m.all }); // read only by evaluateIp, which collects into a set (a repeated address is harmless)
      continue;
    }
    // A second slice of the service: the union, as sets.
    out.set(m.svc, { local: new Set([...e.local, ...m.local]), all: new Set([...e.all, ...m.all]) });
  }
  return out;
}

const NONE_UNHEALTHY: ReadonlySet<string> = new Set();

/** One selected IP's host route, or why it is withheld. */
function evaluateIp(ip: string, sel: Selection, services: IntentSnapshot['services'], backends: ReadonlyMap<string, Backends>): BgpRouteRow | Withheld {
  const family = fam(ip);
  const hops = new Set<string>();
  let anyReady = false;
  const v6 = family === 'IPv6';
  for (const svcKey of sel.services) {
    const b = backends.get(svcKey);
    if (b === undefined) continue;
    let local = 0;
    for (const a of b.local) if (a.includes(':') === v6) (local++, hops.add(a));
    let all = 0;
    for (const a of b.all) if (a.includes(':') === v6) all++;
    if (all > 0) anyReady = true;
    // Cluster: the local ready backends, or every ready one when none is local.
    if (local === 0 && services.get(svcKey)?.spec.externalTrafficPolicy !== 'Local') for (const a of b.all) if (a.includes(':') === v6) hops.add(a);
  }
  if (hops.size === 0) return { ip, services: sorted(sel.services), reason: anyReady ? 'no-local-ready-backend' : 'no-ready-backend' };
  const prefix = `${ip}/${v6 ? 128 : 32}`;
  return { ip, prefix, nextHops: sortedList(hops), services: sortedList(sel.services), peers: sortedList(sel.peers) };
}

const isRow = (r: BgpRouteRow | Withheld): r is BgpRouteRow => 'prefix' in r;
const byIp = <T extends { ip: string }>(a: T, b: T) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);

export function computeBgpDesired(input: BgpDesiredInput): BgpDesired {
  const warnings: BgpPolicyWarning[] = [];
  const selected = selectedIps(input, warnings);
  const backends = readyBackends(input.snapshot, input.node.name, input.unhealthy ?? NONE_UNHEALTHY);
  const routes = new Map<string, BgpRouteRow>();
  const withheld: Withheld[] = [];
  for (const [ip, sel] of [...selected].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const r = evaluateIp(ip, sel, input.snapshot.services, backends);
    if (isRow(r)) routes.set(r.prefix, r);
    else withheld.push(r);
  }
  return { routes, withheld, warnings, attributes: attributeGroups(selected) };
}

/** The desired state plus which prefixes changed since the previous result (undefined: compare them all). */
export interface BgpDesiredDelta extends BgpDesired {
  readonly changed?: ReadonlySet<string>;
}

const sameEntries = <V>(a: ReadonlyMap<string, V>, b: ReadonlyMap<string, V>): boolean => {
  if (a === b) return true;
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
};

/**
 * computeBgpDesired, incrementally: one readiness change among 10,000
 * services re-evaluates that service's IPs, not all of them. The previous
 * inputs are compared object by object (intent objects are immutable: an
 * unchanged Service or EndpointSlice is the same object in the next
 * snapshot, as the Kubernetes source keeps them; a source that re-parses
 * everything makes every object new and so takes the full pass). Anything
 * beyond services, their ingress IPs and EndpointSlices — the BGP policy
 * kinds, the node, the health checks — takes the full pass. The result is
 * the pure function's (a unit test drives both with random changes).
 */
export class BgpDesiredEngine {
  private last: BgpDesiredInput | undefined;
  private result: BgpDesired | undefined;
  private selected = new Map<string, Selection>();
  private backends = new Map<string, Backends>();
  private routesByIp = new Map<string, BgpRouteRow>();
  private withheld = new Map<string, Withheld>();
  /** service key → the IPs it selects (any peer). */
  private svcIps = new Map<string, Set<string>>();
  /** slice key → its service; service → its slice keys. */
  private sliceSvc = new Map<string, string>();
  private svcSlices = new Map<string, Set<string>>();
  private pairs: { peerId: string; ipFamily: 'IPv4' | 'IPv6'; advert: BgpAdvertisementManifest }[] = [];

  compute(input: BgpDesiredInput): BgpDesiredDelta {
    const last = this.last;
    const s = input.snapshot;
    const policySame =
      last !== undefined &&
      sameEntries(s.bgpClusterConfigs, last.snapshot.bgpClusterConfigs) &&
      sameEntries(s.bgpPeerConfigs, last.snapshot.bgpPeerConfigs) &&
      sameEntries(s.bgpAdvertisements, last.snapshot.bgpAdvertisements) &&
      input.node.name === last.node.name &&
      JSON.stringify(input.node.labels) === JSON.stringify(last.node.labels) &&
      (input.unhealthy ?? NONE_UNHEALTHY) === (last.unhealthy ?? NONE_UNHEALTHY);
    if (!policySame || !this.result) return this.full(input);
    const affected = new Set<string>();
    if (s.services !== last.snapshot.services) {
      for (const [k, v] of s.services) if (last.snapshot.services.get(k) !== v) affected.add(k);
      for (const k of last.snapshot.services.keys()) if (!s.services.has(k)) affected.add(k);
    }
    if (input.ingress !== last.ingress) {
      for (const [k, v] of input.ingress) {
        const old = last.ingress.get(k);
        if (old === undefined || !sameList(old, v)) affected.add(k);
      }
      for (const k of last.ingress.keys()) if (!input.ingress.has(k)) affected.add(k);
    }
    if (s.endpointSlices !== last.snapshot.endpointSlices) {
      const touch = (key: string, slice: IntentSnapshot['endpointSlices'] extends ReadonlyMap<string, infer V> ? V | undefined : never) => {
        const old = this.sliceSvc.get(key);
        if (old !== undefined) {
          affected.add(old);
          this.svcSlices.get(old)?.delete(key);
          this.sliceSvc.delete(key);
        }
        const svc = slice && slice.addressType !== 'FQDN' ? sliceService(slice) : undefined;
        if (svc !== undefined) {
          affected.add(svc);
          this.sliceSvc.set(key, svc);
          (this.svcSlices.get(svc) ?? this.svcSlices.set(svc, new Set()).get(svc)!).add(key);
        }
      };
      for (const [k, v] of s.endpointSlices) if (last.snapshot.endpointSlices.get(k) !== v) touch(k, v);
      for (const k of last.snapshot.endpointSlices.keys()) if (!s.endpointSlices.has(k)) touch(k, undefined);
    }
    this.last = input;
    if (affected.size === 0) return { ...this.result, changed: new Set() };
    if (affected.size > 64 && affected.size * 4 > s.services.size) return this.full(input); // a bulk change: one pass is cheaper
    const unhealthy = input.unhealthy ?? NONE_UNHEALTHY;
    // The affected services' backends, from their slices.
    for (const svc of affected) {
      const e = { local: new Set<string>(), all: new Set<string>() };
      for (const key of this.svcSlices.get(svc) ?? []) {
        const slice = s.endpointSlices.get(key);
        if (!slice) continue;
        for (const ep of slice.endpoints) {
          if (!endpointReady(ep)) continue;
          for (const a of ep.addresses) {
            if (unhealthy.size > 0 && unhealthy.has(healthKey(svc, a))) continue;
            e.all.add(a);
            if (ep.nodeName === input.node.name) e.local.add(a);
          }
        }
      }
      this.backends.set(svc, e);
    }
    // Their IPs before and after, and each such IP's selection rebuilt from the services selecting it.
    const ips = new Set<string>();
    for (const svc of affected) for (const ip of this.svcIps.get(svc) ?? []) ips.add(ip);
    /** ip → the affected services that select it now. */
    const now = new Map<string, Set<string>>();
    for (const svc of affected) {
      const mine = new Set<string>();
      const obj = s.services.get(svc);
      if (obj) for (const pair of this.pairs) for (const [ip] of memoAdvertisedIps(pair.advert, obj, input.ingress.get(svc) ?? [])) if (fam(ip) === pair.ipFamily) mine.add(ip);
      for (const ip of mine) {
        ips.add(ip);
        (now.get(ip) ?? now.set(ip, new Set()).get(ip)!).add(svc);
      }
      if (mine.size > 0) this.svcIps.set(svc, mine);
      else this.svcIps.delete(svc);
    }
    let attributesTouched = false;
    const changed = new Set<string>();
    for (const ip of ips) {
      const before = this.selected.get(ip);
      if (before && before.attributes.size > 0) attributesTouched = true;
      const candidates = new Set([...(before?.services ?? []), ...(now.get(ip) ?? [])]);
      const sel = newSelection();
      for (const svc of candidates) {
        const obj = s.services.get(svc);
        if (!obj) continue;
        for (const pair of this.pairs) {
          if (fam(ip) !== pair.ipFamily) continue;
          const attrs = memoAdvertisedIps(pair.advert, obj, input.ingress.get(svc) ?? []).get(ip);
          if (attrs === undefined) continue;
          sel.services.add(svc);
          sel.peers.add(pair.peerId);
          addSelectionAttributes(sel, pair.peerId, attrs);
        }
      }
      const prefix = `${ip}/${fam(ip) === 'IPv4' ? 32 : 128}`;
      const oldRow = this.routesByIp.get(ip);
      this.routesByIp.delete(ip);
      this.withheld.delete(ip);
      if (sel.services.size === 0) {
        this.selected.delete(ip);
      } else {
        this.selected.set(ip, sel);
        if (sel.attributes.size > 0) attributesTouched = true;
        const r = evaluateIp(ip, sel, s.services, this.backends);
        if (isRow(r)) this.routesByIp.set(ip, r);
        else this.withheld.set(ip, r);
      }
      if (oldRow !== undefined || this.routesByIp.has(ip)) changed.add(prefix);
    }
    const routes = this.result.routes as Map<string, BgpRouteRow>;
    for (const prefix of changed) {
      const ip = prefix.slice(0, prefix.lastIndexOf('/'));
      const r = this.routesByIp.get(ip);
      if (r) routes.set(prefix, r);
      else routes.delete(prefix);
    }
    this.result = {
      routes,
      withheld: [...this.withheld.values()].sort(byIp),
      warnings: this.result.warnings,
      attributes: attributesTouched ? attributeGroups(this.selected) : this.result.attributes,
    };
    return { ...this.result, changed };
  }

  private full(input: BgpDesiredInput): BgpDesiredDelta {
    const warnings: BgpPolicyWarning[] = [];
    this.pairs = policyPairs(input, warnings);
    this.selected = new Map();
    this.svcIps = new Map();
    for (const [svcKey, svc] of input.snapshot.services) {
      for (const pair of this.pairs) {
        for (const [ip, attrs] of memoAdvertisedIps(pair.advert, svc, input.ingress.get(svcKey) ?? [])) {
          if (fam(ip) !== pair.ipFamily) continue;
          let e = this.selected.get(ip);
          if (!e) this.selected.set(ip, (e = newSelection()));
          e.services.add(svcKey);
          e.peers.add(pair.peerId);
          addSelectionAttributes(e, pair.peerId, attrs);
          (this.svcIps.get(svcKey) ?? this.svcIps.set(svcKey, new Set()).get(svcKey)!).add(ip);
        }
      }
    }
    this.sliceSvc = new Map();
    this.svcSlices = new Map();
    for (const [key, slice] of input.snapshot.endpointSlices) {
      const svc = slice.addressType !== 'FQDN' ? sliceService(slice) : undefined;
      if (svc === undefined) continue;
      this.sliceSvc.set(key, svc);
      (this.svcSlices.get(svc) ?? this.svcSlices.set(svc, new Set()).get(svc)!).add(key);
    }
    this.backends = readyBackends(input.snapshot, input.node.name, input.unhealthy ?? NONE_UNHEALTHY);
    const routes = new Map<string, BgpRouteRow>();
    this.routesByIp = new Map();
    this.withheld = new Map();
    for (const [ip, sel] of [...this.selected].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const r = evaluateIp(ip, sel, input.snapshot.services, this.backends);
      if (isRow(r)) {
        routes.set(r.prefix, r);
        this.routesByIp.set(ip, r);
      } else this.withheld.set(ip, r);
    }
    this.last = input;
    this.result = { routes, withheld: [...this.withheld.values()], warnings, attributes: attributeGroups(this.selected) };
    return this.result;
  }
}
