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
  /** "ok" or what is wrong (from its report; "unreachable: …" when its status endpoint did not answer; "" unknown). */
  health: string;
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
  /** ARP/NDP answers per node, from every node reached (this one and the peers' status endpoints). */
  answers: Record<string, number>;
  /** The LB-IPAM pool whose blocks hold it. */
  pool: string | null;
  /** Load-balancer frontends on it (lb-services table) with their backends. */
  lb: ViewLbFrontend[];
  /** Revision of the traffic policy guarding it (service-policy table); null: no policy selects it. */
  policyRevision: number | null;
  /** Its rows' reconcile state on every node reached (row status): done, pending or error, with where and why. */
  reconcile: ViewReconcile;
}

export interface ViewLbFrontend {
  frontend: string;
  mode: string;
  /** "ip:port", "(terminating)" appended for a terminating one. */
  backends: string[];
}

export interface ViewReconcile {
  state: 'done' | 'pending' | 'error';
  /** "" when done; otherwise "node reconciler: error" items joined by "; ". */
  detail: string;
}

/** A row not done (pending or in error) on some node, as `herald status` reports it. */
export interface NotDoneRow {
  reconciler: string;
  key: string;
  kind: 'pending' | 'error' | 'done';
  error?: string;
}

/**
 * What one node tells the others about itself (GET /v1/node on its view
 * server): its per-IP answer counters, its rows not done, its health. Small
 * on purpose: no intent, no events (those are in the store).
 */
export interface NodeReport {
  node: string;
  at: number;
  replies: Record<string, number>;
  notDone: NotDoneRow[];
  /** "ok", or what is wrong (failing jobs, rows in error, last error). */
  health: string;
}

/** A peer's report as the aggregating node last got it. */
export interface PeerReport {
  /** Null until the first answer. */
  report: NodeReport | null;
  /** Why the last fetch failed ("" when it answered). */
  error: string;
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
  /** IP → pool (whose blocks hold it). */
  poolOf?: ReadonlyMap<string, string>;
  /** lb-services rows. */
  lbFrontends?: readonly { key: string; vip: string; mode: string; backends: readonly { ip: string; port: number; terminating: boolean }[] }[];
  /** service-policy rows. */
  policies?: readonly { service: string; ips: readonly string[]; revision: number }[];
  /** This node's report (rows not done, health). */
  self?: Omit<NodeReport, 'replies'>;
  /** Peers' reports, fetched from their status endpoints (by node name). */
  peerReports?: ReadonlyMap<string, PeerReport>;
  /** buildDetails() of the three above, when the caller keeps it. */
  details?: ReadonlyMap<string, IpDetails>;
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

/** The IPs a reconcile-status key stands for: `ip|iface` (l2 tables), `ip/len` (routes), `vip:port/proto` (lb frontends), a service (policy). */
export function ipsOfRowKey(key: string, serviceIps: ReadonlyMap<string, readonly string[]>): readonly string[] {
  const bar = key.indexOf('|');
  if (bar > 0) return [key.slice(0, bar)];
  const frontend = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):\d+\/[A-Z]+$/.exec(key);
  if (frontend) return [(frontend[1] ?? frontend[2])!];
  const prefix = /^([0-9a-fA-F:.]+)\/\d{1,3}$/.exec(key);
  if (prefix && parseIp(prefix[1]!)) return [prefix[1]!];
  return serviceIps.get(key) ?? [];
}

/** Per IP, the reconcile state of its rows on every node: errors first, then pending; IPs absent are done. */
export function reconcileByIp(rows: Iterable<{ node: string; row: NotDoneRow }>, serviceIps: ReadonlyMap<string, readonly string[]>): Map<string, ViewReconcile> {
  const out = new Map<string, { error: string[]; pending: string[] }>();
  for (const { node, row } of rows) {
    if (row.kind === 'done') continue;
    for (const ip of ipsOfRowKey(row.key, serviceIps)) {
      const e = out.get(ip) ?? { error: [], pending: [] };
      if (row.kind === 'error') e.error.push(`${node} ${row.reconciler}: ${(row.error ?? 'error').slice(0, 200)}`);
      else e.pending.push(`${node} ${row.reconciler}`);
      out.set(ip, e);
    }
  }
  return new Map(
    [...out].map(([ip, e]) => [ip, e.error.length > 0 ? { state: 'error', detail: [...new Set(e.error)].join('; ') } : { state: 'pending', detail: [...new Set(e.pending)].join('; ') }] as const),
  );
}

/** What is pushed every second: answers per node and IP, each node's health, the IPs whose rows are not done. */
export interface CountersPush {
  answers: Record<string, Record<string, number>>;
  health: Record<string, string>;
  reconcile: Record<string, ViewReconcile>;
  /** Pool, LB backends and policy revision of the IPs where they changed since the last push. */
  details?: Record<string, IpDetails>;
}

/** The per-IP columns that follow the tables (lb-services, service-policy) and the pools. */
export type IpDetails = Pick<ViewIp, 'pool' | 'lb' | 'policyRevision'>;

export const NO_DETAILS: IpDetails = { pool: null, lb: [], policyRevision: null };

/** Per IP: its pool, its LB frontends with their backends, the revision of the policy guarding it. */
export function buildDetails(i: Pick<ViewInput, 'poolOf' | 'lbFrontends' | 'policies'> & { services?: ViewInput['services'] }): Map<string, IpDetails> {
  const out = new Map<string, IpDetails>();
  const get = (ip: string) => {
    let d = out.get(ip);
    if (!d) out.set(ip, (d = { pool: null, lb: [], policyRevision: null }));
    return d;
  };
  for (const [ip, pool] of i.poolOf ?? []) get(ip).pool = pool;
  for (const f of i.lbFrontends ?? [])
    get(f.vip).lb.push({ frontend: f.key, mode: f.mode, backends: f.backends.map((b) => `${b.ip.includes(':') ? `[${b.ip}]` : b.ip}:${b.port}${b.terminating ? ' (terminating)' : ''}`) });
  // A policy row lists only the IPs this node announces: the service's other IPs (owned elsewhere) are guarded by the same policy.
  for (const p of i.policies ?? []) for (const ip of new Set([...p.ips, ...(i.services?.get(p.service) ?? [])])) get(ip).policyRevision = Math.max(get(ip).policyRevision ?? 0, p.revision);
  return out;
}

/** The entries of `now` that differ from `before` (IPs gone from `now` get NO_DETAILS); `before` is updated. */
export function diffDetails(before: Map<string, string>, now: ReadonlyMap<string, IpDetails>): Record<string, IpDetails> {
  const out: Record<string, IpDetails> = {};
  for (const [ip, d] of now) {
    const text = JSON.stringify(d);
    if (before.get(ip) !== text) {
      out[ip] = d;
      before.set(ip, text);
    }
  }
  for (const ip of [...before.keys()]) {
    if (now.has(ip)) continue;
    out[ip] = NO_DETAILS;
    before.delete(ip);
  }
  return out;
}

export function nodeHealth(peer: PeerReport | undefined): string {
  if (!peer) return '';
  if (peer.error) return `unreachable: ${peer.error}`;
  return peer.report?.health ?? '';
}

/** Service → its IPs (LB-IPAM ingress and policy rows), to place rows keyed by service. */
function serviceIpsOf(i: Pick<ViewInput, 'services' | 'policies'>): Map<string, readonly string[]> {
  const m = new Map<string, readonly string[]>(i.services);
  for (const p of i.policies ?? []) m.set(p.service, [...new Set([...(m.get(p.service) ?? []), ...p.ips])]);
  return m;
}

export function buildCounters(i: Pick<ViewInput, 'node' | 'replies' | 'self' | 'peerReports' | 'services' | 'policies'>): CountersPush {
  const answers: Record<string, Record<string, number>> = { [i.node]: Object.fromEntries(i.replies) };
  const health: Record<string, string> = { [i.node]: i.self?.health ?? 'ok' };
  const rows: Array<{ node: string; row: NotDoneRow }> = (i.self?.notDone ?? []).map((row) => ({ node: i.node, row }));
  for (const [node, peer] of i.peerReports ?? []) {
    if (node === i.node) continue;
    health[node] = nodeHealth(peer);
    // A peer that did not answer this time: its last counters would be stale, so none are shown (its health says why).
    if (!peer.report || peer.error) continue;
    answers[node] = peer.report.replies;
    for (const row of peer.report.notDone) rows.push({ node, row });
  }
  return { answers, health, reconcile: Object.fromEntries(reconcileByIp(rows, serviceIpsOf(i))) };
}

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
  const counters = buildCounters(i);
  const answersOf = new Map<string, Record<string, number>>();
  for (const [node, replies] of Object.entries(counters.answers))
    for (const [ip, n] of Object.entries(replies)) answersOf.set(ip, { ...(answersOf.get(ip) ?? {}), [node]: n });
  const details = i.details ?? buildDetails(i);
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
        answers: answersOf.get(ip) ?? {},
        ...(details.get(ip) ?? NO_DETAILS),
        reconcile: counters.reconcile[ip] ?? { state: 'done', detail: '' },
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
      health: counters.health[i.node] ?? 'ok',
    },
  ];
  const names = new Set([i.node]);
  for (const [name, card] of [...i.peers].sort(([a], [b]) => a.localeCompare(b))) {
    if (names.has(name)) continue;
    names.add(name);
    nodes.push({ name, alive: true, self: false, lease: 'live', interfaces: card.interfaces, owned: ownedCount.get(name) ?? 0, version: card.version, lastError: card.lastError ?? null, startedAt: card.startedAt, health: counters.health[name] ?? '' });
  }
  // Nodes seen on the timeline or as owners but without a card: gone (lease ended).
  for (const name of [...new Set([...i.events.map((e) => e.node), ...i.owners.values()])].sort()) {
    if (names.has(name)) continue;
    names.add(name);
    nodes.push({ name, alive: false, self: false, lease: 'gone', interfaces: [], owned: ownedCount.get(name) ?? 0, version: '', lastError: null, startedAt: null, health: '' });
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
