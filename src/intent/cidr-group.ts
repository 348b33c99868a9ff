/**
 * CiliumCIDRGroup (cluster-scoped; cilium.io/v2alpha1, and cilium.io/v2 in
 * newer Cilium): a named list of external CIDRs that network policies refer
 * to with `fromCIDRSet: [{cidrGroupRef: NAME}]` or select by label with
 * `cidrGroupSelector`. herald reads spec.externalCIDRs; a bad CIDR is a
 * coded error (HERALD_POLICY_INVALID_CIDR), nothing applied.
 */
import { z } from 'zod';
import { parseCidr } from '../core/addr.js';
import { clusterMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';
import { quote } from './quote.js';

export const CIDR_GROUP_API_VERSIONS = ['cilium.io/v2alpha1', 'cilium.io/v2'] as const;

const externalCidr = z.string().transform((s, ctx) => {
  const r = parseCidr(s);
  if (r.ok) return r.cidr.text;
  ctx.issues.push({ code: 'custom', message: `invalid CIDR ${quote(s)}: ${r.reason}`, input: s, params: { heraldCode: 'HERALD_POLICY_INVALID_CIDR' } });
  return z.NEVER;
});

export const cidrGroupSchema = z
  .object({
    apiVersion: z.enum(CIDR_GROUP_API_VERSIONS),
    kind: z.literal('CiliumCIDRGroup'),
    metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
    spec: z.object({ externalCIDRs: z.array(externalCidr).default([]) }).prefault({}),
    status: z.unknown().optional(),
  })
  .transform(({ status: _status, ...g }) => g);

export type CidrGroupManifest = z.output<typeof cidrGroupSchema>;
