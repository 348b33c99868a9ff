/**
 * Cilium LB-IPAM Service annotations (cilium:pkg/annotation/k8s.go). Each has
 * a current name and an old `io.cilium/` alias; when both are set the current
 * name wins and the alias is ignored.
 */
import { parseIp } from './ip.js';
import { quote } from './quote.js';
import { checkDns1123Label } from './names.js';

export const ANNOTATION_IPS = 'lbipam.cilium.io/ips';
export const ANNOTATION_SHARING_KEY = 'lbipam.cilium.io/sharing-key';
export const ANNOTATION_SHARING_CROSS_NAMESPACE = 'lbipam.cilium.io/sharing-cross-namespace';

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
  };
  return key ? { ...request, sharingKey: key } : request;
}
