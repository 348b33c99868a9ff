/**
 * Cilium LB-IPAM Service annotations (cilium:pkg/annotation/k8s.go). Each has
 * a current name and an old `io.cilium/` alias; when both are set the current
 * name wins and the alias is ignored.
 */
import { parseIp } from '../core/addr.js';
import { quote } from './quote.js';
import { checkDns1123Label } from './names.js';

export const ANNOTATION_IPS = 'lbipam.cilium.io/ips';
export const ANNOTATION_SHARING_KEY = 'lbipam.cilium.io/sharing-key';
export const ANNOTATION_SHARING_CROSS_NAMESPACE = 'lbipam.cilium.io/sharing-cross-namespace';
/** Lets ETP=Local Services with different pod selectors share (set on both; Cilium 1.21). */
export const ANNOTATION_SHARING_PERMIT_DIFFERENT_PODS = 'lbipam.cilium.io/sharing-permit-different-pods';

/** Current name → old alias. */
export const ANNOTATION_ALIASES: Readonly<Record<string, string>> = {
  [ANNOTATION_IPS]: 'io.cilium/lb-ipam-ips',
  [ANNOTATION_SHARING_KEY]: 'io.cilium/lb-ipam-sharing-key',
  [ANNOTATION_SHARING_CROSS_NAMESPACE]: 'io.cilium/lb-ipam-sharing-cross-namespace',
};

/** What a Service asks LB-IPAM for. */
export interface LbIpamRequest {
  /** Canonical IPs from the ips annotation, then spec.loadBalancerIP; no duplicates. */
  readonly requestedIPs: string[];
  readonly sharingKey?: string;
  /** Namespaces allowed to share, or `["*"]` for any. */
  readonly sharingCrossNamespace: string[];
  /** `sharing-permit-different-pods: "true"`. */
  readonly sharingPermitDifferentPods: boolean;
}

export interface AnnotationIssue {
  /** The annotation key actually used (current name or alias). */
  readonly key: string;
  readonly message: string;
}

type Annotations = Readonly<Record<string, string>>;

/** The value of an annotation under its current name, else its alias, with the key it came from. */
export function annotationValue(annotations: Annotations, name: string): { key: string; value: string } | undefined {
  if (Object.hasOwn(annotations, name)) return { key: name, value: annotations[name] ?? '' };
  const alias = ANNOTATION_ALIASES[name];
  if (alias !== undefined && Object.hasOwn(annotations, alias)) return { key: alias, value: annotations[alias] ?? '' };
  return undefined;
}

/** Splits a comma list, trimming blanks and dropping empty entries ("a, b," → ["a", "b"]). */
function commaList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** Validation of the LB-IPAM annotations, one issue per bad entry. */
export function checkLbIpamAnnotations(annotations: Annotations): AnnotationIssue[] {
  const issues: AnnotationIssue[] = [];
  const ips = annotationValue(annotations, ANNOTATION_IPS);
  if (ips) {
    for (const entry of commaList(ips.value)) {
      if (!parseIp(entry)) issues.push({ key: ips.key, message: `invalid IP address ${quote(entry)}` });
    }
  }
  const cross = annotationValue(annotations, ANNOTATION_SHARING_CROSS_NAMESPACE);
  if (cross) {
    for (const entry of commaList(cross.value)) {
      if (entry === '*') continue;
      const message = checkDns1123Label(entry, 'namespace');
      if (message !== undefined) issues.push({ key: cross.key, message });
    }
  }
  return issues;
}

/** The annotations herald reads (current names and old aliases). */
const IMPLEMENTED_ANNOTATIONS: ReadonlySet<string> = new Set([
  ...Object.keys(ANNOTATION_ALIASES),
  ...Object.values(ANNOTATION_ALIASES),
  ANNOTATION_SHARING_PERMIT_DIFFERENT_PODS,
]);

/** Why herald ignores some well-known Cilium Service annotations (others get a generic reason). */
const IGNORED_REASONS: Readonly<Record<string, string>> = {
  'io.cilium/global-service': 'cluster mesh global services are not implemented (service.cilium.io/global)',
  'io.cilium/shared-service': 'cluster mesh shared services are not implemented (service.cilium.io/shared)',
  'io.cilium/service-affinity': 'cluster mesh service affinity is not implemented (service.cilium.io/affinity)',
  'io.cilium/lb-l7': 'L7 load balancing is not implemented',
  'io.cilium/lb-l7-algorithm': 'L7 load balancing is not implemented',
};

/**
 * Every `lbipam.cilium.io/*` and `io.cilium/*` annotation of a Service that
 * herald does not implement, with the reason: reported as a warning so a
 * Cilium setting is never dropped silently. An alias shadowed by its current
 * name counts too (Cilium ignores it as well).
 */
export function ignoredCiliumAnnotations(annotations: Annotations): { key: string; message: string }[] {
  const out: { key: string; message: string }[] = [];
  for (const key of Object.keys(annotations).sort()) {
    if (!key.startsWith('lbipam.cilium.io/') && !key.startsWith('io.cilium/')) continue;
    if (key === ANNOTATION_SHARING_PERMIT_DIFFERENT_PODS) {
      const value = annotations[key]?.trim();
      if (value !== 'true' && value !== 'false') out.push({ key, message: `ignored: only "true" permits sharing, got ${quote(annotations[key] ?? '')}` });
      continue;
    }
    if (IMPLEMENTED_ANNOTATIONS.has(key)) {
      const current = Object.keys(ANNOTATION_ALIASES).find((name) => ANNOTATION_ALIASES[name] === key);
      if (current !== undefined && Object.hasOwn(annotations, current)) {
        out.push({ key, message: `ignored: ${quote(current)} is also set and takes precedence` });
      }
      continue;
    }
    out.push({ key, message: `ignored: ${IGNORED_REASONS[key] ?? 'herald does not implement this annotation'}` });
  }
  return out;
}

/**
 * The normalised LB-IPAM request of a Service. Entries that do not parse are
 * skipped here; `checkLbIpamAnnotations` (run when the manifest is loaded)
 * reports them.
 */
export function lbIpamRequest(service: {
  readonly metadata: { readonly annotations: Annotations };
  readonly spec: { readonly loadBalancerIP?: string | undefined };
}): LbIpamRequest {
  const annotations = service.metadata.annotations;
  const requested = new Set<string>();
  const ips = annotationValue(annotations, ANNOTATION_IPS);
  for (const entry of ips ? commaList(ips.value) : []) {
    const ip = parseIp(entry);
    if (ip) requested.add(ip.text);
  }
  const lbip = service.spec.loadBalancerIP !== undefined ? parseIp(service.spec.loadBalancerIP) : undefined;
  if (lbip) requested.add(lbip.text);

  const key = annotationValue(annotations, ANNOTATION_SHARING_KEY)?.value.trim();
  const cross = annotationValue(annotations, ANNOTATION_SHARING_CROSS_NAMESPACE);
  const request: LbIpamRequest = {
    requestedIPs: [...requested],
    sharingCrossNamespace: cross ? [...new Set(commaList(cross.value))] : [],
    sharingPermitDifferentPods: annotations[ANNOTATION_SHARING_PERMIT_DIFFERENT_PODS]?.trim() === 'true',
  };
  return key ? { ...request, sharingKey: key } : request;
}
