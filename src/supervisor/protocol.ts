/**
 * What the supervised agent tells its supervisor, one line per fact on fd 3:
 * `lease <id>` whenever an etcd lease is granted (the ids of every lease that
 * may hold its keys); `journal <key prefix>` once, where its timeline events
 * go in the store, so that the supervisor can write the one event a dead
 * process cannot: that it crashed (before its lease is revoked, so the
 * takeover that follows names a crash, not a lease expiry);
 * `kube-lease <namespace>/<name> <incarnation>` once, on the Kubernetes store:
 * the child's node Lease and the incarnation stamped on it, so that the
 * supervisor deletes that Lease when the child dies — and only while it is
 * still this child's (a restarted agent stamps another incarnation);
 * `handover-plan <lease> <record key> <owners prefix> <record>` whenever the
 * etcd hand-over a crash should make changes (`handover-plan -`: none), so
 * that the supervisor hands the dead child's IPs straight to their successors
 * as a stop would, before it revokes the lease. Set in the child's
 * environment: the fd number.
 */
import { HANDOVER_RECORD_MAX_BYTES, type CrashHandoverPlan } from '../store/etcd/handover-record.js';

export const SUPERVISED_ENV = 'HERALD_SUPERVISOR_FD';

export function leaseReport(id: string): string {
  return `lease ${id}\n`;
}

export function journalReport(prefix: string): string {
  return `journal ${prefix}\n`;
}

/**
 * On a node Lease: which agent process wrote it (a fresh id per process).
 * The supervisor deletes a crashed agent's node Lease only while it still
 * carries that agent's incarnation, so a restarted agent's Lease is never hit.
 */
export const INCARNATION_ANNOTATION = 'herald.dev/incarnation';

export interface KubeLeaseReport {
  namespace: string;
  name: string;
  incarnation: string;
}

export function kubeLeaseReport(l: KubeLeaseReport): string {
  return `kube-lease ${l.namespace}/${l.name} ${l.incarnation}\n`;
}

export function handoverPlanReport(plan: CrashHandoverPlan | undefined): string {
  return plan ? `handover-plan ${plan.lease} ${plan.recordKey} ${plan.ownersPrefix} ${plan.record}\n` : 'handover-plan -\n';
}

export type Report = { lease: string } | { journal: string } | { kubeLease: KubeLeaseReport } | { handoverPlan: CrashHandoverPlan | null };

/** Store keys in a report: printable, no spaces, bounded. */
const KEY = /^[\x21-\x7e]{1,512}$/;

/** `handover-plan …` (split by hand: the record may be a megabyte; its content is checked where it is used). */
function parseHandoverPlan(line: string): Report | undefined {
  const rest = line.slice('handover-plan '.length);
  if (rest === '-') return { handoverPlan: null };
  const parts = rest.split(' ', 3);
  if (parts.length !== 3) return undefined;
  const [lease, recordKey, ownersPrefix] = parts as [string, string, string];
  const record = rest.slice(lease.length + recordKey.length + ownersPrefix.length + 3);
  if (!/^\d{1,20}$/.test(lease) || !KEY.test(recordKey) || !KEY.test(ownersPrefix) || record === '' || Buffer.byteLength(record) > HANDOVER_RECORD_MAX_BYTES) return undefined;
  return { handoverPlan: { lease, recordKey, ownersPrefix, record } };
}

export function parseReport(line: string): Report | undefined {
  if (line.startsWith('handover-plan ')) return parseHandoverPlan(line.trimEnd());
  const m = /^lease (\d+)$/.exec(line.trim());
  if (m) return { lease: m[1]! };
  // DNS-1123 names (namespace ≤ 63, Lease ≤ 253), an incarnation of [A-Za-z0-9-], bounded.
  const k = /^kube-lease ([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/([a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?) ([A-Za-z0-9-]{1,64})$/.exec(line.trim());
  if (k) return { kubeLease: { namespace: k[1]!, name: k[3]!, incarnation: k[5]! } };
  // A store key prefix: printable, no spaces, bounded.
  const j = /^journal ([\x21-\x7e]{1,512}\/)$/.exec(line.trim());
  return j ? { journal: j[1]! } : undefined;
}
