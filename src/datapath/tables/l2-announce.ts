/**
 * The L2 announce table: which IPs this node answers ARP (later NDP) for, on
 * which interface, and who wants it. The contract between the control plane
 * (which writes it) and the datapath reconciler (which reads it).
 */
import { defineTable } from '../../core/statedb/index.js';

export interface L2AnnounceRow {
  /** IPv4 dotted quad or canonical IPv6. */
  readonly ip: string;
  /** Interface name (resolved to an ifindex by the reconciler, re-resolved when links change). */
  readonly iface: string;
  /** Who wants it announced, e.g. "service:default/web" or "static"; sorted, non-empty. */
  readonly origins: readonly string[];
}

export const l2AnnounceKey = (ip: string, iface: string) => `${ip}|${iface}`;

export const l2AnnounceTable = defineTable<L2AnnounceRow, 'ip'>({
  name: 'l2-announce',
  primaryKey: (r) => l2AnnounceKey(r.ip, r.iface),
  // By IP only (the local routes ask "is this IP announced anywhere?"): an
  // index nobody reads costs every write of a hand-over of 1,000 rows.
  indexes: { ip: (r) => r.ip },
  columns: ['IP', 'INTERFACE', 'ORIGINS'],
  toColumns: (r) => [r.ip, r.iface, r.origins.join(',')],
});

/** Merges an origin into a row (or creates it); rows with no origin left are deleted by the caller. */
export function withOrigin(row: L2AnnounceRow | undefined, ip: string, iface: string, origin: string): L2AnnounceRow {
  const origins = new Set(row?.origins ?? []);
  origins.add(origin);
  return { ip, iface, origins: [...origins].sort() };
}

export function withoutOrigin(row: L2AnnounceRow, origin: string): L2AnnounceRow | undefined {
  const origins = row.origins.filter((o) => o !== origin);
  return origins.length === 0 ? undefined : { ...row, origins };
}
