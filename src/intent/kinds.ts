/** The kinds herald reads, their API versions, scope and schema. */
import type { z } from 'zod';
import { formatPath, type SourceRef } from './diagnostics.js';
import { nodeSchema, type NodeManifest } from './node.js';
import { l2PolicySchema, l2PolicyWarnings, POLICY_API_VERSIONS, type L2PolicyManifest } from './policy.js';
import { poolSchema, poolWarnings, POOL_API_VERSIONS, type IPPoolManifest } from './pool.js';
import { serviceSchema, type ServiceManifest } from './service.js';
import { ignoredCiliumAnnotations } from './annotations.js';
import {
  NETWORK_POLICY_API_VERSIONS,
  ciliumClusterwideNetworkPolicySchema,
  ciliumNetworkPolicySchema,
  networkPolicyWarnings,
  type CiliumClusterwideNetworkPolicyManifest,
  type CiliumNetworkPolicyManifest,
} from './network-policy.js';
import { serviceSourceRangeWarnings } from './source-ranges.js';
import { CIDR_GROUP_API_VERSIONS, cidrGroupSchema, type CidrGroupManifest } from './cidr-group.js';
import { k8sNetworkPolicySchema, k8sNetworkPolicyWarnings, type K8sNetworkPolicyManifest } from './k8s-network-policy.js';
import { endpointSliceSchema, endpointSliceWarnings, type EndpointSliceManifest } from './endpoint-slice.js';
import {
  BGP_API_VERSIONS,
  bgpAdvertisementSchema,
  bgpClusterConfigSchema,
  bgpNodeConfigOverrideSchema,
  bgpPeerConfigSchema,
  bgpWarnings,
  type BgpAdvertisementManifest,
  type BgpClusterConfigManifest,
  type BgpNodeConfigOverrideManifest,
  type BgpPeerConfigManifest,
} from './bgp.js';

/** A manifest object plus where it was read from (for later messages). */
export type Sourced<T> = T & { readonly source: SourceRef };

/** A parsed manifest object of one of the supported kinds. */
export type IntentManifest =
  | ServiceManifest
  | IPPoolManifest
  | L2PolicyManifest
  | NodeManifest
  | EndpointSliceManifest
  | BgpClusterConfigManifest
  | BgpPeerConfigManifest
  | BgpAdvertisementManifest
  | BgpNodeConfigOverrideManifest
  | CiliumNetworkPolicyManifest
  | CiliumClusterwideNetworkPolicyManifest
  | K8sNetworkPolicyManifest
  | CidrGroupManifest;

export type IntentObject =
  | Sourced<ServiceManifest>
  | Sourced<IPPoolManifest>
  | Sourced<L2PolicyManifest>
  | Sourced<NodeManifest>
  | Sourced<EndpointSliceManifest>
  | Sourced<BgpClusterConfigManifest>
  | Sourced<BgpPeerConfigManifest>
  | Sourced<BgpAdvertisementManifest>
  | Sourced<BgpNodeConfigOverrideManifest>
  | Sourced<CiliumNetworkPolicyManifest>
  | Sourced<CiliumClusterwideNetworkPolicyManifest>
  | Sourced<K8sNetworkPolicyManifest>
  | Sourced<CidrGroupManifest>;

export type IntentKind = IntentManifest['kind'];

interface KindInfo {
  readonly apiVersions: readonly string[];
  readonly namespaced: boolean;
  readonly schema: z.ZodType<IntentManifest>;
}

export const KINDS: Readonly<Record<IntentKind, KindInfo>> = {
  Service: { apiVersions: ['v1'], namespaced: true, schema: serviceSchema },
  CiliumLoadBalancerIPPool: { apiVersions: POOL_API_VERSIONS, namespaced: false, schema: poolSchema },
  CiliumL2AnnouncementPolicy: { apiVersions: POLICY_API_VERSIONS, namespaced: false, schema: l2PolicySchema },
  Node: { apiVersions: ['v1'], namespaced: false, schema: nodeSchema },
  EndpointSlice: { apiVersions: ['discovery.k8s.io/v1'], namespaced: true, schema: endpointSliceSchema },
  CiliumBGPClusterConfig: { apiVersions: BGP_API_VERSIONS, namespaced: false, schema: bgpClusterConfigSchema },
  CiliumBGPPeerConfig: { apiVersions: BGP_API_VERSIONS, namespaced: false, schema: bgpPeerConfigSchema },
  CiliumBGPAdvertisement: { apiVersions: BGP_API_VERSIONS, namespaced: false, schema: bgpAdvertisementSchema },
  CiliumBGPNodeConfigOverride: { apiVersions: BGP_API_VERSIONS, namespaced: false, schema: bgpNodeConfigOverrideSchema },
  CiliumNetworkPolicy: { apiVersions: NETWORK_POLICY_API_VERSIONS, namespaced: true, schema: ciliumNetworkPolicySchema },
  CiliumClusterwideNetworkPolicy: { apiVersions: NETWORK_POLICY_API_VERSIONS, namespaced: false, schema: ciliumClusterwideNetworkPolicySchema },
  NetworkPolicy: { apiVersions: ['networking.k8s.io/v1'], namespaced: true, schema: k8sNetworkPolicySchema },
  CiliumCIDRGroup: { apiVersions: CIDR_GROUP_API_VERSIONS, namespaced: false, schema: cidrGroupSchema },
};

export function isIntentKind(kind: string): kind is IntentKind {
  return Object.hasOwn(KINDS, kind);
}

/** `namespace/name` for namespaced kinds, `name` for cluster-scoped ones. */
export function objectKey(kind: IntentKind, name: string, namespace: string | undefined): string {
  return KINDS[kind].namespaced ? `${namespace ?? 'default'}/${name}` : name;
}

/** The key of a parsed object (see `objectKey`). */
export function keyOf(obj: IntentManifest): string {
  return obj.kind === 'Service' || obj.kind === 'EndpointSlice' || obj.kind === 'CiliumNetworkPolicy' || obj.kind === 'NetworkPolicy'
    ? `${obj.metadata.namespace}/${obj.metadata.name}`
    : obj.metadata.name;
}

/**
 * Non-fatal remarks about a valid object: field path and message, plus the
 * path's segments when a key itself holds dots (an annotation name).
 */
export function manifestWarnings(obj: IntentManifest): { path: string; message: string; segments?: string[] }[] {
  switch (obj.kind) {
    case 'Service':
      return [
        ...ignoredCiliumAnnotations(obj.metadata.annotations).map(({ key, message }) => ({
          path: formatPath(['metadata', 'annotations', key]),
          segments: ['metadata', 'annotations', key],
          message,
        })),
        // Deprecated since Kubernetes 1.24 but still served, by Kubernetes and by Cilium's LB-IPAM.
        ...(obj.spec.loadBalancerIP !== undefined
          ? [{ path: 'spec.loadBalancerIP', message: 'deprecated: use the lbipam.cilium.io/ips annotation (still honoured)' }]
          : []),
        ...serviceSourceRangeWarnings(obj),
      ];
    case 'CiliumNetworkPolicy':
    case 'CiliumClusterwideNetworkPolicy':
      return networkPolicyWarnings(obj);
    case 'NetworkPolicy':
      return k8sNetworkPolicyWarnings(obj);
    case 'CiliumLoadBalancerIPPool':
      return poolWarnings(obj);
    case 'CiliumL2AnnouncementPolicy':
      return l2PolicyWarnings(obj);
    case 'EndpointSlice':
      return endpointSliceWarnings(obj);
    case 'CiliumBGPClusterConfig':
    case 'CiliumBGPPeerConfig':
    case 'CiliumBGPAdvertisement':
    case 'CiliumBGPNodeConfigOverride':
      return bgpWarnings(obj);
    default:
      return [];
  }
}
