/**
 * One IP, several services (LB-IPAM's sharing key: `lbipam.cilium.io/sharing-key`,
 * each service on its own ports). The datapath polices by destination IP, so
 * such an IP gets one table of its own, merged from its services:
 *
 * - traffic to a service's (port, protocol) is decided by that service's
 *   rules alone: each rule is restricted to the ports the service declares
 *   (a rule without ports becomes "these ports"; a rule with ports keeps
 *   only the part that overlaps them);
 * - a sharing service no policy selects stays open on its own ports (an
 *   allow-from-everywhere rule on them, synthesized here);
 * - anything else to the IP — a port no sharing service declares, ICMP,
 *   a non-first fragment nobody tracked — matches no rule: default deny.
 *   (No service of the IP answers there; a policed service on its own IP
 *   keeps its written semantics, ICMP rules included.)
 *
 * Rule ids stay the repository's, so counters and `herald policy trace`
 * name the rule (and through its origin, the service) that decided.
 * Synthesized "open" rules take ids from OPEN_RULE_BASE up.
 */
import { PROTO, type L4Proto, type PeerBlock, type PolicyRule, type PortRange } from './model.js';

export interface ServicePort {
  readonly proto: L4Proto;
  readonly port: number;
  /** The backend port it leads to, when named: what a policy's named port resolves against (named-ports.ts). */
  readonly targetPort?: string;
}

export interface Sharer {
  /** `namespace/name`. */
  readonly service: string;
  readonly ports: readonly ServicePort[];
  /** The rules selecting the service (empty: no policy selects it — open on its ports). */
  readonly rules: readonly PolicyRule[];
}

/** Ids of synthesized rules (repository ids are far below). */
export const OPEN_RULE_BASE = 0x7f000000;

const EVERYWHERE: readonly PeerBlock[] = [
  { cidr: { family: 4, addr: 0n, len: 0 }, except: [] },
  { cidr: { family: 6, addr: 0n, len: 0 }, except: [] },
];

const PROTO_TEXT: Readonly<Record<number, string>> = { [PROTO.TCP]: 'TCP', [PROTO.UDP]: 'UDP', [PROTO.SCTP]: 'SCTP' };

export function formatServicePorts(ports: readonly ServicePort[]): string {
  return ports.map((p) => `${p.port}/${PROTO_TEXT[p.proto]}`).join(',');
}

/** The part of `ranges` (undefined: every packet) that falls on the service's ports. */
export function restrictToPorts(ranges: readonly PortRange[] | undefined, ports: readonly ServicePort[]): PortRange[] {
  const out: PortRange[] = [];
  for (const p of ports) {
    const hit = ranges === undefined || ranges.some((r) => r.proto === p.proto && r.lo <= p.port && p.port <= r.hi);
    if (hit) out.push({ proto: p.proto, lo: p.port, hi: p.port });
  }
  return out;
}

/** The merged rule set of a shared IP (see the header). Pure. */
export function mergeSharedRules(sharers: readonly Sharer[]): PolicyRule[] {
  const out: PolicyRule[] = [];
  let open = OPEN_RULE_BASE;
  for (const s of [...sharers].sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0))) {
    const on = ` (on ${s.service}'s ports ${formatServicePorts(s.ports) || 'none'})`;
    if (s.rules.length === 0) {
      open++;
      if (s.ports.length > 0) out.push({ id: open, verdict: 'allow', peers: EVERYWHERE, ports: restrictToPorts(undefined, s.ports), origin: `Service ${s.service}: no policy selects it, open${on}` });
      continue;
    }
    for (const r of s.rules) {
      const ports = restrictToPorts(r.ports, s.ports);
      if (ports.length === 0) continue; // none of its ports: it cannot decide anything on this IP
      out.push({ id: r.id, verdict: r.verdict, peers: r.peers, ports, origin: `${r.origin}${on}` });
    }
  }
  return out;
}
