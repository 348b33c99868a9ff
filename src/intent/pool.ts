/**
 * CiliumLoadBalancerIPPool (cilium.io/v2 and v2alpha1, cluster-scoped):
 * blocks are parsed into canonical CIDRs and inclusive ranges.
 */
import { z } from 'zod';
import { quote } from './quote.js';
import { compareIps, parseCidrMasking, parseIp, type IpFamily, type ParsedIp } from '../core/addr.js';
import { neverServiceRangeReason } from './ip.js';
import { clusterMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';
import { removedField } from './fields.js';
import { labelSelectorSchema } from './selector.js';

export const POOL_API_VERSIONS = ['cilium.io/v2', 'cilium.io/v2alpha1'] as const;

const q = quote;

/** One block of a pool, canonical. A `start` without `stop` is the range start..start. */
export type PoolBlock =
  | {
      readonly type: 'cidr';
      readonly family: IpFamily;
      readonly cidr: string;
      /** The CIDR as written when it had host bits set (Cilium masks them; so does herald, with a warning). */
      readonly maskedFrom?: string;
    }
  | { readonly type: 'range'; readonly family: IpFamily; readonly start: string; readonly stop: string };

export const poolBlockSchema = z
  .strictObject({
    // Empty strings are unset: the Go type writes `cidr: ""` for range blocks.
    cidr: z.string().optional(),
    start: z.string().optional(),
    stop: z.string().optional(),
  })
  .transform((raw, ctx): PoolBlock => {
    const cidr = raw.cidr || undefined;
    const start = raw.start || undefined;
    const stop = raw.stop || undefined;
    const fail = (path: string[], message: string, input: unknown): PoolBlock => {
      ctx.issues.push({ code: 'custom', message, input, path });
      return z.NEVER;
    };
    if (cidr !== undefined) {
      if (start !== undefined || stop !== undefined) {
        return fail([], 'a block has either cidr or start/stop, not both', raw);
      }
      const parsed = parseCidrMasking(cidr);
      if (!parsed.ok) return fail(['cidr'], `invalid CIDR ${q(cidr)}: ${parsed.reason}`, cidr);
      const { network, prefix, family } = parsed.cidr;
      const never = neverServiceRangeReason(network, lastOf(network, prefix));
      if (never !== undefined) return fail(['cidr'], `CIDR ${q(parsed.cidr.text)} is refused: ${never}`, cidr);
      return { type: 'cidr', family, cidr: parsed.cidr.text, ...(parsed.maskedFrom !== undefined ? { maskedFrom: parsed.maskedFrom } : {}) };
    }
    if (start === undefined) {
      return stop === undefined
        ? fail([], 'a block needs cidr, or start (and optionally stop)', raw)
        : fail(['start'], 'required when stop is set', undefined);
    }
    const first = parseIp(start);
    const last = stop === undefined ? first : parseIp(stop);
    if (!first) fail(['start'], `invalid IP address ${q(start)}`, start);
    if (stop !== undefined && !last) fail(['stop'], `invalid IP address ${q(stop)}`, stop);
    if (!first || !last) return z.NEVER;
    if (first.family !== last.family) {
      return fail(['stop'], `stop ${q(last.text)} is ${last.family} but start ${q(first.text)} is ${first.family}`, stop);
    }
    if (compareIps(first, last) > 0) {
      return fail(['stop'], `stop ${q(last.text)} is before start ${q(first.text)}`, stop);
    }
    const never = neverServiceRangeReason(first, last);
    if (never !== undefined) {
      const range = stop === undefined ? q(first.text) : `${q(first.text)}-${q(last.text)}`;
      return fail(['start'], `range ${range} is refused: ${never}`, start);
    }
    return { type: 'range', family: first.family, start: first.text, stop: last.text };
  });

/** The last address of `network/prefix`. */
function lastOf(network: ParsedIp, prefix: number): ParsedIp {
  const bytes = network.bytes.map((byte, i) => byte | (0xff >> Math.max(0, Math.min(8, prefix - i * 8))));
  return { text: '', family: network.family, bytes };
}

// Cilium's CRDs are strict (kubectl's default field validation): unknown fields are errors.
export const poolSpecSchema = z
  .strictObject({
    blocks: z.array(poolBlockSchema).default([]),
    cidrs: removedField('removed in Cilium 1.16: rename it to spec.blocks (the {cidr: ...} entries stay the same)'),
    serviceSelector: labelSelectorSchema.optional(),
    /** Unset means Yes (Cilium ≥ 1.16). */
    allowFirstLastIPs: z.enum(['Yes', 'No']).default('Yes'),
    disabled: z.boolean().default(false),
  })
  .transform(({ cidrs: _removed, ...spec }) => spec);

export const poolSchema = z.strictObject({
  apiVersion: z.enum(POOL_API_VERSIONS),
  kind: z.literal('CiliumLoadBalancerIPPool'),
  metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
  spec: poolSpecSchema,
  /** Written by the operator (conditions); accepted and dropped. */
  status: z.unknown().optional(),
}).transform(({ status: _status, ...pool }) => pool);

export type PoolSpec = z.output<typeof poolSpecSchema>;
export type IPPoolManifest = z.output<typeof poolSchema>;

/** Non-fatal remarks about a valid pool. */
export function poolWarnings(pool: IPPoolManifest): { path: string; message: string }[] {
  if (pool.spec.blocks.length === 0) return [{ path: 'spec.blocks', message: 'the pool has no blocks, so it allocates nothing' }];
  const out: { path: string; message: string }[] = [];
  pool.spec.blocks.forEach((b, i) => {
    if (b.type === 'cidr' && b.maskedFrom !== undefined) {
      out.push({
        path: `spec.blocks[${i}].cidr`,
        message: `${q(b.maskedFrom)} has host bits set; read as ${q(b.cidr)} (masked, as Cilium does): write ${q(b.cidr)} to say so`,
      });
    }
  });
  return out;
}
