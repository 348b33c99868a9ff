/**
 * Service.spec.loadBalancerSourceRanges and its older annotation form
 * `service.beta.kubernetes.io/load-balancer-source-ranges` (a comma list,
 * read only when the field is empty, as Kubernetes does). Kubernetes parses
 * both with Go's net.ParseCIDR, which accepts host bits and masks them: so
 * does herald, with a warning.
 */
import { parseCidrMasking } from '../core/addr.js';
import { quote } from './quote.js';

export const ANNOTATION_SOURCE_RANGES = 'service.beta.kubernetes.io/load-balancer-source-ranges';

export interface SourceRangeIssue {
  /** Path segments inside the Service. */
  readonly path: (string | number)[];
  readonly message: string;
}

interface ServiceLike {
  readonly metadata: { readonly annotations: Readonly<Record<string, string>> };
  readonly spec: { readonly loadBalancerSourceRanges?: readonly string[] };
}

function entries(svc: ServiceLike): { text: string; path: (string | number)[] }[] {
  const field = svc.spec.loadBalancerSourceRanges ?? [];
  if (field.length > 0) return field.map((text, i) => ({ text: text.trim(), path: ['spec', 'loadBalancerSourceRanges', i] }));
  const ann = svc.metadata.annotations[ANNOTATION_SOURCE_RANGES];
  if (ann === undefined) return [];
  return ann
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '')
    .map((text) => ({ text, path: ['metadata', 'annotations', ANNOTATION_SOURCE_RANGES] }));
}

/** Errors: entries that are not CIDRs. */
export function sourceRangeErrors(svc: ServiceLike): SourceRangeIssue[] {
  return entries(svc).flatMap(({ text, path }) => {
    const r = parseCidrMasking(text);
    return r.ok ? [] : [{ path, message: `invalid CIDR ${quote(text)}: ${r.reason}` }];
  });
}

/** The source ranges in force, canonical ("" list: none, the service is open to everyone). */
export function serviceSourceRanges(svc: ServiceLike): string[] {
  const out: string[] = [];
  for (const { text } of entries(svc)) {
    const r = parseCidrMasking(text);
    if (r.ok && !out.includes(r.cidr.text)) out.push(r.cidr.text);
  }
  return out;
}

export function serviceSourceRangeWarnings(svc: ServiceLike): { path: string; message: string; segments?: string[] }[] {
  const out: { path: string; message: string; segments?: string[] }[] = [];
  const field = svc.spec.loadBalancerSourceRanges ?? [];
  if (field.length > 0 && svc.metadata.annotations[ANNOTATION_SOURCE_RANGES] !== undefined) {
    out.push({
      path: `metadata.annotations["${ANNOTATION_SOURCE_RANGES}"]`,
      segments: ['metadata', 'annotations', ANNOTATION_SOURCE_RANGES],
      message: 'ignored: spec.loadBalancerSourceRanges is set and takes precedence (as in Kubernetes)',
    });
  }
  for (const { text, path } of entries(svc)) {
    const r = parseCidrMasking(text);
    if (r.ok && r.maskedFrom !== undefined) {
      const segs = path.map(String);
      out.push({
        path: typeof path[2] === 'number' ? `spec.loadBalancerSourceRanges[${path[2]}]` : `metadata.annotations["${ANNOTATION_SOURCE_RANGES}"]`,
        segments: segs,
        message: `${quote(text)} has host bits set; read as ${quote(r.cidr.text)}`,
      });
    }
  }
  return out;
}
