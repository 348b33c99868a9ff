/**
 * core/v1 Service: the fields LB-IPAM and L2 announcement read, validated as
 * the API server would (ports, families, names) plus the LB-IPAM annotations.
 */
import { z } from 'zod';
import { quote } from './quote.js';
import { checkLbIpamAnnotations } from './annotations.js';
import { parseHealthCheck } from './health-check.js';
import { annotationMap, checkedString, condition, describeValue, ipAddress, labelMap, optionalIpAddress, portNumber } from './fields.js';
import { namespacedMetadata } from './metadata.js';
import { checkDns1035Label, checkDns1123Label } from './names.js';
import type { Labels } from './selector.js';
import { sourceRangeErrors } from './source-ranges.js';

const q = quote;

/** IANA_SVC_NAME, the string form of a targetPort (also a policy's named port). */
export function checkPortName(s: string): string | undefined {
  const wellFormed = /^[a-z0-9]+(-[a-z0-9]+)*$/.test(s) && /[a-z]/.test(s);
  if (s.length > 15 || !wellFormed) {
    return `invalid port name ${q(s)}: must be at most 15 lowercase letters, digits and single '-', with at least one letter`;
  }
  return undefined;
}

/** IntOrString: a port number or a named container port. */
const targetPort = z.unknown().transform((v, ctx): number | string => {
  if (typeof v === 'string') {
    // Kubernetes also accepts a number written as a string.
    if (/^[0-9]+$/.test(v)) return targetPortNumber(Number(v), ctx) ?? z.NEVER;
    const message = checkPortName(v);
    if (message === undefined) return v;
    ctx.issues.push({ code: 'custom', message, input: v });
    return z.NEVER;
  }
  if (typeof v === 'number') return targetPortNumber(v, ctx) ?? z.NEVER;
  ctx.issues.push({ code: 'custom', message: `expected a port number or name, got ${describeValue(v)}`, input: v });
  return z.NEVER;
});

function targetPortNumber(n: number, ctx: z.core.$RefinementCtx): number | undefined {
  if (Number.isInteger(n) && n >= 1 && n <= 65535) return n;
  ctx.issues.push({ code: 'custom', message: `must be between 1 and 65535, got ${n}`, input: n });
  return undefined;
}

export const servicePortSchema = z.object({
  name: checkedString((s) => checkDns1123Label(s, 'port name')).optional(),
  protocol: z.enum(['TCP', 'UDP', 'SCTP']).default('TCP'),
  port: portNumber,
  targetPort: targetPort.optional(),
  nodePort: portNumber.optional(),
});

/** Kubernetes' rules across ports: (port, protocol) and names unique, names required beyond one port. */
const servicePorts = z.array(servicePortSchema).check((ctx) => {
  const ports = ctx.value;
  const issue = (i: number, field: string, message: string, input: unknown): void => {
    ctx.issues.push({ code: 'custom', message, input, path: [i, field] });
  };
  const seenPort = new Map<string, number>();
  const seenName = new Map<string, number>();
  ports.forEach((p, i) => {
    const id = `${p.port}/${p.protocol}`;
    const first = seenPort.get(id);
    if (first !== undefined) issue(i, 'port', `duplicate port ${id} (also ports[${first}])`, p.port);
    else seenPort.set(id, i);
    if (p.name === undefined) {
      if (ports.length > 1) issue(i, 'name', 'required when a Service has more than one port', undefined);
      return;
    }
    const firstName = seenName.get(p.name);
    if (firstName !== undefined) issue(i, 'name', `duplicate port name ${q(p.name)} (also ports[${firstName}])`, p.name);
    else seenName.set(p.name, i);
  });
});

export const serviceSpecSchema = z
  .object({
    type: z.enum(['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName']).default('ClusterIP'),
    loadBalancerIP: optionalIpAddress.optional(),
    externalIPs: z.array(ipAddress).default([]),
    loadBalancerClass: z.string().min(1).optional(),
    ports: servicePorts.default([]),
    externalTrafficPolicy: z.enum(['Cluster', 'Local']).default('Cluster'),
    sessionAffinity: z.enum(['None', 'ClientIP']).default('None'),
    sessionAffinityConfig: z
      .object({ clientIP: z.object({ timeoutSeconds: z.number().int().min(1).max(86400).default(10800) }).prefault({}) })
      .optional(),
    ipFamilies: z.array(z.enum(['IPv4', 'IPv6'])).max(2).default([]),
    ipFamilyPolicy: z.enum(['SingleStack', 'PreferDualStack', 'RequireDualStack']).optional(),
    selector: labelMap.default({}),
    /** Who may reach the load balancer (see source-ranges.ts). */
    loadBalancerSourceRanges: z.array(z.string()).default([]),
  })
  .check((ctx) => {
    const { ipFamilies, ipFamilyPolicy } = ctx.value;
    const [first, second] = ipFamilies;
    if (second !== undefined && first === second) {
      ctx.issues.push({ code: 'custom', message: `duplicate family ${q(second)}`, input: ipFamilies, path: ['ipFamilies', 1] });
    }
    if (ipFamilyPolicy === 'SingleStack' && ipFamilies.length > 1) {
      ctx.issues.push({ code: 'custom', message: 'SingleStack allows only one family', input: ipFamilies, path: ['ipFamilies'] });
    }
  });

const ingressSchema = z.object({
  ip: ipAddress.optional(),
  hostname: z.string().optional(),
  ipMode: z.enum(['VIP', 'Proxy']).optional(),
});

export const serviceStatusSchema = z.object({
  loadBalancer: z.object({ ingress: z.array(ingressSchema).default([]) }).prefault({}),
  conditions: z.array(condition).default([]),
});

const serviceAnnotations = annotationMap.check((ctx) => {
  for (const issue of [...checkLbIpamAnnotations(ctx.value), ...parseHealthCheck(ctx.value).issues]) {
    ctx.issues.push({ code: 'custom', message: issue.message, input: ctx.value[issue.key], path: [issue.key] });
  }
});

export const serviceSchema = z.object({
  apiVersion: z.literal('v1'),
  kind: z.literal('Service'),
  metadata: namespacedMetadata((s) => checkDns1035Label(s)).extend({
    annotations: serviceAnnotations.default({}),
  }),
  spec: serviceSpecSchema,
  status: serviceStatusSchema.prefault({}),
}).check((ctx) => {
  for (const issue of sourceRangeErrors(ctx.value)) {
    ctx.issues.push({ code: 'custom', message: issue.message, input: undefined, path: issue.path, params: { heraldCode: 'HERALD_POLICY_INVALID_CIDR' } });
  }
});

export type ServicePort = z.output<typeof servicePortSchema>;
export type ServiceSpec = z.output<typeof serviceSpecSchema>;
export type ServiceStatus = z.output<typeof serviceStatusSchema>;
export type ServiceManifest = z.output<typeof serviceSchema>;

/**
 * The labels a Service selector is matched against: the Service's labels
 * plus the synthetic `io.kubernetes.service.{namespace,name}` that Cilium adds.
 */
export function serviceSelectorLabels(service: {
  readonly metadata: { readonly name: string; readonly namespace: string; readonly labels: Labels };
}): Labels {
  return {
    ...service.metadata.labels,
    'io.kubernetes.service.namespace': service.metadata.namespace,
    'io.kubernetes.service.name': service.metadata.name,
  };
}
