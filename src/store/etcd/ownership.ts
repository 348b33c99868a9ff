/**
 * Per-IP ownership on etcd.
 *
 *   <prefix>owners/<ip>               → owner node, attached to the owner's lease
 *   <prefix>candidates/<ip>/<node>    → "", attached to the candidate's lease
 *   <prefix>releasing/<ip>            → owner node, on the owner's lease: written
 *                                       before the owner goes silent on a release,
 *                                       deleted with the owner key
 *   <prefix>handover/<node>           → a stopping node's successors, on its lease
 *                                       (handover-record.ts): honoured while the
 *                                       owner key is still on that lease
 *
 * Owning an IP is a key created in a transaction only if absent: the key is the
 * fence, so two nodes never own one IP. Keys live on the agent's one lease, so
 * steady-state store load is one keep-alive per node, whatever the IP count.
 *
 * Spread: the preferred owner of an IP is the live candidate with the highest
 * rendezvous score sha256(node#ip) (MetalLB hashes the same way since
 * MetalLB PR 976); it contends at once, others only after `contendDelayMs`, so
 * ownership is deterministic instead of first come first served (Cilium
 * #28326). An owner hands an IP over to a more preferred candidate that has
 * been present for `handoverHoldMs`. A lost ownership is always contended
 * again (Cilium PR 30340, kube-vip #475): every owner-key delete triggers
 * contention by every remaining candidate.
 */
import type { Watcher } from 'etcd3';
import { monotonicMs, type Clock, type TimerHandle } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { isIpv4 } from '../../core/addr.js';
import { Trigger } from '../../core/trigger.js';
import { causeText, type EventBody, type OwnershipCause } from '../../core/events.js';
import type { OwnershipBackend, OwnershipView } from '../../controlplane/ownership/backend.js';
import type { LivenessGate, OwnerWatch } from '../../controlplane/ownership/edges.js';
import { SilenceVerdicts, watchTargets, type HeldElsewhere } from '../../controlplane/ownership/fencing.js';
import { MEMO_LIMIT, rendezvousMemoSize, rendezvousScore } from '../../controlplane/ownership/rendezvous.js';
import { HANDOVER_CHUNK, HANDOVER_MOVES_AFTER_MS, encodeHandoverRecord, parseHandoverRecord, type CrashHandoverPlan, type HandoverCause, type HandoverMove, type HandoverRecord } from './handover-record.js';
import type { EtcdSession } from './session.js';
import { performance } from 'node:perf_hooks';

export interface EtcdOwnershipOptions {
  /**
   * When the store is unreachable: 'withdraw' (never two owners; the default)
   * or 'keep' announcing what we own (availability first, Cilium #40735; two
   * nodes may answer if another one takes over meanwhile).
   */
  onStoreLoss: 'withdraw' | 'keep';
  /** Non-preferred candidates wait this long before contending for a free IP. */
  contendDelayMs: number;
  /** A more preferred candidate must be present this long before the owner hands over. */
  handoverHoldMs: number;
  /**
   * A more preferred candidate that left a free IP unclaimed this long is
   * skipped for that IP for `skipPreferredMs` (a broken or wedged agent must
   * not make the IP flap between give-up and re-take forever).
   */
  skipPreferredMs?: number;
  /** A full re-read of owners and candidates this often (a safety net under the watch). */
  fullRefreshMs?: number;
  /**
   * Silence about an IP its owner has marked as releasing is no evidence of
   * death for this long (the candidate's own clock, from its first such
   * verdict); a marker still standing after it is fenced as before.
   */
  releaseGraceMs?: number;
}

export const etcdOwnershipDefaults: EtcdOwnershipOptions = { onStoreLoss: 'withdraw', contendDelayMs: 300, handoverHoldMs: 5000, skipPreferredMs: 60_000, fullRefreshMs: 30_000, releaseGraceMs: 3000 };

/** Keys without a lease carry no authority: a live agent's keys always sit on its lease. */
const NO_LEASE = '0';
/** Keys per contention transaction (etcd refuses more than 128 operations per branch by default). */
const CONTEND_CHUNK = 125;
/** Contention transactions in flight at once (disjoint keys; etcd orders them). */
const CONTEND_IN_FLIGHT = 8;
/** Timeline events recorded per claim or release batch (a cold start of 10k IPs records this many, not 10k). */
const EVENTS_PER_BATCH = 50;
/** How soon a release the datapath did not confirm is tried again. */
const WITHDRAWAL_RETRY_MS = 1000;
/** How long a node that handed a key over on its stop counts as departed (its lease is revoked next; at most it expires). */
const DEPARTED_MS = 10_000;
/** IPs per release transaction: the owner key and its releasing marker deleted for each. */
const RELEASE_CHUNK = 60;
/** IPs whose candidates rankAhead() scores per turn of the event loop (a few ms of hashing when none is memoized yet). */
const RANK_AHEAD_PER_TURN = 256;
/** rankAhead() waits for this long without a candidacy change: a cold start of 10,000 IPs converges first (ranking during it slowed it ~15 %). */
export const RANK_AHEAD_AFTER_MS = 1000;

/** At most `n` per `windowMs` (a mass move records its first few events, not one per IP). */
class EventBudget {
  private start = -Infinity;
  private used = 0;
  constructor(
    private readonly n: number,
    private readonly windowMs: number,
  ) {}
  count(nowMs: number): boolean {
    if (nowMs - this.start >= this.windowMs) {
      this.start = nowMs;
      this.used = 0;
    }
    return this.used++ < this.n;
  }
}

/** A free IP to claim; `late` when we are not its preferred node and waited the contention delay. */
/** An owned IP to give up, and why (logged). */
interface Release {
  ip: string;
  why: string;
}

interface Contention {
  ip: string;
  late: boolean;
}

export interface OwnershipStatus {
  /** Keys ignored because they had no live lease, by kind. */
  staleKeysIgnored: number;
  staleKeysRemoved: number;
  fencesIssued: number;
  /** Our keys moved from a former lease onto the current one after an outage. */
  keysMovedToNewLease: number;
  /** Why this node owns nothing right now (undefined when it owns something, or nothing is expected). */
  notOwningReason?: string;
}

/** Why an IP was given up, as a cause the view understands. */
function releaseCause(why: string): OwnershipCause {
  if (why.startsWith('handing over')) return 'spread-rebalance';
  if (why.startsWith('no longer a candidate')) return 'link-or-policy';
  return 'unknown';
}

interface OwnerRecord {
  node: string;
  lease: string;
}

/** A stopping node's hand-over record as seen here: on `lease`; `goneAtMs` once its key was deleted. */
interface SeenHandover extends HandoverRecord {
  readonly lease: string;
  goneAtMs?: number;
}

/** One change of a key under our prefix, at the store revision that made it. */
interface KeyEvent {
  type: 'put' | 'delete';
  key: string;
  value: string;
  lease: string;
  /** The store revision of this change (mod revision of a put, revision of a delete). */
  revision: number;
  /** Seen on the watch (the ordered stream of every change), not learnt from a read. */
  watched?: boolean;
}

export class EtcdOwnership implements OwnershipBackend {
  readonly kind = 'etcd' as const;
  private candidates: ReadonlyMap<string, readonly string[]> = new Map();
  /** Candidacy keys we have written, by IP. */
  private published = new Set<string>();
  private owners = new Map<string, OwnerRecord>();
  /** ip → node → first seen (clock ms). */
  private others = new Map<string, Map<string, number>>();
  /** "ip/node" → the lease another node's candidacy key sits on (a hand-over on stop writes the owner key onto it). */
  private candidateLeases = new Map<string, string>();
  private emitQueued = false;
  /** rankAhead()'s passes: one at a time, a request during one runs one more after it. */
  private readonly rankings: Trigger;
  private rankTimer: TimerHandle | undefined;
  private rankWantedAt = 0;
  /**
   * Leases whose node handed an owner key over to another node: it is
   * stopping, so its candidacy keys on that lease (standing until its revoke
   * reaches us) are no candidacy any more — never a node to hand back to, to
   * defer to, or to name as a successor. Its next incarnation has a new lease.
   */
  private readonly departed = new Map<string, { node: string; untilMs: number }>();
  /** Events recorded for hand-overs to us: EVENTS_PER_BATCH a second. */
  private readonly handoverEvents = new EventBudget(EVENTS_PER_BATCH, 1000);
  /** Hand-overs to us seen in the current watch batch (traced). */
  private handedToUs = 0;
  private watcher: Watcher | undefined;
  private onChange: (view: OwnershipView) => void | Promise<void> = () => {};
  private lastOwned: ReadonlySet<string> = new Set();
  private readonly timers = new Map<string, TimerHandle>();
  private disposed = false;
  private released = false;
  /** release() is handing our keys over (the datapath already silent): the owned set is published once it is through. */
  private handingOver = false;
  /** ip → monotonic ms at which we gave it up to hand it over to a more preferred node. */
  private readonly handedOverAt = new Map<string, number>();
  /** ip → node → monotonic ms until which that preferred node is skipped (it left the IP unclaimed). */
  private readonly skipped = new Map<string, Map<string, number>>();
  /** ip → the other owner whose key we saw vanish, and when (monotonic ms): the start of a takeover's gap. */
  private readonly gone = new Map<string, { node: string; atMs: number }>();
  /** node → monotonic ms at which we fenced it out. */
  private readonly fencedAt = new Map<string, number>();
  /** Stale (lease-less) keys already warned about, so the log names each once. */
  private readonly warnedStale = new Set<string>();
  private readonly counters = { staleKeysIgnored: 0, staleKeysRemoved: 0, fencesIssued: 0, keysMovedToNewLease: 0 };
  private readonly ownersPrefix: string;
  private readonly candidatesPrefix: string;
  private readonly releasingPrefix: string;
  private readonly handoverPrefix: string;
  /**
   * Stopping nodes' hand-over records by key. A record naming us for an IP
   * whose owner key still names its node on its lease makes the IP ours to
   * answer until the key is moved onto our lease (or vanishes with the
   * record). Kept DEPARTED_MS after deletion, for the rule below.
   */
  private handovers = new Map<string, SeenHandover>();
  /** Our IPs a fencer is handing over from our lease (withdrawn; the revoke follows). */
  private fencedAway: { lease: string; ips: ReadonlySet<string> } | undefined;
  /** "node|lease" → when a hand-over record of that node on that lease was first seen (a stalled one is fenced past the grace). */
  private readonly recordsFirstSeen = new Map<string, number>();
  /**
   * ip → monotonic ms until which an IP is not contended at once: its owner
   * key vanished while a hand-over record named another node for it, which
   * may still answer it until it sees the delete (contended after the
   * contention delay instead, like any non-preferred claim).
   */
  private readonly voidedHandovers = new Map<string, number>();
  /** ip → the releasing marker's node and lease (another owner is giving the IP up: its silence is no death). */
  private marks = new Map<string, OwnerRecord>();
  /** What a silence report proves, with the releasing markers' grace (shared with the Kubernetes store). */
  private readonly verdicts: SilenceVerdicts;
  /**
   * The view is ordered by store revision: a snapshot read (refresh) reflects
   * every change up to its revision, so a watch event or a write of ours at or
   * below it is already in (applying it again would resurrect a deleted owner
   * key), and one above it that arrived while the read was in flight is
   * replayed on top (else the snapshot would erase a key we just created —
   * an IP owned in the store that nobody answers for).
   */
  private snapshotRevision = 0;
  /** key → revision of the last change applied to the view since the snapshot. */
  private readonly keyRevisions = new Map<string, number>();
  /** Changes seen while a refresh is in flight, one journal per refresh. */
  private readonly journals = new Set<KeyEvent[]>();
  /** Sync passes: one at a time, a burst of triggers costs one more (core/trigger). */
  private readonly passes: Trigger;
  /** Full re-reads: one at a time, and one every `fullRefreshMs` as a safety net under the watch. */
  private readonly refreshes: Trigger;

  constructor(
    private readonly session: EtcdSession,
    private readonly nodeName: string,
    private readonly deps: { clock: Clock; log: Logger; watch?: OwnerWatch; events?: (e: EventBody) => void | Promise<void>; onOwners?: () => void },
    private readonly opts: EtcdOwnershipOptions = etcdOwnershipDefaults,
  ) {
    this.ownersPrefix = `${session.prefix}owners/`;
    this.candidatesPrefix = `${session.prefix}candidates/`;
    this.releasingPrefix = `${session.prefix}releasing/`;
    this.handoverPrefix = `${session.prefix}handover/`;
    this.verdicts = new SilenceVerdicts({ clock: deps.clock, log: deps.log, ...(deps.watch ? { watch: deps.watch } : {}), again: (node, ip) => void this.fence(node, ip) }, opts.releaseGraceMs ?? etcdOwnershipDefaults.releaseGraceMs!);
    // A zero delay still coalesces everything already queued (a watch delivers a batch at once).
    this.passes = new Trigger({ name: 'etcd ownership', run: () => this.pass(), clock: deps.clock, log: deps.log, delayMs: 0 });
    this.rankings = new Trigger({ name: 'etcd ownership rank-ahead', run: (signal) => this.rankPass(signal), clock: deps.clock, log: deps.log });
    this.refreshes = new Trigger({
      name: 'etcd ownership refresh',
      run: () => this.readAll(),
      clock: deps.clock,
      log: deps.log,
      periodicMs: opts.fullRefreshMs ?? etcdOwnershipDefaults.fullRefreshMs!,
    });
  }

  async start(onChange: (view: OwnershipView) => void | Promise<void>): Promise<void> {
    this.onChange = onChange;
    await this.watch();
    this.session.onState((s) => {
      if (s === 'lost') {
        this.published.clear();
        if (this.holdingThroughOutage()) {
          this.deps.log.warn({ owned: this.lastOwned.size }, 'etcd unreachable: keeping announcements (--on-store-loss keep)');
          return;
        }
        // Our keys are (or are about to be) gone: stop answering at once.
        this.owners = new Map([...this.owners].filter(([, o]) => o.node !== this.nodeName));
        void this.emit();
      } else if (s === 'live') {
        // A new watch, then a re-read: after an outage the old stream may be
        // silently dead for a keep-alive timeout (a link that went down does
        // not reset the TCP connection), and our view dropped our keys,
        // which may still stand on the former lease (to be moved, not waited out).
        void this.watch().then(() => this.refresh());
      }
    });
    this.deps.watch?.onSilent((node, ip) => void this.fence(node, ip));
    await this.refresh();
  }

  /** (Re)creates the watch on our prefix; the events update the view, a reconnect re-reads everything. */
  private async watch(): Promise<void> {
    if (this.disposed) return;
    const old = this.watcher;
    this.watcher = undefined;
    void old?.cancel().catch(() => {});
    let watcher: Watcher;
    try {
      watcher = await this.session.client.watch().prefix(this.session.prefix).create();
    } catch (e) {
      // The store is not answering yet: the periodic pass and the next session change retry.
      this.deps.log.warn({ err: describeError(e) }, 'etcd ownership watch could not be created; retrying');
      this.resyncAt(this.deps.clock.now() + 1000);
      if (!this.watcher) this.retryWatchSoon();
      return;
    }
    if (this.disposed) {
      void watcher.cancel();
      return;
    }
    this.watcher = watcher;
    watcher.on('put', (kv) => {
      this.observe({ type: 'put', key: kv.key.toString(), value: kv.value.toString(), lease: String(kv.lease), revision: Number(kv.mod_revision), watched: true });
      this.markDirty();
    });
    watcher.on('delete', (kv) => {
      if (this.watchDeletes++ === 0) {
        const first = performance.now();
        setImmediate(() => {
          this.deps.log.debug({ deletes: this.watchDeletes, sinceFirstMs: Math.round(performance.now() - first) }, 'trace: watch deletes applied');
          this.watchDeletes = 0;
        });
      }
      this.observe({ type: 'delete', key: kv.key.toString(), value: '', lease: NO_LEASE, revision: Number(kv.mod_revision) });
      this.markDirty();
    });
    watcher.on('connected', () => void this.refresh());
    watcher.on('error', (e) => this.deps.log.warn({ err: describeError(e) }, 'etcd ownership watch error'));
  }

  /** No new release attempt before this (monotonic ms): the datapath did not confirm the last withdrawal. */
  private withdrawalRetryAtMs = 0;
  /** Deletes seen on the watch in this turn of the event loop (tracing). */
  private watchDeletes = 0;
  private watchRetry: TimerHandle | undefined;
  private retryWatchSoon(): void {
    if (this.watchRetry || this.disposed) return;
    this.watchRetry = this.deps.clock.setTimeout(() => {
      this.watchRetry = undefined;
      if (!this.watcher) void this.watch().then(() => this.refresh());
    }, 1000);
  }

  setCandidates(candidates: ReadonlyMap<string, readonly string[]>, affinity: ReadonlyMap<string, string> = new Map()): void {
    this.candidates = new Map(candidates);
    this.affinity = new Map(affinity);
    this.markDirty();
    this.rankAhead();
  }

  /**
   * Hashes ahead, in the background, the rendezvous score of every candidate
   * of every IP we are a candidate for (rendezvous.ts keeps them): a fencer
   * names a silent node's successors from them, on the fence's critical path
   * (measured: 2,000 fresh hashes were 26–39 ms of a 1,000-IP node loss, on
   * 2 loaded cores; memoized, ~0.5 ms). One pass at a time (a Trigger),
   * RANK_AHEAD_PER_TURN IPs per turn of the event loop, once the candidacies
   * have been quiet for RANK_AHEAD_AFTER_MS; skipped when the pairs would not
   * fit the memo (hashing them ahead would only evict each other).
   */
  private rankAhead(): void {
    this.rankWantedAt = monotonicMs(this.deps.clock);
    if (this.rankTimer) return; // one timer, re-armed until the changes pause (not one per watch event)
    const arm = (ms: number) => {
      this.rankTimer = this.deps.clock.setTimeout(() => {
        const quiet = monotonicMs(this.deps.clock) - this.rankWantedAt;
        if (quiet < RANK_AHEAD_AFTER_MS) return arm(RANK_AHEAD_AFTER_MS - quiet);
        this.rankTimer = undefined;
        void this.rankings.triggerNow();
      }, ms);
    };
    arm(RANK_AHEAD_AFTER_MS);
  }

  private async rankPass(signal: AbortSignal): Promise<void> {
    let pairs = 0;
    for (const ip of this.candidates.keys()) pairs += 1 + (this.others.get(ip)?.size ?? 0);
    if (pairs > MEMO_LIMIT / 2) return;
    let n = 0;
    for (const ip of [...this.candidates.keys()]) {
      if (signal.aborted) return;
      this.score(this.nodeName, ip);
      for (const node of this.others.get(ip)?.keys() ?? []) this.score(node, ip);
      if (++n % RANK_AHEAD_PER_TURN === 0) await new Promise<void>((r) => setImmediate(r));
    }
  }

  /** IP → the key rendezvous preference is computed from (a dual-stack service's addresses share one). */
  private affinity = new Map<string, string>();

  private score(node: string, ip: string): string {
    return rendezvousScore(node, this.affinity.get(ip) ?? ip);
  }

  /** `--on-store-loss keep`, and the store is merely unreachable (not: it told us our lease is gone). */
  private holdingThroughOutage(): boolean {
    return this.opts.onStoreLoss === 'keep' && !this.released && this.session.state === 'lost' && this.session.lostReason === 'unreachable';
  }

  /**
   * A key without a lease (written by hand, by a broken tool, or left from a
   * store restore) would block an IP forever or make ownership flap: it is
   * ignored, named in a warning, and removed if nobody changed it meanwhile.
   */
  private staleKey(key: string, modRevision: string, lease: string): void {
    this.counters.staleKeysIgnored++;
    if (!this.warnedStale.has(key)) {
      this.warnedStale.add(key);
      this.deps.log.warn({ key, lease }, 'ignoring a key without a live lease: it carries no authority; removing it');
    }
    void this.session.client
      .if(key, 'Mod', '==', modRevision)
      .then(this.session.client.delete().key(key))
      .commit()
      .then((r) => {
        if (r.succeeded) this.counters.staleKeysRemoved++;
      })
      .catch(() => {
        /* retried on the next read */
      });
  }

  /** A change seen on the watch or made by us: applied in revision order, journaled for in-flight refreshes. */
  private observe(ev: KeyEvent): void {
    for (const journal of this.journals) journal.push(ev);
    this.applyEvent(ev);
  }

  private applyEvent(ev: KeyEvent): void {
    if (!Number.isFinite(ev.revision) || ev.revision <= Math.max(this.snapshotRevision, this.keyRevisions.get(ev.key) ?? 0)) return;
    this.keyRevisions.set(ev.key, ev.revision);
    if (ev.type === 'put') this.applyPut(ev.key, ev.value, ev.lease, String(ev.revision), ev.watched === true);
    else this.applyDelete(ev.key);
  }

  private applyPut(key: string, value: string, lease: string, modRevision: string, watched = false): void {
    if (key.startsWith(this.ownersPrefix)) {
      const ip = key.slice(this.ownersPrefix.length);
      this.deps.onOwners?.();
      if (lease === NO_LEASE) {
        this.owners.delete(ip);
        this.staleKey(key, modRevision, lease);
        return;
      }
      const prev = this.owners.get(ip);
      // Another node's key put over onto another lease, in the ordered stream of
      // changes (no delete between), is a hand-over on a stop: only handOver()
      // writes over another node's key. (A read may skip the delete between a
      // release and a claim, so only watched changes count.)
      if (watched && prev && prev.node !== value && prev.lease !== lease && prev.lease !== NO_LEASE) this.depart(prev.lease, prev.node);
      if (value === this.nodeName && prev && prev.node !== this.nodeName) {
        this.gone.delete(ip);
        // On the timeline as a move like any other (the view names it a clean
        // stop), not awaited, after the datapath has run; bounded like a
        // claim's: each event is a store write that every node reads back, and
        // a stop of 1,000 IPs recorded 500 per successor while they answered.
        const record = this.handoverEvents.count(monotonicMs(this.deps.clock));
        // Its own stop's record, or one its supervisor (a crash) or a fencer (silence) wrote for it.
        const cause = this.handoverCause(prev) ?? 'clean-stop';
        setImmediate(() => {
          this.deps.log.info({ ip, from: prev.node, ...(cause !== 'clean-stop' ? { cause } : {}) }, 'took ownership: handed over by the stopping owner');
          if (record) void Promise.resolve(this.deps.events?.({ kind: 'owner-took', ip, from: prev.node, hint: cause === 'wire-silence' ? 'fenced' : 'released', cause, causeText: causeText(cause) })).catch(() => {});
        });
        // Answer once the watch messages that are in are applied (one pass over
        // the pipeline for all of them, not one per message), not a timer later.
        this.handedToUs++;
        if (!this.emitQueued) {
          this.emitQueued = true;
          setImmediate(() => {
            this.deps.log.debug({ ips: this.handedToUs }, 'trace: handed over to us (watch batch)');
            this.handedToUs = 0;
            this.emitQueued = false;
            void this.emit();
          });
        }
      }
      this.owners.set(ip, { node: value, lease });
    } else if (key.startsWith(this.releasingPrefix)) {
      // A lease-less marker proves nothing (the owner key's lease must match): kept out of the view.
      const ip = key.slice(this.releasingPrefix.length);
      if (lease === NO_LEASE) this.marks.delete(ip);
      else this.marks.set(ip, { node: value, lease });
    } else if (key.startsWith(this.handoverPrefix)) {
      const record = this.seenHandover(value, lease);
      if (record) this.handovers.set(key, record);
      else this.handovers.delete(key);
    } else if (key.startsWith(this.candidatesPrefix)) {
      const [ip, node] = key.slice(this.candidatesPrefix.length).split('/');
      if (!ip || !node || node === this.nodeName) return;
      if (lease === NO_LEASE) {
        this.others.get(ip)?.delete(node);
        this.candidateLeases.delete(`${ip}/${node}`);
        this.staleKey(key, modRevision, lease);
        return;
      }
      if (this.isDeparted(lease, node)) return;
      const seen = this.others.get(ip) ?? new Map<string, number>();
      if (!seen.has(node)) {
        seen.set(node, this.deps.clock.now());
        this.rankAhead();
      }
      this.others.set(ip, seen);
      this.candidateLeases.set(`${ip}/${node}`, lease);
    }
  }

  /** `node` is stopping on `lease` (it handed a key over): drop its candidacies on that lease from the view. */
  private depart(lease: string, node: string): void {
    if (this.isDeparted(lease, node)) return;
    // For DEPARTED_MS: by then the stopping node's lease is revoked, or expired
    // (a node that hung after its hand-over); were it still there, the periodic
    // re-read brings its candidacies back and the usual rules apply.
    this.departed.delete(lease);
    this.departed.set(lease, { node, untilMs: monotonicMs(this.deps.clock) + DEPARTED_MS });
    // Bounded: one entry per stop seen; the oldest go first.
    if (this.departed.size > 64) this.departed.delete(this.departed.keys().next().value!);
    this.dropCandidacies(lease, node);
  }

  /** Forgets `node`'s candidacies on `lease` (a departed node's). */
  private dropCandidacies(lease: string, node: string): void {
    for (const [k, l] of this.candidateLeases) {
      if (l !== lease) continue;
      const slash = k.lastIndexOf('/');
      const [ip, other] = [k.slice(0, slash), k.slice(slash + 1)];
      if (other !== node) continue;
      this.candidateLeases.delete(k);
      this.others.get(ip)?.delete(node);
      if (this.others.get(ip)?.size === 0) this.others.delete(ip);
    }
  }

  /**
   * A hand-over record read from the store (a put or a re-read): another
   * node's, on a live lease, well-formed — else nothing. Its node is stopping:
   * departed on that lease, as when its first key moves.
   */
  private seenHandover(value: Buffer | string, lease: string): SeenHandover | undefined {
    if (lease === NO_LEASE) return undefined;
    const record = parseHandoverRecord(value);
    if (!record) return undefined;
    if (record.node === this.nodeName) {
      // Another node fenced us on the wire's evidence and is handing our IPs
      // over (our lease is revoked next): fall silent about them now, as the
      // revoke would make us, rather than beside the successor until it lands.
      if (record.cause === 'wire-silence' && (lease === this.session.leaseId || this.session.formerLeases.has(lease))) {
        this.fencedAway = { lease, ips: new Set(record.moves.keys()) };
        this.deps.log.warn({ lease, ips: record.moves.size }, 'another node fenced us on silence and is handing our IPs over: withdrawing them');
        void this.emit();
      }
      return undefined;
    }
    this.depart(lease, record.node);
    const id = `${record.node}|${lease}`;
    if (!this.recordsFirstSeen.has(id)) {
      this.recordsFirstSeen.set(id, monotonicMs(this.deps.clock));
      // Bounded: one entry per departure seen; the oldest go first.
      if (this.recordsFirstSeen.size > 64) this.recordsFirstSeen.delete(this.recordsFirstSeen.keys().next().value!);
    }
    const named = [...record.moves.values()].filter((m) => m.node === this.nodeName).length;
    if (named > 0) this.deps.log.debug({ from: record.node, ips: named }, 'trace: hand-over record names us');
    return { ...record, lease };
  }

  /**
   * `ip`'s owner key vanished: if a hand-over record on its lease (standing or
   * just gone with it) named another node, that node may answer the IP until
   * it sees the delete — so nobody else contends at once.
   */
  private voidHandover(ip: string, prev: OwnerRecord): void {
    const now = monotonicMs(this.deps.clock);
    for (const [key, r] of this.handovers) {
      if (r.goneAtMs !== undefined && now - r.goneAtMs >= DEPARTED_MS) {
        this.handovers.delete(key);
        continue;
      }
      if (r.lease !== prev.lease || r.node !== prev.node) continue;
      const successor = r.moves.get(ip);
      if (successor && successor.node !== this.nodeName) this.voidedHandovers.set(ip, now + this.opts.contendDelayMs);
    }
  }

  /** Who wrote the hand-over record on `owner`'s lease, when not the owner's own stop. */
  private handoverCause(owner: OwnerRecord): HandoverCause | undefined {
    for (const r of this.handovers.values()) if (r.node === owner.node && r.lease === owner.lease) return r.cause;
    return undefined;
  }

  /** A standing hand-over record of `owner`, on the lease its key is on, names a successor for `ip`. */
  private recordHandsOver(ip: string, owner: OwnerRecord): boolean {
    for (const r of this.handovers.values()) if (r.goneAtMs === undefined && r.node === owner.node && r.lease === owner.lease && r.moves.has(ip)) return true;
    return false;
  }

  /** IPs a standing hand-over record names us for (on our lease) whose owner key is still on the record's lease. */
  private *handedOverByRecord(lease: string): Iterable<string> {
    for (const r of this.handovers.values()) {
      if (r.goneAtMs !== undefined) continue;
      for (const [ip, m] of r.moves) {
        if (m.node !== this.nodeName || m.lease !== lease || !this.candidates.has(ip)) continue;
        const o = this.owners.get(ip);
        if (o && o.node === r.node && o.lease === r.lease) yield ip;
      }
    }
  }

  private isDeparted(lease: string, node: string): boolean {
    const d = this.departed.get(lease);
    return d !== undefined && d.node === node && monotonicMs(this.deps.clock) < d.untilMs;
  }

  private applyDelete(key: string): void {
    if (key.startsWith(this.ownersPrefix)) {
      const ip = key.slice(this.ownersPrefix.length);
      const prev = this.owners.get(ip);
      if (prev && prev.node !== this.nodeName) this.gone.set(ip, { node: prev.node, atMs: monotonicMs(this.deps.clock) });
      if (prev) this.voidHandover(ip, prev);
      this.deps.onOwners?.();
      this.owners.delete(ip);
      this.releaseDone(ip);
    } else if (key.startsWith(this.releasingPrefix)) {
      this.marks.delete(key.slice(this.releasingPrefix.length));
    } else if (key.startsWith(this.handoverPrefix)) {
      const record = this.handovers.get(key);
      if (record && record.goneAtMs === undefined) record.goneAtMs = monotonicMs(this.deps.clock);
    } else if (key.startsWith(this.candidatesPrefix)) {
      const [ip, node] = key.slice(this.candidatesPrefix.length).split('/');
      if (!ip || !node) return;
      this.others.get(ip)?.delete(node);
      this.candidateLeases.delete(`${ip}/${node}`);
      if (this.others.get(ip)?.size === 0) this.others.delete(ip);
    }
  }

  /**
   * Coalesces events into one pass at a time: a burst of watch events (a
   * node joining with 10k candidacies) costs one pass, not 10k concurrent ones.
   */
  private markDirty(): void {
    this.passes.trigger();
  }

  private async pass(): Promise<void> {
    void this.emit();
    this.updateWatch();
    await this.sync();
    void this.emit();
  }

  /**
   * Re-reads owners and candidates from etcd, then acts; resolves once a
   * re-read that started after the call has ended (one at a time: a request
   * during a read runs one more after it).
   */
  private refresh(): Promise<void> {
    return this.refreshes.triggerNow();
  }

  private async readAll(): Promise<void> {
    if (this.disposed) return;
    const journal: KeyEvent[] = [];
    this.journals.add(journal);
    try {
      const res = await this.session.client.getAll().prefix(this.session.prefix).exec();
      const revision = Number(res.header.revision);
      // A newer snapshot has already been applied: this one is stale.
      if (!(revision >= this.snapshotRevision)) return;
      const owners = new Map<string, OwnerRecord>();
      const others = new Map<string, Map<string, number>>();
      const candidateLeases = new Map<string, string>();
      const marks = new Map<string, OwnerRecord>();
      const handovers = new Map<string, SeenHandover>();
      const now = this.deps.clock.now();
      for (const kv of res.kvs) {
        const key = kv.key.toString();
        const lease = String(kv.lease);
        if (key.startsWith(this.ownersPrefix)) {
          if (lease === NO_LEASE) {
            this.staleKey(key, String(kv.mod_revision), lease);
            continue;
          }
          owners.set(key.slice(this.ownersPrefix.length), { node: kv.value.toString(), lease });
        } else if (key.startsWith(this.releasingPrefix)) {
          if (lease !== NO_LEASE) marks.set(key.slice(this.releasingPrefix.length), { node: kv.value.toString(), lease });
        } else if (key.startsWith(this.handoverPrefix)) {
          const record = this.seenHandover(kv.value, lease);
          if (record) handovers.set(key, record);
        } else if (key.startsWith(this.candidatesPrefix)) {
          const [ip, node] = key.slice(this.candidatesPrefix.length).split('/');
          if (!ip || !node || node === this.nodeName) continue;
          if (lease === NO_LEASE) {
            this.staleKey(key, String(kv.mod_revision), lease);
            continue;
          }
          if (this.isDeparted(lease, node)) continue;
          const seen = others.get(ip) ?? new Map<string, number>();
          seen.set(node, this.others.get(ip)?.get(node) ?? now);
          others.set(ip, seen);
          candidateLeases.set(`${ip}/${node}`, lease);
        }
      }
      this.owners = owners;
      this.others = others;
      this.candidateLeases = candidateLeases;
      this.rankAhead();
      // Read in key order, candidacies before hand-over records: a stopping node's go now.
      for (const r of handovers.values()) this.dropCandidacies(r.lease, r.node);
      this.marks = marks;
      // Records gone since are kept for the voided-hand-over rule (their deletion time is what it reads).
      const nowMs = monotonicMs(this.deps.clock);
      for (const [key, r] of this.handovers) if (!handovers.has(key) && nowMs - (r.goneAtMs ?? nowMs) < DEPARTED_MS) handovers.set(key, { ...r, goneAtMs: r.goneAtMs ?? nowMs });
      this.handovers = handovers;
      this.snapshotRevision = revision;
      this.keyRevisions.clear();
      for (const ev of journal) this.applyEvent(ev);
      this.markDirty();
    } catch (e) {
      this.deps.log.debug({ err: describeError(e) }, 'etcd ownership refresh failed');
    } finally {
      // Whatever a lost watch event or an unforeseen race left wrong in the view
      // is repaired by the periodic re-read within one period (the refreshes trigger).
      this.journals.delete(journal);
    }
  }

  /** Publishes candidacy, contends for free IPs, gives up what we no longer qualify for. */
  private async sync(): Promise<void> {
    const lease = this.session.leaseId;
    if (this.disposed || this.released || !lease) return;
    const client = this.session.client;
    try {
      await this.moveKeysToCurrentLease(lease);
      // Candidacy keys: written once per IP, live as long as the lease; in
      // transactions of up to 100 operations (etcd's default limit is 128).
      const toPublish = [...this.candidates.keys()].filter((ip) => !this.published.has(ip));
      const toRetract = [...this.published].filter((ip) => !this.candidates.has(ip));
      for (let i = 0; i < toPublish.length; i += 100) {
        const chunk = toPublish.slice(i, i + 100);
        await client.if(this.ownersPrefix, 'Version', '>', -1).then(...chunk.map((ip) => client.put(`${this.candidatesPrefix}${ip}/${this.nodeName}`).value('').lease(lease))).commit();
        for (const ip of chunk) this.published.add(ip);
      }
      for (let i = 0; i < toRetract.length; i += 100) {
        const chunk = toRetract.slice(i, i + 100);
        await client.if(this.ownersPrefix, 'Version', '>', -1).then(...chunk.map((ip) => client.delete().key(`${this.candidatesPrefix}${ip}/${this.nodeName}`))).commit();
        for (const ip of chunk) this.published.delete(ip);
      }
      // Give up IPs we no longer qualify for, and hand over to a more preferred candidate.
      for (const ip of this.releasing) if (this.owners.get(ip)?.node !== this.nodeName) this.releasing.delete(ip);
      const release: Release[] = [];
      for (const [ip, owner] of this.owners) {
        if (owner.node !== this.nodeName) continue;
        if (this.releasing.has(ip)) release.push({ ip, why: 'finishing an interrupted release' });
        else if (!this.candidates.has(ip)) release.push({ ip, why: 'no longer a candidate' });
        else if (this.handoverDue(ip)) {
          this.handedOverAt.set(ip, monotonicMs(this.deps.clock));
          release.push({ ip, why: 'handing over to the preferred node' });
        }
      }
      await this.giveUp(release);
      // Contend for free IPs: the preferred node at once, the others after a delay.
      const contendNow: Contention[] = [];
      let late = 0;
      for (const ip of this.candidates.keys()) {
        if (this.owners.has(ip)) {
          this.lateContenders.delete(ip);
          continue;
        }
        if (this.isPreferred(ip) && !this.handoverVoidedRecently(ip)) contendNow.push({ ip, late: false });
        else if (this.lateContenders.delete(ip)) {
          late++;
          contendNow.push({ ip, late: true });
        } else this.contendLater(ip);
      }
      if (contendNow.length > 0) this.deps.log.debug({ ips: contendNow.length, late }, 'trace: contending');
      await this.contend(contendNow);
    } catch (e) {
      // Retry on our own, not only on the next change: a hand-over or a
      // contention must not wait for an unrelated watch event.
      this.deps.log.debug({ err: describeError(e) }, 'etcd ownership sync failed; retrying');
      this.resyncAt(this.deps.clock.now() + 500);
    }
  }

  /**
   * After an outage the session runs on a new lease while our ownership keys
   * still sit on the old one (etcd even renews every lease when it restarts).
   * Move them onto the new lease in one transaction per chunk, so ownership
   * survives the outage without an owner change, then revoke the old lease
   * so nothing else of ours lingers on it.
   */
  private async moveKeysToCurrentLease(lease: string): Promise<void> {
    const former = this.session.formerLeases;
    if (former.size === 0) return;
    const mine = [...this.owners].filter(([, o]) => o.node === this.nodeName && former.has(o.lease));
    if (mine.length === 0) return;
    const client = this.session.client;
    for (let i = 0; i < mine.length; i += 64) {
      const chunk = mine.slice(i, i + 64);
      let txn = client.if(`${this.ownersPrefix}${chunk[0]![0]}`, 'Lease', '==', chunk[0]![1].lease);
      for (const [ip, o] of chunk.slice(1)) txn = txn.and(`${this.ownersPrefix}${ip}`, 'Lease', '==', o.lease);
      const res = await txn.then(...chunk.map(([ip]) => client.put(`${this.ownersPrefix}${ip}`).value(this.nodeName).lease(lease))).commit();
      if (res.succeeded) {
        for (const [ip] of chunk) this.observe({ type: 'put', key: `${this.ownersPrefix}${ip}`, value: this.nodeName, lease, revision: Number(res.header.revision) });
        this.counters.keysMovedToNewLease += chunk.length;
      } else {
        // Some key changed meanwhile: move the rest one by one, never taking a key that is no longer ours.
        for (const [ip, o] of chunk) {
          const key = `${this.ownersPrefix}${ip}`;
          const r = await client.if(key, 'Lease', '==', o.lease).then(client.put(key).value(this.nodeName).lease(lease)).commit();
          if (r.succeeded) {
            this.observe({ type: 'put', key, value: this.nodeName, lease, revision: Number(r.header.revision) });
            this.counters.keysMovedToNewLease++;
          }
        }
      }
    }
    this.deps.log.info({ moved: mine.length, lease }, 'moved our ownership keys onto the new lease after the store outage');
    for (const old of former) {
      if ([...this.owners.values()].some((o) => o.lease === old)) continue;
      void client.leaseClient.leaseRevoke({ ID: old }).catch(() => {
        /* already gone */
      });
    }
    void this.emit();
  }

  /**
   * Watch, on the wire, one IP of every other node that owns something we
   * could take over: an IPv4 one when it owns any (one ARP socket serves them
   * all), else an IPv6 one (probed with NS).
   */
  private updateWatch(): void {
    const watch = this.deps.watch;
    if (!watch) return;
    watch.setTargets(watchTargets(this.heldElsewhere(), this.candidates));
  }

  private *heldElsewhere(): Iterable<HeldElsewhere> {
    for (const [ip, owner] of this.owners) if (owner.node !== this.nodeName) yield { ip, node: owner.node, marked: this.marks.get(ip)?.node === owner.node || this.recordHandsOver(ip, owner) };
  }

  /**
   * A node went silent on the wire while its lease still runs (crashed agent,
   * lost node): revoke its lease so its IPs are free now, not at lease expiry.
   */
  private async fence(node: string, ip?: string): Promise<void> {
    if (this.disposed || this.released || !this.session.leaseId) return;
    if (ip !== undefined && !(await this.stillOwnerOf(node, ip))) return;
    if (this.disposed || this.released) return;
    const leases = new Set([...this.owners.values()].filter((o) => o.node === node).map((o) => o.lease));
    if (leases.size > 0) {
      this.fencedAt.set(node, monotonicMs(this.deps.clock));
      // Not waited for: the fence is what lets a successor answer.
      void Promise.resolve(this.deps.events?.({ kind: 'owner-fenced', fenced: node, ips: [...this.owners].filter(([, o]) => o.node === node).map(([ip]) => ip).slice(0, 100) })).catch(() => {});
    }
    let revoked = false;
    for (const lease of leases) {
      // Its IPs to their successors first, as its own stop would hand them:
      // they answer at the record instead of contending after the revoke.
      // Another fencer's hand-over under way: that one revokes (or, should it
      // fail half-way, the record's grace runs out and we fence again).
      if ((await this.handOverSilent(node, lease)) === 'in-progress') continue;
      try {
        const res = await this.session.client.leaseClient.leaseRevoke({ ID: lease });
        this.counters.fencesIssued++;
        this.deps.log.warn({ node, lease }, 'fenced out a silent owner: revoked its lease');
        // Every key on the lease is gone at the revoke's revision: apply that
        // now and contend, instead of waiting for the watch or a full re-read.
        const revision = Number(res.header.revision);
        const gone = [...this.owners].filter(([, o]) => o.lease === lease).map(([ip]) => `${this.ownersPrefix}${ip}`);
        for (const [k, l] of this.candidateLeases) if (l === lease) gone.push(`${this.candidatesPrefix}${k}`);
        for (const key of gone) this.observe({ type: 'delete', key, value: '', lease: NO_LEASE, revision });
        revoked = true;
      } catch (e) {
        this.deps.log.debug({ node, err: describeError(e) }, 'revoking a silent owner failed (already gone?)');
      }
    }
    if (revoked) {
      this.markDirty();
      void this.refresh(); // the full re-read follows, as a check
      return;
    }
    await this.refresh();
  }

  /**
   * A silent node's hand-over, made by the fencer: a record on the node's own
   * lease naming each of its IPs' successors (written only if the node has
   * none — its own stop's, or another fencer's: then 'in-progress'), then,
   * after the same pause a stop makes, the keys moved. The record grants only
   * while each key still names the node on that lease, so it is no
   * authority beside the fence: what the revoke would have freed for a
   * contention round goes straight to the node that round would elect.
   */
  private async handOverSilent(node: string, lease: string): Promise<'handed' | 'in-progress' | 'none'> {
    // A record of its own standing past the release grace: a hand-over that stalled (its
    // writer died half-way) — the revoke frees the rest.
    const firstSeen = this.recordsFirstSeen.get(`${node}|${lease}`);
    if (firstSeen !== undefined && monotonicMs(this.deps.clock) - firstSeen >= (this.opts.releaseGraceMs ?? etcdOwnershipDefaults.releaseGraceMs!)) return 'none';
    const ips = [...this.owners].filter(([, o]) => o.node === node && o.lease === lease).map(([ip]) => ip);
    const hashedBefore = rendezvousMemoSize();
    const moves = this.movesFor(ips, node);
    const value = moves.length > 0 ? encodeHandoverRecord(node, moves, 'wire-silence') : undefined;
    this.deps.log.debug({ node, ips: moves.length, hashed: rendezvousMemoSize() - hashedBefore }, 'trace: fence: record built');
    if (value === undefined) return 'none';
    const key = `${this.handoverPrefix}${node}`;
    const client = this.session.client;
    try {
      const res = await client.if(key, 'Version', '==', 0).then(client.put(key).value(value).lease(lease)).commit();
      if (!res.succeeded) return 'in-progress';
      this.observe({ type: 'put', key, value, lease, revision: Number(res.header.revision) });
    } catch (e) {
      // Its lease gone meanwhile (the put is refused): the revoke says so.
      this.deps.log.debug({ node, err: describeError(e) }, 'writing a silent owner\'s hand-over record failed');
      return 'none';
    }
    this.deps.log.warn({ node, lease, ips: moves.length, of: ips.length }, 'fencing a silent owner: its IPs handed to their successors first');
    void this.emit();
    await new Promise<void>((r) => this.deps.clock.setTimeout(() => r(), HANDOVER_MOVES_AFTER_MS));
    await this.moveKeys(moves, lease);
    return 'handed';
  }

  /**
   * A releasing owner goes silent first and deletes its key next (never two
   * answering), so silence about an IP whose key is gone or moved by now is
   * no evidence against its node: read the key before revoking anything. On
   * a loaded store the delete reached us later than the silence verdict, and
   * a live node lost its whole lease to it. Unreadable: the fence decides.
   */
  private async stillOwnerOf(node: string, ip: string): Promise<boolean> {
    const key = `${this.ownersPrefix}${ip}`;
    const markKey = `${this.releasingPrefix}${ip}`;
    const client = this.session.client;
    let res;
    try {
      // At one revision: the owner key, and whether its owner said it is releasing the IP or handing it over.
      res = await client.if(this.ownersPrefix, 'Version', '>', -1).then(client.get(key), client.get(markKey), client.get(`${this.handoverPrefix}${node}`)).commit();
    } catch {
      return true;
    }
    const kv = res.responses[0]?.response_range?.kvs[0];
    const mark = res.responses[1]?.response_range?.kvs[0];
    const record = res.responses[2]?.response_range?.kvs[0];
    const holder = kv?.value.toString();
    // Marked by that owner on the lease its key is on — a releasing marker, or
    // a hand-over record naming a successor for the IP (a stop's, or its
    // supervisor's after a crash): a release in progress, its silence chosen
    // (SilenceVerdicts: the grace). Fencing it would free the IP under the
    // successor that answers it by the record, for a contention round.
    const onKeyLease = (other: { lease: string } | undefined) => Boolean(kv && other && String(kv.lease) !== NO_LEASE && String(other.lease) === String(kv.lease));
    const handing = onKeyLease(record) ? parseHandoverRecord(record!.value) : undefined;
    const releasing = (onKeyLease(mark) && mark!.value.toString() === node) || (handing?.node === node && handing.moves.has(ip));
    const fence = this.verdicts.judge(node, ip, { holder, releasing });
    if (holder !== node) {
      if (kv) this.observe({ type: 'put', key, value: kv.value.toString(), lease: String(kv.lease), revision: Number(kv.mod_revision) });
      else this.observe({ type: 'delete', key, value: '', lease: NO_LEASE, revision: Number(res.header.revision) });
      this.markDirty();
    }
    return fence;
  }

  /** The owner key of `ip` is gone: a release we were waiting out has finished (no re-check). */
  private releaseDone(ip: string): void {
    this.verdicts.released(ip);
  }

  private isSkipped(ip: string, node: string): boolean {
    const until = this.skipped.get(ip)?.get(node);
    if (until === undefined) return false;
    if (monotonicMs(this.deps.clock) < until) return true;
    this.skipped.get(ip)!.delete(node);
    return false;
  }

  private handoverVoidedRecently(ip: string): boolean {
    const until = this.voidedHandovers.get(ip);
    if (until === undefined) return false;
    if (monotonicMs(this.deps.clock) < until) return true;
    this.voidedHandovers.delete(ip);
    return false;
  }

  private isPreferred(ip: string): boolean {
    const mine = this.score(this.nodeName, ip);
    for (const node of this.others.get(ip)?.keys() ?? []) if (this.score(node, ip) > mine && !this.isSkipped(ip, node)) return false;
    return true;
  }

  /** We took `ip` late: every more preferred candidate left it unclaimed, so skip them for a while. */
  private skipUnclaimingPreferred(ip: string): void {
    const mine = this.score(this.nodeName, ip);
    const skipMs = this.opts.skipPreferredMs ?? etcdOwnershipDefaults.skipPreferredMs!;
    const until = monotonicMs(this.deps.clock) + skipMs;
    for (const node of this.others.get(ip)?.keys() ?? []) {
      if (this.score(node, ip) <= mine || this.isSkipped(ip, node)) continue;
      const perIp = this.skipped.get(ip) ?? new Map<string, number>();
      perIp.set(node, until);
      this.skipped.set(ip, perIp);
      this.deps.log.warn({ ip, node, skipForMs: skipMs }, 'the preferred node left the IP unclaimed: skipping it for this IP');
    }
  }

  private handoverDue(ip: string): boolean {
    const mine = this.score(this.nodeName, ip);
    const now = this.deps.clock.now();
    for (const [node, since] of this.others.get(ip) ?? []) {
      if (this.score(node, ip) <= mine || this.isSkipped(ip, node)) continue;
      if (now - since >= this.opts.handoverHoldMs) return true;
      this.resyncAt(since + this.opts.handoverHoldMs);
    }
    return false;
  }

  /** A claim of ours, with the previous owner and the gap since its key vanished (when we saw it go). */
  private recordTook(ip: string): void {
    if (!this.deps.events) return;
    const gone = this.gone.get(ip);
    this.gone.delete(ip);
    const now = monotonicMs(this.deps.clock);
    if (!gone || now - gone.atMs > 60_000) {
      this.deps.events({ kind: 'owner-took', ip, hint: 'free' });
      return;
    }
    const fenced = this.fencedAt.get(gone.node);
    const hint = fenced !== undefined && now - fenced < 10_000 ? 'fenced' : 'lease-ended';
    this.deps.events({ kind: 'owner-took', ip, from: gone.node, gapMs: Math.round(now - gone.atMs), hint });
  }

  /** Runs sync() again at `at` (the earliest pending request wins). */
  private resyncAt(at: number): void {
    this.passes.triggerAt(at + 10);
  }

  private contendLater(ip: string): void {
    if (this.timers.has(ip)) return;
    this.timers.set(
      ip,
      this.deps.clock.setTimeout(() => {
        this.timers.delete(ip);
        this.lateContenders.add(ip);
        this.markDirty();
      }, this.opts.contendDelayMs),
    );
  }

  /** IPs whose contention delay has passed: contend in the next pass if still free. */
  private readonly lateContenders = new Set<string>();

  /**
   * Claims free IPs in transactions of up to CONTEND_CHUNK keys: all keys
   * absent → all ours; otherwise the else-branch reads every key, so the view
   * learns who took which at that revision and the still-free rest is tried
   * again (each failed round learns at least one taken key, so this ends).
   * One transaction per IP made cold convergence of 10k IPs take 45 s.
   * The chunks' transactions are in flight together (CONTEND_IN_FLIGHT at a
   * time; their keys are disjoint): one after another, a failover of 1,000 IPs
   * answered its last chunk five store round trips after its first.
   */
  private async contend(contentions: readonly Contention[]): Promise<void> {
    const chunks: Contention[][] = [];
    for (let i = 0; i < contentions.length; i += CONTEND_CHUNK) chunks.push(contentions.slice(i, i + CONTEND_CHUNK));
    const counter = { tookRecorded: 0 };
    let next = 0;
    let changed = false;
    const worker = async () => {
      while (next < chunks.length) {
        if (await this.contendChunk(chunks[next++]!, counter)) changed = true;
      }
    };
    await Promise.all(Array.from({ length: Math.min(CONTEND_IN_FLIGHT, chunks.length) }, worker));
    if (changed) void this.emit();
  }

  /** One chunk's claim, retried on what the else-branch taught; true when the view changed. */
  private async contendChunk(chunk: readonly Contention[], counter: { tookRecorded: number }): Promise<boolean> {
    const client = this.session.client;
    let changed = false;
    let pending = chunk;
    for (let round = 0; pending.length > 0 && round <= CONTEND_CHUNK; round++) {
      const lease = this.session.leaseId;
      if (!lease || this.released || this.disposed) return changed;
      const keys = pending.map((c) => `${this.ownersPrefix}${c.ip}`);
      const t0 = monotonicMs(this.deps.clock);
      let txn = client.if(keys[0]!, 'Create', '==', 0);
      for (const key of keys.slice(1)) txn = txn.and(key, 'Create', '==', 0);
      const res = await txn
        .then(...keys.map((key) => client.put(key).value(this.nodeName).lease(lease)))
        .else(...keys.map((key) => client.get(key)))
        .commit();
      this.deps.log.debug({ ips: pending.length, won: res.succeeded, first: pending[0]!.ip, ms: Math.round(monotonicMs(this.deps.clock) - t0) }, 'trace: contention transaction');
      if (res.succeeded) {
        for (const n of pending.keys()) this.observe({ type: 'put', key: keys[n]!, value: this.nodeName, lease, revision: Number(res.header.revision) });
        // Answer for this chunk now, before the other chunks' transactions
        // return; its log lines after the datapath has run (a thousand
        // synchronous writes must not stand between the last IP and its answer).
        void this.emit();
        const took = pending.map(({ ip, late }) => ({ ip, late }));
        setImmediate(() => {
          for (const { ip, late } of took) this.deps.log.info({ ip, ...(late ? { late: true } : {}) }, 'took ownership');
        });
        for (const { ip, late } of pending) {
          if (counter.tookRecorded++ < EVENTS_PER_BATCH) this.recordTook(ip);
          else this.gone.delete(ip);
          // We handed this IP over and had to take it back: the preferred node
          // never claimed it. Skip it for this IP instead of flapping forever.
          const handedOver = this.handedOverAt.get(ip);
          if (late && handedOver !== undefined && monotonicMs(this.deps.clock) - handedOver < 10_000) this.skipUnclaimingPreferred(ip);
          this.handedOverAt.delete(ip);
        }
        return true;
      }
      for (const [n, key] of keys.entries()) this.learnKey(key, res, n);
      for (const { ip, late } of pending) {
        if (late || !this.owners.has(ip)) continue;
        this.handedOverAt.delete(ip);
        changed = true;
      }
      pending = pending.filter(({ ip }) => !this.owners.has(ip));
    }
    if (pending.length > 0) this.resyncAt(this.deps.clock.now() + 500); // the bound was hit: try again soon
    return changed;
  }

  /**
   * The view was wrong about `key` (a conditional write failed): learn its
   * state from the transaction's else-branch read, at the read's revision.
   */
  private learnKey(key: string, res: { header: { revision: string }; responses: Array<{ response_range?: { kvs: Array<{ value: Buffer; lease: string; mod_revision: string }> } }> }, index = 0): void {
    const kv = res.responses[index]?.response_range?.kvs[0];
    if (kv) this.observe({ type: 'put', key, value: kv.value.toString(), lease: String(kv.lease), revision: Number(kv.mod_revision) });
    else this.observe({ type: 'delete', key, value: '', lease: NO_LEASE, revision: Number(res.header.revision) });
  }

  /** IPs withdrawn locally whose owner key is still to be deleted: never announced, never contended, retried. */
  private readonly releasing = new Set<string>();

  private async giveUp(releases: readonly Release[]): Promise<void> {
    if (releases.length === 0) return;
    // A failed attempt's own marker writes wake a pass at once: without this the
    // retry would run as fast as the store answers (mark, fail, unmark, again).
    if (monotonicMs(this.deps.clock) < this.withdrawalRetryAtMs) return;
    // Said in the store before we go silent: candidates take our silence about
    // these IPs for a release, not for death, however late our deletes come
    // (a starved releasing owner was fenced: its whole lease revoked).
    const marked = await this.markReleasing(releases.filter(({ ip }) => this.owners.get(ip)?.node === this.nodeName).map(({ ip }) => ip));
    // Withdraw locally first — and wait until the datapath has — so two nodes never answer at once.
    for (const { ip } of releases) this.releasing.add(ip);
    if (!(await this.emit())) {
      // Not confirmed withdrawn (the datapath failed or is stuck): keep the
      // keys, so nobody else answers beside us, and try again shortly.
      for (const { ip } of releases) this.releasing.delete(ip);
      void this.unmark(marked);
      this.deps.log.error({ ips: releases.length, first: releases[0]!.ip, why: releases[0]!.why }, 'datapath did not confirm the withdrawal: keeping ownership, retrying');
      this.withdrawalRetryAtMs = monotonicMs(this.deps.clock) + WITHDRAWAL_RETRY_MS;
      this.resyncAt(this.deps.clock.now() + WITHDRAWAL_RETRY_MS);
      return;
    }
    // Delete our keys in transactions of up to CONTEND_CHUNK, each only while
    // it is still on the lease we know; a key that changed is learnt and the
    // rest retried. A failure here leaves the IPs in `releasing` (withdrawn,
    // keys kept as the fence); the next sync retries the deletes.
    const client = this.session.client;
    const ours = releases.filter(({ ip }) => this.owners.get(ip)?.node === this.nodeName);
    // Recorded as the keys go, never waited for: between the withdrawal and the
    // deletes the IP is silent with our key still there, which candidates
    // rightly take for a dead owner and fence (a stored event is not worth that).
    // Bounded: a mass release (10k IPs) records its first EVENTS_PER_BATCH.
    for (const { ip, why } of ours.slice(0, EVENTS_PER_BATCH)) void Promise.resolve(this.deps.events?.({ kind: 'owner-released', ip, why, cause: releaseCause(why) })).catch(() => {});
    const unfinished = new Set<string>();
    const deleted = new Set<string>();
    for (let i = 0; i < ours.length; i += RELEASE_CHUNK) {
      let pending = ours.slice(i, i + RELEASE_CHUNK);
      // Each failed round learns at least one changed key; the bound only guards against a view that does not.
      for (let round = 0; pending.length > 0; round++) {
        if (round > RELEASE_CHUNK) {
          for (const { ip } of pending) unfinished.add(ip);
          this.resyncAt(this.deps.clock.now() + 500);
          break;
        }
        const keys = pending.map(({ ip }) => `${this.ownersPrefix}${ip}`);
        const leases = pending.map(({ ip }) => this.owners.get(ip)!.lease);
        let txn = client.if(keys[0]!, 'Lease', '==', leases[0]!);
        for (const [n, key] of keys.entries()) if (n > 0) txn = txn.and(key, 'Lease', '==', leases[n]!);
        const marks = pending.map(({ ip }) => `${this.releasingPrefix}${ip}`);
        const res = await txn
          .then(...keys.map((key) => client.delete().key(key)), ...marks.map((key) => client.delete().key(key)))
          .else(...keys.map((key) => client.get(key)))
          .commit();
        if (res.succeeded) {
          for (const key of [...keys, ...marks]) this.observe({ type: 'delete', key, value: '', lease: NO_LEASE, revision: Number(res.header.revision) });
          for (const { ip } of pending) deleted.add(ip);
          break;
        }
        for (const [n, key] of keys.entries()) this.learnKey(key, res, n);
        // Still ours (perhaps on another lease than we compared with): try again with what we learnt.
        pending = pending.filter(({ ip }) => this.owners.get(ip)?.node === this.nodeName);
      }
    }
    for (const { ip, why } of releases) {
      if (unfinished.has(ip)) continue;
      this.releasing.delete(ip);
      this.deps.log.info({ ip, why }, 'released ownership');
    }
    // Markers of IPs that turned out not to be ours to delete (the key moved meanwhile, before or during the deletes).
    void this.unmark(marked.filter((m) => !deleted.has(m.ip) && !unfinished.has(m.ip)));
  }

  /**
   * Writes a releasing marker for each IP, on the lease its owner key is on,
   * one transaction per CONTEND_CHUNK, awaited (the marker must be in the
   * store before the silence starts). A failed write marks nothing: the old
   * order holds (silence before the delete; a candidate may fence us — safe,
   * never two answering).
   */
  private async markReleasing(ips: readonly string[]): Promise<Array<{ ip: string; lease: string }>> {
    const client = this.session.client;
    const marks = ips.flatMap((ip) => {
      const o = this.owners.get(ip);
      return o && o.node === this.nodeName ? [{ ip, lease: o.lease }] : [];
    });
    const done: Array<{ ip: string; lease: string }> = [];
    await Promise.all(
      Array.from({ length: Math.ceil(marks.length / CONTEND_CHUNK) }, async (_, c) => {
        const chunk = marks.slice(c * CONTEND_CHUNK, (c + 1) * CONTEND_CHUNK);
        try {
          const res = await client
            .if(this.ownersPrefix, 'Version', '>', -1)
            .then(...chunk.map(({ ip, lease }) => client.put(`${this.releasingPrefix}${ip}`).value(this.nodeName).lease(lease)))
            .commit();
          for (const { ip, lease } of chunk) this.observe({ type: 'put', key: `${this.releasingPrefix}${ip}`, value: this.nodeName, lease, revision: Number(res.header.revision) });
          done.push(...chunk);
        } catch (e) {
          this.deps.log.warn({ ips: chunk.length, first: chunk[0]!.ip, err: describeError(e) }, 'could not mark IPs as releasing: a candidate may take our silence for death');
        }
      }),
    );
    return done;
  }

  /** Removes our releasing markers (a release called off, or a key that moved): each only while still on the lease it was written on. */
  private async unmark(marks: ReadonlyArray<{ ip: string; lease: string }>): Promise<void> {
    const client = this.session.client;
    for (let i = 0; i < marks.length; i += CONTEND_CHUNK) {
      const chunk = marks.slice(i, i + CONTEND_CHUNK);
      const keys = chunk.map(({ ip }) => `${this.releasingPrefix}${ip}`);
      let txn = client.if(keys[0]!, 'Lease', '==', chunk[0]!.lease);
      for (const [n, key] of keys.entries()) if (n > 0) txn = txn.and(key, 'Lease', '==', chunk[n]!.lease);
      try {
        const res = await txn.then(...keys.map((key) => client.delete().key(key))).commit();
        if (res.succeeded) for (const key of keys) this.observe({ type: 'delete', key, value: '', lease: NO_LEASE, revision: Number(res.header.revision) });
      } catch {
        /* left on our lease: it goes with the lease, and a candidate fences past the grace anyway */
      }
    }
  }


  /**
   * Publishes the owned set when it changed; resolves true once the consumer
   * has applied it (or nothing changed), false if it failed or took longer
   * than the bound (never hang on a stuck consumer).
   */
  private emit(): Promise<boolean> {
    if (this.holdingThroughOutage()) return Promise.resolve(true); // hold what we have
    // A stop's hand-over is in flight: the datapath is silent already, and the
    // local withdrawal (a thousand map deletes and log lines) waits for the
    // transactions — a pass woken by their watch events must not start it.
    if (this.handingOver) return Promise.resolve(true);
    const owned = new Set<string>();
    const lease = this.session.leaseId;
    // Ours: keys on our current lease, or on a lease this process held before
    // an outage (still standing at the server, so still a fence) until moved.
    const former = this.session.formerLeases;
    if (!this.released) {
      for (const [ip, o] of this.owners) {
        if (o.node === this.nodeName && lease !== undefined && !this.releasing.has(ip) && (o.lease === lease || former.has(o.lease)) && !(this.fencedAway?.lease === o.lease && this.fencedAway.ips.has(ip))) owned.add(ip);
      }
      // A stopping node's successor answers at its hand-over record, not after the moves.
      if (lease !== undefined) for (const ip of this.handedOverByRecord(lease)) if (!this.releasing.has(ip)) owned.add(ip);
    }
    const same = owned.size === this.lastOwned.size && [...owned].every((ip) => this.lastOwned.has(ip));
    if (same) return Promise.resolve(true);
    const added = [...owned].filter((ip) => !this.lastOwned.has(ip)).length;
    this.deps.log.debug({ owned: owned.size, added, removed: this.lastOwned.size + added - owned.size }, 'trace: owned set emitted');
    this.lastOwned = owned;
    const t0 = monotonicMs(this.deps.clock);
    const applied = Promise.resolve(this.onChange(this.view())).then(
      () => {
        this.deps.log.debug({ owned: owned.size, added, ms: Math.round(monotonicMs(this.deps.clock) - t0) }, 'trace: owned set applied');
        return true;
      },
      (e: unknown) => {
        this.deps.log.warn({ err: describeError(e) }, 'applying the owned set failed');
        return false;
      },
    );
    return Promise.race([applied, new Promise<boolean>((r) => this.deps.clock.setTimeout(() => r(false), 2000))]);
  }

  view(): OwnershipView {
    return { owned: this.lastOwned, owners: new Map([...this.owners].map(([ip, o]) => [ip, o.node])) };
  }

  /**
   * The datapath heartbeat's gate: answer only while our lease is valid by
   * our own clock (or, with `keep`, while the store is merely unreachable);
   * after a late wake-up, re-verify the lease and the owners with the store
   * and withdraw what we lost before answering again.
   */
  livenessGate(): LivenessGate {
    return {
      answerUntilMs: () => {
        if (this.released) return 0;
        if (this.holdingThroughOutage()) return Infinity;
        return this.session.state === 'live' ? this.session.validUntilMs() : 0;
      },
      recheck: async (why) => {
        const verdict = await this.session.verify();
        this.deps.log.warn({ why, lease: verdict }, 'lease re-checked with the store');
        if (verdict !== 'unreachable') await this.refresh();
        await this.emit();
      },
    };
  }

  status(): OwnershipStatus {
    const session = this.session.status();
    let notOwningReason: string | undefined;
    if (this.lastOwned.size === 0) {
      if (this.released) notOwningReason = 'released (agent stopping)';
      else if (session.state === 'connecting') notOwningReason = 'waiting for an etcd session';
      else if (session.state === 'lost') notOwningReason = session.lostReason === 'lease-gone' ? 'our etcd lease was revoked or expired; re-joining' : 'etcd unreachable: withdrawn (--on-store-loss withdraw)';
      else if (this.candidates.size === 0) notOwningReason = 'not a candidate for any IP (no allocation, policy, node or interface match)';
      else notOwningReason = 'every candidate IP is owned by another node';
    }
    return { ...this.counters, ...(notOwningReason ? { notOwningReason } : {}) };
  }

  /**
   * Graceful stop: withdraw locally; the caller then revokes the lease so
   * every IP is free at once. With `silenced` (the caller has already made
   * the datapath answer nothing, in one map write) each owned IP is first
   * handed straight to its successor — the most preferred live candidate — by
   * writing its owner key onto the successor's lease in one transaction, only
   * while the key is still ours and the successor's candidacy still stands
   * on that lease. The successor sees its own name on the key and answers at
   * once: no contention round after the delete (a store write and a pass).
   * An IP whose hand-over fails is freed by the revoke as before.
   */
  async release(opts: { silenced?: boolean } = {}): Promise<void> {
    this.released = true;
    for (const t of this.timers.values()) t.cancel();
    const lease = this.session.leaseId;
    const mine = lease ? this.ownedOn(lease) : [];
    this.deps.log.debug({ ips: mine.length, silenced: !!opts.silenced }, 'trace: release');
    if (opts.silenced && lease && mine.length > 0) {
      // Silent already: the local withdrawal (a thousand map deletes and log
      // lines) waits until the transactions are through, so it never delays
      // them — a hand-over slower than the candidates' silence window would be
      // overtaken by a fence (safe, but a contention round later).
      this.handingOver = true;
      try {
        const n = await Promise.race([this.handOver(mine, lease), new Promise<number>((r) => this.deps.clock.setTimeout(() => r(0), 1000))]);
        if (n > 0) this.deps.log.info({ ips: n, of: mine.length }, 'handed ownership over to the successors');
      } finally {
        this.handingOver = false;
      }
    }
    this.owners = new Map([...this.owners].filter(([, o]) => o.node !== this.nodeName));
    this.lastOwned = new Set();
    this.onChange(this.view());
  }

  /**
   * What our supervisor hands over if this process dies without releasing
   * (kill -9, a crash): the record and moves a stop would make now, for every
   * IP whose key is on our current lease. Undefined when there is nothing to
   * hand over (no lease, released, no successor, or a record over its bound).
   */
  crashHandoverPlan(): CrashHandoverPlan | undefined {
    const lease = this.session.leaseId;
    if (!lease || this.released) return undefined;
    const moves = this.movesFor(this.ownedOn(lease));
    const record = moves.length > 0 ? encodeHandoverRecord(this.nodeName, moves, 'crash') : undefined;
    return record === undefined ? undefined : { lease, recordKey: `${this.handoverPrefix}${this.nodeName}`, ownersPrefix: this.ownersPrefix, record };
  }

  /** IPs whose owner key names us on `lease`. */
  private ownedOn(lease: string): string[] {
    return [...this.owners].filter(([, o]) => o.node === this.nodeName && o.lease === lease).map(([ip]) => ip);
  }

  /** Each IP's successor when `departing` (we, by default) leaves, for those that have one. */
  private movesFor(ips: readonly string[], departing = this.nodeName): HandoverMove[] {
    return ips.flatMap((ip) => {
      const s = this.successor(ip, departing);
      return s ? [{ ip, ...s }] : [];
    });
  }

  /**
   * The successor for `ip` when `departing` leaves: the most preferred live
   * candidate but it (we among them when another node departs), with the
   * lease its candidacy is on.
   */
  private successor(ip: string, departing: string): { node: string; lease: string } | undefined {
    let best: { node: string; lease: string; score: string } | undefined;
    const ours = this.session.leaseId;
    if (departing !== this.nodeName && ours && this.candidates.has(ip)) best = { node: this.nodeName, lease: ours, score: this.score(this.nodeName, ip) };
    for (const node of this.others.get(ip)?.keys() ?? []) {
      const lease = this.candidateLeases.get(`${ip}/${node}`);
      if (!lease || node === departing || this.isSkipped(ip, node)) continue;
      const score = this.score(node, ip);
      if (!best || score > best.score) best = { node, lease, score };
    }
    return best;
  }

  /** Owner keys moved onto successors' leases, in transactions of HANDOVER_CHUNK IPs; resolves with how many moved. */
  private async handOver(ips: readonly string[], lease: string): Promise<number> {
    const moves = this.movesFor(ips);
    // The successors answer at the record; the moves only make it last past our revoke. Started at
    // once, their 1,000 puts and watch events take the CPU the successors need to answer (measured:
    // last IP 133–201 ms with the moves at once, on 2 cores shared with etcd).
    const record = await this.writeHandoverRecord(moves, lease);
    // A record of ours stands already: a fencer took our silence for death and is handing
    // our IPs over by it. Its successors answer by that record; moving keys to ours could
    // make two nodes answer one IP — the revoke that follows frees what it has not moved.
    if (record === 'taken') {
      this.deps.log.warn({ ips: moves.length }, 'a fencer is handing our IPs over already: leaving the hand-over to it');
      return 0;
    }
    if (record === 'written') await new Promise<void>((r) => this.deps.clock.setTimeout(() => r(), HANDOVER_MOVES_AFTER_MS));
    return this.moveKeys(moves, lease, (m) => ({ kind: 'owner-released', ip: m.ip, why: `handed over to ${m.node} (stopping)`, cause: 'clean-stop' }));
  }

  /**
   * Each owner key onto its successor's lease, in transactions of
   * HANDOVER_CHUNK with one compare per key: still on `from`. The put onto a
   * successor's lease fails the whole transaction if that lease is gone
   * (etcd: "requested lease not found"), so no key lands on a dead node; what
   * is not moved is freed by the revoke of `from` that follows. Resolves with
   * how many keys moved.
   */
  private async moveKeys(moves: readonly HandoverMove[], from: string, event?: (m: HandoverMove) => EventBody): Promise<number> {
    const client = this.session.client;
    const chunks: HandoverMove[][] = [];
    for (let i = 0; i < moves.length; i += HANDOVER_CHUNK) chunks.push(moves.slice(i, i + HANDOVER_CHUNK));
    const done = await Promise.all(
      chunks.map(async (chunk) => {
        let txn = client.if(`${this.ownersPrefix}${chunk[0]!.ip}`, 'Lease', '==', from);
        for (const [n, m] of chunk.entries()) if (n > 0) txn = txn.and(`${this.ownersPrefix}${m.ip}`, 'Lease', '==', from);
        const t0 = monotonicMs(this.deps.clock);
        try {
          // The departing node's candidacy keys stay until the revoke: every node that sees
          // its key move onto another lease takes it for departed (depart()), so nobody
          // hands an IP back to it. Deleting them here doubled the work.
          const res = await txn.then(...chunk.map((m) => client.put(`${this.ownersPrefix}${m.ip}`).value(m.node).lease(m.lease))).commit();
          this.deps.log.debug({ ips: chunk.length, done: res.succeeded, ms: Math.round(monotonicMs(this.deps.clock) - t0) }, 'trace: hand-over transaction');
          if (!res.succeeded) return 0;
          for (const m of chunk) this.observe({ type: 'put', key: `${this.ownersPrefix}${m.ip}`, value: m.node, lease: m.lease, revision: Number(res.header.revision) });
        } catch (e) {
          this.deps.log.debug({ err: describeError(e) }, 'handing ownership over failed; the lease revoke frees the IPs');
          return 0;
        }
        if (event) for (const m of chunk.slice(0, EVENTS_PER_BATCH)) void Promise.resolve(this.deps.events?.(event(m))).catch(() => {});
        return chunk.length;
      }),
    );
    return done.reduce((a, b) => a + b, 0);
  }

  /**
   * One put before the moves: the successors answer as they see it (one watch
   * event), while the moves — eight transactions for 1,000 IPs — follow.
   * On our lease (a put onto a lease that is gone fails), so it goes with our
   * owner keys at the revoke. Failing is no error: the moves still hand over.
   */
  private async writeHandoverRecord(moves: readonly HandoverMove[], lease: string): Promise<'written' | 'taken' | 'failed'> {
    const value = encodeHandoverRecord(this.nodeName, moves);
    if (moves.length === 0 || value === undefined) return 'failed';
    const t0 = monotonicMs(this.deps.clock);
    const key = `${this.handoverPrefix}${this.nodeName}`;
    const client = this.session.client;
    try {
      const res = await client.if(key, 'Version', '==', 0).then(client.put(key).value(value).lease(lease)).commit();
      if (!res.succeeded) return 'taken';
      this.deps.log.debug({ ips: moves.length, bytes: value.length, ms: Math.round(monotonicMs(this.deps.clock) - t0) }, 'trace: hand-over record written');
      return 'written';
    } catch (e) {
      this.deps.log.debug({ err: describeError(e) }, 'writing the hand-over record failed; the moves hand over alone');
      return 'failed';
    }
  }

  dispose(): void {
    this.disposed = true;
    this.passes.dispose();
    this.refreshes.dispose();
    this.watchRetry?.cancel();
    this.rankTimer?.cancel();
    this.rankings.dispose();
    for (const t of this.timers.values()) t.cancel();
    this.verdicts.dispose();
    void this.watcher?.cancel();
  }
}
