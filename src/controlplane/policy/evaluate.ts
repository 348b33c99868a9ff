/**
 * The reference evaluator: the semantics of model.ts written as plainly as
 * possible, rule by rule. The datapath (via compile.ts) must agree with it on
 * every packet; the property test checks exactly that.
 */
import { NO_DEFAULT_DENY_RULE, prefixContains, type Decision, type Packet, type PeerBlock, type PolicyRule } from './model.js';

export function peerMatches(block: PeerBlock, packet: Packet): boolean {
  if (!prefixContains(block.cidr, packet.family, packet.src)) return false;
  return !block.except.some((e) => prefixContains(e, packet.family, packet.src));
}

export function ruleMatches(rule: PolicyRule, packet: Packet): boolean {
  if (!rule.peers.some((b) => peerMatches(b, packet))) return false;
  if (rule.ports === undefined) return true;
  const dport = packet.dport;
  if (dport === undefined) return false;
  return rule.ports.some((r) => r.proto === packet.proto && r.lo <= dport && dport <= r.hi);
}

/** The verdict for a packet to a service selected by `rules` (an empty list still means selected: default deny). */
export function evaluate(rules: readonly PolicyRule[], packet: Packet): Decision {
  let deny: number | undefined;
  let allow: number | undefined;
  for (const rule of rules) {
    if (!ruleMatches(rule, packet)) continue;
    if (rule.verdict === 'deny') deny = deny === undefined ? rule.id : Math.min(deny, rule.id);
    else allow = allow === undefined ? rule.id : Math.min(allow, rule.id);
  }
  if (deny !== undefined) return { verdict: 'deny', rule: deny };
  if (allow !== undefined) return { verdict: 'allow', rule: allow };
  // Selected only by policies with enableDefaultDeny.ingress false: not default deny.
  if (rules.length > 0 && rules.every((r) => r.defaultDeny === false)) return { verdict: 'allow', rule: NO_DEFAULT_DENY_RULE };
  return { verdict: 'deny', rule: 0 };
}
