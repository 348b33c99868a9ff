/**
 * Kubernetes NetworkPolicy (networking.k8s.io/v1), the part that maps
 * cleanly onto service traffic policy: `podSelector` (matched, like a
 * CiliumNetworkPolicy's endpointSelector, against the Service's labels),
 * `policyTypes` including Ingress, `ingress[].from[].ipBlock` (cidr +
 * except) and `ingress[].ports` (protocol, port — a number or a name resolved
 * per selected service against its ports' targetPort names —, endPort).
 * podSelector / namespaceSelector peers and egress are warnings.
 */
import { z } from 'zod';
import { parseCidr } from '../core/addr.js';
import { formatPath } from './diagnostics.js';
import { namespacedMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';
import { cidrWithin } from './network-policy.js';
import { quote } from './quote.js';
import { SELECTOR_OPERATORS } from './selector.js';
import { checkPortName } from './service.js';

const coded = (code: string) => ({ heraldCode: code });

const cidrText = z.string().transform((s, ctx) => {
  const r = parseCidr(s);
  if (r.ok) return r.cidr.text;
  ctx.issues.push({ code: 'custom', message: `invalid CIDR ${quote(s)}: ${r.reason}`, input: s, params: coded('HERALD_POLICY_INVALID_CIDR') });
  return z.NEVER;
});

const ipBlock = z
  .strictObject({ cidr: cidrText, except: z.array(cidrText).default([]) })
  .check((ctx) => {
    ctx.value.except.forEach((e, i) => {
      if (!cidrWithin(e, ctx.value.cidr)) {
        ctx.issues.push({ code: 'custom', message: `except ${quote(e)} is not inside cidr ${quote(ctx.value.cidr)}`, input: e, path: ['except', i], params: coded('HERALD_POLICY_EXCEPT_OUTSIDE_CIDR') });
      }
    });
  });

const port = z
  .looseObject({ protocol: z.unknown().optional(), port: z.union([z.number(), z.string()]).optional(), endPort: z.number().optional() })
  .transform((v, ctx) => {
    const protocol = v.protocol ?? 'TCP';
    if (protocol !== 'TCP' && protocol !== 'UDP' && protocol !== 'SCTP') {
      ctx.issues.push({ code: 'custom', message: `unknown protocol ${typeof protocol === 'string' ? quote(protocol) : String(protocol)}: expected TCP, UDP or SCTP`, input: protocol, path: ['protocol'], params: coded('HERALD_POLICY_UNKNOWN_PROTOCOL') });
      return z.NEVER;
    }
    if (typeof v.port === 'string' && !/^[0-9]+$/.test(v.port)) {
      // A named port: resolved per selected service against its ports' targetPort names.
      const problem = checkPortName(v.port) ?? (v.endPort !== undefined ? 'endPort needs a numeric port' : undefined);
      if (problem !== undefined) {
        ctx.issues.push({ code: 'custom', message: problem, input: v.port, path: [problem.startsWith('endPort') ? 'endPort' : 'port'], params: coded('HERALD_POLICY_NAMED_PORT') });
        return z.NEVER;
      }
      return { protocol: protocol as 'TCP' | 'UDP' | 'SCTP', name: v.port };
    }
    if (typeof v.port === 'string') v.port = Number(v.port);
    const p = v.port;
    if (p !== undefined && (!Number.isInteger(p) || p < 1 || p > 65535)) {
      ctx.issues.push({ code: 'custom', message: `port ${p} is out of range 1-65535`, input: p, path: ['port'], params: coded('HERALD_POLICY_PORT_RANGE') });
      return z.NEVER;
    }
    if (v.endPort !== undefined) {
      const e = v.endPort;
      const problem = p === undefined ? 'endPort needs a port' : !Number.isInteger(e) || e > 65535 ? `endPort ${e} is out of range 1-65535` : e < p ? `endPort ${e} is below port ${p}` : undefined;
      if (problem) {
        ctx.issues.push({ code: 'custom', message: problem, input: e, path: ['endPort'], params: coded('HERALD_POLICY_PORT_RANGE') });
        return z.NEVER;
      }
    }
    return { protocol: protocol as 'TCP' | 'UDP' | 'SCTP', ...(p !== undefined ? { port: p } : {}), ...(v.endPort !== undefined ? { endPort: v.endPort } : {}) } as {
      protocol: 'TCP' | 'UDP' | 'SCTP';
      port?: number;
      endPort?: number;
      /** A named port (no `port` then). */
      name?: string;
    };
  });

const peer = z.looseObject({ ipBlock: ipBlock.optional() });
const ingressRule = z.looseObject({ from: z.array(peer).optional(), ports: z.array(port).optional() });

const podSelector = z.strictObject({
  matchLabels: z.record(z.string(), z.string()).default({}),
  matchExpressions: z.array(z.strictObject({ key: z.string(), operator: z.enum(SELECTOR_OPERATORS), values: z.array(z.string()).optional() })).default([]),
});

export const k8sNetworkPolicySchema = z
  .object({
    apiVersion: z.literal('networking.k8s.io/v1'),
    kind: z.literal('NetworkPolicy'),
    metadata: namespacedMetadata((s) => checkDns1123Subdomain(s)),
    spec: z.looseObject({
      podSelector,
      policyTypes: z.array(z.enum(['Ingress', 'Egress'])).optional(),
      ingress: z.array(ingressRule).optional(),
    }),
    status: z.unknown().optional(),
  })
  .transform(({ status: _s, ...p }) => p);

export type K8sNetworkPolicyManifest = z.output<typeof k8sNetworkPolicySchema>;

/** Whether the policy governs ingress (policyTypes absent: Ingress, plus Egress when egress rules exist). */
export function governsIngress(p: K8sNetworkPolicyManifest): boolean {
  return p.spec.policyTypes === undefined || p.spec.policyTypes.includes('Ingress');
}

export function k8sNetworkPolicyWarnings(p: K8sNetworkPolicyManifest): { path: string; message: string }[] {
  const out: { path: string; message: string }[] = [];
  const spec = p.spec as Record<string, unknown>;
  for (const k of Object.keys(spec)) {
    if (!['podSelector', 'policyTypes', 'ingress'].includes(k)) out.push({ path: formatPath(['spec', k]), message: 'ignored by herald (it polices traffic to service IPs: ingress only)' });
  }
  if (!governsIngress(p)) out.push({ path: 'spec.policyTypes', message: 'no Ingress: this policy has no effect in herald' });
  (p.spec.ingress ?? []).forEach((rule, i) => {
    for (const k of Object.keys(rule)) if (k !== 'from' && k !== 'ports') out.push({ path: formatPath(['spec', 'ingress', i, k]), message: 'ignored by herald (unknown field)' });
    (rule.from ?? []).forEach((peerSpec, j) => {
      for (const k of Object.keys(peerSpec)) {
        if (k !== 'ipBlock') out.push({ path: formatPath(['spec', 'ingress', i, 'from', j, k]), message: 'ignored by herald (only ipBlock names sources of service traffic): this rule allows less than written' });
      }
    });
  });
  return out;
}
