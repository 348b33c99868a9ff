/** The agent's status document (served on the status socket) and its text rendering. */
import type { JobHealth } from '../core/jobs.js';
import type { ReconcilerHealth, RowStatusEntry } from '../core/reconciler/reconciler.js';
import type { ControlPlaneStatus } from '../controlplane/controller.js';
import type { ConflictRecord } from '../datapath/conflict-defence.js';
import type { L2Datapath } from '../datapath/l2-responder/datapath.js';
import { livenessAge } from '../datapath/l2-responder/liveness.js';
import type { L2AnnounceRow } from '../datapath/tables/l2-announce.js';
import { libbpf } from '../os/libbpf.js';
import { compareIps, isIpv4, mustParseIp } from '../core/addr.js';
import type { SessionStatus } from '../store/etcd/session.js';
import type { OwnershipStatus } from '../store/etcd/ownership.js';
import { renderIntentStatus, type IntentStatus } from './intent-status.js';
import type { BackendHealthView } from '../controlplane/health/checker.js';
import type { BgpRouteRow } from '../datapath/tables/bgp-routes.js';
import type { BgpSession, BirdHealth } from '../os/bird.js';

export interface StatusInput {
  config: { node: string; store: string; manifests?: string; datapath: { pinDir: string } };
  startedAt: number;
  controlPlane: ControlPlaneStatus;
  reconciler: ReconcilerHealth | undefined;
  /** Rows not done, per reconciler, from the reconcile-status table (core/reconciler/status.ts): pending and in error. */
  rowsNotDone: readonly RowStatusEntry[];
  table: readonly L2AnnounceRow[];
  datapath: L2Datapath;
  garp: { sent: number; failed: number };
  /** The last foreign claim per (IP, interface) and how it was defended. */
  conflicts?: readonly ConflictRecord[];
  now: bigint;
  /** Store session and ownership safety state (etcd store); undefined with the local store. */
  ha?: HaStatus;
  /** The last rejected intent and warnings about this node's intent. */
  intent?: IntentStatus;
  /** Health of the agent's long-lived jobs, by name (core/jobs.ts). */
  jobs?: ReadonlyMap<string, JobHealth>;
  /** BGP anycast (with --bgp-router-id): routes, withheld IPs and why, BIRD's health and sessions. */
  bgp?: BgpStatusView;
  /** L4 load balancing (with --lb-interfaces): frontends, warnings, conntrack GC. */
  lb?: LbStatusView;
  /** Kubernetes mode: informers (synced, lists, errors), node Lease and ownership counters, status write-back. */
  kubernetes?: KubernetesStatusView;
}

export interface KubernetesStatusView {
  source: { synced: boolean; informers: readonly { kind: string; synced: boolean; lists: number; errors: number; objects: number; resourceVersion: string }[] } | undefined;
  leases: { renewals: number; renewFailures: number; claims: number; takeovers: number; lostRaces: number; releases: number; handovers: number; leaseValid: boolean; liveNodes: string[] } | undefined;
  serviceStatus: { writes: number; conflicts: number; refused: number; failures: number; pending: number } | undefined;
}

export interface LbStatusView {
  interfaces: readonly string[];
  frontends: readonly { key: string; service: string; mode?: string; algorithm?: string; backends: readonly { ip: string; port: number; terminating: boolean }[] }[];
  warnings: readonly { service: string; message: string }[];
  ct: { entries: number; capacity: number; gcPasses: number; gcDeleted: number; gcIntervalMs: number };
  counters: Record<string, number>;
}

export interface BgpStatusView {
  routes: readonly BgpRouteRow[];
  withheld: readonly { ip: string; services: readonly string[]; reason: string }[];
  warnings: readonly { peer: string; message: string }[];
  bird: BirdHealth;
  peers: readonly { id: string; protocol: string; address: string; asn: number }[];
  sessions?: { at: number; sessions: readonly BgpSession[]; error?: string };
  rowErrors: readonly { key: string; error: string; attempts: number }[];
  /** This node's backends under herald's own health check. */
  health: readonly BackendHealthView[];
}

export interface HaStatus {
  session: SessionStatus;
  ownership: OwnershipStatus;
  ownerWatch?: { targets: number; lateTicks: number; reports: number };
  heartbeat?: { held: number; lateWakeups: number; failures: number; thread?: boolean; linksDark?: boolean };
}

/** IPv4 before IPv6, then numeric. */
const compareIpText = (a: string, b: string) => compareIps(mustParseIp(a), mustParseIp(b));

export type AgentStatus = ReturnType<typeof buildStatus>;

export function buildStatus(i: StatusInput) {
  const cp = i.controlPlane;
  const maps = i.datapath.maps;
  const names = new Map<number, string>();
  const nameOf = (ifindex: number) => {
    if (!names.has(ifindex)) names.set(ifindex, libbpf().ifIndexToName(ifindex) ?? `ifindex ${ifindex}`);
    return names.get(ifindex)!;
  };
  const entries = maps.responders
    .entries()
    .map(([k, v]) => ({ ip: k.ip, interface: nameOf(k.ifindex), ifindex: k.ifindex, replies: Number(v.replies), conflicts: Number(v.conflicts) }))
    .sort((a, b) => compareIpText(a.ip, b.ip) || a.ifindex - b.ifindex);
  const owned = cp.ownership.owned;
  // Rows per IP, grouped once (a filter per owned IP made 10k IPs cost 10^8 steps and blocked the agent for a minute).
  const rowsByIp = new Map<string, L2AnnounceRow[]>();
  for (const r of i.table) rowsByIp.set(r.ip, [...(rowsByIp.get(r.ip) ?? []), r]);
  return {
    node: i.config.node,
    store: i.config.store,
    source: i.config.manifests ?? (i.kubernetes ? 'kubernetes' : i.config.store === 'etcd' ? 'etcd' : 'none'),
    startedAt: new Date(i.startedAt).toISOString(),
    intentLoaded: cp.snapshotLoaded,
    intent: i.intent ?? { rejected: null, warnings: [] },
    ...(cp.lastError ? { lastError: cp.lastError } : {}),
    allocator: cp.allocator ?? null,
    allocation: cp.ipamState,
    ha: i.ha ?? null,
    bgp: i.bgp ?? null,
    lb: i.lb ?? null,
    ...(i.kubernetes ? { kubernetes: i.kubernetes } : {}),
    // Per service IP, how this node serves it: L2 (owned here / a candidate owned elsewhere) and BGP (advertised or why not).
    ...(i.bgp ? { modes: ipModes(owned, cp.candidates.map((c) => c.ip), i.bgp) } : {}),
    owned: [...owned].sort(compareIpText).map((ip) => ({
      ip,
      interfaces: (rowsByIp.get(ip) ?? []).map((r) => r.iface),
      origins: [...new Set((rowsByIp.get(ip) ?? []).flatMap((r) => r.origins))],
    })),
    candidates: cp.candidates.map((c) => ({ ...c, owner: cp.ownership.owners.get(c.ip) ?? null })),
    services: [...(cp.ipam?.services ?? new Map())].map(([service, a]) => ({
      service,
      ingress: a.ingress,
      condition: a.condition,
      ...(a.warnings ? { warnings: a.warnings } : {}),
    })),
    // Intent that is valid but announces nothing here (policy selectors, interfaces).
    warnings: (cp.policyWarnings ?? []).map((w) => ({ policy: w.policy, kind: w.kind, message: w.message, ...(w.seen ? { seen: w.seen } : {}) })),
    pools: [...(cp.ipam?.pools ?? new Map())].map(([pool, p]) => ({
      pool,
      total: p.total.toString(),
      used: p.used.toString(),
      available: p.available.toString(),
      conflicting: p.conflicting,
      disabled: p.disabled,
      conditions: p.conditions,
    })),
    datapath: {
      pinDir: i.config.datapath.pinDir,
      // How the tc programs are attached: tcx links (Linux ≥ 6.6) or legacy cls_bpf filters.
      tcAttach: i.datapath.attachMode,
      capacity: i.datapath.map.capacity,
      liveness: livenessAge(maps.config, i.now),
      // Answers per family: ARP replies (IPv4) and Neighbor Advertisements (IPv6).
      answers: {
        ipv4: entries.filter((e) => isIpv4(e.ip)).reduce((n, e) => n + e.replies, 0),
        ipv6: entries.filter((e) => !isIpv4(e.ip)).reduce((n, e) => n + e.replies, 0),
      },
      entries,
    },
    reconciler: i.reconciler ?? null,
    // Why a row is not in the kernel: the last error of each failing row, per reconciler.
    rowErrors: i.rowsNotDone.flatMap((s) =>
      s.kind === 'error'
        ? [{ reconciler: s.reconciler, key: s.key, op: s.op, revision: s.revision, error: s.error ?? '', attempts: s.attempts ?? 0, since: new Date(s.updatedAt ?? 0).toISOString() }]
        : [],
    ),
    rowsPending: i.rowsNotDone.filter((s) => s.kind === 'pending').map((s) => ({ reconciler: s.reconciler, key: s.key, op: s.op, revision: s.revision })),
    garp: i.garp,
    conflicts: (i.conflicts ?? []).map((c) => ({
      ip: c.ip,
      interface: c.interface,
      foreignMac: c.foreignMac,
      op: c.op,
      lastSeen: new Date(c.lastSeenAt).toISOString(),
      claims: c.claims,
      defences: c.defences,
      lastDefence: c.lastDefenceAt === undefined ? null : new Date(c.lastDefenceAt).toISOString(),
    })),
    jobs: [...(i.jobs ?? new Map<string, JobHealth>())].map(([name, h]) => ({ name, ...h })),
  };
}

export function renderStatus(s: AgentStatus): string {
  const out: string[] = [];
  const table = (headers: string[], rows: string[][]) => {
    const w = headers.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
    const line = (cells: string[]) => '  ' + cells.map((x, c) => x.padEnd(w[c] ?? 0)).join('  ').trimEnd();
    out.push(line(headers), ...rows.map(line));
  };
  out.push(`node ${s.node}  store ${s.store}  intent ${s.source}${s.intentLoaded ? '' : ' (not loaded yet)'}  up since ${s.startedAt}`);
  if (s.lastError) out.push(`last error: ${s.lastError}`);
  out.push(...renderIntentStatus(s.intent, s.pools));
  if (s.ha) {
    const se = s.ha.session;
    const ka = se.lastKeepaliveAgeMs === undefined ? 'never' : `${(se.lastKeepaliveAgeMs / 1000).toFixed(1)}s ago`;
    out.push(
      `store session ${se.state}${se.lostReason ? ` (${se.lostReason})` : ''}  lease ${se.lease ?? '-'}  last keep-alive ${ka}  valid for ${(se.validForMs / 1000).toFixed(1)}s  leases granted ${se.leasesGranted}`,
    );
    const o = s.ha.ownership;
    out.push(
      `allocator ${s.allocator ?? '(none)'}  fences issued ${o.fencesIssued}  stale keys ignored ${o.staleKeysIgnored}  keys moved to a new lease ${o.keysMovedToNewLease}` +
        (s.ha.heartbeat ? `  heartbeat${s.ha.heartbeat.thread ? ' (own thread)' : ''} held ${s.ha.heartbeat.held}, late wake-ups ${s.ha.heartbeat.lateWakeups}${s.ha.heartbeat.linksDark ? ' — SILENT: every served link lost carrier' : ''}` : ''),
    );
  }
  {
    const a = s.allocation;
    const src = a.source === 'restored' ? `restored from ${a.restoredFrom ?? '?'}` : a.source;
    out.push(
      `allocation state: generation ${a.generation} (${src})` +
        (a.held ? `, ${a.held} services held until re-applied` : '') +
        (a.waiting ? `; waiting: ${a.waiting}` : '') +
        (a.lastStateError ? `; last state error ${a.lastStateError.at}: ${a.lastStateError.message}` : ''),
    );
  }
  out.push('', `owned IPs (${s.owned.length}):${s.owned.length === 0 && s.ha?.ownership.notOwningReason ? ` ${s.ha.ownership.notOwningReason}` : ''}`);
  table(['IP', 'INTERFACES', 'ORIGINS'], s.owned.map((o) => [o.ip, o.interfaces.join(',') || '-', o.origins.join(',')]));
  out.push('', `candidates (${s.candidates.length}):`);
  table(['IP', 'INTERFACES', 'SERVICES', 'POLICIES', 'OWNER'], s.candidates.map((c) => [c.ip, c.interfaces.join(','), c.services.join(','), c.policies.join(','), c.owner ?? '-']));
  out.push('', `services (${s.services.length}):`);
  table(
    ['SERVICE', 'INGRESS', 'SATISFIED', 'REASON', 'MESSAGE'],
    s.services.map((x) => [x.service, x.ingress.join(',') || '-', x.condition.status, x.condition.reason, x.condition.message]),
  );
  for (const x of s.services) for (const w of x.warnings ?? []) out.push(`warning: ${x.service}: ${w}`);
  for (const w of s.warnings) out.push(`warning: policy ${w.policy}: ${w.message}`);
  out.push('', `pools (${s.pools.length}):`);
  table(
    ['POOL', 'TOTAL', 'USED', 'AVAILABLE', 'DISABLED', 'CONFLICTING'],
    s.pools.map((p) => [p.pool, p.total, p.used, p.available, String(p.disabled), String(p.conflicting)]),
  );
  const live = s.datapath.liveness;
  const age = live.ageMs === undefined ? 'never written' : `${(live.ageMs / 1000).toFixed(1)}s ago`;
  out.push(
    '',
    `responder map ${s.datapath.pinDir}: ${s.datapath.entries.length} entries (capacity ${s.datapath.capacity} per family); heartbeat ${age} (limit ${live.maxAgeMs / 1000}s); ` +
      `answers: ARP ${s.datapath.answers.ipv4}, NDP ${s.datapath.answers.ipv6}; tc programs: ${s.datapath.tcAttach === 'tcx' ? 'tcx links' : 'cls_bpf filters'}`,
  );
  table(['IP', 'INTERFACE', 'REPLIES', 'CONFLICTS'], s.datapath.entries.map((e) => [e.ip, e.interface, String(e.replies), String(e.conflicts)]));
  const r = s.reconciler;
  if (r) {
    const when = (o?: { at: number; ok: boolean; durationMs: number }) => (o ? `${new Date(o.at).toISOString()} ${o.ok ? 'ok' : 'FAILED'} in ${o.durationMs} ms` : 'never');
    out.push('', `reconciler: initialized ${r.initialized}; last partial ${when(r.lastPartial)}; last full ${when(r.lastFull)}; errors ${r.errorCount}; retrying ${r.retrying}`);
  }
  if (s.rowsPending.length > 0) out.push(`  rows pending: ${s.rowsPending.length}`);
  if (s.rowErrors.length > 0) {
    out.push(`  rows in error (${s.rowErrors.length}):`);
    table(
      ['RECONCILER', 'ROW', 'OP', 'REVISION', 'ATTEMPTS', 'SINCE', 'ERROR'],
      s.rowErrors.map((e) => [e.reconciler, e.key, e.op, String(e.revision), String(e.attempts), e.since, e.error]),
    );
  }
  out.push(`gratuitous ARP / unsolicited NA: ${s.garp.sent} sent, ${s.garp.failed} failed`);
  if (s.conflicts.length > 0) {
    out.push('', `address conflicts (${s.conflicts.length}): foreign MACs claimed IPs this node answers for`);
    table(
      ['IP', 'INTERFACE', 'FOREIGN MAC', 'OP', 'LAST SEEN', 'CLAIMS', 'DEFENCES'],
      s.conflicts.map((c) => [c.ip, c.interface, c.foreignMac, c.op, c.lastSeen, String(c.claims), String(c.defences)]),
    );
  }
  if (s.bgp) renderBgp(s.bgp, out, table);
  if (s.lb) {
    const l = s.lb;
    out.push('', `load balancing on ${l.interfaces.join(',')}: ${l.frontends.length} frontends; ct ${l.ct.entries}/${l.ct.capacity} (GC: ${l.ct.gcPasses} passes, ${l.ct.gcDeleted} deleted, next in ${Math.round(l.ct.gcIntervalMs / 1000)} s)`);
    table(['FRONTEND', 'SERVICE', 'MODE', 'ALGORITHM', 'BACKENDS'], l.frontends.map((f) => [f.key, f.service, f.mode ?? 'dnat', f.algorithm ?? 'maglev', f.backends.map((b) => `${b.ip}:${b.port}${b.terminating ? '(terminating)' : ''}`).join(',') || '-']));
    for (const w of l.warnings) out.push(`warning: ${w.service}: ${w.message}`);
  }
  if (s.modes) {
    out.push('', `service IPs by mode (${s.modes.length}):`);
    table(['IP', 'L2', 'BGP', 'NEXT HOPS'], s.modes.map((m) => [m.ip, m.l2 ?? '-', m.bgp ?? '-', m.nextHops.join(',') || '-']));
  }
  const unwell = s.jobs.filter((j) => j.level !== 'ok');
  if (unwell.length > 0) {
    out.push('', `jobs not ok (${unwell.length} of ${s.jobs.length}):`);
    table(['JOB', 'HEALTH', 'SINCE', 'MESSAGE'], unwell.map((j) => [j.name, j.level, j.since, j.message]));
  }
  return out.join('\n') + '\n';
}

export interface IpMode {
  ip: string;
  l2: 'owned' | 'candidate' | null;
  bgp: 'advertised' | string | null;
  nextHops: readonly string[];
}

/** Joins the L2 and BGP views per IP (an IP may be in both during a migration). */
function ipModes(owned: ReadonlySet<string>, candidates: readonly string[], b: BgpStatusView): IpMode[] {
  const out = new Map<string, IpMode>();
  const get = (ip: string) => out.get(ip) ?? out.set(ip, { ip, l2: null, bgp: null, nextHops: [] }).get(ip)!;
  for (const ip of candidates) get(ip).l2 = 'candidate';
  for (const ip of owned) get(ip).l2 = 'owned';
  for (const r of b.routes) Object.assign(get(r.ip), { bgp: 'advertised', nextHops: r.nextHops });
  for (const w of b.withheld) get(w.ip).bgp = w.reason;
  return [...out.values()].sort((x, y) => x.ip.localeCompare(y.ip, undefined, { numeric: true }));
}

function renderBgp(b: BgpStatusView, out: string[], table: (headers: string[], rows: string[][]) => void): void {
  const bird = b.bird.running ? `running (pid ${b.bird.pid ?? '?'})` : 'not running';
  out.push('', `BGP: BIRD ${bird}, restarts ${b.bird.restarts}${b.bird.lastError ? `; last error: ${b.bird.lastError}` : ''}`);
  const byProtocol = new Map((b.sessions?.sessions ?? []).map((x) => [x.protocol, x]));
  table(
    ['PEER', 'ADDRESS', 'ASN', 'STATE', 'INFO'],
    b.peers.map((p) => [p.id, p.address, String(p.asn), byProtocol.get(p.protocol)?.state ?? '?', byProtocol.get(p.protocol)?.info ?? b.sessions?.error ?? '']),
  );
  out.push(`advertised (${b.routes.length}):`);
  table(['PREFIX', 'NEXT HOPS', 'SERVICES', 'PEERS'], b.routes.map((r) => [r.prefix, r.nextHops.join(','), r.services.join(','), r.peers.join(',')]));
  if (b.health.length > 0) {
    out.push(`health checks (${b.health.length}):`);
    table(['SERVICE', 'BACKEND', 'CHECK', 'STATE', 'SINCE', 'LAST RESULT'], b.health.map((h) => [h.service, `${h.address}:${h.port}`, h.type, h.up ? 'up' : 'down', new Date(h.since).toISOString(), h.lastResult ?? '-']));
  }
  for (const w of b.withheld) out.push(`not advertised: ${w.ip} (${w.services.join(',')}): ${w.reason}`);
  for (const w of b.warnings) out.push(`warning: BGP peer ${w.peer}: ${w.message}`);
  for (const e of b.rowErrors) out.push(`  ! ${e.key}: ${e.error} (attempt ${e.attempts})`);
}
