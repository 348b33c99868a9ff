/**
 * What the supervised agent tells its supervisor, one line per fact on fd 3:
 * `lease <id>` whenever an etcd lease is granted (the ids of every lease that
 * may hold its keys). Set in the child's environment: the fd number.
 */
export const SUPERVISED_ENV = 'HERALD_SUPERVISOR_FD';

export function leaseReport(id: string): string {
  return `lease ${id}\n`;
}

export function parseReport(line: string): { lease: string } | undefined {
  const m = /^lease (\d+)$/.exec(line.trim());
  return m ? { lease: m[1]! } : undefined;
}
