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
  /** Advertising nodes (BGP): this node's own routes and every peer's report. */
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
  /** Load-balanced connections on it per node (live entries of that node's LB conntrack tables); {} when none. */
  connections: Record<string, number>;
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
  /** IPs this node advertises over BGP. */
  advertised?: string[];
  /** Load-balanced connections per VIP on this node (its LB conntrack tables, last count). */
  connections?: Record<string, number>;
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
  /** Load-balanced connections per VIP on this node. */
  connections?: ReadonlyMap<string, number>;
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
  /** Answers per node and IP: in a stream's pushes after its first (`full`), only those that changed. */
  answers: Record<string, Record<string, number>>;
  /** A stream's first push: everything; later ones carry only the answers that changed, and BGP advertisers only when they did. */
  full?: boolean;
  /** The nodes whose answers are known (a page drops the others'). */
  nodes?: string[];
  /** LB connections per node and VIP (nodes whose count is known). */
  connections?: Record<string, Record<string, number>>;
  /** IP → the nodes advertising it over BGP (IPs nobody advertises are absent). */
  advertised?: Record<string, string[]>;
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

export function buildCounters(i: Pick<ViewInput, 'node' | 'replies' | 'self' | 'peerReports' | 'services' | 'policies' | 'bgpAdvertised' | 'connections'>): CountersPush {
  const answers: Record<string, Record<string, number>> = { [i.node]: Object.fromEntries(i.replies) };
  const connections: Record<string, Record<string, number>> = i.connections ? { [i.node]: Object.fromEntries(i.connections) } : {};
  const advertisedBy = new Map<string, string[]>();
  const advertise = (node: string, ips: Iterable<string>) => {
    for (const ip of ips) advertisedBy.set(ip, [...(advertisedBy.get(ip) ?? []), node]);
  };
  advertise(i.node, i.bgpAdvertised ?? []);
  const health: Record<string, string> = { [i.node]: i.self?.health ?? 'ok' };
  const rows: Array<{ node: string; row: NotDoneRow }> = (i.self?.notDone ?? []).map((row) => ({ node: i.node, row }));
  for (const [node, peer] of i.peerReports ?? []) {
    if (node === i.node) continue;
    health[node] = nodeHealth(peer);
    // A peer that did not answer this time: its last counters would be stale, so none are shown (its health says why).
    if (!peer.report || peer.error) continue;
    answers[node] = peer.report.replies;
    if (peer.report.connections) connections[node] = peer.report.connections;
    advertise(node, peer.report.advertised ?? []);
    for (const row of peer.report.notDone) rows.push({ node, row });
  }
  const advertised: Record<string, string[]> = {};
  for (const [ip, nodes] of advertisedBy) advertised[ip] = [...new Set(nodes)].sort();
  return { answers, connections, advertised, health, reconcile: Object.fromEntries(reconcileByIp(rows, serviceIpsOf(i))) };
}

/** Per IP, the per-node numbers of a node → IP → n map. */
function byIp(perNode: Record<string, Record<string, number>> | undefined): Map<string, Record<string, number>> {
  const out = new Map<string, Record<string, number>>();
  for (const [node, values] of Object.entries(perNode ?? {}))
    for (const [ip, n] of Object.entries(values)) {
      let r = out.get(ip);
      if (!r) out.set(ip, (r = {}));
      r[node] = n;
    }
  return out;
}

/**
 * The entries of `now` (node → IP → n) that differ from what was last sent;
 * `sent` is updated. Nodes absent from `now` are forgotten (the push names the
 * nodes it covers, so a page drops theirs).
 */
export function diffPerNode(sent: Map<string, Map<string, number>>, now: Record<string, Record<string, number>>): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const [node, values] of Object.entries(now)) {
    let before = sent.get(node);
    if (!before) sent.set(node, (before = new Map()));
    let changed: Record<string, number> | undefined;
    for (const [ip, n] of Object.entries(values)) {
      if (before.get(ip) === n) continue;
      before.set(ip, n);
      (changed ??= {})[ip] = n;
    }
    // An IP the node no longer counts (it moved away): -1 tells the page to drop it.
    for (const ip of [...before.keys()]) {
      if (Object.hasOwn(values, ip)) continue;
      before.delete(ip);
      (changed ??= {})[ip] = -1;
    }
    if (changed) out[node] = changed;
  }
  for (const node of [...sent.keys()]) if (!(node in now)) sent.delete(node);
  return out;
}

/** Parsed addresses, kept across snapshots (pruned to what the last snapshot held when it grows past twice that). */
const parsedIps = new Map<string, ReturnType<typeof parseIp>>();

export function buildView(i: ViewInput): ViewSnapshot {
  const servicesOf = new Map<string, string[]>();
  for (const [svc, ips] of i.services) for (const ip of ips) servicesOf.set(ip, [...(servicesOf.get(ip) ?? []), svc]);
  const allIps = new Set<string>([...servicesOf.keys(), ...i.owners.keys(), ...i.bgpAdvertised]);
  // Since when each owner holds its IP: the last move to it on the timeline.
  const since = new Map<string, { node: string; at: string }>();
  for (const e of i.events) if (e.kind === 'owner-took') since.set(e.ip, { node: e.node, at: e.at });
  const ownedCount = new Map<string, number>();
  for (const n of i.owners.values()) ownedCount.set(n, (ownedCount.get(n) ?? 0) + 1);
  const counters = buildCounters(i);
  // Peers' BGP routes too: an IP only another node advertises is still a row.
  for (const ip of Object.keys(counters.advertised ?? {})) allIps.add(ip);
  // IPv4 before IPv6, then numeric; each address parsed once (a locale-aware compare cost 1 s for 10k) and
  // kept for the next snapshot (parsing 10,000 addresses took 120–370 ms of every snapshot).
  if (parsedIps.size > 2 * allIps.size + 1024) for (const ip of [...parsedIps.keys()]) if (!allIps.has(ip)) parsedIps.delete(ip);
  const parsed = parsedIps;
  for (const ip of allIps) if (!parsed.has(ip)) parsed.set(ip, parseIp(ip));
  const answersOf = byIp(counters.answers);
  const connectionsOf = byIp(counters.connections);
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
      const advertisedBy = counters.advertised?.[ip] ?? [];
      const bgp = advertisedBy.length > 0;
      return {
        ip,
        family: ip.includes(':') ? 6 : 4,
        services: servicesOf.get(ip) ?? [],
        mode: owner && bgp ? 'L2+BGP' : bgp ? 'BGP' : 'L2',
        owner,
        advertisedBy,
        since: s && s.node === owner ? s.at : null,
        replies: i.replies.get(ip) ?? null,
        answers: answersOf.get(ip) ?? {},
        ...(details.get(ip) ?? NO_DETAILS),
        connections: connectionsOf.get(ip) ?? {},
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

/**
 * The IP rows as the page loads them (GET /v1/view?compact=1): one array per
 * column, every repeated string (service lists, pools, modes, owners, since
 * times, node names) kept once in `strings` and referred to by index (-1:
 * none), and the sparse columns (BGP advertisers, LB backends and
 * connections, policy revisions, rows not done) only for the rows that have
 * them. The full rows repeat field names and defaults per IP: 10,000 IPs
 * were 2.57 MB that way.
 */
export interface CompactIps {
  strings: string[];
  ip: string[];
  /** The services joined by a space ('' when none). */
  services: number[];
  pool: number[];
  mode: number[];
  owner: number[];
  since: number[];
  /** Row → the advertising nodes joined by a space. */
  advertisedBy: Record<number, number>;
  /** Node → [row, n, row, n, …]. */
  answers: Record<number, number[]>;
  connections: Record<number, number[]>;
  lb: Record<number, ViewLbFrontend[]>;
  policyRevision: Record<number, number>;
  reconcile: Record<number, ViewReconcile>;
}

export type CompactSnapshot = Omit<ViewSnapshot, 'ips'> & { ips: CompactIps };

export function compactView(v: ViewSnapshot): CompactSnapshot {
  const strings: string[] = [];
  const index = new Map<string, number>();
  const intern = (s: string | null): number => {
    if (s === null) return -1;
    let k = index.get(s);
    if (k === undefined) {
      index.set(s, (k = strings.length));
      strings.push(s);
    }
    return k;
  };
  const c: CompactIps = { strings, ip: [], services: [], pool: [], mode: [], owner: [], since: [], advertisedBy: {}, answers: {}, connections: {}, lb: {}, policyRevision: {}, reconcile: {} };
  const perNode = (into: Record<number, number[]>, row: number, values: Record<string, number>) => {
    for (const [node, n] of Object.entries(values)) (into[intern(node)] ??= []).push(row, n);
  };
  v.ips.forEach((x, row) => {
    c.ip.push(x.ip);
    c.services.push(intern(x.services.join(' ')));
    c.pool.push(intern(x.pool));
    c.mode.push(intern(x.mode));
    c.owner.push(intern(x.owner));
    c.since.push(intern(x.since));
    if (x.advertisedBy.length > 0) c.advertisedBy[row] = intern(x.advertisedBy.join(' '));
    perNode(c.answers, row, x.answers);
    perNode(c.connections, row, x.connections);
    if (x.lb.length > 0) c.lb[row] = x.lb;
    if (x.policyRevision !== null) c.policyRevision[row] = x.policyRevision;
    if (x.reconcile.state !== 'done') c.reconcile[row] = x.reconcile;
  });
  return { ...v, ips: c };
}

const DONE_STATE: ViewReconcile = { state: 'done', detail: '' };

/** The rows back from their columns (the page does this once per snapshot). */
export function expandView(s: CompactSnapshot): ViewSnapshot {
  const c = s.ips;
  const str = (k: number | undefined) => (k === undefined || k < 0 ? null : (c.strings[k] ?? null));
  const words = (k: number | undefined) => (str(k) || '').split(' ').filter(Boolean);
  const ips: ViewIp[] = c.ip.map((ip, row) => ({
    ip,
    family: ip.includes(':') ? 6 : 4,
    services: words(c.services[row]),
    mode: str(c.mode[row]) ?? 'L2',
    owner: str(c.owner[row]),
    advertisedBy: words(c.advertisedBy[row]),
    since: str(c.since[row]),
    replies: null,
    answers: {},
    pool: str(c.pool[row]),
    lb: c.lb[row] ?? [],
    policyRevision: c.policyRevision[row] ?? null,
    connections: {},
    reconcile: c.reconcile[row] ?? DONE_STATE,
  }));
  const fill = (from: Record<number, number[]>, key: 'answers' | 'connections') => {
    for (const [node, pairs] of Object.entries(from)) {
      const name = str(Number(node)) ?? '';
      for (let k = 0; k + 1 < pairs.length; k += 2) {
        const x = ips[pairs[k]!];
        if (x) x[key][name] = pairs[k + 1]!;
      }
    }
  };
  fill(c.answers, 'answers');
  fill(c.connections, 'connections');
  for (const x of ips) x.replies = x.answers[s.node] ?? null;
  return { ...s, ips };
}
