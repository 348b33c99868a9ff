/**
 * Service traffic policy, the model every stage shares: rules as the
 * repository holds them, and packets as the reference evaluator and the
 * datapath see them. Addresses are bigints of their family's width.
 *
 * Semantics (docs: README "Service traffic policy"):
 * - a service no rule selects is open (the datapath does not look at it);
 * - once selected, traffic is denied unless an allow rule matches;
 * - a matching deny rule beats every allow rule;
 * - a peer block matches a source inside `cidr` and outside every `except`;
 * - a rule without ports matches every packet from its peers (any protocol,
 *   ICMP included); a rule with ports matches packets whose L4 key is in one
 *   of its ranges for that protocol: the destination port of TCP/UDP/SCTP,
 *   the type of ICMP (IPv4) / ICMPv6 (IPv6) — an `icmps` rule is a range
 *   type..type of protocol ICMP or ICMPv6. A packet without a known L4 key
 *   (a later fragment whose first fragment was not seen, another protocol)
 *   matches only rules without ports. IPv6 extension headers are walked to
 *   find the L4 header; a later fragment is decided with its first
 *   fragment's L4 key when the datapath saw that one;
 * - the deciding rule is the matching deny rule with the lowest id, else the
 *   matching allow rule with the lowest id, else "default deny" (rule 0).
 */
export type Family = 4 | 6;
export const FAMILY_WIDTH: Readonly<Record<Family, number>> = { 4: 32, 6: 128 };

export const PROTO = { TCP: 6, UDP: 17, SCTP: 132, ICMP: 1, ICMPV6: 58 } as const;
export type L4Proto = (typeof PROTO)[keyof typeof PROTO];
export const PROTO_NAME: Readonly<Record<number, string>> = { 6: 'TCP', 17: 'UDP', 132: 'SCTP', 1: 'ICMP', 58: 'ICMPv6' };

/** A network prefix; `addr` has no host bits set. */
export interface Prefix {
  readonly family: Family;
  readonly addr: bigint;
  readonly len: number;
}

export interface PeerBlock {
  readonly cidr: Prefix;
  /** Each inside `cidr` (validated at intake). */
  readonly except: readonly Prefix[];
}

export interface PortRange {
  readonly proto: L4Proto;
  /** Inclusive destination port range. */
  readonly lo: number;
  readonly hi: number;
}

/** A port by name (`port: http`), resolved per service against its ports' targetPort names (named-ports.ts). */
export interface NamedPort {
  readonly proto: L4Proto;
  readonly name: string;
}

export type Verdict = 'allow' | 'deny';

export interface PolicyRule {
  /** > 0, unique in the repository; rule 0 means "default deny". */
  readonly id: number;
  readonly verdict: Verdict;
  readonly peers: readonly PeerBlock[];
  /** Absent: every packet from the peers. */
  readonly ports?: readonly PortRange[];
  /** Named ports, still to be resolved for a service (then added to `ports`); compile and evaluate see resolved rules only. */
  readonly namedPorts?: readonly NamedPort[];
  /** Where it came from, e.g. `CiliumNetworkPolicy default/web ingressDeny[0]`. */
  readonly origin: string;
  /**
   * false: from a policy with `enableDefaultDeny: {ingress: false}` — it does
   * not put the services it selects into default deny. A service all of whose
   * rules say so is not default deny: what no rule denies is allowed (its
   * allow rules change nothing). One rule without it (any other policy, or
   * loadBalancerSourceRanges) makes the service default deny, as Cilium does
   * ("enabled if any policy requests it").
   */
  readonly defaultDeny?: false;
}

export interface Packet {
  readonly family: Family;
  readonly src: bigint;
  /** IP protocol / IPv6 next header. */
  readonly proto: number;
  /** The L4 key, when known: destination port (TCP/UDP/SCTP) or ICMP type (ICMP/ICMPv6). */
  readonly dport?: number;
}

export interface Decision {
  readonly verdict: Verdict;
  /** The deciding rule's id; 0 = default deny. */
  readonly rule: number;
}

export function hostMask(family: Family, len: number): bigint {
  return (1n << BigInt(FAMILY_WIDTH[family] - len)) - 1n;
}

export function prefixContains(p: Prefix, family: Family, addr: bigint): boolean {
  return p.family === family && (addr & ~hostMask(family, p.len)) === p.addr;
}

/** `outer` contains every address of `inner`. */
export function prefixCovers(outer: Prefix, inner: Prefix): boolean {
  return outer.family === inner.family && outer.len <= inner.len && prefixContains(outer, inner.family, inner.addr);
}

export function prefixKey(p: Prefix): string {
  return `${p.family}/${p.len}/${p.addr.toString(16)}`;
}

export function formatPrefix(p: Prefix): string {
  return `${formatAddress(p.family, p.addr)}/${p.len}`;
}

export function formatAddress(family: Family, addr: bigint): string {
  if (family === 4) return [24n, 16n, 8n, 0n].map((s) => String((addr >> s) & 255n)).join('.');
  const groups: string[] = [];
  for (let i = 7; i >= 0; i--) groups.push(((addr >> BigInt(i * 16)) & 0xffffn).toString(16));
  // RFC 5952: compress the longest run (≥ 2) of zero groups.
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** The id of the allow-everything rule a service gets when no policy selecting it asks for default deny (repository ids are far below; shared.ts's synthesized ids above). */
export const NO_DEFAULT_DENY_RULE = 0x7effffff;

/**
 * A service's rules with Cilium's `enableDefaultDeny` applied: when every
 * rule selecting it comes from a policy with `enableDefaultDeny.ingress:
 * false`, a last allow-everything rule (id NO_DEFAULT_DENY_RULE) follows
 * them — deny rules still beat it, nothing falls to default deny. Pure.
 */
export function withDefaultDenySwitch<R extends PolicyRule>(rules: readonly R[]): readonly PolicyRule[] {
  if (rules.length === 0 || rules.some((r) => r.defaultDeny !== false)) return rules;
  const everywhere: PeerBlock[] = [
    { cidr: { family: 4, addr: 0n, len: 0 }, except: [] },
    { cidr: { family: 6, addr: 0n, len: 0 }, except: [] },
  ];
  return [...rules, { id: NO_DEFAULT_DENY_RULE, verdict: 'allow', peers: everywhere, origin: 'not default deny: every policy selecting it sets enableDefaultDeny.ingress false (what no rule denies is allowed)' }];
}
