/**
 * How the generic reconciler applies service-policy rows to the policy maps,
 * hitlessly: each service owns two LPM slots (svcId*2, svcId*2+1). A new
 * revision is written into the idle slot, complete, and only then does one
 * update per service IP flip the svc map to it. The slot left behind is
 * cleared just before it is reused (one revision later), so a packet that
 * read the old slot a moment before the flip still finds every entry.
 */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import type { PolicyL4Entry, ServicePolicyRow } from '../tables/service-policy.js';
import { familyOfIp, type LpmKey } from './layout.js';
import type { PolicyMaps } from './program.js';

interface Applied {
  svcId: number;
  gen: 0 | 1;
  ips: Set<string>;
  /** LPM keys written per generation. */
  keys: [LpmKey[], LpmKey[]];
  revision: number;
}

export interface PolicyOpsEvents {
  /** A service's new revision is enforced (its svc entries point at it). */
  onEnforced?(service: string, revision: number): void;
}

export class PolicyMapOps implements ReconcilerOps<ServicePolicyRow> {
  private readonly applied = new Map<string, Applied>();

  constructor(
    private readonly maps: PolicyMaps,
    private readonly events: PolicyOpsEvents = {},
  ) {}

  /** The revision enforced per service (what `herald policy` shows as realized). */
  realized(): ReadonlyMap<string, number> {
    return new Map([...this.applied].map(([k, a]) => [k, a.revision]));
  }

  update(row: ServicePolicyRow): void {
    let a = this.applied.get(row.service);
    if (a && a.svcId !== row.svcId) {
      this.delete({ ...row, ips: [...a.ips], svcId: a.svcId });
      a = undefined;
    }
    const gen: 0 | 1 = a ? (a.gen === 0 ? 1 : 0) : 0;
    const slot = row.svcId * 2 + gen;
    const state: Applied = a ?? { svcId: row.svcId, gen, ips: new Set(), keys: [[], []], revision: 0 };
    // 1. Clear what an older revision left in the idle slot.
    for (const k of state.keys[gen]) this.lpm(k.family).delete(k);
    state.keys[gen] = [];
    // 2. Write the new revision, complete, into it.
    for (const p of row.prefixes) {
      const key: LpmKey = { slot, family: p.family, addr: p.addr, len: p.len };
      this.lpm(p.family).update(key, p.entries as PolicyL4Entry[]);
      state.keys[gen].push(key);
    }
    // 3. Flip every service IP to it (one map update each).
    const ips = new Set(row.ips);
    for (const ip of ips) this.svc(ip).update(ip, { slot, svcId: row.svcId });
    for (const ip of state.ips) if (!ips.has(ip)) this.svc(ip).delete(ip);
    state.ips = ips;
    state.gen = gen;
    state.revision = row.revision;
    this.applied.set(row.service, state);
    this.events.onEnforced?.(row.service, row.revision);
  }

  delete(row: ServicePolicyRow): void {
    const a = this.applied.get(row.service);
    for (const ip of new Set([...row.ips, ...(a?.ips ?? [])])) this.svc(ip).delete(ip);
    if (a) for (const keys of a.keys) for (const k of keys) this.lpm(k.family).delete(k);
    this.applied.delete(row.service);
  }

  prune(desired: readonly ServicePolicyRow[]): void {
    const wanted = new Set(desired.map((r) => r.service));
    for (const [service, a] of this.applied) {
      if (!wanted.has(service)) this.delete({ service, svcId: a.svcId, ips: [...a.ips], revision: 0, prefixes: [], rules: [] });
    }
    // Entries this agent did not write (a previous run's pins) are left alone
    // until their service is written again; see README "left undone".
  }

  private svc(ip: string) {
    return familyOfIp(ip) === 4 ? this.maps.svc4 : this.maps.svc6;
  }

  private lpm(family: 4 | 6) {
    return family === 4 ? this.maps.lpm4 : this.maps.lpm6;
  }
}
