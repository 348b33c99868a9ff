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
 * still this child's (a restarted agent stamps another incarnation). Set in
 * the child's environment: the fd number.
 */
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

export type Report = { lease: string } | { journal: string } | { kubeLease: KubeLeaseReport };

export function parseReport(line: string): Report | undefined {
  const m = /^lease (\d+)$/.exec(line.trim());
  if (m) return { lease: m[1]! };
  // DNS-1123 names (namespace ≤ 63, Lease ≤ 253), an incarnation of [A-Za-z0-9-], bounded.
  const k = /^kube-lease ([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/([a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?) ([A-Za-z0-9-]{1,64})$/.exec(line.trim());
  if (k) return { kubeLease: { namespace: k[1]!, name: k[3]!, incarnation: k[5]! } };
  // A store key prefix: printable, no spaces, bounded.
  const j = /^journal ([\x21-\x7e]{1,512}\/)$/.exec(line.trim());
  return j ? { journal: j[1]! } : undefined;
}
