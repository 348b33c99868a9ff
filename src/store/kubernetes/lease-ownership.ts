/**
 * Per-IP ownership on Kubernetes, O(nodes) API writes in steady state.
 *
 *   Lease <namespace>/node-<node>   holderIdentity = node; renewed every renewMs
 *   Lease <namespace>/ip-<ip>       holderIdentity = owner node; written only when ownership moves
 *
 * An IP's Lease names its holder and is valid exactly while the holder's
 * node Lease is: one renewal per node keeps every IP it owns (Cilium renews
 * one Lease per service every couple of seconds instead).
 *
 * - Liveness of other nodes is judged on our own clock, as client-go does:
 *   a node Lease whose resourceVersion has not changed for its
 *   leaseDurationSeconds (watched, not polled) has expired; so has one
 *   deleted or never seen since we started watching that long ago.
 * - Claiming a free IP is a create (`409 AlreadyExists`: someone else won);
 *   taking over from an expired holder is an update carrying the
 *   resourceVersion we saw (`409 Conflict`: someone else won). So two nodes
 *   never hold one IP's Lease.
 * - We answer only while our own node Lease is valid by our own clock: from
 *   the moment the last successful renewal was *sent*, minus `safetyMs`
 *   (the liveness gate). Others wait the full duration from when they *saw*
 *   the renewal, which is later: we step down before anyone may take over.
 * - Spread: the preferred holder of a free IP is the live node with the
 *   highest rendezvous score sha256(node#ip) (as on etcd); it claims at once,
 *   the others after `contendDelayMs`.
 * - Giving an IP up (no longer a candidate, or stopping): withdrawn from the
 *   datapath first, then the Lease deleted (precondition: its resourceVersion).
 * - Handing an IP over to its preferred node (spread): withdrawn first, then
 *   the Lease updated to name that node (precondition: its resourceVersion),
 *   so it answers as soon as its watch shows it the Lease. Deleting the Lease
 *   instead left a race: under load the preferred node often saw the free
 *   Lease after the others' contend delay, one of them took it back and the
 *   preferred node was skipped for that IP — spreading then took minutes.
 *
 * Leader election for cluster-wide single writers (`elect('herald-ipam')`)
 * rides on the same Leases: the election Lease names its holder, written
 * only when leadership moves, and is valid while the holder's node Lease is.
 * Claimed like a free IP (create, or update with the resourceVersion seen
 * after the holder expired), never handed over while the leader lives (a
 * leader change is a cost, not a balance), and given up at once on our own
 * clock when our node Lease may have lapsed: `isLeader()` is the fence.
 */
import type * as k8s from '@kubernetes/client-node';
import { randomUUID } from 'node:crypto';
import { monotonicMs, systemClock, type Clock, type TimerHandle } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { Trigger } from '../../core/trigger.js';
import type { OwnershipBackend, OwnershipView } from '../../controlplane/ownership/backend.js';
import type { LivenessGate, OwnerWatch } from '../../controlplane/ownership/edges.js';
import { RELEASE_GRACE_MS, SilenceVerdicts, watchTargets, type HeldElsewhere } from '../../controlplane/ownership/fencing.js';
import { deleteAsRead, isConflict, isNotFound, type KubeClient, type KubeList, type KubeObject } from '../../intent/sources/kube-client.js';
import { rendezvousScore } from '../../controlplane/ownership/rendezvous.js';
import { INCARNATION_ANNOTATION } from '../../supervisor/protocol.js';

export interface LeaseOwnershipOptions {
  /** Namespace of the Leases. */
  readonly namespace: string;
  /** leaseDurationSeconds of the node Lease. */
  readonly durationS: number;
  /** Renewal interval of the node Lease. */
  readonly renewMs: number;
  /** We stop answering this long before our Lease could expire elsewhere. */
  readonly safetyMs: number;
  /** Non-preferred nodes wait this long before claiming a free (or expired) IP. */
  readonly contendDelayMs: number;
  /** A more preferred node must have been live this long before a holder hands an IP over to it. */
  readonly handoverHoldMs: number;
  /** A preferred node that left a handed-over IP unclaimed is skipped for that IP this long (it is not a candidate). */
  readonly skipPreferredMs: number;
  /** A handed-over IP back to us within this long counts as left unclaimed (default HANDED_BACK_WITHIN_MS). */
  readonly handedBackWithinMs?: number;
  /**
   * Silence about an IP its holder has marked as releasing is no evidence of
   * death for this long (our own clock, from the first such verdict).
   */
  readonly releaseGraceMs?: number;
}

export const leaseOwnershipDefaults: LeaseOwnershipOptions = {
  namespace: 'herald-system',
  durationS: 6,
  renewMs: 2000,
  safetyMs: 500,
  contendDelayMs: 300,
  handoverHoldMs: 5000,
  skipPreferredMs: 60_000,
};

/** As on etcd: an IP handed over that is ours again within 10 s was left by the preferred node. */
export const HANDED_BACK_WITHIN_MS = 10_000;

const LABEL = 'herald.dev/lease';
/** On an IP Lease: the uid of the holder's node Lease when it was written — valid only while that very node Lease is. */
export const NODE_LEASE_UID_ANNOTATION = 'herald.dev/node-lease-uid';
/** On an IP Lease: its holder is giving it up (written before it goes silent; the Lease's delete or hand-over removes it). */
export const RELEASING_ANNOTATION = 'herald.dev/releasing';
/** IP Lease claims in flight at once in one pass. */
const CLAIMS_IN_FLIGHT = 16;
/** Rendezvous rankings kept (one per IP); beyond it the cache starts over. */
const RANKINGS_MAX = 1 << 17;

/**
 * Lease name of an IP: `ip-198-51-100-7`, `ip-2001-db8--7` (injective: IPs
 * hold no '-'). A name must end with a letter or digit, so an address ending
 * in `::` (`2001:db8:1::`, the first of an IPv6 pool) gets a `0`:
 * `ip-2001-db8-1--0` — still injective, as the canonical text of an address
 * never ends in `::0`. (Without it the API server refused the create with a
 * 422, and the failed claim stopped that ownership pass.)
 */
export function ipLeaseName(ip: string): string {
  const name = `ip-${ip.toLowerCase().replace(/[.:]/g, '-')}`;
  return name.endsWith('-') ? `${name}0` : name;
}

export function nodeLeaseName(node: string): string {
  return `node-${node}`;
}

interface Observed {
  rv: string;
  /** The node Lease object's uid: IP Leases bound to another uid are not valid for this node. */
  uid: string | undefined;
  /** Our monotonic ms when this resourceVersion was first seen. */
  seenAt: number;
  durationMs: number;
  /** Since when it has been live without a gap (for the hand-over hold). */
  liveSince: number;
  /** We saw this Lease change (a renewal), not only found it on a list: the node is renewing now. */
  renewing: boolean;
}

export interface LeaseOwnershipStatus {
  renewals: number;
  renewFailures: number;
  claims: number;
  takeovers: number;
  lostRaces: number;
  releases: number;
  /** IP Leases handed straight to their preferred node. */
  handovers: number;
  elected: number;
  /** Our node Lease is valid by our own clock. */
  leaseValid: boolean;
  /** Nodes this one fenced out (silent on the wire while their node Lease ran). */
  fencedNodes: string[];
  fencesIssued: number;
  /** Times our own node Lease was found deleted while we ran (fenced out by another node). */
  fencedOut: number;
  releaseMarks: number;
  /** Holders we judged expired and the API server agreed (their node Lease deleted as we saw it, or none). */
  expiriesConfirmed: number;
  /** Holders we judged expired whose node Lease had been renewed after all (our watch was behind): nothing taken. */
  expiriesRefuted: number;
  liveNodes: string[];
  /** Election Lease → its live holder (null: none). */
  leaders: Record<string, string | null>;
}

/**
 * An IP Lease this node wrote to a new holder (the writer knows why): claimed
 * while free — first owner, or `from` released it (deleted its Lease on a
 * clean stop or because it no longer qualified) —, taken over because the
 * holder's node Lease expired, or handed to its preferred node.
 */
export interface OwnershipMove {
  readonly ip: string;
  readonly to: string;
  readonly from?: string;
  /**
   * `fenced`: we deleted the holder's node Lease because it went silent on
   * the wire while its Lease still ran; `gone`: its node Lease was deleted
   * (its supervisor after a crash, or another node's fence).
   */
  readonly cause: 'free' | 'released' | 'expired' | 'handover' | 'fenced' | 'gone';
}

/** A node fenced out by this one: silent on the wire about `silentIp` while its node Lease still ran. */
export interface FenceRecord {
  readonly node: string;
  readonly by: string;
  readonly silentIp: string;
  /** The IPs it held (each moves now), at most 100. */
  readonly ips: readonly string[];
}

/** One line for logs and Events. */
export function describeFence(f: FenceRecord): string {
  return `${f.by} fenced out ${f.node}: it stopped answering for ${f.silentIp} on the wire while its node Lease still ran (a lost link, a frozen agent); its node Lease was deleted, so its IPs move now instead of at Lease expiry`;
}

/** One line for logs and Events: `node-b now announces 192.0.2.10: …`. */
export function describeMove(m: OwnershipMove): string {
  const why =
    m.cause === 'expired'
      ? `took it over from ${m.from}, whose node Lease expired`
      : m.cause === 'fenced'
        ? `took it over from ${m.from}, fenced out: silent on the wire while its node Lease still ran`
        : m.cause === 'gone'
          ? `took it over from ${m.from}, whose node Lease was deleted (its agent crashed, or it was fenced out)`
          : m.cause === 'handover'
        ? `handed over by ${m.from} (${m.to} is its preferred node)`
        : m.cause === 'released'
          ? `claimed it after ${m.from} released it`
          : 'claimed it while free (no node held it)';
  return `${m.to} now announces ${m.ip}: ${why}`;
}

/** One election: who leads now, and whether it is us (fenced on our own clock). */
export interface LeaderElection {
  readonly name: string;
  /** We hold the election Lease and our node Lease is valid by our own clock. */
  isLeader(): boolean;
  /** The live holder of the election Lease, if any (ourselves included). */
  leader(): string | undefined;
  /** Called (after the change) whenever `isLeader()` or `leader()` changes. */
  onChange(fn: () => void): void;
}

interface Election {
  readonly name: string;
  lease: KubeObject | undefined;
  freeSince: number | undefined;
  listeners: (() => void)[];
  /** What listeners last heard: `leader|mine`. */
  last: string;
}

export class LeaseOwnership implements OwnershipBackend {
  readonly kind = 'kubernetes' as const;
  private readonly clock: Clock;
  private readonly base: string;
  private readonly nodes = new Map<string, Observed>();
  private readonly ips = new Map<string, KubeObject>();
  private readonly elections = new Map<string, Election>();
  /** When we first saw each candidate IP free (or its holder expired). */
  private readonly freeSince = new Map<string, number>();
  /** IPs we handed over to a more preferred node: to whom, when. */
  private readonly handedTo = new Map<string, { node: string; at: number }>();
  /** Preferred nodes that did not take an IP we handed them: skipped for that IP until `until`. */
  private readonly skip = new Map<string, { node: string; until: number }>();
  private candidates: ReadonlyMap<string, readonly string[]> = new Map();
  private owned: ReadonlySet<string> = new Set();
  private onChange: ((view: OwnershipView) => void | Promise<void>) | undefined;
  private readonly moveListeners: ((move: OwnershipMove) => void)[] = [];
  /** The holder of each IP Lease we saw deleted (a release), so the next claim can say whose it was. */
  private readonly releasedBy = new Map<string, string>();
  private lw: k8s.ListWatch<KubeObject> | undefined;
  private watchingSince = 0;
  private synced = false;
  private myLease: KubeObject | undefined;
  /** Our Lease is valid until this monotonic ms (own clock; 0 = not held). */
  private validUntil = 0;
  private renewTimer: TimerHandle | undefined;
  private retryTimer: TimerHandle | undefined;
  private readonly evaluate: Trigger;
  private released = false;
  private disposed = false;
  /** Nodes whose Lease we saw deleted (a clean stop, or a crash released by the supervisor): gone, no benefit of the doubt. */
  private readonly goneNodes = new Set<string>();
  /** Nodes we fenced out, and when (monotonic ms): the cause of the takeovers that follow. */
  private readonly fencedAt = new Map<string, number>();
  /** Nodes whose expiry the API server confirmed (confirmExpired), when: the takeover's cause. */
  private readonly expiredAt = new Map<string, number>();
  private readonly fenceListeners: ((f: FenceRecord) => void)[] = [];
  private readonly verdicts: SilenceVerdicts;
  /** The known nodes and this one (the array is replaced when the set changes: rankings made from another are stale). */
  private nodeSet: readonly string[] | undefined;
  /** Per IP, the nodes by rendezvous score (see ranking()). */
  private readonly rankings = new Map<string, { nodes: readonly string[]; ranked: readonly string[] }>();
  /** This process's incarnation, stamped on our node Lease. */
  readonly incarnation = randomUUID();
  readonly counters = { renewals: 0, renewFailures: 0, claims: 0, takeovers: 0, lostRaces: 0, releases: 0, handovers: 0, elected: 0, fencesIssued: 0, fencedOut: 0, releaseMarks: 0, expiriesConfirmed: 0, expiriesRefuted: 0, rankings: 0, passes: 0 };

  constructor(
    private readonly client: KubeClient,
    private readonly node: string,
    /** `watch`: other owners on the wire (datapath/owner-watch.ts); a silent one is fenced out. */
    private readonly deps: { log: Logger; clock?: Clock; watch?: OwnerWatch },
    private readonly opts: LeaseOwnershipOptions = leaseOwnershipDefaults,
  ) {
    this.clock = deps.clock ?? systemClock;
    this.verdicts = new SilenceVerdicts(
      { clock: this.clock, log: deps.log, ...(deps.watch ? { watch: deps.watch } : {}), again: (node, ip) => void this.fence(node, ip) },
      opts.releaseGraceMs ?? RELEASE_GRACE_MS,
    );
    this.base = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(opts.namespace)}/leases`;
    this.evaluate = new Trigger({
      name: 'lease-ownership',
      run: () => this.reconcile(),
      clock: this.clock,
      log: deps.log,
      periodicMs: Math.max(100, Math.floor(opts.renewMs / 2)),
      onError: (e) => deps.log.warn({ err: describeError(e) }, 'lease ownership pass failed; retrying'),
    });
  }

  private now(): number {
    return monotonicMs(this.clock);
  }

  async start(onChange: (view: OwnershipView) => void | Promise<void>): Promise<void> {
    this.onChange = onChange;
    this.deps.watch?.onSilent((node, ip) => void this.fence(node, ip).catch((e) => this.deps.log.warn({ node, ip, err: describeError(e) }, 'fencing a silent owner failed')));
    await this.renew();
    this.startWatch();
  }

  setCandidates(candidates: ReadonlyMap<string, readonly string[]>): void {
    this.candidates = candidates;
    this.evaluate.trigger();
  }

  /**
   * Takes part in the election on Lease `name` (in this store's namespace);
   * its Lease must not start with `node-` or `ip-`. Register before start().
   */
  elect(name: string): LeaderElection {
    if (name.startsWith('node-') || name.startsWith('ip-')) throw new Error(`election lease ${name}: the node- and ip- prefixes are taken`);
    let e = this.elections.get(name);
    if (!e) {
      e = { name, lease: undefined, freeSince: undefined, listeners: [], last: '' };
      this.elections.set(name, e);
    }
    const election = e;
    return {
      name,
      isLeader: () => this.leads(election),
      leader: () => this.leaderOf(election),
      onChange: (fn) => {
        election.listeners.push(fn);
      },
    };
  }

  private leads(e: Election): boolean {
    return !this.released && !this.disposed && e.lease !== undefined && holderOf(e.lease) === this.node && this.now() < this.validUntil;
  }

  private leaderOf(e: Election): string | undefined {
    const holder = e.lease ? holderOf(e.lease) : undefined;
    return holder && this.alive(holder) && !(holder === this.node && (this.released || this.disposed)) ? holder : undefined;
  }

  /** Tells listeners when the leader (or whether it is us) changed. */
  private announceLeaders(): void {
    for (const e of this.elections.values()) {
      const now = `${this.leaderOf(e) ?? ''}|${this.leads(e)}`;
      if (now === e.last) continue;
      e.last = now;
      if (this.leads(e)) {
        this.counters.elected++;
        this.deps.log.info({ election: e.name }, 'elected leader');
      }
      for (const fn of e.listeners) {
        try {
          fn();
        } catch (err) {
          this.deps.log.warn({ election: e.name, err: describeError(err) }, 'leader change listener failed');
        }
      }
    }
  }

  view(): OwnershipView {
    const owners = new Map<string, string>();
    for (const [ip, lease] of this.ips) {
      const holder = this.validHolder(lease);
      if (holder) owners.set(ip, holder);
    }
    return { owned: this.owned, owners };
  }

  livenessGate(): LivenessGate {
    return {
      answerUntilMs: () => (this.released ? 0 : this.validUntil),
      recheck: async (why) => {
        this.deps.log.warn({ why }, 'node lease re-checked with the API server');
        // Our renewal is the fencing token: it finds our node Lease deleted (we were fenced out:
        // step down) or, written, makes a fence still in flight fail (a 409 on its precondition).
        await this.renew();
        // What we missed meanwhile (a successor's IP Lease, others' renewals): read now, not from the watch cache.
        await this.relist().catch((e) => this.deps.log.warn({ err: describeError(e) }, 'leases could not be re-read; the watch decides'));
        await this.evaluate.triggerNow();
      },
    };
  }

  status(): LeaseOwnershipStatus {
    return {
      ...this.counters,
      leaseValid: this.now() < this.validUntil,
      fencedNodes: [...this.fencedAt.keys()].sort(),
      liveNodes: [...this.nodes.keys()].filter((n) => this.alive(n)).sort(),
      leaders: Object.fromEntries([...this.elections.values()].map((e) => [e.name, this.leaderOf(e) ?? null])),
    };
  }

  /** Our node Lease and the incarnation stamped on it (reported to the supervisor, which releases it if we crash). */
  nodeLease(): { namespace: string; name: string; incarnation: string } {
    return { namespace: this.opts.namespace, name: nodeLeaseName(this.node), incarnation: this.incarnation };
  }

  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    this.renewTimer?.cancel();
    await this.emit(new Set());
    // Free every IP at once: our node Lease gone makes every IP Lease naming us invalid.
    await this.client.request('DELETE', `${this.base}/${nodeLeaseName(this.node)}`).catch(() => {});
    for (const [ip, lease] of this.ips) {
      if (holderOf(lease) !== this.node) continue;
      await this.deleteIpLease(ip, lease).catch(() => {});
    }
    // Leadership too: a successor needs no expiry.
    for (const e of this.elections.values()) {
      if (!e.lease || holderOf(e.lease) !== this.node) continue;
      await this.client
        .request('DELETE', `${this.base}/${e.lease.metadata.name}`, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { resourceVersion: e.lease.metadata.resourceVersion } })
        .catch(() => {});
    }
    this.announceLeaders();
  }

  dispose(): void {
    this.disposed = true;
    this.onChange = undefined;
    this.renewTimer?.cancel();
    this.retryTimer?.cancel();
    this.evaluate.dispose();
    this.verdicts.dispose();
    void this.lw?.stop().catch(() => {});
  }

  // ---- our node Lease ----

  private scheduleRenew(ms: number): void {
    if (this.disposed || this.released) return;
    this.renewTimer?.cancel();
    this.renewTimer = this.clock.setTimeout(() => void this.renew(), ms);
  }

  private async renew(): Promise<void> {
    if (this.disposed || this.released) return;
    const sentAt = this.now();
    const name = nodeLeaseName(this.node);
    const base = this.myLease;
    const spec = () => ({ holderIdentity: this.node, leaseDurationSeconds: this.opts.durationS, renewTime: new this.client.k8s.V1MicroTime() });
    try {
      let result: KubeObject;
      if (base) {
        const body = { ...base, metadata: this.stamped(base.metadata), spec: { ...(base.spec as object), ...spec() } };
        result = await this.client.request<KubeObject>('PUT', `${this.base}/${name}`, body);
      } else {
        result = await this.readOrCreate(name, spec());
      }
      // Fenced out while this renewal was in flight (its answer came after the watch's delete): the re-join renews.
      if (this.myLease !== base) return;
      this.myLease = result;
      this.counters.renewals++;
      const wasValid = this.now() < this.validUntil;
      this.validUntil = sentAt + this.opts.durationS * 1000 - this.opts.safetyMs;
      if (!wasValid) this.evaluate.trigger();
      // Every renewMs from the last send, however long the request took.
      this.scheduleRenew(Math.max(0, sentAt + this.opts.renewMs - this.now()));
    } catch (e) {
      this.counters.renewFailures++;
      // Superseded: we were fenced out while this renewal was in flight, and the re-join renews from now on.
      if (this.myLease !== base) return;
      // Deleted under us while we ran: another node found us silent on the wire and fenced us out. The renewal
      // carries our node Lease's uid, so kube-apiserver answers that with a 409 (a failed uid precondition) as
      // well as a 404: on a 409 a read tells a fence from a lost race (our watch may have missed the delete).
      if (base && !this.released && !this.disposed && (isNotFound(e) || (isConflict(e) && (await this.ourLeaseGone(name, base))))) {
        if (this.myLease !== base) return; // superseded while we read
        this.fencedOut('our node Lease is gone: another node found us silent on the wire and fenced us out');
        return;
      }
      if (isConflict(e) || isNotFound(e)) this.myLease = undefined; // re-read (or re-create) next time
      this.deps.log.warn({ err: describeError(e), validForMs: Math.max(0, this.validUntil - this.now()) }, 'node lease renewal failed; retrying');
      this.scheduleRenew(Math.min(500, this.opts.renewMs));
      // Step down on our own clock: the heartbeat gate closes at validUntil; drop ownership then too.
      this.evaluate.trigger();
    }
  }

  /** Our node Lease `base` no longer stands: deleted, or another object under its name. */
  private async ourLeaseGone(name: string, base: KubeObject): Promise<boolean> {
    try {
      const cur = await this.client.request<KubeObject>('GET', `${this.base}/${name}`);
      return cur.metadata.uid !== base.metadata.uid;
    } catch (e) {
      return isNotFound(e);
    }
  }

  private async readOrCreate(name: string, spec: Record<string, unknown>): Promise<KubeObject> {
    try {
      const cur = await this.client.request<KubeObject>('GET', `${this.base}/${name}`);
      return await this.client.request<KubeObject>('PUT', `${this.base}/${name}`, { ...cur, metadata: this.stamped(cur.metadata), spec: { ...(cur.spec as object), ...spec } });
    } catch (e) {
      if (!isNotFound(e)) throw e;
      return await this.client.request<KubeObject>('POST', this.base, {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace: this.opts.namespace, labels: { [LABEL]: 'node' }, annotations: { [INCARNATION_ANNOTATION]: this.incarnation } },
        spec: { ...spec, acquireTime: new this.client.k8s.V1MicroTime() },
      });
    }
  }

  /**
   * Fenced out (our node Lease deleted while we ran): answer nothing from now
   * on — the gate closes, every IP is withdrawn — and re-join with a new node
   * Lease. The IP Leases written under the old one are bound to its uid, so
   * they are nobody's now (never ours again by accident): whoever claims one
   * does it with a conditional write, as with any free IP.
   */
  private fencedOut(why: string): void {
    this.counters.fencedOut++;
    this.validUntil = 0;
    this.myLease = undefined;
    this.deps.log.warn({ why }, 'fenced out: stepping down at once (every IP withdrawn), re-joining with a new node Lease');
    void Promise.resolve(this.emit(new Set())).catch(() => {});
    this.scheduleRenew(0);
  }

  private stamped(metadata: KubeObject['metadata']): KubeObject['metadata'] {
    return { ...metadata, annotations: { ...(metadata.annotations as Record<string, string> | undefined), [INCARNATION_ANNOTATION]: this.incarnation } };
  }

  // ---- the watch of every Lease in the namespace ----

  private startWatch(): void {
    const { k8s } = this.client;
    const watch = new k8s.Watch(this.client.kc);
    const watcher = {
      watch: (path: string, query: Record<string, unknown>, cb: (phase: string, obj: any) => void, done: (err: any) => void) => {
        if (!this.synced) this.watchingSince = this.now();
        this.synced = true;
        this.evaluate.trigger();
        return watch.watch(path, { ...query, allowWatchBookmarks: true, timeoutSeconds: 240 + Math.floor(Math.random() * 60) }, cb, done);
      },
    };
    const lw = new k8s.ListWatch<KubeObject>(this.base, watcher as unknown as k8s.Watch, (() => this.client.list(this.base)) as never, false);
    const seen = (obj: KubeObject) => this.observe(obj, false);
    lw.on('add', seen);
    lw.on('update', seen);
    lw.on('delete', (obj: KubeObject) => this.observe(obj, true));
    lw.on('error', (err: unknown) => {
      if (this.disposed) return;
      this.deps.log.warn({ err: describeError(err) }, 'lease watch failed; retrying');
      this.retryTimer?.cancel();
      this.retryTimer = this.clock.setTimeout(() => void lw.start().catch(() => {}), 500);
    });
    this.lw = lw;
    void lw.start().catch(() => {});
  }

  private observe(obj: KubeObject, deleted: boolean): void {
    const name = obj.metadata.name;
    if (name.startsWith('node-')) {
      const node = (obj.spec as { holderIdentity?: string } | undefined)?.holderIdentity ?? name.slice('node-'.length);
      const known = this.nodes.get(node);
      const wasAlive = this.alive(node);
      if (node === this.node && deleted && !this.released && !this.disposed && this.myLease && obj.metadata.uid === this.myLease.metadata.uid) {
        this.fencedOut('our node Lease was deleted: another node found us silent on the wire and fenced us out');
      }
      if (deleted) {
        // Deleted when it had (nearly) run out by our clock: another node confirmed its expiry before we did,
        // so a take-over says "expired". A live holder renews long before half its duration is gone, so a
        // deletion earlier than that was a fence or a crash revoked at once ("deleted").
        if (node !== this.node && known && known.seenAt + known.durationMs - this.now() < known.durationMs / 2) this.noteExpired(node);
        if (this.nodes.delete(node)) this.nodeSet = undefined;
        this.goneNodes.add(node);
        if (this.goneNodes.size > 10_000) this.goneNodes.clear(); // bounded; only the benefit of the doubt comes back
      } else {
        this.goneNodes.delete(node);
        const rv = obj.metadata.resourceVersion ?? '';
        const durationMs = ((obj.spec as { leaseDurationSeconds?: number }).leaseDurationSeconds ?? this.opts.durationS) * 1000;
        const now = this.now();
        const liveSince = known && wasAlive ? known.liveSince : now;
        if (!known) this.nodeSet = undefined;
        const uid = typeof obj.metadata.uid === 'string' ? obj.metadata.uid : undefined;
        if (!known || known.rv !== rv) this.nodes.set(node, { rv, uid, seenAt: now, durationMs, liveSince, renewing: known !== undefined && wasAlive && known.uid === uid });
      }
      // A node joining, coming back or leaving changes preferences and owners; a renewal alone does not
      // (expiries are found by the periodic pass).
      if (node !== this.node && wasAlive !== this.alive(node)) this.evaluate.trigger();
      return;
    }
    const election = this.elections.get(name);
    if (election) {
      election.lease = deleted ? undefined : obj;
      this.evaluate.trigger();
      this.announceLeaders();
      return;
    }
    if (!name.startsWith('ip-')) return;
    const ip = (obj.metadata.annotations as Record<string, string> | undefined)?.['herald.dev/ip'];
    if (!ip) return;
    if (deleted) {
      const holder = holderOf(obj);
      if (holder) this.releasedBy.set(ip, holder);
      if (this.releasedBy.size > 100_000) this.releasedBy.clear(); // bounded; only the message loses the name
      this.ips.delete(ip);
      this.verdicts.released(ip);
    } else {
      const before = this.ips.get(ip);
      if (before && holderOf(before) !== holderOf(obj)) this.verdicts.released(ip);
      this.ips.set(ip, obj);
    }
    this.evaluate.trigger();
  }

  /** Told every IP Lease this node writes to a new holder, with the cause. */
  onMove(fn: (move: OwnershipMove) => void): void {
    this.moveListeners.push(fn);
  }

  private moved(move: OwnershipMove): void {
    this.deps.log.info({ ip: move.ip, to: move.to, ...(move.from ? { from: move.from } : {}), cause: move.cause }, describeMove(move));
    for (const fn of this.moveListeners) {
      try {
        fn(move);
      } catch (e) {
        this.deps.log.warn({ err: describeError(e) }, 'an ownership move listener failed');
      }
    }
  }

  /** A holder whose node Lease we have neither seen nor seen deleted, while we have watched for less than a Lease duration. */
  private doubtful(holder: string, now: number): boolean {
    return !this.nodes.has(holder) && !this.goneNodes.has(holder) && now < this.watchingSince + this.opts.durationS * 1000;
  }

  /** A node's Lease is valid by our observation (our own: by our own clock). */
  private alive(node: string, now = this.now()): boolean {
    if (node === this.node) return now < this.validUntil;
    const o = this.nodes.get(node);
    return o !== undefined && now < o.seenAt + o.durationMs;
  }

  /**
   * The holder an IP Lease names while that holding is valid: the holder's
   * node Lease is valid, and is the very one the IP Lease was written under
   * (a node Lease deleted — a fence, a crash — and created again does not
   * bring the old IP Leases back to life).
   */
  private validHolder(lease: KubeObject): string | undefined {
    const holder = holderOf(lease);
    if (!holder || !this.alive(holder)) return undefined;
    return this.bound(lease, holder) ? holder : undefined;
  }

  private bound(lease: KubeObject, holder: string): boolean {
    const uid = annotationsOf(lease)[NODE_LEASE_UID_ANNOTATION];
    if (!uid) return true; // written before bindings: valid with any node Lease of its holder
    const current = holder === this.node ? this.myLease?.metadata.uid : this.nodes.get(holder)?.uid;
    return current === uid;
  }

  /** The live node with the highest rendezvous score: the same answer on every node that sees the same live nodes. */
  private preferred(ip: string, now = this.now()): string | undefined {
    for (const node of this.ranking(ip)) if (this.alive(node, now)) return node;
    return undefined;
  }

  /**
   * Every known node (and this one), highest rendezvous score for `ip` first.
   * Kept per IP until the set of known nodes changes: a pass asks it for every
   * IP held and every free candidate, and a score is a sha256 — hashed again per
   * node per IP per pass it was the largest cost of a pass at 2,000 IPs.
   */
  private ranking(ip: string): readonly string[] {
    const cached = this.rankings.get(ip);
    if (cached && cached.nodes === this.nodeSet) return cached.ranked;
    if (this.nodeSet === undefined) this.nodeSet = [...new Set([...this.nodes.keys(), this.node])];
    const nodes = this.nodeSet;
    const ranked = nodes.map((node) => ({ node, score: rendezvousScore(node, ip) })).sort((a, b) => (a.score < b.score ? 1 : a.score > b.score ? -1 : 0)).map((r) => r.node);
    if (this.rankings.size >= RANKINGS_MAX) this.rankings.clear(); // bounded; recomputed on need
    this.rankings.set(ip, { nodes, ranked });
    this.counters.rankings++;
    return ranked;
  }

  // ---- one pass: claim, take over, give up, publish ----

  private async reconcile(): Promise<void> {
    if (this.disposed || this.released || !this.synced) return;
    this.counters.passes++;
    const now = this.now();
    const leaseValid = now < this.validUntil;
    // Give up what we hold but no longer qualify for: withdraw first, then delete the Lease.
    let giveUp = [...this.ips].filter(([ip, lease]) => this.validHolder(lease) === this.node && (!this.candidates.has(ip) || this.handOverTo(ip, now) !== undefined));
    for (const [ip] of giveUp) {
      const to = this.candidates.has(ip) ? this.handOverTo(ip, now) : undefined;
      if (to) {
        this.handedTo.set(ip, { node: to, at: now });
        this.deps.log.info({ ip, to }, 'handing an IP over to its preferred node');
      }
    }
    if (giveUp.length > 0) {
      // Said in the store before we go silent: candidates take our silence about these IPs for a release, not for death.
      giveUp = await this.markReleasing(giveUp);
      const leaving = new Set(giveUp.map(([ip]) => ip));
      await this.emit(new Set([...this.owned].filter((ip) => !leaving.has(ip))));
      for (const [ip, lease] of giveUp) {
        const to = this.handedTo.get(ip);
        const done = to && to.at === now ? this.handIpLeaseTo(ip, lease, to.node) : this.deleteIpLease(ip, lease);
        await done.catch((e) => this.deps.log.warn({ ip, err: describeError(e) }, 'releasing an IP lease failed'));
      }
    }
    if (leaseValid) {
      const toClaim: [string, KubeObject | undefined][] = [];
      for (const ip of this.candidates.keys()) {
        const lease = this.ips.get(ip);
        const holder = lease ? holderOf(lease) : undefined;
        const valid = lease ? this.validHolder(lease) : undefined;
        if (valid === this.node) continue;
        if (valid) {
          this.freeSince.delete(ip);
          continue;
        }
        // Free, or its holder expired. A holder we have not watched for a whole lease duration yet is given the
        // benefit of the doubt — unless we saw its node Lease deleted (released: a clean stop, or its supervisor after a crash).
        if (holder && holder !== this.node && this.doubtful(holder, now)) continue;
        const since = this.freeSince.get(ip) ?? now;
        this.freeSince.set(ip, since);
        const mine = this.preferred(ip, now) === this.node;
        if (!mine && now - since < this.opts.contendDelayMs) {
          // Look again when the delay is over (not at once: re-running the pass until then was a busy loop
          // over every candidate while Services kept arriving — the largest cost of a pass at 2,000 IPs).
          this.lookAgainAt(since + this.opts.contendDelayMs, now);
          continue;
        }
        // We handed this IP over and it came back to us soon after: the preferred node left it (not a candidate,
        // or broken); skip it for a while instead of flapping. Later, it held the IP and then died or was fenced
        // out: when it re-joins it gets the IP back like any preferred node (as on etcd).
        const handed = this.handedTo.get(ip);
        if (handed && now - handed.at < (this.opts.handedBackWithinMs ?? HANDED_BACK_WITHIN_MS)) this.skip.set(ip, { node: handed.node, until: now + this.opts.skipPreferredMs });
        this.handedTo.delete(ip);
        toClaim.push([ip, lease]);
      }
      // A holder we judge expired is judged on our own view, which may be stale (a starved candidate
      // reads its watch late and sees a whole Lease duration pass without the renewals already sent).
      // Before taking over, its node Lease is deleted exactly as we last saw it: a renewal we have not
      // seen yet makes that a 409 and nothing is taken (its IP Leases stay its). One request per
      // expired node, not per IP.
      const expiredHolders = new Set<string>();
      for (const [, lease] of toClaim) {
        const h = lease ? holderOf(lease) : undefined;
        if (h && h !== this.node && !this.goneNodes.has(h) && !this.alive(h)) expiredHolders.add(h);
      }
      const stillLive = new Set<string>();
      for (const h of expiredHolders) if (!(await this.confirmExpired(h).catch(() => false))) stillLive.add(h);
      if (stillLive.size > 0) {
        // Read live again (observe): the next pass leaves their IPs alone until their Leases really lapse.
        toClaim.splice(0, toClaim.length, ...toClaim.filter(([, lease]) => !stillLive.has((lease && holderOf(lease)) ?? '')));
      }
      // Claims are independent conditional writes (a create, or an update carrying the resourceVersion
      // seen): CLAIMS_IN_FLIGHT at a time instead of one round trip after another (1,000 IPs took
      // 2.3 s on one node one by one). One IP's refusal (a 403, a 422) holds back no other claim.
      let next = 0;
      const worker = async () => {
        while (next < toClaim.length) {
          const [ip, lease] = toClaim[next++]!;
          await this.claim(ip, lease).catch((e) => this.deps.log.warn({ ip, err: describeError(e) }, 'claiming an IP lease failed; retrying'));
        }
      };
      await Promise.all(Array.from({ length: Math.min(CLAIMS_IN_FLIGHT, toClaim.length) }, worker));
    }
    if (leaseValid) for (const e of this.elections.values()) await this.contend(e, now);
    this.announceLeaders();
    const owned = new Set<string>();
    if (leaseValid) for (const [ip, lease] of this.ips) if (this.validHolder(lease) === this.node && this.candidates.has(ip)) owned.add(ip);
    await this.emit(owned);
    this.updateWatch();
  }

  // ---- wire-verified fencing (controlplane/ownership/fencing.ts: the rules shared with etcd) ----

  /** Watch one IP of every other valid holder we could take over from. */
  private updateWatch(): void {
    this.deps.watch?.setTargets(watchTargets(this.heldElsewhere(), this.candidates));
  }

  private *heldElsewhere(): Iterable<HeldElsewhere> {
    for (const [ip, lease] of this.ips) {
      const holder = this.validHolder(lease);
      if (holder && holder !== this.node) yield { ip, node: holder, marked: annotationsOf(lease)[RELEASING_ANNOTATION] === holder };
    }
  }

  /** Told every node this one fences out. */
  onFence(fn: (f: FenceRecord) => void): void {
    this.fenceListeners.push(fn);
  }

  /**
   * `node` went silent on the wire about `ip` while its node Lease still runs
   * (a lost link, a frozen agent): read the IP Lease again (a releasing
   * holder goes silent first and lets go next — SilenceVerdicts), then delete
   * the holder's node Lease — only the one the IP Lease is bound to, and only
   * as read (uid and resourceVersion preconditions; a renewal in between is
   * read again while the node is still silent). Every IP Lease bound to it is
   * then nobody's: candidates take them over with conditional writes at once,
   * instead of waiting out the Lease duration. The fenced node finds its
   * Lease gone (watch, renewal, or the re-check after a late wake-up or a
   * link regaining carrier, which renews before answering) and steps down.
   */
  private async fence(node: string, ip: string): Promise<void> {
    if (this.disposed || this.released || node === this.node || !(this.now() < this.validUntil)) return;
    const startedAt = this.now();
    let lease: KubeObject | undefined;
    try {
      lease = await this.client.request<KubeObject>('GET', `${this.base}/${ipLeaseName(ip)}`);
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
    if (lease) this.learnIpLease(ip, lease);
    const holder = lease ? holderOf(lease) : undefined;
    const releasing = Boolean(lease && holder && annotationsOf(lease)[RELEASING_ANNOTATION] === holder);
    if (!this.verdicts.judge(node, ip, { holder, releasing }) || !lease) {
      this.evaluate.trigger();
      return;
    }
    if (this.disposed || this.released) return;
    const readAt = this.now();
    const boundTo = annotationsOf(lease)[NODE_LEASE_UID_ANNOTATION];
    const ips = [...this.ips].filter(([, l]) => this.validHolder(l) === node).map(([i]) => i);
    const outcome = await deleteAsRead(
      this.client,
      `${this.base}/${nodeLeaseName(node)}`,
      (cur) => holderOf(cur) === node && (!boundTo || cur.metadata.uid === boundTo),
      { again: () => this.deps.watch?.stillSilent?.(node, ip) !== false, ...(this.knownNodeLease(node) ? { known: this.knownNodeLease(node)! } : {}) },
    );
    if (outcome === 'deleted') {
      this.counters.fencesIssued++;
      this.fencedAt.set(node, this.now());
      if (this.fencedAt.size > 1000) this.fencedAt.delete(this.fencedAt.keys().next().value!);
      if (this.nodes.delete(node)) this.nodeSet = undefined;
      this.goneNodes.add(node);
      this.deps.log.warn({ node, ip, ips: ips.length, readMs: Math.round(readAt - startedAt), deleteMs: Math.round(this.now() - readAt) }, 'fenced out a silent owner: deleted its node Lease');
      const record: FenceRecord = { node, by: this.node, silentIp: ip, ips: ips.slice(0, 100) };
      for (const fn of this.fenceListeners) {
        try {
          fn(record);
        } catch (e) {
          this.deps.log.warn({ err: describeError(e) }, 'a fence listener failed');
        }
      }
    } else this.deps.log.info({ node, ip, outcome }, 'silent owner not fenced');
    this.evaluate.trigger();
  }

  /**
   * `node`'s Lease has expired by our observation: true once the API server
   * agrees — its node Lease deleted as we last saw it (uid and
   * resourceVersion preconditions), or there is none. A 409 is a renewal we
   * had not seen (our watch is behind): read it, so it counts as live again.
   */
  private async confirmExpired(node: string): Promise<boolean> {
    const path = `${this.base}/${nodeLeaseName(node)}`;
    const known = this.knownNodeLease(node);
    const outcome = known ? await deleteAsRead(this.client, path, (cur) => holderOf(cur) === node, { known, attempts: 1 }) : 'conflict';
    if (outcome === 'deleted' || outcome === 'gone') {
      this.noteExpired(node);
      if (this.nodes.delete(node)) this.nodeSet = undefined;
      this.goneNodes.add(node);
      this.counters.expiriesConfirmed++;
      return true;
    }
    try {
      const cur = await this.client.request<KubeObject>('GET', path);
      if (holderOf(cur) !== node) return true; // not its Lease any more: nothing of it to wait for
      this.counters.expiriesRefuted++;
      this.deps.log.info({ node, rv: cur.metadata.resourceVersion }, 'a node Lease we judged expired was renewed (our watch was behind): not taking over');
      this.observe(cur, false);
      return false;
    } catch (e) {
      if (!isNotFound(e)) throw e;
      if (this.nodes.delete(node)) this.nodeSet = undefined;
      this.goneNodes.add(node);
      return true;
    }
  }

  private noteExpired(node: string): void {
    this.expiredAt.delete(node);
    this.expiredAt.set(node, this.now());
    if (this.expiredAt.size > 1000) this.expiredAt.delete(this.expiredAt.keys().next().value!);
  }

  /** A node Lease as the watch last showed it (name, uid, resourceVersion, holder): enough for a conditional delete. */
  private knownNodeLease(node: string): KubeObject | undefined {
    const o = this.nodes.get(node);
    if (!o?.uid) return undefined;
    return { metadata: { name: nodeLeaseName(node), uid: o.uid, resourceVersion: o.rv }, spec: { holderIdentity: node } };
  }

  /** An IP Lease read directly: kept unless the cache already holds a newer version. */
  private learnIpLease(ip: string, lease: KubeObject): void {
    const cached = this.ips.get(ip);
    if (cached && newer(cached.metadata.resourceVersion, lease.metadata.resourceVersion)) return;
    this.observe(lease, false);
  }

  /**
   * Every Lease of the namespace read now (after a late wake-up or a link
   * regaining carrier): what the watch has not delivered yet — a successor's
   * IP Lease, a deletion — is in the view before we answer again.
   */
  private async relist(): Promise<void> {
    const list = await this.client.list(this.base);
    const present = new Set<string>();
    for (const obj of list.items) {
      present.add(obj.metadata.name);
      const ip = annotationsOf(obj)['herald.dev/ip'];
      if (obj.metadata.name.startsWith('ip-') && ip) this.learnIpLease(ip, obj);
      else if (obj.metadata.name.startsWith('node-')) {
        const node = holderOf(obj) ?? obj.metadata.name.slice('node-'.length);
        if (!newer(this.nodes.get(node)?.rv, obj.metadata.resourceVersion)) this.observe(obj, false);
      }
    }
    for (const lease of [...this.ips.values()]) {
      if (!present.has(lease.metadata.name) && !newer(lease.metadata.resourceVersion, list.metadata.resourceVersion)) this.observe(lease, true);
    }
  }

  /**
   * Marks each IP Lease as being released by us (its resourceVersion as the
   * precondition), 16 at a time, before we go silent about them; returns the
   * IP Leases as they are now (a failed mark keeps the one we had: the old
   * order holds — silence before the delete, and a candidate may fence us:
   * safe, never two answering).
   */
  private async markReleasing(leases: readonly [string, KubeObject][]): Promise<[string, KubeObject][]> {
    const out = leases.map(([ip, lease]) => [ip, lease] as [string, KubeObject]);
    let next = 0;
    const worker = async () => {
      while (next < out.length) {
        const n = next++;
        const [ip, lease] = out[n]!;
        try {
          const marked = await this.client.request<KubeObject>('PUT', `${this.base}/${lease.metadata.name}`, {
            ...lease,
            metadata: { ...lease.metadata, annotations: { ...annotationsOf(lease), [RELEASING_ANNOTATION]: this.node } },
          });
          this.counters.releaseMarks++;
          this.ips.set(ip, marked);
          out[n] = [ip, marked];
        } catch (e) {
          this.deps.log.debug({ ip, err: describeError(e) }, 'could not mark an IP as releasing: a candidate may take our silence for death');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(CLAIMS_IN_FLIGHT, out.length) }, worker));
    return out;
  }

  /** Claims an election Lease that is free or whose holder expired (the preferred live node at once, others after the contend delay). */
  private async contend(e: Election, now: number): Promise<void> {
    const holder = e.lease ? holderOf(e.lease) : undefined;
    if (holder === this.node || (holder && this.alive(holder))) {
      e.freeSince = undefined;
      return;
    }
    if (holder && this.doubtful(holder, now)) return;
    e.freeSince ??= now;
    if (this.preferred(e.name) !== this.node && now - e.freeSince < this.opts.contendDelayMs) {
      this.lookAgainAt(e.freeSince + this.opts.contendDelayMs, now);
      return;
    }
    // As for IPs: an expiry seen through a stale watch is checked with the API server first.
    if (holder && !this.goneNodes.has(holder) && !(await this.confirmExpired(holder).catch(() => false))) {
      this.evaluate.trigger();
      return;
    }
    try {
      const stamp = new this.client.k8s.V1MicroTime();
      if (!e.lease) {
        e.lease = await this.client.request<KubeObject>('POST', this.base, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: e.name, namespace: this.opts.namespace, labels: { [LABEL]: 'election' } },
          spec: { holderIdentity: this.node, acquireTime: stamp, leaseTransitions: 0 },
        });
      } else {
        const spec = (e.lease.spec ?? {}) as { leaseTransitions?: number };
        e.lease = await this.client.request<KubeObject>('PUT', `${this.base}/${e.name}`, {
          ...e.lease,
          spec: { ...spec, holderIdentity: this.node, acquireTime: stamp, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 },
        });
        this.deps.log.info({ election: e.name, from: holder }, 'took leadership over from an expired holder');
      }
      e.freeSince = undefined;
    } catch (err) {
      if (isConflict(err)) {
        this.counters.lostRaces++; // someone else won; the watch brings their Lease
        return;
      }
      throw err;
    }
  }

  /** A pass at monotonic time `at` (`now` being the pass's monotonic time). */
  private lookAgainAt(at: number, now: number): void {
    this.evaluate.triggerAt(this.clock.now() + Math.max(0, at - now));
  }

  /** The more preferred node to hand an IP we hold over to, once it has been live for the hold time. */
  private handOverTo(ip: string, now: number): string | undefined {
    if (!this.alive(this.node, now)) return undefined; // stepping down (our own Lease lapsed) is not a hand-over
    const pref = this.preferred(ip, now);
    if (!pref || pref === this.node) return undefined;
    const skip = this.skip.get(ip);
    if (skip && skip.node === pref && now < skip.until) return undefined; // it left this IP unclaimed before
    const o = this.nodes.get(pref);
    if (!o || now - o.liveSince < this.opts.handoverHoldMs) return undefined;
    // Only to a node seen renewing lately (a Lease merely found on a list may be a dead node's, valid for a while yet):
    // an IP handed to a dead node would stay silent until its Lease expired.
    return o.renewing && now - o.seenAt <= 2 * this.opts.renewMs + this.opts.safetyMs ? pref : undefined;
  }

  private async claim(ip: string, lease: KubeObject | undefined): Promise<void> {
    const now = new this.client.k8s.V1MicroTime();
    const uid = this.myLease?.metadata.uid;
    if (typeof uid !== 'string') return; // our node Lease is being re-created: claim once it is (a binding needs its uid)
    try {
      let result: KubeObject;
      if (!lease) {
        result = await this.client.request<KubeObject>('POST', this.base, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: ipLeaseName(ip), namespace: this.opts.namespace, labels: { [LABEL]: 'ip' }, annotations: { 'herald.dev/ip': ip, [NODE_LEASE_UID_ANNOTATION]: uid } },
          spec: { holderIdentity: this.node, acquireTime: now, leaseTransitions: 0 },
        });
        this.counters.claims++;
        const from = this.releasedBy.get(ip);
        this.moved(from && from !== this.node ? { ip, to: this.node, from, cause: 'released' } : { ip, to: this.node, cause: 'free' });
      } else {
        const spec = (lease.spec ?? {}) as { leaseTransitions?: number };
        // PUT carries the resourceVersion we saw: 409 if anyone wrote since.
        result = await this.client.request<KubeObject>('PUT', `${this.base}/${lease.metadata.name}`, {
          ...lease,
          metadata: rebound(lease.metadata, uid),
          spec: { ...spec, holderIdentity: this.node, acquireTime: now, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 },
        });
        this.counters.takeovers++;
        const from = holderOf(lease);
        if (from === this.node) this.deps.log.info({ ip }, 'claimed an IP again under our new node Lease');
        else this.moved(from ? { ip, to: this.node, from, cause: this.takeoverCause(from) } : { ip, to: this.node, cause: 'free' });
      }
      this.releasedBy.delete(ip);
      this.ips.set(ip, result);
      this.freeSince.delete(ip);
    } catch (e) {
      if (isConflict(e)) {
        this.counters.lostRaces++; // someone else won; the watch brings their Lease
        return;
      }
      throw e;
    }
  }

  /** Why the holder we take an IP over from lost it: we fenced it out, its node Lease was deleted, or it expired. */
  private takeoverCause(from: string): OwnershipMove['cause'] {
    const fenced = this.fencedAt.get(from);
    if (fenced !== undefined && this.now() - fenced < 10_000) return 'fenced';
    const expired = this.expiredAt.get(from);
    if (expired !== undefined && this.now() - expired < 10_000) return 'expired';
    return this.goneNodes.has(from) ? 'gone' : 'expired';
  }

  /** Names `to` as the holder of an IP Lease we hold (withdrawn already); 409 means someone wrote it since: theirs stands. */
  private async handIpLeaseTo(ip: string, lease: KubeObject, to: string): Promise<void> {
    const spec = (lease.spec ?? {}) as { leaseTransitions?: number };
    try {
      const uid = this.nodes.get(to)?.uid;
      const result = await this.client.request<KubeObject>('PUT', `${this.base}/${lease.metadata.name}`, {
        ...lease,
        metadata: rebound(lease.metadata, uid),
        spec: { ...spec, holderIdentity: to, acquireTime: new this.client.k8s.V1MicroTime(), leaseTransitions: (spec.leaseTransitions ?? 0) + 1 },
      });
      this.counters.handovers++;
      this.ips.set(ip, result);
      this.moved({ ip, to, from: this.node, cause: 'handover' });
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) return;
      throw e;
    }
  }

  private async deleteIpLease(ip: string, lease: KubeObject): Promise<void> {
    try {
      await this.client.request('DELETE', `${this.base}/${lease.metadata.name}`, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { resourceVersion: lease.metadata.resourceVersion } });
      this.counters.releases++;
      this.ips.delete(ip);
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) return;
      throw e;
    }
  }

  private async emit(owned: Set<string>): Promise<void> {
    const same = owned.size === this.owned.size && [...owned].every((ip) => this.owned.has(ip));
    if (same) return;
    this.owned = owned;
    await this.onChange?.(this.view());
  }
}

function holderOf(lease: KubeObject): string | undefined {
  return (lease.spec as { holderIdentity?: string } | undefined)?.holderIdentity || undefined;
}

function annotationsOf(obj: KubeObject): Record<string, string> {
  return (obj.metadata.annotations as Record<string, string> | undefined) ?? {};
}

/** An IP Lease's metadata for its next holder: bound to that holder's node Lease (uid), no releasing marker. */
function rebound(metadata: KubeObject['metadata'], uid: string | undefined): KubeObject['metadata'] {
  const annotations = { ...(metadata.annotations as Record<string, string> | undefined) };
  delete annotations[RELEASING_ANNOTATION];
  if (uid) annotations[NODE_LEASE_UID_ANNOTATION] = uid;
  else delete annotations[NODE_LEASE_UID_ANNOTATION];
  return { ...metadata, annotations };
}

/** resourceVersion `a` is known to be newer than `b` (both etcd revisions, as kube-apiserver writes them; otherwise: not known). */
function newer(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b || !/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return BigInt(a) > BigInt(b);
}
