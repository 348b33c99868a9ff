/**
 * IntentSnapshot: the immutable result of a successful load, one map per
 * kind keyed by `namespace/name` (Services) or `name` (cluster-scoped kinds).
 * Objects are deep-frozen and keep their `source` for later messages.
 */
import { HeraldError } from '../core/errors.js';
import { quote } from './quote.js';
import type { SourceRef } from './diagnostics.js';
import { keyOf, type IntentKind, type IntentObject, type Sourced } from './kinds.js';
import type { NodeManifest } from './node.js';
import type { L2PolicyManifest } from './policy.js';
import type { IPPoolManifest } from './pool.js';
import type { ServiceManifest } from './service.js';
import type { EndpointSliceManifest } from './endpoint-slice.js';
import type { CiliumClusterwideNetworkPolicyManifest, CiliumNetworkPolicyManifest } from './network-policy.js';
import type { CidrGroupManifest } from './cidr-group.js';
import type { K8sNetworkPolicyManifest } from './k8s-network-policy.js';
import type { BgpAdvertisementManifest, BgpClusterConfigManifest, BgpNodeConfigOverrideManifest, BgpPeerConfigManifest } from './bgp.js';

export interface IntentSnapshot {
  readonly services: ReadonlyMap<string, Sourced<ServiceManifest>>;
  readonly pools: ReadonlyMap<string, Sourced<IPPoolManifest>>;
  readonly policies: ReadonlyMap<string, Sourced<L2PolicyManifest>>;
  readonly nodes: ReadonlyMap<string, Sourced<NodeManifest>>;
  /** EndpointSlices by `namespace/name`. */
  readonly endpointSlices: ReadonlyMap<string, Sourced<EndpointSliceManifest>>;
  readonly bgpClusterConfigs: ReadonlyMap<string, Sourced<BgpClusterConfigManifest>>;
  readonly bgpPeerConfigs: ReadonlyMap<string, Sourced<BgpPeerConfigManifest>>;
  readonly bgpAdvertisements: ReadonlyMap<string, Sourced<BgpAdvertisementManifest>>;
  /** By node name. */
  readonly bgpNodeOverrides: ReadonlyMap<string, Sourced<BgpNodeConfigOverrideManifest>>;
  /** CiliumNetworkPolicy by `namespace/name`. */
  readonly networkPolicies: ReadonlyMap<string, Sourced<CiliumNetworkPolicyManifest>>;
  readonly clusterwideNetworkPolicies: ReadonlyMap<string, Sourced<CiliumClusterwideNetworkPolicyManifest>>;
  /** Kubernetes NetworkPolicy by `namespace/name`. */
  readonly k8sNetworkPolicies: ReadonlyMap<string, Sourced<K8sNetworkPolicyManifest>>;
  /** CiliumCIDRGroup by name (what policies' cidrGroupRef / cidrGroupSelector name). */
  readonly cidrGroups: ReadonlyMap<string, Sourced<CidrGroupManifest>>;
}

/** A ReadonlyMap with no way to mutate it, even by a cast (a frozen `Map` still has `set`). */
class FrozenMap<K, V> implements ReadonlyMap<K, V> {
  readonly #map: Map<K, V>;
  constructor(entries: Iterable<readonly [K, V]>) {
    this.#map = new Map(entries);
    Object.freeze(this);
  }
  get size(): number {
    return this.#map.size;
  }
  get(key: K): V | undefined {
    return this.#map.get(key);
  }
  has(key: K): boolean {
    return this.#map.has(key);
  }
  forEach(fn: (value: V, key: K, map: ReadonlyMap<K, V>) => void, thisArg?: unknown): void {
    this.#map.forEach((v, k) => fn.call(thisArg, v, k, this));
  }
  entries(): MapIterator<[K, V]> {
    return this.#map.entries();
  }
  keys(): MapIterator<K> {
    return this.#map.keys();
  }
  values(): MapIterator<V> {
    return this.#map.values();
  }
  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.#map[Symbol.iterator]();
  }
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** "a.yaml document 2, item 1 (line 7)": a place, for use inside a message. */
export function describePlace(src: SourceRef): string {
  let out = src.file;
  if (src.document !== undefined) out += ` document ${src.document}`;
  if (src.item !== undefined) out += `, item ${src.item}`;
  if (src.line !== undefined) out += ` (line ${src.line})`;
  return out;
}

/**
 * Builds a snapshot from valid objects. Throws HERALD_BAD_MANIFEST on a
 * duplicate kind+key (the loaders report those as ManifestErrors instead and
 * only call this once there are none).
 */
export function buildSnapshot(objects: Iterable<IntentObject>): IntentSnapshot {
  const services = new Map<string, Sourced<ServiceManifest>>();
  const pools = new Map<string, Sourced<IPPoolManifest>>();
  const policies = new Map<string, Sourced<L2PolicyManifest>>();
  const nodes = new Map<string, Sourced<NodeManifest>>();
  const endpointSlices = new Map<string, Sourced<EndpointSliceManifest>>();
  const bgpClusterConfigs = new Map<string, Sourced<BgpClusterConfigManifest>>();
  const bgpPeerConfigs = new Map<string, Sourced<BgpPeerConfigManifest>>();
  const bgpAdvertisements = new Map<string, Sourced<BgpAdvertisementManifest>>();
  const bgpNodeOverrides = new Map<string, Sourced<BgpNodeConfigOverrideManifest>>();
  const networkPolicies = new Map<string, Sourced<CiliumNetworkPolicyManifest>>();
  const clusterwideNetworkPolicies = new Map<string, Sourced<CiliumClusterwideNetworkPolicyManifest>>();
  const k8sNetworkPolicies = new Map<string, Sourced<K8sNetworkPolicyManifest>>();
  const cidrGroups = new Map<string, Sourced<CidrGroupManifest>>();
  const add = <T extends IntentObject>(map: Map<string, T>, obj: T): void => {
    const key = keyOf(obj);
    const first = map.get(key);
    if (first) {
      throw new HeraldError(
        'HERALD_BAD_MANIFEST',
        `duplicate ${obj.kind} ${quote(key)}: in ${describePlace(first.source)} and ${describePlace(obj.source)}`,
      );
    }
    map.set(key, deepFreeze(obj));
  };
  for (const obj of objects) {
    switch (obj.kind) {
      case 'Service':
        add(services, obj);
        break;
      case 'CiliumLoadBalancerIPPool':
        add(pools, obj);
        break;
      case 'CiliumL2AnnouncementPolicy':
        add(policies, obj);
        break;
      case 'Node':
        add(nodes, obj);
        break;
      case 'EndpointSlice':
        add(endpointSlices, obj);
        break;
      case 'CiliumBGPClusterConfig':
        add(bgpClusterConfigs, obj);
        break;
      case 'CiliumBGPPeerConfig':
        add(bgpPeerConfigs, obj);
        break;
      case 'CiliumBGPAdvertisement':
        add(bgpAdvertisements, obj);
        break;
      case 'CiliumBGPNodeConfigOverride':
        add(bgpNodeOverrides, obj);
        break;
      case 'CiliumNetworkPolicy':
        add(networkPolicies, obj);
        break;
      case 'CiliumClusterwideNetworkPolicy':
        add(clusterwideNetworkPolicies, obj);
        break;
      case 'NetworkPolicy':
        add(k8sNetworkPolicies, obj);
        break;
      case 'CiliumCIDRGroup':
        add(cidrGroups, obj);
        break;
    }
  }
  return Object.freeze({
    services: new FrozenMap(services),
    pools: new FrozenMap(pools),
    policies: new FrozenMap(policies),
    nodes: new FrozenMap(nodes),
    endpointSlices: new FrozenMap(endpointSlices),
    bgpClusterConfigs: new FrozenMap(bgpClusterConfigs),
    bgpPeerConfigs: new FrozenMap(bgpPeerConfigs),
    bgpAdvertisements: new FrozenMap(bgpAdvertisements),
    bgpNodeOverrides: new FrozenMap(bgpNodeOverrides),
    networkPolicies: new FrozenMap(networkPolicies),
    clusterwideNetworkPolicies: new FrozenMap(clusterwideNetworkPolicies),
    k8sNetworkPolicies: new FrozenMap(k8sNetworkPolicies),
    cidrGroups: new FrozenMap(cidrGroups),
  });
}

export const emptySnapshot: IntentSnapshot = buildSnapshot([]);

/** The snapshot map each kind's objects are kept in (what buildSnapshot's switch does). */
export const SNAPSHOT_TABLE_OF: Readonly<Record<IntentKind, keyof IntentSnapshot>> = Object.freeze({
  Service: 'services',
  CiliumLoadBalancerIPPool: 'pools',
  CiliumL2AnnouncementPolicy: 'policies',
  Node: 'nodes',
  EndpointSlice: 'endpointSlices',
  CiliumBGPClusterConfig: 'bgpClusterConfigs',
  CiliumBGPPeerConfig: 'bgpPeerConfigs',
  CiliumBGPAdvertisement: 'bgpAdvertisements',
  CiliumBGPNodeConfigOverride: 'bgpNodeOverrides',
  CiliumNetworkPolicy: 'networkPolicies',
  CiliumClusterwideNetworkPolicy: 'clusterwideNetworkPolicies',
  NetworkPolicy: 'k8sNetworkPolicies',
  CiliumCIDRGroup: 'cidrGroups',
});

/** One kind's map for snapshotOf(): entries in the order given, each object deep-frozen (already frozen ones cost nothing). */
export function frozenTable<T extends IntentObject>(entries: Iterable<readonly [string, T]>): ReadonlyMap<string, T> {
  const frozen: [string, T][] = [];
  for (const [k, v] of entries) frozen.push([k, deepFreeze(v)]);
  return new FrozenMap(frozen);
}

/**
 * A snapshot from one map per kind, for a source that keeps its tables up to
 * date itself (Kubernetes informers): a map unchanged since the last snapshot
 * is passed again as is (no copy), so a change costs the kinds it touched.
 * The maps must come from frozenTable() (or an earlier snapshot); each key
 * must be keyOf() its object. Missing kinds are empty.
 */
export function snapshotOf(tables: { readonly [K in keyof IntentSnapshot]?: IntentSnapshot[K] }): IntentSnapshot {
  const out = {} as Record<keyof IntentSnapshot, ReadonlyMap<string, IntentObject>>;
  for (const field of Object.keys(emptySnapshot) as (keyof IntentSnapshot)[]) {
    const t = tables[field];
    if (t !== undefined && !(t instanceof FrozenMap)) throw new HeraldError('HERALD_INTERNAL', `snapshot table ${field} is not frozen`);
    out[field] = (t ?? emptySnapshot[field]) as ReadonlyMap<string, IntentObject>;
  }
  return Object.freeze(out) as unknown as IntentSnapshot;
}
