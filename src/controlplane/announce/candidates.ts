/**
 * Announcement policy: which service IPs this node may announce, and on which
 * interfaces — a pure function of intent, IPAM results, this node and its links.
 * Cilium semantics (CiliumL2AnnouncementPolicy): node selector against the
 * node's labels; interface regexes (OR-ed, unanchored; empty = every eligible
 * interface) against interfaces that are up, have carrier and are Ethernet;
 * service selector including the synthetic io.kubernetes.service.* labels;
 * the IP kinds the policy names (ingress IPs and/or spec.externalIPs).
 */
import { compileRe2 } from '../../intent/re2.js';
import { HOSTNAME_LABEL, nodeIdentity, type NodeIdentity } from '../../intent/node-labels.js';
import { matchesSelector } from '../../intent/selector.js';
import { serviceSelectorLabels } from '../../intent/service.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import type { LinkInfo } from '../../os/links.js';

export const L2_ANNOUNCER_CLASS = 'io.cilium/l2-announcer';
export { HOSTNAME_LABEL, nodeIdentity, type NodeIdentity };

export interface Candidate {
  ip: string;
  /** Interfaces this node would announce the IP on, sorted. */
  interfaces: readonly string[];
  /** Services ("namespace/name") that want it, sorted. */
  services: readonly string[];
  /** Policies that selected it, sorted. */
  policies: readonly string[];
}

/** Links that can answer ARP: up, with carrier, Ethernet, ARP not disabled. */
export function eligibleLinks(links: readonly LinkInfo[]): LinkInfo[] {
  return links.filter((l) => l.up && l.carrier && l.ethernet && l.arp);
}

export function computeCandidates(input: {
  snapshot: IntentSnapshot;
  /** Allocated ingress IPs per service key ("namespace/name"), from LB-IPAM. */
  ingress: ReadonlyMap<string, readonly string[]>;
  node: NodeIdentity;
  links: readonly LinkInfo[];
}): Map<string, Candidate> {
  const usable = eligibleLinks(input.links).map((l) => l.name);
  const acc = new Map<string, { interfaces: Set<string>; services: Set<string>; policies: Set<string> }>();

  for (const [policyName, policy] of [...input.snapshot.policies].sort(([a], [b]) => a.localeCompare(b))) {
    const spec = policy.spec;
    if (!spec.loadBalancerIPs && !spec.externalIPs) continue;
    if (!matchesSelector(spec.nodeSelector, input.node.labels)) continue;
    const patterns = spec.interfaces.map((p) => compileRe2(p)).flatMap((r) => (r.ok ? [r.regex] : []));
    // No patterns: every eligible interface. Patterns none of which compiles (intake refuses them; a defence
    // in depth) match nothing — never "every interface", and as unmatchedInterfaces reports them.
    const interfaces = spec.interfaces.length === 0 ? usable : usable.filter((name) => patterns.some((re) => re.test(name)));
    if (interfaces.length === 0) continue;

    for (const [svcKey, svc] of input.snapshot.services) {
      const cls = svc.spec.loadBalancerClass;
      if (cls !== undefined && cls !== L2_ANNOUNCER_CLASS) continue;
      if (!matchesSelector(spec.serviceSelector, serviceSelectorLabels(svc))) continue;
      const ips = new Set<string>();
      if (spec.loadBalancerIPs && svc.spec.type === 'LoadBalancer') for (const ip of input.ingress.get(svcKey) ?? []) ips.add(ip);
      if (spec.externalIPs) for (const ip of svc.spec.externalIPs) ips.add(ip);
      for (const ip of ips) {
        let c = acc.get(ip);
        if (!c) acc.set(ip, (c = { interfaces: new Set(), services: new Set(), policies: new Set() }));
        for (const i of interfaces) c.interfaces.add(i);
        c.services.add(svcKey);
        c.policies.add(policyName);
      }
    }
  }
  const out = new Map<string, Candidate>();
  for (const [ip, c] of acc) {
    out.set(ip, { ip, interfaces: [...c.interfaces].sort(), services: [...c.services].sort(), policies: [...c.policies].sort() });
  }
  return out;
}

export interface UnmatchedInterfaces {
  readonly policy: string;
  readonly patterns: readonly string[];
  /** Interfaces that could answer ARP (up, carrier, Ethernet). */
  readonly eligible: readonly string[];
  /** Every interface seen, eligible or not. */
  readonly seen: readonly string[];
}

/**
 * Policies selecting this node whose `interfaces` regexes match no eligible
 * interface: they announce nothing here, which must be said, not silent.
 */
export function unmatchedInterfaces(snapshot: IntentSnapshot, node: NodeIdentity, links: readonly LinkInfo[]): UnmatchedInterfaces[] {
  const eligible = eligibleLinks(links).map((l) => l.name).sort();
  const seen = links.map((l) => l.name).sort();
  const out: UnmatchedInterfaces[] = [];
  for (const [policyName, policy] of [...snapshot.policies].sort(([a], [b]) => a.localeCompare(b))) {
    const spec = policy.spec;
    if (spec.interfaces.length === 0 || (!spec.loadBalancerIPs && !spec.externalIPs)) continue;
    if (!matchesSelector(spec.nodeSelector, node.labels)) continue;
    const patterns = spec.interfaces.map((p) => compileRe2(p)).flatMap((r) => (r.ok ? [r.regex] : []));
    if (eligible.some((name) => patterns.some((re) => re.test(name)))) continue;
    out.push({ policy: policyName, patterns: spec.interfaces, eligible, seen });
  }
  return out;
}
