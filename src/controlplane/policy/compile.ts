/**
 * A service's effective rules → the longest-prefix-match table the datapath
 * looks up: for every prefix any rule mentions (a cidr or an except), the
 * ordered list of L4 entries of the rules that match the addresses whose
 * longest mentioned prefix it is.
 *
 * Why that is exact: the mentioned prefixes that contain an address form a
 * chain, and all of them contain its longest match P. So "address in cidr C
 * and in no except E" depends only on P: C and E are ancestors-or-self of P.
 * A prefix no rule matches is still stored (with no entries), or the lookup
 * would fall through to its parent.
 *
 * Entry order is the evaluator's decision order: deny rules by id, then allow
 * rules by id; the datapath takes the first matching entry. Entries after a
 * port-less rule can never decide and are left out.
 */
import { HeraldError } from '../../core/errors.js';
import type { PolicyL4Entry, PolicyPrefixEntry } from '../../datapath/tables/service-policy.js';
import { FAMILY_WIDTH, hostMask, prefixKey, formatPrefix, type Family, type PeerBlock, type PolicyRule, type Prefix } from './model.js';

/** Entries per prefix the datapath value holds (MAX_L4 in bpf/policy.bpf.c). */
export const MAX_L4_ENTRIES = 16;

export type L4Entry = PolicyL4Entry;

export interface CompiledPrefix {
  readonly prefix: Prefix;
  readonly entries: readonly L4Entry[];
}

/** Keyed by prefixKey. */
export type CompiledPolicy = ReadonlyMap<string, CompiledPrefix>;

function decisionOrder(a: PolicyRule, b: PolicyRule): number {
  if (a.verdict !== b.verdict) return a.verdict === 'deny' ? -1 : 1;
  return a.id - b.id;
}

function entriesOf(rules: readonly PolicyRule[]): L4Entry[] {
  const out: L4Entry[] = [];
  for (const rule of rules) {
    const deny = rule.verdict === 'deny';
    if (rule.ports === undefined) {
      out.push({ proto: 0, deny, any: true, lo: 0, hi: 65535, rule: rule.id });
      break; // nothing after a port-less entry can decide
    }
    for (const r of rule.ports) out.push({ proto: r.proto, deny, any: false, lo: r.lo, hi: r.hi, rule: rule.id });
  }
  return out;
}

/** Throws HERALD_POLICY_TOO_COMPLEX when a prefix needs more than MAX_L4_ENTRIES entries. */
export function compilePolicy(rules: readonly PolicyRule[], service = 'service'): CompiledPolicy {
  if (rules.length === 1 && rules[0]!.peers.every((b) => b.except.length === 0)) return compileOne(rules[0]!, service);
  const ordered = [...rules].sort(decisionOrder);
  // Peer blocks by their cidr and by each of their excepts, to find a prefix's ancestors quickly.
  const byCidr = new Map<string, { rule: PolicyRule; block: PeerBlock }[]>();
  const byExcept = new Map<string, PeerBlock[]>();
  const mentioned = new Map<string, Prefix>();
  const push = <T>(m: Map<string, T[]>, k: string, v: T) => {
    const list = m.get(k);
    if (list) list.push(v);
    else m.set(k, [v]);
  };
  for (const rule of ordered) {
    for (const block of rule.peers) {
      const k = prefixKey(block.cidr);
      push(byCidr, k, { rule, block });
      mentioned.set(k, block.cidr);
      for (const e of block.except) {
        const ek = prefixKey(e);
        push(byExcept, ek, block);
        mentioned.set(ek, e);
      }
    }
  }
  // Only lengths some prefix has can hold an ancestor: look those up, not every length.
  const lengths: Record<Family, number[]> = { 4: [], 6: [] };
  for (const p of mentioned.values()) if (!lengths[p.family].includes(p.len)) lengths[p.family].push(p.len);
  lengths[4].sort((a, b) => a - b);
  lengths[6].sort((a, b) => a - b);
  const out = new Map<string, CompiledPrefix>();
  for (const [key, prefix] of mentioned) {
    const inside = new Set<PeerBlock>();
    const excluded = new Set<PeerBlock>();
    const candidates: { rule: PolicyRule; block: PeerBlock }[] = [];
    for (const len of lengths[prefix.family]) {
      if (len > prefix.len) break;
      const ak = prefixKey({ family: prefix.family, len, addr: prefix.addr & ~hostMask(prefix.family, len) });
      for (const c of byCidr.get(ak) ?? []) {
        inside.add(c.block);
        candidates.push(c);
      }
      for (const b of byExcept.get(ak) ?? []) excluded.add(b);
    }
    const matching = new Set<PolicyRule>();
    for (const c of candidates) if (inside.has(c.block) && !excluded.has(c.block)) matching.add(c.rule);
    const entries = entriesOf([...matching].sort(decisionOrder));
    if (entries.length > MAX_L4_ENTRIES) tooComplex(service, prefix, entries.length);
    out.set(key, { prefix, entries });
  }
  return out;
}

/**
 * The common shape (one rule, its peers without excepts: a CNP with one
 * fromCIDR list) without the general walk: every prefix it mentions is one
 * of its own cidrs, so each gets the rule's entries.
 */
function compileOne(rule: PolicyRule, service: string): CompiledPolicy {
  const entries = entriesOf([rule]);
  const out = new Map<string, CompiledPrefix>();
  if (entries.length > MAX_L4_ENTRIES && rule.peers.length > 0) tooComplex(service, rule.peers[0]!.cidr, entries.length);
  for (const b of rule.peers) out.set(prefixKey(b.cidr), { prefix: b.cidr, entries });
  return out;
}

function tooComplex(service: string, prefix: Prefix, entries: number): never {
  throw new HeraldError(
    'HERALD_POLICY_TOO_COMPLEX',
    `${service}: source ${formatPrefix(prefix)} is matched by ${entries} port entries, the datapath holds ${MAX_L4_ENTRIES} per prefix (merge port ranges or rules)`,
  );
}

/** Equal compiled policies need no datapath write. */
export function compiledEqual(a: CompiledPolicy, b: CompiledPolicy): boolean {
  if (a.size !== b.size) return false;
  for (const [k, x] of a) {
    const y = b.get(k);
    if (!y || y.entries.length !== x.entries.length) return false;
    for (let i = 0; i < x.entries.length; i++) {
      const p = x.entries[i]!;
      const q = y.entries[i]!;
      if (p.proto !== q.proto || p.deny !== q.deny || p.any !== q.any || p.lo !== q.lo || p.hi !== q.hi || p.rule !== q.rule) return false;
    }
  }
  return true;
}

export function familyWidth(f: Family): number {
  return FAMILY_WIDTH[f];
}

/** The datapath table's form of a compiled policy. */
export function toPrefixEntries(compiled: CompiledPolicy): PolicyPrefixEntry[] {
  return [...compiled.values()].map(({ prefix, entries }) => ({ family: prefix.family, addr: prefix.addr, len: prefix.len, entries }));
}
