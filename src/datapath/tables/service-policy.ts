/**
 * The service-policy table: for every service some policy selects, the
 * compiled source-prefix table the datapath enforces, and the repository
 * revision it was computed at. The contract between the policy pipeline
 * (controlplane/policy, which writes it) and the policy datapath reconciler.
 * A service with no row is open: no policy selects it.
 */
import { defineTable } from '../../core/statedb/index.js';

export interface PolicyL4Entry {
  /** IP protocol; 0 with `any`. */
  readonly proto: number;
  readonly deny: boolean;
  /** Matches every packet (a rule without ports). */
  readonly any: boolean;
  readonly lo: number;
  readonly hi: number;
  /** The rule this entry stands for (0 never appears here: default deny is the absence of a match). */
  readonly rule: number;
}

export interface PolicyPrefixEntry {
  readonly family: 4 | 6;
  /** Network address as an unsigned integer of the family's width. */
  readonly addr: bigint;
  readonly len: number;
  /** In decision order: the first matching entry decides. */
  readonly entries: readonly PolicyL4Entry[];
}

export interface ServicePolicyRow {
  /** `namespace/name`. */
  readonly service: string;
  /** Stable small id: the datapath's counter key and slot base. */
  readonly svcId: number;
  /** Service IPs (canonical text) the policy guards. */
  readonly ips: readonly string[];
  /** Repository revision this row was computed at. */
  readonly revision: number;
  readonly prefixes: readonly PolicyPrefixEntry[];
  /** The effective rules, for `herald policy` and trace. */
  readonly rules: readonly { readonly id: number; readonly verdict: 'allow' | 'deny'; readonly origin: string; readonly text: string }[];
}

export const servicePolicyTable = defineTable<ServicePolicyRow>({
  name: 'service-policy',
  primaryKey: (r) => r.service,
  columns: ['SERVICE', 'ID', 'IPS', 'REVISION', 'RULES', 'PREFIXES'],
  toColumns: (r) => [r.service, String(r.svcId), r.ips.join(','), String(r.revision), String(r.rules.length), String(r.prefixes.length)],
});
