/**
 * `herald policy trace`: the verdict for one packet, computed from the
 * service-policy rows exactly as the datapath computes it (the longest
 * matching source prefix of the service's table, then the first matching
 * entry; nothing: default deny), naming the deciding rule.
 */
import type { PolicyPrefixEntry, ServicePolicyRow } from '../../datapath/tables/service-policy.js';
import { hostMask, type Packet } from './model.js';

export interface TraceResult {
  readonly service?: string;
  readonly verdict: 'allow' | 'deny' | 'open';
  readonly rule: number;
  readonly origin?: string;
  readonly text?: string;
  readonly prefix?: PolicyPrefixEntry;
}

type RowLike = Pick<ServicePolicyRow, 'service' | 'ips' | 'prefixes' | 'rules'>;

export function trace(rows: readonly RowLike[], dst: string, packet: Packet): TraceResult {
  const row = rows.find((r) => r.ips.includes(dst));
  if (!row) return { verdict: 'open', rule: 0, text: `no policy selects ${dst}: open` };
  let best: PolicyPrefixEntry | undefined;
  for (const p of row.prefixes) {
    if (p.family !== packet.family) continue;
    if ((packet.src & ~hostMask(p.family, p.len)) !== p.addr) continue;
    if (!best || p.len > best.len) best = p;
  }
  const decide = (rule: number, verdict: 'allow' | 'deny'): TraceResult => {
    const r = row.rules.find((x) => x.id === rule);
    return { service: row.service, verdict, rule, ...(r ? { origin: r.origin, text: r.text } : { text: 'default deny: selected, and no rule allows it' }), ...(best ? { prefix: best } : {}) };
  };
  for (const e of best?.entries ?? []) {
    const match = e.any || (packet.dport !== undefined && e.proto === packet.proto && packet.dport >= e.lo && packet.dport <= e.hi);
    if (match) return decide(e.rule, e.deny ? 'deny' : 'allow');
  }
  return decide(0, 'deny');
}
