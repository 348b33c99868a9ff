/**
 * What the supervised agent tells its supervisor, one line per fact on fd 3:
 * `lease <id>` whenever an etcd lease is granted (the ids of every lease that
 * may hold its keys); `journal <key prefix>` once, where its timeline events
 * go in the store, so that the supervisor can write the one event a dead
 * process cannot: that it crashed (before its lease is revoked, so the
 * takeover that follows names a crash, not a lease expiry). Set in the
 * child's environment: the fd number.
 */
export const SUPERVISED_ENV = 'HERALD_SUPERVISOR_FD';

export function leaseReport(id: string): string {
  return `lease ${id}\n`;
}

export function journalReport(prefix: string): string {
  return `journal ${prefix}\n`;
}

export function parseReport(line: string): { lease: string } | { journal: string } | undefined {
  const m = /^lease (\d+)$/.exec(line.trim());
  if (m) return { lease: m[1]! };
  // A store key prefix: printable, no spaces, bounded.
  const j = /^journal ([\x21-\x7e]{1,512}\/)$/.exec(line.trim());
  return j ? { journal: j[1]! } : undefined;
}
