/**
 * The cluster view's snapshot: every node, every service IP, pools, rejected
 * intent and the recent timeline, built from the same status model as
 * `herald status` plus what the store holds (owners of every IP, node cards).
 * Pure: the agent hands it plain data.
 */
import { compareIps, parseIp } from '../../core/addr.js';
import type { ClusterEvent } from '../../core/events.js';
import type { IntentStatus } from '../intent-status.js';

export interface ViewNode {
  name: string;
  alive: boolean;
  self: boolean;
  lease: string;
  interfaces: string[];
  owned: number;
  version: string;
  lastError: string | null;
  startedAt: string | null;
}

export interface ViewIp {
  ip: string;
  family: 4 | 6;
  services: string[];
  mode: string;
  /** The owning node (L2) or null when nobody owns it. */
  owner: string | null;
  /** Advertising nodes (BGP). */
  advertisedBy: string[];
  /** When the current owner took it (from the timeline), if known. */
  since: string | null;
  /** Answers counted by this node's datapath (only for IPs this node answers for). */
  replies: number | null;
}

export interface ViewSnapshot {
  node: string;
  version: string;
  store: string;
  generatedAt: string;
  lastEventId: number;
  nodes: ViewNode[];
  ips: ViewIp[];
  pools: { pool: string; total: string; used: string; free: string; conflicting: boolean; disabled: boolean }[];
  rejected: IntentStatus['rejected'];
  conflicts: { ip: string; foreignMac: string; claims: number }[];
  garp: { sent: number; failed: number };
  events: ClusterEvent[];
}

export interface ViewInput {
  node: string;
  version: string;
  store: 'local' | 'etcd';
  startedAt: string;
  /** This node's lease state (etcd) or 'local'. */
  lease: string;
  lastError: string | null;
  /** Interfaces this node announces on. */
  interfaces: string[];
  /** Service → ingress IPs (LB-IPAM, the same on every node). */
  services: ReadonlyMap<string, readonly string[]>;
  /** IP → owner node, cluster-wide with etcd (this node's own IPs with the local store). */
  owners: ReadonlyMap<string, string>;
  /** IPs this node advertises over BGP. */
  bgpAdvertised: ReadonlySet<string>;
  /** Answers per IP on this node. */
  replies: ReadonlyMap<string, number>;
  /** Other nodes from the store (etcd): their cards. */
  peers: ReadonlyMap<string, { version: string; startedAt: string; interfaces: string[]; owned: number; lastError?: string }>;
  pools: readonly { pool: string; total: string; used: string; available: string; conflicting: boolean; disabled: boolean }[];
  rejected: IntentStatus['rejected'];
  conflicts: readonly { ip: string; foreignMac: string; claims: number }[];
  garp: { sent: number; failed: number };
  events: readonly ClusterEvent[];
  lastEventId: number;
}

/** Events in a snapshot: the most recent ones (the stream carries the rest). */
export const SNAPSHOT_EVENTS = 300;

export function buildView(i: ViewInput): ViewSnapshot {
  const servicesOf = new Map<string, string[]>();
  for (const [svc, ips] of i.services) for (const ip of ips) servicesOf.set(ip, [...(servicesOf.get(ip) ?? []), svc]);
  const allIps = new Set<string>([...servicesOf.keys(), ...i.owners.keys(), ...i.bgpAdvertised]);
  // Since when each owner holds its IP: the last move to it on the timeline.
  const since = new Map<string, { node: string; at: string }>();
  for (const e of i.events) if (e.kind === 'owner-took') since.set(e.ip, { node: e.node, at: e.at });
  const ownedCount = new Map<string, number>();
  for (const n of i.owners.values()) ownedCount.set(n, (ownedCount.get(n) ?? 0) + 1);
  // IPv4 before IPv6, then numeric; each address parsed once (a locale-aware compare cost 1 s for 10k).
  const parsed = new Map([...allIps].map((ip) => [ip, parseIp(ip)] as const));
  const ips: ViewIp[] = [...allIps]
    .sort((a, b) => {
      const x = parsed.get(a);
      const y = parsed.get(b);
      return x && y ? compareIps(x, y) : a < b ? -1 : a > b ? 1 : 0;
    })
    .map((ip) => {
      const owner = i.owners.get(ip) ?? null;
      const s = since.get(ip);
      const bgp = i.bgpAdvertised.has(ip);
      return {
        ip,
        family: ip.includes(':') ? 6 : 4,
        services: servicesOf.get(ip) ?? [],
        mode: owner && bgp ? 'L2+BGP' : bgp ? 'BGP' : 'L2',
        owner,
        advertisedBy: bgp ? [i.node] : [],
        since: s && s.node === owner ? s.at : null,
        replies: i.replies.get(ip) ?? null,
      };
    });
  const nodes: ViewNode[] = [
    {
      name: i.node,
      alive: true,
      self: true,
      lease: i.lease,
      interfaces: i.interfaces,
      owned: ownedCount.get(i.node) ?? 0,
      version: i.version,
      lastError: i.lastError,
      startedAt: i.startedAt,
    },
  ];
  const names = new Set([i.node]);
  for (const [name, card] of [...i.peers].sort(([a], [b]) => a.localeCompare(b))) {
    if (names.has(name)) continue;
    names.add(name);
    nodes.push({ name, alive: true, self: false, lease: 'live', interfaces: card.interfaces, owned: ownedCount.get(name) ?? 0, version: card.version, lastError: card.lastError ?? null, startedAt: card.startedAt });
  }
  // Nodes seen on the timeline or as owners but without a card: gone (lease ended).
  for (const name of [...new Set([...i.events.map((e) => e.node), ...i.owners.values()])].sort()) {
    if (names.has(name)) continue;
    names.add(name);
    nodes.push({ name, alive: false, self: false, lease: 'gone', interfaces: [], owned: ownedCount.get(name) ?? 0, version: '', lastError: null, startedAt: null });
  }
  return {
    node: i.node,
    version: i.version,
    store: i.store,
    generatedAt: new Date().toISOString(),
    lastEventId: i.lastEventId,
    nodes,
    ips,
    pools: i.pools.map((p) => ({ pool: p.pool, total: p.total, used: p.used, free: p.available, conflicting: p.conflicting, disabled: p.disabled })),
    rejected: i.rejected,
    conflicts: [...i.conflicts],
    garp: i.garp,
    events: i.events.slice(-SNAPSHOT_EVENTS),
  };
}
