/**
 * CustomResourceDefinitions for the Cilium kinds herald reads, generated
 * from the same zod schemas that validate files and stored objects, so the
 * two cannot drift (scripts/gen-crds.ts writes deploy/kubernetes/crds.yaml;
 * a test checks the file is current). For clusters without Cilium.
 *
 * The zod schema (JSON Schema, input side) is turned into a Kubernetes
 * structural schema: every node typed, no `additionalProperties: false`
 * (the API server refuses unknown fields itself under kubectl's default
 * strict field validation, and prunes them otherwise), no defaults (objects
 * are stored as written), JS regex patterns left out (the API server speaks
 * RE2; herald's validation checks them), unions of string and integer as
 * `x-kubernetes-int-or-string`, anything else it cannot type as
 * `x-kubernetes-preserve-unknown-fields`. Fields zod forbids (`not: {}`,
 * Cilium's removed `spec.cidrs`) are left out of the schema.
 */
import { z } from 'zod';
import { KINDS, type IntentKind } from './kinds.js';

type Json = Record<string, unknown>;

export const CRD_KINDS = {
  CiliumLoadBalancerIPPool: { plural: 'ciliumloadbalancerippools', singular: 'ciliumloadbalancerippool', shortNames: ['ippools', 'ippool', 'lbippool', 'lbippools'] },
  CiliumL2AnnouncementPolicy: { plural: 'ciliuml2announcementpolicies', singular: 'ciliuml2announcementpolicy', shortNames: ['l2announcement'] },
  CiliumBGPClusterConfig: { plural: 'ciliumbgpclusterconfigs', singular: 'ciliumbgpclusterconfig', shortNames: ['cbgpcluster'] },
  CiliumBGPPeerConfig: { plural: 'ciliumbgppeerconfigs', singular: 'ciliumbgppeerconfig', shortNames: [] },
  CiliumBGPAdvertisement: { plural: 'ciliumbgpadvertisements', singular: 'ciliumbgpadvertisement', shortNames: [] },
  CiliumBGPNodeConfigOverride: { plural: 'ciliumbgpnodeconfigoverrides', singular: 'ciliumbgpnodeconfigoverride', shortNames: [] },
  CiliumNetworkPolicy: { plural: 'ciliumnetworkpolicies', singular: 'ciliumnetworkpolicy', shortNames: ['cnp', 'ciliumnp'] },
  CiliumClusterwideNetworkPolicy: { plural: 'ciliumclusterwidenetworkpolicies', singular: 'ciliumclusterwidenetworkpolicy', shortNames: ['ccnp'] },
  CiliumCIDRGroup: { plural: 'ciliumcidrgroups', singular: 'ciliumcidrgroup', shortNames: ['ccg'] },
} as const satisfies Partial<Record<IntentKind, { plural: string; singular: string; shortNames: readonly string[] }>>;

export type CrdKind = keyof typeof CRD_KINDS;

const KEEP = ['description', 'enum', 'maxLength', 'minLength', 'maxItems', 'minItems', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'nullable'];
const preserve = (type?: string): Json => ({ ...(type ? { type } : {}), 'x-kubernetes-preserve-unknown-fields': true });

/** One JSON Schema node (draft 2020-12, from zod) as a structural schema node. */
export function structural(node: unknown): Json {
  if (typeof node !== 'object' || node === null) return preserve();
  const s = node as Json;
  const union = (s.anyOf ?? s.oneOf) as Json[] | undefined;
  if (union) {
    const options = union.filter((o) => o.type !== 'null');
    const types = new Set(options.map((o) => o.type));
    if (types.size === 2 && types.has('string') && (types.has('integer') || types.has('number'))) return { 'x-kubernetes-int-or-string': true };
    if (options.length === 1) return structural(options[0]);
    if (types.size === 1 && types.has('string')) {
      const values = options.flatMap((o) => (Array.isArray(o.enum) ? o.enum : o.const !== undefined ? [o.const] : [null]));
      return values.includes(null) ? { type: 'string' } : { type: 'string', enum: values };
    }
    if (types.size === 1 && types.has('object')) {
      // Alternatives of one object: every property any of them allows.
      const properties: Json = {};
      for (const o of options) Object.assign(properties, (structural(o).properties as Json | undefined) ?? {});
      return { type: 'object', properties };
    }
    return preserve(types.size === 1 ? String([...types][0]) : undefined);
  }
  if (s.allOf && Array.isArray(s.allOf) && s.allOf.length === 1) return structural({ ...(s.allOf[0] as Json), ...s, allOf: undefined });
  const out: Json = {};
  for (const k of KEEP) if (s[k] !== undefined) out[k] = s[k];
  if (s.const !== undefined) out.enum = [s.const];
  const type = s.type;
  if (type === 'object') {
    out.type = 'object';
    if (s.properties && typeof s.properties === 'object') {
      const properties: Json = {};
      for (const [name, sub] of Object.entries(s.properties as Json)) {
        if (isForbidden(sub)) continue;
        properties[name] = structural(sub);
      }
      out.properties = properties;
      const required = Array.isArray(s.required) ? (s.required as string[]).filter((r) => r in properties && !hasDefault((s.properties as Json)[r])) : [];
      if (required.length > 0) out.required = required;
    } else if (s.additionalProperties && typeof s.additionalProperties === 'object') {
      out.additionalProperties = structural(s.additionalProperties);
    } else {
      out['x-kubernetes-preserve-unknown-fields'] = true;
    }
    return out;
  }
  if (type === 'array') {
    out.type = 'array';
    out.items = s.items ? structural(s.items) : preserve();
    return out;
  }
  if (type === 'string' || type === 'integer' || type === 'number' || type === 'boolean') {
    out.type = type;
    return out;
  }
  return preserve();
}

function isForbidden(sub: unknown): boolean {
  return typeof sub === 'object' && sub !== null && 'not' in sub && Object.keys((sub as Json).not as Json).length === 0;
}

function hasDefault(sub: unknown): boolean {
  return typeof sub === 'object' && sub !== null && 'default' in sub;
}

/** The CustomResourceDefinition of one Cilium kind (every apiVersion herald reads served; the first stored). */
export function crdFor(kind: CrdKind): Json {
  const info = KINDS[kind];
  const names = CRD_KINDS[kind];
  const json = z.toJSONSchema(info.schema as z.ZodType, { io: 'input', unrepresentable: 'any' }) as Json;
  const props = (json.properties ?? {}) as Json;
  const schema: Json = {
    type: 'object',
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object' },
      spec: props.spec ? structural(props.spec) : preserve('object'),
      // Other top-level fields the schema reads (a Cilium policy's `specs`).
      ...Object.fromEntries(Object.entries(props).filter(([k, v]) => !['apiVersion', 'kind', 'metadata', 'spec', 'status'].includes(k) && !isForbidden(v)).map(([k, v]) => [k, structural(v)])),
      status: preserve('object'),
    },
    ...(Array.isArray(json.required) && json.required.includes('spec') && !hasDefault(props.spec) ? { required: ['spec'] } : {}),
  };
  const group = info.apiVersions[0]!.split('/')[0]!;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${names.plural}.${group}`, labels: { 'app.kubernetes.io/part-of': 'herald' } },
    spec: {
      group,
      scope: info.namespaced ? 'Namespaced' : 'Cluster',
      names: { kind, listKind: `${kind}List`, plural: names.plural, singular: names.singular, ...(names.shortNames.length > 0 ? { shortNames: [...names.shortNames] } : {}), categories: ['cilium'] },
      versions: info.apiVersions.map((apiVersion, i) => ({
        name: apiVersion.split('/')[1]!,
        served: true,
        storage: i === 0,
        subresources: { status: {} },
        schema: { openAPIV3Schema: schema },
      })),
    },
  };
}

export function allCrds(): Json[] {
  return (Object.keys(CRD_KINDS) as CrdKind[]).map(crdFor);
}
