/**
 * The control plane: intent in, the l2-announce table out.
 *
 *   snapshot ─► LB-IPAM (persisted first) ─► candidates (policy × node × links)
 *            ─► ownership (per IP) ─► l2-announce rows (owned IP × interface)
 *
 * Every step is a pure function except the two edges it calls: the allocation
 * store (IPAM results are persisted before anything is announced, so an IP is
 * never handed out twice across a crash) and the ownership backend. The
 * controller is the only writer of the l2-announce table.
 */
import { monotonicMs, type Clock, type TimerHandle } from '../core/clock.js';
import type { Disposable } from '../core/disposable.js';
import { describeError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import type { Initializer, StateDB } from '../core/statedb/index.js';
import { l2AnnounceKey, l2AnnounceTable, type L2AnnounceRow } from '../datapath/tables/l2-announce.js';
import { emptySnapshot, type IntentSnapshot } from '../intent/snapshot.js';
import type { LinkInfo, Links } from '../os/links.js';
import { computeCandidates, nodeIdentity, unmatchedInterfaces, type Candidate, type NodeIdentity } from './announce/candidates.js';
import { knownNodes, unmatchedNodeSelectors } from '../intent/node-labels.js';
import { missingCidrGroups } from './policy/intake.js';
import type { Labels } from '../intent/selector.js';
import { IncrementalAllocator } from './ipam/incremental.js';
import type { IpamCoordinator, IpamStateStatus } from './ipam/coordinator.js';
import { onlyPersisted } from './ipam/report.js';
import { sameState } from './ipam/state.js';
import type { IpamResult } from './ipam/types.js';
import type { OwnershipBackend, OwnershipView } from './ownership/backend.js';
import type { StaticAnnouncement } from './static-announcements.js';
import { STATIC_ORIGIN } from './static-announcements.js';

/**
 * A recompute of d ms is followed by at least this many times d ms without
 * one. Was 1 (half a core under a stream): at 4,000–5,000 Services each of
 * three agents then spent its half core on recomputes over every Service
 * while the API server, on the same two cores, slowed to 3.6 creates/s —
 * the fewer creates per pass, the more passes per create. 3 caps it at a
 * quarter of a core and delays the last change by at most 3 × a pass.
 */
export const RECOMPUTE_GAP_FACTOR = 3;

export interface ControlPlaneDeps {
  db: StateDB;
  nodeName: string;
  /** Labels given on the command line (--node-labels), between the well-known ones and the Node manifest's. */
  nodeLabels?: Labels;
  links: Links;
  ownership: OwnershipBackend;
  ipam: IpamCoordinator;
  /** Announcements from the command line, kept alongside intent. */
  staticAnnouncements: readonly StaticAnnouncement[];
  /** `--lb-classes`: LB-IPAM serves only these classes (class-less Services too when unset; see LbClassPolicy). */
  lbClasses?: readonly string[];
  /** Resolves when the datapath has applied the table (awaited before an IP is given away). */
  applied?: () => Promise<void>;
  /** A new intent warning about an object (logged once): Kubernetes mode makes it a Warning Event on that object. */
  onIntentWarning?: (w: { kind: string; name: string; namespace?: string; message: string }) => void;
  /** Told the service IPs (intent, LB-IPAM results, this node) on every recompute: the BGP control plane's input. */
  onServiceIps?: (inputs: { snapshot: IntentSnapshot; ingress: ReadonlyMap<string, readonly string[]>; node: NodeIdentity; ipam?: IpamResult }) => void;
  /** Told every IP this node is a candidate for, with its interfaces, so the datapath can prepare them ahead of ownership. */
  onCandidates?: (wanted: ReadonlyMap<string, readonly string[]>) => void;
  clock: Clock;
  log: Logger;
}

export interface ControlPlaneStatus {
  node: string;
  snapshotLoaded: boolean;
  ipam?: IpamResult;
  allocator?: string;
  /** Generation and source of the allocation state in force, and why the allocator waits. */
  ipamState: IpamStateStatus;
  candidates: Candidate[];
  ownership: OwnershipView;
  /** Policies that announce nothing because of node labels or this node's links (also logged, once per change). */
  policyWarnings: PolicyWarning[];
  lastError?: string;
}

export interface PolicyWarning {
  policy: string;
  kind: 'node-selector' | 'interfaces' | 'cidr-group';
  message: string;
  /** For `interfaces`: the patterns, and every interface seen on this node. */
  interfaces?: readonly string[];
  seen?: readonly string[];
}

export class ControlPlane implements Disposable {
  private snapshot: IntentSnapshot = emptySnapshot;
  private snapshotLoaded = false;
  /** The snapshot the queued recompute will take (the latest one given). */
  private nextSnapshot: IntentSnapshot | undefined;
  private queuedRecompute: Promise<void> | undefined;
  /** When the last recompute ended and how long it took (monotonic ms). */
  private lastPass = { end: 0, took: 0 };
  private ipam: IpamResult | undefined;
  private links: LinkInfo[] = [];
  private candidates = new Map<string, Candidate>();
  private readonly initializer: Initializer;
  private initialized = false;
  private lastError: string | undefined;
  private linkTimer: TimerHandle | undefined;
  /** Serialises updates: each runs to completion before the next starts. */
  private queue: Promise<void> = Promise.resolve();
  private disposed = false;
  /** What was last warned about (policy + its inputs), so a warning repeats only when something changed. */
  private warned = new Set<string>();
  private policyWarnings: PolicyWarning[] = [];
  /** LB-IPAM, reconsidering only the Services a change can affect (the same result as a full run). */
  private readonly allocator = new IncrementalAllocator();
  /** Counters for metrics. */
  readonly stats = { ownershipChanges: 0, recomputes: 0, ipam: this.allocator.stats };

  constructor(private readonly deps: ControlPlaneDeps) {
    // Registered now, before the reconciler starts: no pruning until intent is in.
    this.initializer = deps.db.registerInitializer(l2AnnounceTable, 'control-plane');
  }

  async start(): Promise<void> {
    await this.deps.ipam.start(() => {
      // The persisted state or the allocator role changed (another node wrote it).
      if (this.snapshotLoaded) void this.recompute();
    });
    this.links = await this.deps.links.list();
    await this.deps.ownership.start((view) => this.enqueue(() => this.onOwnership(view)).then(() => this.deps.applied?.()));
  }

  /** A new complete, valid snapshot from the intent source. */
  setSnapshot(snapshot: IntentSnapshot): Promise<void> {
    this.nextSnapshot = snapshot;
    return this.recompute();
  }

  /**
   * LB-IPAM and candidates again, from the latest snapshot. Coalesced: while a
   * recompute waits in the queue, further requests (a burst of snapshots from
   * an informer, IPAM state changes) join it instead of queueing one pass
   * each, so a pass that takes longer than changes arrive never builds a
   * backlog — the next pass takes the latest snapshot. A pass that took d ms
   * is followed by at least RECOMPUTE_GAP_FACTOR × d ms without one (waited
   * outside the queue, so ownership changes are never held up): under a
   * stream of changes the recomputes use at most a quarter of a core, however
   * many Services there are, and the more changes each pass takes in.
   */
  private recompute(): Promise<void> {
    if (this.queuedRecompute) return this.queuedRecompute;
    const gap = this.lastPass.end + this.lastPass.took * RECOMPUTE_GAP_FACTOR - monotonicMs(this.deps.clock);
    const waited = gap > 0 ? new Promise<void>((resolve) => this.deps.clock.setTimeout(resolve, gap)) : Promise.resolve();
    const run = waited.then(() =>
      this.enqueue(async () => {
        this.queuedRecompute = undefined;
        if (this.nextSnapshot) {
          this.snapshot = this.nextSnapshot;
          this.nextSnapshot = undefined;
          this.snapshotLoaded = true;
        }
        if (!this.snapshotLoaded) return;
        const t0 = monotonicMs(this.deps.clock);
        try {
          await this.runIpam();
          this.recomputeCandidates();
        } finally {
          const end = monotonicMs(this.deps.clock);
          this.lastPass = { end, took: end - t0 };
        }
      }),
    );
    this.queuedRecompute = run;
    return run;
  }

  /** Links changed (carrier, up/down, added/removed): debounced re-read. */
  linksChanged(): void {
    this.linkTimer?.cancel();
    this.linkTimer = this.deps.clock.setTimeout(() => {
      void this.enqueue(async () => {
        this.links = await this.deps.links.list();
        this.recomputeCandidates();
      });
    }, 50);
  }

  status(): ControlPlaneStatus {
    return {
      node: this.deps.nodeName,
      snapshotLoaded: this.snapshotLoaded,
      ...(this.ipam ? { ipam: this.ipam } : {}),
      ...(this.deps.ipam.allocator() ? { allocator: this.deps.ipam.allocator()! } : {}),
      ipamState: this.deps.ipam.status(),
      candidates: [...this.candidates.values()],
      ownership: this.deps.ownership.view(),
      policyWarnings: this.policyWarnings,
      ...(this.lastError ? { lastError: this.lastError } : {}),
    };
  }

  /** The Services (`namespace/name`) this node would announce `ip` for (empty when not a candidate). */
  servicesFor(ip: string): readonly string[] {
    return this.candidates.get(ip)?.services ?? [];
  }

  /** Resolves when every queued update has been applied. */
  async idle(): Promise<void> {
    await this.queue;
  }

  private enqueue(fn: () => Promise<void> | void): Promise<void> {
    const run = this.queue.then(async () => {
      if (this.disposed) return;
      try {
        await fn();
        this.lastError = undefined;
      } catch (e) {
        this.lastError = describeError(e);
        this.deps.log.error({ err: this.lastError }, 'control plane update failed; the previous state stays in force');
      }
    });
    this.queue = run;
    return run;
  }

  private async runIpam(): Promise<void> {
    const persisted = this.deps.ipam.current();
    let result = this.allocator.allocate(this.snapshot, persisted, { lbClasses: this.deps.lbClasses });
    if (this.deps.ipam.isAllocator()) {
      // Persist before anything is announced: a crash never forgets a handed-out IP.
      const changed = !sameState(result.state, persisted);
      if (changed && !(await this.deps.ipam.save(result.state))) result = onlyPersisted(result, this.deps.ipam.current(), this.deps.ipam.allocator());
    } else {
      // Not the allocator: announce only what the allocator has persisted.
      result = onlyPersisted(result, persisted, this.deps.ipam.allocator());
    }
    this.ipam = result;
    for (const [key, svc] of result.services) {
      if (svc.condition.status === 'False') {
        this.deps.log.debug({ service: key, reason: svc.condition.reason, message: svc.condition.message }, 'LB-IPAM request not satisfied');
      }
    }
  }

  private recomputeCandidates(): void {
    const ingress = new Map([...(this.ipam?.services ?? new Map())].map(([k, v]) => [k, v.ingress] as const));
    const node = nodeIdentity(this.snapshot, this.deps.nodeName, this.deps.nodeLabels);
    // Both families: IPv4 addresses are answered with ARP, IPv6 with NDP. A
    // dual-stack service's addresses are candidates of the same policies and
    // interfaces, and share one affinity key (its first address), so every
    // node prefers the same owner for both and they move together.
    this.candidates = computeCandidates({ snapshot: this.snapshot, ingress, node, links: this.links });
    this.deps.onServiceIps?.({ snapshot: this.snapshot, ingress, node, ...(this.ipam ? { ipam: this.ipam } : {}) });
    const affinity = new Map<string, string>();
    for (const ips of ingress.values()) {
      if (ips.length < 2) continue;
      const key = [...ips].sort()[0]!; // the same on every node, whatever the order
      for (const ip of ips) affinity.set(ip, key);
    }
    this.stats.recomputes++;
    this.warnAboutPolicies(node);
    // Static announcements qualify on their own, on their named interface.
    const wanted = new Map<string, string[]>([...this.candidates].map(([ip, c]) => [ip, [...c.interfaces]]));
    for (const a of this.deps.staticAnnouncements) wanted.set(a.ip, [...new Set([...(wanted.get(a.ip) ?? []), a.interface])]);
    this.deps.onCandidates?.(wanted);
    this.deps.ownership.setCandidates(wanted, affinity);
    this.writeTable(this.deps.ownership.view());
  }

  /**
   * Policies that announce nothing because of this node's labels or links are
   * logged, once per policy and change of what it was checked against (not on
   * every recompute).
   */
  private warnAboutPolicies(node: ReturnType<typeof nodeIdentity>): void {
    if (!this.snapshotLoaded) return;
    const now = new Set<string>();
    const warnings: PolicyWarning[] = [];
    const once = (key: string, log: () => void): void => {
      now.add(key);
      if (!this.warned.has(key)) log();
    };
    const nodes = knownNodes(this.snapshot, node);
    for (const u of unmatchedNodeSelectors(this.snapshot, nodes)) {
      warnings.push({ policy: u.policy, kind: 'node-selector', message: u.message });
      const key = `selector\u0000${u.policy}\u0000${JSON.stringify(u.selector)}\u0000${JSON.stringify(nodes)}`;
      once(key, () => this.deps.log.warn({ policy: u.policy, nodes: nodes.map((n) => n.name) }, u.message));
    }
    for (const u of unmatchedInterfaces(this.snapshot, node, this.links)) {
      const message = 'policy interfaces match no interface on this node that can answer ARP (up, carrier, Ethernet), so it announces nothing here';
      warnings.push({
        policy: u.policy,
        kind: 'interfaces',
        message: `${message} (interfaces ${u.patterns.map((p) => JSON.stringify(p)).join(', ')}; seen: ${u.seen.join(', ') || 'none'}; eligible: ${u.eligible.join(', ') || 'none'})`,
        interfaces: u.patterns,
        seen: u.seen,
      });
      const key = `interfaces\u0000${u.policy}\u0000${JSON.stringify(u.patterns)}\u0000${u.eligible.join(',')}`;
      once(key, () => this.deps.log.warn({ policy: u.policy, interfaces: u.patterns, eligible: u.eligible, seen: u.seen }, message));
    }
    // Service traffic policy: a fromCIDRSet naming a CiliumCIDRGroup that does not exist (the rule goes without its CIDRs).
    for (const w of missingCidrGroups(this.snapshot)) {
      warnings.push({ policy: w.policy, kind: 'cidr-group', message: w.message });
      once(`cidr-group\u0000${w.policy}\u0000${w.path}\u0000${w.group}`, () => this.deps.log.warn({ policy: w.policy, rule: w.path, group: w.group }, w.message));
      // Every pass (a node that becomes the leader later reports it too); the Event recorder does not repeat an Event within 5 min.
      const ns = (w.object.metadata as { namespace?: string }).namespace;
      this.deps.onIntentWarning?.({ kind: w.object.kind, name: w.object.metadata.name, ...(ns !== undefined ? { namespace: ns } : {}), message: w.message });
    }
    this.warned = now;
    this.policyWarnings = warnings;
  }

  private onOwnership(view: OwnershipView): void {
    this.stats.ownershipChanges++;
    this.writeTable(view);
  }

  /** The desired l2-announce rows for what this node owns, written as one diff. */
  private writeTable(view: OwnershipView): void {
    if (!this.snapshotLoaded) return; // nothing is known yet: leave the pinned state alone
    const desired = new Map<string, L2AnnounceRow>();
    const add = (ip: string, iface: string, origin: string) => {
      const key = l2AnnounceKey(ip, iface);
      const row = desired.get(key);
      const origins = new Set(row?.origins ?? []);
      origins.add(origin);
      desired.set(key, { ip, iface, origins: [...origins].sort() });
    };
    for (const c of this.candidates.values()) {
      if (!view.owned.has(c.ip)) continue;
      for (const iface of c.interfaces) for (const svc of c.services) add(c.ip, iface, `service:${svc}`);
    }
    for (const a of this.deps.staticAnnouncements) if (view.owned.has(a.ip)) add(a.ip, a.interface, STATIC_ORIGIN);

    const t0 = monotonicMs(this.deps.clock);
    let written = 0;
    // An IP we still own but no longer qualify for keeps its rows until the
    // ownership module lets it go: its release marks the IP as releasing in
    // the store first and only then withdraws it. Dropping the rows here, on
    // the intent change, would silence the IP with our key still standing and
    // no marker — which a candidate whose intent lags rightly takes for a
    // dead owner, and fences.
    const awaitingRelease = (ip: string) => view.owned.has(ip) && !this.candidates.has(ip) && !this.deps.staticAnnouncements.some((a) => a.ip === ip);
    this.deps.db.update([l2AnnounceTable], (txn) => {
      for (const row of txn.list(l2AnnounceTable)) {
        if (!desired.has(l2AnnounceKey(row.ip, row.iface)) && !awaitingRelease(row.ip)) txn.delete(l2AnnounceTable, row);
      }
      for (const [key, row] of desired) {
        const old = txn.get(l2AnnounceTable, key);
        if (!old || old.origins.join(',') !== row.origins.join(',')) {
          txn.insert(l2AnnounceTable, row);
          written++;
        }
      }
    });
    this.deps.log.debug({ rows: desired.size, written, ms: Math.round(monotonicMs(this.deps.clock) - t0) }, 'trace: l2-announce table written');
    if (!this.initialized) {
      this.initialized = true;
      this.initializer.done();
    }
  }

  dispose(): void {
    this.disposed = true;
    this.linkTimer?.cancel();
  }
}
