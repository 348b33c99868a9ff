/**
 * Intent → policy rules: what each CiliumNetworkPolicy,
 * CiliumClusterwideNetworkPolicy and Service (loadBalancerSourceRanges)
 * contributes to the repository, keyed by the object it came from (a
 * re-applied object replaces its rules as a whole).
 *
 * - Selection: a CNP rule selects the services of its namespace whose labels
 *   (plus io.kubernetes.service.namespace/name) match its endpointSelector;
 *   a CCNP rule selects across namespaces. A `k8s:`/`any:` key prefix is
 *   dropped before matching, as Cilium's label sources.
 * - An ingress rule allows (ingressDeny: denies) from the union of its
 *   fromCIDR, fromCIDRSet (a cidr, or the CIDRs of the CiliumCIDRGroups its
 *   cidrGroupRef / cidrGroupSelector names, each with the excepts inside it)
 *   and fromEntities world/all; with no peer field at
 *   all it means every source (as Cilium). A rule naming only peers herald
 *   cannot see (fromEndpoints …) is dropped, with the warning intake gives;
 *   a spec whose ingress rules all drop out still selects its services
 *   (default deny), as its ingress section does in Cilium.
 * - toPorts: each port entry is (protocol, port..endPort); ANY is TCP, UDP
 *   and SCTP; port 0 is every port. No toPorts: every packet.
 * - a named port resolves per selected service (named-ports.ts).
 * - icmps: each field is (ICMP for IPv4 / ICMPv6 for IPv6, type..type): the
 *   rule matches those ICMP messages only (as a toPorts entry would).
 * - loadBalancerSourceRanges R on a service = allow from R, plus deny from
 *   everything outside R (per family): Kubernetes' "only these sources",
 *   which then also holds against any CNP allow.
 */
import { parseCidr } from '../../core/addr.js';
import type { Sourced } from '../../intent/kinds.js';
import { NAMED_PORT, WORLD_ENTITIES, type IngressRuleSpec, type NetworkPolicyManifest, type PolicyRuleSpec } from '../../intent/network-policy.js';
import type { ServiceManifest } from '../../intent/service.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import { serviceSourceRanges } from '../../intent/source-ranges.js';
import { governsIngress, type K8sNetworkPolicyManifest } from '../../intent/k8s-network-policy.js';
import type { ServicePort } from './shared.js';
import type { CidrGroupManifest } from '../../intent/cidr-group.js';
import { endpointSelectorMatches } from './selection.js';
import { PROTO, prefixCovers, type NamedPort, type Family, type PeerBlock, type PortRange, type Prefix, type Verdict } from './model.js';

export interface EndpointSelectorLike {
  readonly matchLabels: Readonly<Record<string, string>>;
  readonly matchExpressions: readonly { readonly key: string; readonly operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist'; readonly values?: readonly string[] }[];
}

/** Which services a rule applies to. */
export type Selection =
  | { readonly kind: 'labels'; readonly namespace?: string; readonly selector: EndpointSelectorLike }
  | { readonly kind: 'service'; readonly service: string };

export interface RuleInput {
  readonly verdict: Verdict;
  /** false: its policy sets enableDefaultDeny.ingress false (model.ts). */
  readonly defaultDeny?: false;
  readonly peers: readonly PeerBlock[];
  readonly ports?: readonly PortRange[];
  /** Named ports (resolved per service; `ports` is then at least []). */
  readonly namedPorts?: readonly NamedPort[];
  readonly selection: Selection;
  readonly origin: string;
}

export interface RuleSetInput {
  /** `CiliumNetworkPolicy/ns/name`, `CiliumClusterwideNetworkPolicy/name`, `Service/ns/name`. */
  readonly key: string;
  readonly rules: readonly RuleInput[];
}

export function toPrefix(text: string): Prefix {
  const r = parseCidr(text);
  if (!r.ok) throw new Error(`intake: ${text} is not a validated CIDR`);
  let addr = 0n;
  for (const b of r.cidr.network.bytes) addr = (addr << 8n) | BigInt(b);
  return { family: r.cidr.family === 'IPv4' ? 4 : 6, addr, len: r.cidr.prefix };
}

const EVERYWHERE: readonly PeerBlock[] = [
  { cidr: { family: 4, addr: 0n, len: 0 }, except: [] },
  { cidr: { family: 6, addr: 0n, len: 0 }, except: [] },
];

const PEER_FIELDS = ['fromCIDR', 'fromCIDRSet', 'fromEntities', 'fromEndpoints', 'fromRequires', 'fromGroups', 'fromNodes', 'fromNodeSelector'];

/**
 * The CIDRs of the CiliumCIDRGroups a fromCIDRSet entry names (by
 * cidrGroupRef, or by labels with cidrGroupSelector). A group that does not
 * exist contributes nothing, as in Cilium (objects may arrive in any order);
 * `herald policy` shows the rule's resolved sources.
 */
function groupCidrs(s: { cidrGroupRef?: string; cidrGroupSelector?: EndpointSelectorLike }, groups: ReadonlyMap<string, Sourced<CidrGroupManifest>>): string[] {
  if (s.cidrGroupRef !== undefined) return [...(groups.get(s.cidrGroupRef)?.spec.externalCIDRs ?? [])];
  const sel = s.cidrGroupSelector;
  if (sel === undefined) return [];
  const out: string[] = [];
  for (const g of groups.values()) if (endpointSelectorMatches(sel, g.metadata.labels)) out.push(...g.spec.externalCIDRs);
  return out;
}

function peersOf(ing: IngressRuleSpec, groups: ReadonlyMap<string, Sourced<CidrGroupManifest>>): readonly PeerBlock[] | undefined {
  const raw = ing as Record<string, unknown>;
  if (!PEER_FIELDS.some((f) => raw[f] !== undefined)) return EVERYWHERE;
  const out: PeerBlock[] = [];
  for (const c of ing.fromCIDR ?? []) out.push({ cidr: toPrefix(c), except: [] });
  for (const s of ing.fromCIDRSet ?? []) {
    if (s.cidr !== undefined) {
      out.push({ cidr: toPrefix(s.cidr), except: s.except.map(toPrefix) });
      continue;
    }
    const excepts = s.except.map(toPrefix);
    for (const c of groupCidrs(s, groups)) {
      const cidr = toPrefix(c);
      out.push({ cidr, except: excepts.filter((e) => prefixCovers(cidr, e)) });
    }
  }
  if ((ing.fromEntities ?? []).some((e) => WORLD_ENTITIES.has(e))) out.push(...EVERYWHERE);
  return out.length > 0 ? out : undefined;
}

/** The rule's L4 part; 'no-packet' when it can match no packet at all (the rule is then dropped). */
function portsOf(ing: IngressRuleSpec): { ports?: readonly PortRange[]; namedPorts?: readonly NamedPort[] } | 'no-packet' {
  if (ing.icmps !== undefined && ing.icmps.length > 0) {
    // ICMP types are the L4 key of ICMP / ICMPv6 packets (intake refuses icmps together with toPorts).
    const out: PortRange[] = ing.icmps.flatMap((r) => r.fields.map((f) => ({ proto: f.family === 'IPv4' ? PROTO.ICMP : PROTO.ICMPV6, lo: f.type, hi: f.type })));
    // icmps entries without fields: as Cilium (a non-empty icmps list makes the rule an L4 rule, and each
    // ICMP entry adds one filter per field), such a rule matches nothing — never "every port".
    return out.length > 0 ? { ports: out } : 'no-packet';
  }
  if (ing.toPorts === undefined) return {};
  const out: PortRange[] = [];
  const named: NamedPort[] = [];
  for (const tp of ing.toPorts) {
    for (const p of tp.ports) {
      const protos = p.protocol === 'ANY' ? [PROTO.TCP, PROTO.UDP, PROTO.SCTP] : [PROTO[p.protocol]];
      const name = p[NAMED_PORT];
      if (name !== undefined) {
        for (const proto of protos) named.push({ proto, name });
        continue;
      }
      const lo = p.port === 0 ? 0 : p.port;
      const hi = p.port === 0 ? 65535 : (p.endPort ?? p.port);
      for (const proto of protos) out.push({ proto, lo, hi });
    }
  }
  if (named.length > 0) return { ports: out, namedPorts: named };
  // `toPorts: [{}]` or only L7 parts: Cilium reads no port as every port.
  return out.length > 0 ? { ports: out } : {};
}

function policyRuleSets(obj: Sourced<NetworkPolicyManifest>, groups: ReadonlyMap<string, Sourced<CidrGroupManifest>> = new Map()): RuleSetInput {
  const namespaced = obj.kind === 'CiliumNetworkPolicy';
  const name = namespaced ? `${(obj.metadata as { namespace: string }).namespace}/${obj.metadata.name}` : obj.metadata.name;
  const specs: [PolicyRuleSpec, string][] = [];
  if (obj.spec) specs.push([obj.spec, 'spec']);
  (obj.specs ?? []).forEach((s, i) => specs.push([s, `specs[${i}]`]));
  const rules: RuleInput[] = [];
  for (const [spec, at] of specs) {
    if (spec.endpointSelector === undefined) continue; // a nodeSelector rule: warned at intake
    const selection: Selection = {
      kind: 'labels',
      ...(namespaced ? { namespace: (obj.metadata as { namespace: string }).namespace } : {}),
      selector: spec.endpointSelector,
    };
    const before = rules.length;
    // enableDefaultDeny.ingress false: this spec's rules do not put their services into default deny (model.ts).
    const dd = spec.enableDefaultDeny?.ingress === false ? { defaultDeny: false as const } : {};
    for (const section of ['ingressDeny', 'ingress'] as const) {
      (spec[section] ?? []).forEach((ing, i) => {
        const peers = peersOf(ing, groups);
        if (peers === undefined) return;
        const ports = portsOf(ing);
        if (ports === 'no-packet') return; // warned at intake
        rules.push({
          verdict: section === 'ingressDeny' ? 'deny' : 'allow',
          peers,
          ...ports,
          selection,
          ...dd,
          origin: `${obj.kind} ${name} ${at}.${section}[${i}]`,
        });
      });
    }
    // An ingress section selects its services into default deny (as Cilium) even when none of its
    // rules names a source herald sees (only fromEndpoints, a CIDR group that does not exist …).
    // enableDefaultDeny.ingress true does so without any ingress rule (Cilium); false never adds the marker.
    const selectsIngress = spec.enableDefaultDeny?.ingress ?? (spec.ingress !== undefined || spec.ingressDeny !== undefined);
    if (rules.length === before && selectsIngress) {
      rules.push({ verdict: 'allow', peers: [], selection, origin: `${obj.kind} ${name} ${at} (selects: default deny; no rule names a source herald sees)` });
    }
  }
  return { key: `${obj.kind}/${name}`, rules };
}

/** loadBalancerSourceRanges → allow from the ranges + deny from the rest. */
export function sourceRangeRuleSet(service: string, ranges: readonly string[]): RuleSetInput {
  const key = `Service/${service}`;
  if (ranges.length === 0) return { key, rules: [] };
  const prefixes = ranges.map(toPrefix);
  const selection: Selection = { kind: 'service', service };
  const origin = `Service ${service} loadBalancerSourceRanges`;
  const outside: PeerBlock[] = ([4, 6] as Family[]).map((family) => ({
    cidr: { family, addr: 0n, len: 0 },
    except: prefixes.filter((p) => p.family === family),
  }));
  return {
    key,
    rules: [
      { verdict: 'deny', peers: outside, selection, origin: `${origin} (sources outside the ranges)` },
      { verdict: 'allow', peers: prefixes.map((cidr) => ({ cidr, except: [] })), selection, origin },
    ],
  };
}

/**
 * A NetworkPolicy governing ingress selects its services even with no rule
 * (default deny): a rule with no peers selects and matches nothing.
 */
function k8sRuleSet(obj: Sourced<K8sNetworkPolicyManifest>): RuleSetInput {
  const ns = obj.metadata.namespace;
  const name = `${ns}/${obj.metadata.name}`;
  const key = `NetworkPolicy/${name}`;
  if (!governsIngress(obj)) return { key, rules: [] };
  const selection: Selection = { kind: 'labels', namespace: ns, selector: obj.spec.podSelector };
  const rules: RuleInput[] = [{ verdict: 'allow', peers: [], selection, origin: `NetworkPolicy ${name} (selects: default deny)` }];
  (obj.spec.ingress ?? []).forEach((rule, i) => {
    const from = rule.from ?? [];
    const peers: PeerBlock[] =
      from.length === 0 ? [...EVERYWHERE] : from.flatMap((p) => (p.ipBlock ? [{ cidr: toPrefix(p.ipBlock.cidr), except: p.ipBlock.except.map(toPrefix) }] : []));
    if (peers.length === 0) return; // only pod/namespace selectors: warned at intake
    const ports: PortRange[] = (rule.ports ?? []).flatMap((p) => (p.name !== undefined ? [] : [{ proto: PROTO[p.protocol], lo: p.port ?? 0, hi: p.port === undefined ? 65535 : (p.endPort ?? p.port) }]));
    const namedPorts: NamedPort[] = (rule.ports ?? []).flatMap((p) => (p.name !== undefined ? [{ proto: PROTO[p.protocol], name: p.name }] : []));
    const l4 = namedPorts.length > 0 ? { ports, namedPorts } : ports.length > 0 ? { ports } : {};
    rules.push({ verdict: 'allow', peers, ...l4, selection, origin: `NetworkPolicy ${name} spec.ingress[${i}]` });
  });
  return { key, rules };
}

/** A service's (port, protocol) pairs: what it owns of an IP it shares (shared.ts). */
export function servicePortsOf(svc: ServiceManifest): ServicePort[] {
  return svc.spec.ports.map((p) => ({ proto: PROTO[p.protocol], port: p.port, ...(typeof p.targetPort === 'string' ? { targetPort: p.targetPort } : {}) }));
}

/** Every rule set the snapshot holds, in a stable order. */
export function ruleSetsFromSnapshot(snapshot: IntentSnapshot): RuleSetInput[] {
  const out: RuleSetInput[] = [];
  for (const p of snapshot.networkPolicies.values()) out.push(policyRuleSets(p, snapshot.cidrGroups));
  for (const p of snapshot.clusterwideNetworkPolicies.values()) out.push(policyRuleSets(p, snapshot.cidrGroups));
  for (const p of snapshot.k8sNetworkPolicies.values()) out.push(k8sRuleSet(p));
  for (const [key, svc] of snapshot.services) {
    const ranges = serviceSourceRanges(svc as Sourced<ServiceManifest>);
    if (ranges.length > 0) out.push(sourceRangeRuleSet(key, ranges));
  }
  return out;
}

export interface CidrGroupWarning {
  /** `CiliumNetworkPolicy ns/name` or `CiliumClusterwideNetworkPolicy name`. */
  readonly policy: string;
  readonly object: Sourced<NetworkPolicyManifest>;
  /** The fromCIDRSet entry, e.g. `spec.ingress[0].fromCIDRSet[1]`. */
  readonly path: string;
  /** The field: `cidrGroupRef` or `cidrGroupSelector`. */
  readonly field: 'cidrGroupRef' | 'cidrGroupSelector';
  /** The group named (cidrGroupRef), or the selector (cidrGroupSelector) as JSON. */
  readonly group: string;
  /** What is wrong and its effect (without the path). */
  readonly detail: string;
  /** `<path>.<field>: <detail>`. */
  readonly message: string;
}

/**
 * fromCIDRSet entries whose cidrGroupRef names a CiliumCIDRGroup that does
 * not exist (or whose cidrGroupSelector selects none). The rule is applied
 * without those sources, as Cilium does (the group may arrive later); this
 * says so, naming the policy, the rule and the group.
 */
export function missingCidrGroups(snapshot: IntentSnapshot): CidrGroupWarning[] {
  const out: CidrGroupWarning[] = [];
  for (const obj of [...snapshot.networkPolicies.values(), ...snapshot.clusterwideNetworkPolicies.values()]) {
    const name = obj.kind === 'CiliumNetworkPolicy' ? `${(obj.metadata as { namespace: string }).namespace}/${obj.metadata.name}` : obj.metadata.name;
    const specs: [PolicyRuleSpec, string][] = [];
    if (obj.spec) specs.push([obj.spec, 'spec']);
    (obj.specs ?? []).forEach((sp, i) => specs.push([sp, `specs[${i}]`]));
    for (const [spec, at] of specs) {
      for (const section of ['ingress', 'ingressDeny'] as const) {
        (spec[section] ?? []).forEach((ing, i) => {
          (ing.fromCIDRSet ?? []).forEach((set, j) => {
            const path = `${at}.${section}[${i}].fromCIDRSet[${j}]`;
            const effect = section === 'ingress' ? 'this rule allows from none of its CIDRs' : 'this deny rule denies none of its CIDRs';
            const add = (field: CidrGroupWarning['field'], group: string, detail: string) =>
              out.push({ policy: `${obj.kind} ${name}`, object: obj, path, field, group, detail, message: `${path}.${field}: ${detail}` });
            if (set.cidrGroupRef !== undefined && !snapshot.cidrGroups.has(set.cidrGroupRef)) {
              add('cidrGroupRef', set.cidrGroupRef, `CiliumCIDRGroup "${set.cidrGroupRef}" does not exist: ${effect} until it is created (as Cilium)`);
            } else if (set.cidrGroupSelector !== undefined && ![...snapshot.cidrGroups.values()].some((g) => endpointSelectorMatches(set.cidrGroupSelector!, g.metadata.labels))) {
              const sel = JSON.stringify(set.cidrGroupSelector);
              add('cidrGroupSelector', sel, `selects no CiliumCIDRGroup (${sel}): ${effect} until one is created (as Cilium)`);
            }
          });
        });
      }
    }
  }
  return out;
}
