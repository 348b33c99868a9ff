/** CiliumL2AnnouncementPolicy (cilium.io/v2alpha1, cluster-scoped). */
import { z } from 'zod';
import { quote } from './quote.js';
import { clusterMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';
import { compileRe2 } from './re2.js';
import { labelSelectorSchema } from './selector.js';

export const POLICY_API_VERSIONS = ['cilium.io/v2alpha1'] as const;

const interfacePattern = z.string().check((ctx) => {
  const result = compileRe2(ctx.value);
  if (!result.ok) {
    ctx.issues.push({
      code: 'custom',
      message: `invalid interface regex ${quote(ctx.value)}: ${result.reason}`,
      input: ctx.value,
    });
  }
});

// Strict like the CRD under kubectl's default field validation.
export const l2PolicySpecSchema = z.strictObject({
  /** Unset: every node. */
  nodeSelector: labelSelectorSchema.optional(),
  /** Unset: every service. */
  serviceSelector: labelSelectorSchema.optional(),
  /** RE2 patterns, OR-ed, unanchored; empty means every selected device. Compile with `compileInterfacePattern`. */
  interfaces: z.array(interfacePattern).default([]),
  externalIPs: z.boolean().default(false),
  loadBalancerIPs: z.boolean().default(false),
});

export const l2PolicySchema = z.strictObject({
  apiVersion: z.enum(POLICY_API_VERSIONS),
  kind: z.literal('CiliumL2AnnouncementPolicy'),
  metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
  spec: l2PolicySpecSchema.prefault({}),
  status: z.unknown().optional(),
}).transform(({ status: _status, ...policy }) => policy);

export type L2PolicySpec = z.output<typeof l2PolicySpecSchema>;
export type L2PolicyManifest = z.output<typeof l2PolicySchema>;

/** Non-fatal remarks about a valid policy. */
export function l2PolicyWarnings(policy: L2PolicyManifest): { path: string; message: string }[] {
  if (!policy.spec.externalIPs && !policy.spec.loadBalancerIPs) {
    return [
      {
        path: 'spec',
        message: 'neither loadBalancerIPs nor externalIPs is true, so this policy announces nothing',
      },
    ];
  }
  return [];
}
