/**
 * discovery.k8s.io/v1 EndpointSlice: the backends of a Service and their
 * readiness, which gates BGP advertisement. Read leniently like the other
 * core kinds (fields herald does not use are accepted and dropped).
 */
import { z } from 'zod';
import { quote } from './quote.js';
import { parseIp } from '../core/addr.js';
import { checkedString } from './fields.js';
import { namespacedMetadata } from './metadata.js';
import { checkDns1123Label, checkDns1123Subdomain } from './names.js';

/** The label that ties a slice to its Service (same namespace). */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

const endpointConditionsSchema = z.object({
  ready: z.boolean().optional(),
  serving: z.boolean().optional(),
  terminating: z.boolean().optional(),
});

const endpointSchema = z.object({
  addresses: z.array(z.string()).min(1).max(100),
  conditions: endpointConditionsSchema.prefault({}),
  hostname: checkedString((s) => checkDns1123Label(s, 'hostname')).optional(),
  nodeName: checkedString((s) => checkDns1123Subdomain(s)).optional(),
  zone: z.string().optional(),
});

const endpointPortSchema = z.object({
  name: z.string().optional(),
  protocol: z.enum(['TCP', 'UDP', 'SCTP']).default('TCP'),
  port: z.number().int().min(1).max(65535).optional(),
  appProtocol: z.string().optional(),
});

export const endpointSliceSchema = z
  .object({
    apiVersion: z.literal('discovery.k8s.io/v1'),
    kind: z.literal('EndpointSlice'),
    metadata: namespacedMetadata((s) => checkDns1123Subdomain(s)),
    addressType: z.enum(['IPv4', 'IPv6', 'FQDN']),
    endpoints: z.array(endpointSchema).max(1000).default([]),
    ports: z.array(endpointPortSchema).max(100).default([]),
  })
  .check((ctx) => {
    const { addressType, endpoints } = ctx.value;
    if (addressType === 'FQDN') return; // no IPs to route; kept so the slice is not an error
    endpoints.forEach((ep, i) =>
      ep.addresses.forEach((a, j) => {
        const ip = parseIp(a);
        const path = ['endpoints', i, 'addresses', j];
        if (!ip) ctx.issues.push({ code: 'custom', message: `invalid IP address ${quote(a)}`, input: a, path });
        else if (ip.family !== addressType) {
          ctx.issues.push({ code: 'custom', message: `${quote(a)} is not an ${addressType} address (addressType ${addressType})`, input: a, path });
        }
      }),
    );
  })
  .transform((slice) => ({
    ...slice,
    // Canonical address text, so later lookups compare equal.
    endpoints: slice.endpoints.map((ep) => ({
      ...ep,
      addresses: slice.addressType === 'FQDN' ? ep.addresses : ep.addresses.map((a) => parseIp(a)?.text ?? a),
    })),
  }));

export type EndpointSliceManifest = z.output<typeof endpointSliceSchema>;
export type Endpoint = EndpointSliceManifest['endpoints'][number];

/**
 * Kubernetes' reading of the conditions: nil `ready` means ready, nil
 * `serving` means the value of ready, nil `terminating` means not terminating.
 * Herald routes to an endpoint only when it is ready and not terminating.
 */
export function endpointReady(ep: Endpoint): boolean {
  return (ep.conditions.ready ?? true) && !(ep.conditions.terminating ?? false);
}

/** The Service ("namespace/name") a slice belongs to, or undefined without the label. */
export function sliceService(slice: EndpointSliceManifest): string | undefined {
  const name = slice.metadata.labels[SERVICE_NAME_LABEL];
  return name === undefined || name === '' ? undefined : `${slice.metadata.namespace}/${name}`;
}

/** Non-fatal remarks about a valid slice. */
export function endpointSliceWarnings(slice: EndpointSliceManifest): { path: string; message: string; segments?: string[] }[] {
  if (sliceService(slice) === undefined) {
    return [{
      path: `metadata.labels[${SERVICE_NAME_LABEL}]`,
      segments: ['metadata', 'labels', SERVICE_NAME_LABEL],
      message: `no ${SERVICE_NAME_LABEL} label: this slice backs no Service, so it gates nothing`,
    }];
  }
  return [];
}
