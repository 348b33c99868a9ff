/**
 * LB-IPAM's view of a Service: which Services it handles, what each asks
 * for (specific IPs, families, sharing), and Cilium's sharing rule
 * (`isCompatible`, cilium:operator/pkg/lbipam/service_store.go).
 */
import {
  ignoredCiliumAnnotations,
  lbIpamRequest,
  serviceSelectorLabels,
  type IpFamily,
  type Labels,
  type ServiceManifest,
} from '../../intent/index.js';
import { addrOf, formatAddr, type Addr } from '../../core/addr.js';
import { fingerprint } from './state.js';
import { compareStrings, sortedEntries } from '../../core/order.js';

/** The load balancer classes LB-IPAM serves; an unset class is served too (`default-lb-service-ipam=lbipam`). */
export const HANDLED_LB_CLASSES: readonly string[] = ['io.cilium/l2-announcer', 'io.cilium/bgp-control-plane'];

/**
 * Which Services LB-IPAM serves. Without `lbClasses`: class-less Services
 * and HANDLED_LB_CLASSES. With it (`--lb-classes`, Cilium's
 * `lbipam-require-lb-class` with its class list): only Services whose class
 * is listed; class-less ones are left alone.
 */
export interface LbClassPolicy {
  readonly lbClasses?: readonly string[] | undefined;
}

export type FamilyPolicy = 'SingleStack' | 'PreferDualStack' | 'RequireDualStack';

export interface ServiceView {
  /** `namespace/name`. */
  readonly key: string;
  readonly namespace: string;
  /** The Service's labels plus `io.kubernetes.service.{namespace,name}`, for pool selectors. */
  readonly labels: Labels;
  /** creationTimestamp in ms since the epoch; +Infinity when unset (not yet created: newest). */
  readonly created: number;
  /** Specific IPs, canonical and in request order (annotation, then spec.loadBalancerIP). */
  readonly requested: readonly { readonly text: string; readonly addr: Addr }[];
  readonly sharingKey: string | undefined;
  readonly crossNamespace: readonly string[];
  /** `lbipam.cilium.io/sharing-permit-different-pods: "true"`. */
  readonly permitDifferentPods: boolean;
  /** `port/protocol`, sorted. */
  readonly ports: readonly string[];
  readonly externalTrafficPolicy: 'Cluster' | 'Local';
  /** The pod selector (spec.selector), compared for ETP=Local sharing. */
  readonly podSelector: Readonly<Record<string, string>>;
  readonly familyPolicy: FamilyPolicy;
  /** Families the policy may ask for, in preference order (see `wantedFamilies`). */
  readonly wanted: readonly IpFamily[];
  /** Fingerprint of everything above (see AllocationState.fingerprints). */
  readonly fingerprint: string;
  /** Warnings about Cilium annotations herald ignores (`key: reason`), for status. */
  readonly ignoredAnnotations: readonly string[];
}

/** Whether LB-IPAM allocates for this Service: type LoadBalancer and a handled (or no) class. */
export function isHandledService(svc: ServiceManifest, policy: LbClassPolicy = {}): boolean {
  if (svc.spec.type !== 'LoadBalancer') return false;
  const cls = svc.spec.loadBalancerClass;
  if (policy.lbClasses !== undefined) return cls !== undefined && policy.lbClasses.includes(cls);
  return cls === undefined || HANDLED_LB_CLASSES.includes(cls);
}

/**
 * The families a Service asks for (Cilium's serviceIPFamilyRequest on a
 * dual-stack cluster): SingleStack (or no policy) → the first listed family,
 * else IPv4; PreferDualStack → the listed families, else both;
 * RequireDualStack → both. A family no matching pool offers leaves the
 * request unsatisfied (`no_pool`), as in Cilium; the other family is still
 * allocated.
 */
export function wantedFamilies(policy: FamilyPolicy, listed: readonly IpFamily[]): IpFamily[] {
  switch (policy) {
    case 'SingleStack':
      return [listed[0] ?? 'IPv4'];
    case 'PreferDualStack':
      return listed.length > 0 ? sortFamilies(listed) : ['IPv4', 'IPv6'];
    case 'RequireDualStack':
      return ['IPv4', 'IPv6'];
  }
}

function sortFamilies(families: readonly IpFamily[]): IpFamily[] {
  return [...new Set(families)].sort((a, b) => (a === b ? 0 : a === 'IPv4' ? -1 : 1));
}

export function serviceView(key: string, svc: ServiceManifest): ServiceView {
  const request = lbIpamRequest(svc);
  const requested = request.requestedIPs.flatMap((text) => {
    const addr = addrOf(text);
    return addr ? [{ text: formatAddr(addr), addr }] : [];
  });
  const familyPolicy = svc.spec.ipFamilyPolicy ?? 'SingleStack';
  const created = svc.metadata.creationTimestamp;
  const createdMs = created === undefined ? Number.POSITIVE_INFINITY : Date.parse(created);
  const base = {
    key,
    namespace: svc.metadata.namespace,
    labels: serviceSelectorLabels(svc),
    created: Number.isNaN(createdMs) ? Number.POSITIVE_INFINITY : createdMs,
    requested,
    sharingKey: request.sharingKey,
    crossNamespace: request.sharingCrossNamespace,
    permitDifferentPods: request.sharingPermitDifferentPods,
    ports: svc.spec.ports.map((p) => `${p.port}/${p.protocol}`).sort(), // the parser refuses a port listed twice
    externalTrafficPolicy: svc.spec.externalTrafficPolicy,
    podSelector: svc.spec.selector,
    familyPolicy,
    wanted: wantedFamilies(familyPolicy, svc.spec.ipFamilies),
  };
  const inputs = JSON.stringify([
    base.namespace,
    sortedEntries(svc.metadata.labels),
    requested.map((r) => r.text),
    base.sharingKey ?? null,
    [...base.crossNamespace].sort(),
    base.permitDifferentPods,
    base.ports,
    base.externalTrafficPolicy,
    sortedEntries(base.podSelector),
    familyPolicy,
    base.wanted,
  ]);
  const ignoredAnnotations = ignoredCiliumAnnotations(svc.metadata.annotations).map((i) => `${i.key}: ${i.message}`);
  return { ...base, fingerprint: fingerprint(inputs), ignoredAnnotations };
}

/** Oldest first (unset creationTimestamp = newest), then by key: the order imports and requests are served in. */
export function compareAge(a: ServiceView, b: ServiceView): number {
  if (a.created !== b.created) return a.created < b.created ? -1 : 1;
  return compareStrings(a.key, b.key);
}

function allowsNamespace(view: ServiceView, namespace: string): boolean {
  return view.crossNamespace.includes('*') || view.crossNamespace.includes(namespace);
}

function sameSelector(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

/**
 * Why two Services may not share an IP, or `undefined` if they may. The
 * rules of Cilium's `isCompatible`: the same sharing key; the same
 * namespace unless both allow the other's namespace (or `*`); no common
 * port and protocol (the same port with another protocol may share, Cilium's
 * default since 1.17; before, cilium/cilium#9207 forbade it); the same
 * externalTrafficPolicy; and for Local, non-empty pod selectors that are
 * identical unless both carry `sharing-permit-different-pods: "true"`.
 */
export function incompatibility(a: ServiceView, b: ServiceView): string | undefined {
  if (a.sharingKey === undefined || a.sharingKey !== b.sharingKey) return 'different sharing key';
  if (a.namespace !== b.namespace && !(allowsNamespace(a, b.namespace) && allowsNamespace(b, a.namespace))) {
    return 'different namespace, and sharing across namespaces is not allowed by both services';
  }
  const common = a.ports.find((p) => b.ports.includes(p));
  if (common !== undefined) return `same port and protocol ${common}`;
  if (a.externalTrafficPolicy !== b.externalTrafficPolicy) return 'different externalTrafficPolicy';
  if (a.externalTrafficPolicy === 'Local') {
    if (Object.keys(a.podSelector).length === 0 || Object.keys(b.podSelector).length === 0) {
      return 'externalTrafficPolicy Local needs a pod selector on both services';
    }
    if (!sameSelector(a.podSelector, b.podSelector) && !(a.permitDifferentPods && b.permitDifferentPods)) {
      return 'externalTrafficPolicy Local but selecting different sets of pods without lbipam.cilium.io/sharing-permit-different-pods on both services';
    }
  }
  return undefined;
}
