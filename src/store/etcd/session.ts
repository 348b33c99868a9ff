/**
 * An agent's session on etcd: one client and one lease, kept alive by our own
 * loop. Everything the agent holds in etcd (allocator leadership, IP
 * ownership) is attached to this lease, so a dead agent's keys vanish together.
 *
 * The session decides it has lost the lease on its own clock: at the last
 * successful keep-alive + TTL − margin, before the server can expire it. The
 * etcd3 client would only report a lost lease after 2×TTL (platform.md §7),
 * by which time another node may already own what we still announce.
 */
import type { Etcd3, Lease } from 'etcd3';
import { monotonicMs, type Clock, type TimerHandle } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError, describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { createEtcdClient } from '../../intent/sources/etcd-client.js';

export interface EtcdSessionOptions {
  endpoints: readonly string[];
  /** herald's key prefix, ending in "/". */
  prefix: string;
  /** Lease TTL in seconds (etcd's granularity). */
  ttlSeconds: number;
  /** Keep-alive period. */
  keepaliveMs: number;
  /** Step down this long before the lease could expire at the server. */
  marginMs: number;
}

export const etcdSessionDefaults = { ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 };

export type SessionState = 'connecting' | 'live' | 'lost';
/**
 * Why the session is lost: the store could not be reached in time (our lease
 * may well live on), or the store told us the lease is gone (revoked by a
 * candidate that fenced us, or expired). Only the first may be ridden out
 * with `--on-store-loss keep`; the second always means "we own nothing".
 */
export type LostReason = 'unreachable' | 'lease-gone' | 'released';

export interface SessionStatus {
  state: SessionState;
  lostReason?: LostReason;
  lease?: string;
  /** Age of the last successful keep-alive (from when it was sent). */
  lastKeepaliveAgeMs?: number;
  /** How long our lease is still valid by our own clock (0 when not live). */
  validForMs: number;
  /** Leases granted in this process so far (1 = never lost). */
  leasesGranted: number;
  keepaliveFailures: number;
}

export class EtcdSession implements Disposable {
  /** For everything the agent stores (ownership, allocations). */
  readonly client: Etcd3;
  /**
   * Keep-alives on their own connection, with short deadlines and their own
   * circuit breaker: a burst of slow store writes never starves the lease.
   */
  private readonly keepaliveClient: Etcd3;
  /** The keep-alive connection's call deadline: short enough for several attempts before TTL − margin, long enough for a loaded machine. */
  readonly keepaliveCallTimeoutMs: number;
  private lease: Lease | undefined;
  private leaseIdValue: string | undefined;
  /** Monotonic ms at which the last successful keep-alive (or grant) was SENT: the lease is valid TTL from then, at least. */
  private lastKeepaliveOk = 0;
  private stateValue: SessionState = 'connecting';
  private lostReasonValue: LostReason | undefined;
  /** Leases this process held before the current one: keys on them are ours to move onto the new lease. */
  private readonly formerLeaseIds = new Set<string>();
  private leasesGranted = 0;
  private keepaliveFailures = 0;
  private timer: TimerHandle | undefined;
  private deadline: TimerHandle | undefined;
  private disposed = false;
  private readonly listeners = new Set<(s: SessionState) => void>();
  /** Store requests issued by the session itself (keep-alives, grants), for the scale report. */
  requests = 0;

  constructor(
    private readonly opts: EtcdSessionOptions,
    private readonly deps: { clock: Clock; log: Logger },
  ) {
    if (opts.keepaliveMs * 2 > opts.ttlSeconds * 1000 - opts.marginMs) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', 'etcd keep-alive period must leave room for two attempts within TTL − margin');
    }
    this.client = createEtcdClient({ endpoints: opts.endpoints });
    this.keepaliveCallTimeoutMs = Math.max(250, Math.floor((opts.ttlSeconds * 1000 - opts.marginMs) / 3));
    this.keepaliveClient = createEtcdClient({ endpoints: opts.endpoints, callTimeoutMs: this.keepaliveCallTimeoutMs, noFaultHandling: true });
  }

  get prefix(): string {
    return this.opts.prefix;
  }
  get state(): SessionState {
    return this.stateValue;
  }
  /** The current lease id (decimal string); undefined while not live. */
  get leaseId(): string | undefined {
    return this.stateValue === 'live' ? this.leaseIdValue : undefined;
  }

  get lostReason(): LostReason | undefined {
    return this.stateValue === 'lost' ? this.lostReasonValue : undefined;
  }

  /** Leases this process held before the current one (keys on them are ours). */
  get formerLeases(): ReadonlySet<string> {
    return this.formerLeaseIds;
  }

  /**
   * The lease is valid by our own clock until this monotonic instant: the
   * send time of the last successful keep-alive + TTL − margin. Past it, the
   * server may have expired the lease and another node may own our IPs.
   */
  validUntilMs(): number {
    return this.stateValue === 'live' ? this.leaseDeadlineMs() : 0;
  }

  private leaseDeadlineMs(): number {
    return this.lastKeepaliveOk + this.opts.ttlSeconds * 1000 - this.opts.marginMs;
  }

  status(): SessionStatus {
    const now = monotonicMs(this.deps.clock);
    return {
      state: this.stateValue,
      ...(this.lostReason ? { lostReason: this.lostReason } : {}),
      ...(this.leaseIdValue ? { lease: this.leaseIdValue } : {}),
      ...(this.lastKeepaliveOk ? { lastKeepaliveAgeMs: now - this.lastKeepaliveOk } : {}),
      validForMs: Math.max(0, this.validUntilMs() - now),
      leasesGranted: this.leasesGranted,
      keepaliveFailures: this.keepaliveFailures,
    };
  }

  onState(fn: (s: SessionState) => void): Disposable {
    this.listeners.add(fn);
    return { dispose: () => this.listeners.delete(fn) };
  }

  private setState(s: SessionState, reason?: LostReason): void {
    if (s === 'lost') this.lostReasonValue = reason ?? 'unreachable';
    if (s === this.stateValue) return;
    this.stateValue = s;
    this.deps.log.info({ session: s, lease: this.leaseIdValue, ...(s === 'lost' ? { reason: this.lostReasonValue } : {}) }, s === 'live' ? 'etcd session live' : `etcd session ${s}`);
    for (const l of [...this.listeners]) l(s);
  }

  /** Resolves once a lease is granted (retrying until then). */
  async start(): Promise<void> {
    await this.grant();
    this.schedule();
  }

  private async grant(): Promise<void> {
    for (let attempt = 0; !this.disposed; attempt++) {
      try {
        const lease = this.keepaliveClient.lease(this.opts.ttlSeconds, { autoKeepAlive: false });
        this.requests++;
        const sentAt = monotonicMs(this.deps.clock);
        const id = await lease.grant();
        if (this.leaseIdValue && this.leaseIdValue !== id) this.formerLeaseIds.add(this.leaseIdValue);
        this.leaseIdValue = id;
        this.lease = lease;
        this.leasesGranted++;
        this.lastKeepaliveOk = sentAt;
        this.armDeadline();
        this.setState('live');
        return;
      } catch (e) {
        if (attempt % 20 === 0) this.deps.log.warn({ err: describeError(e) }, 'etcd lease grant failed; retrying');
        await new Promise<void>((r) => this.deps.clock.setTimeout(r, Math.min(1000, 100 * 2 ** Math.min(attempt, 4))));
      }
    }
  }

  private schedule(): void {
    if (this.disposed) return;
    this.timer = this.deps.clock.setTimeout(() => void this.keepalive(), this.opts.keepaliveMs);
  }

  private armDeadline(): void {
    this.deadline?.cancel();
    const ms = this.leaseDeadlineMs() - monotonicMs(this.deps.clock);
    this.deadline = this.deps.clock.setTimeout(() => this.expireLocally(), Math.max(0, ms));
  }

  /** Our own clock says the server may soon expire the lease: act as if it has. */
  private expireLocally(): void {
    if (this.disposed || this.stateValue !== 'live') return;
    this.deps.log.warn({ lastKeepaliveAgoMs: monotonicMs(this.deps.clock) - this.lastKeepaliveOk }, 'etcd keep-alives failing: stepping down before the lease can expire');
    this.setState('lost', 'unreachable');
  }

  private async keepalive(): Promise<void> {
    if (this.disposed) return;
    if (this.stateValue === 'lost') {
      // A fresh lease: whatever the old one held is gone or going.
      await this.grant();
      this.schedule();
      return;
    }
    await this.keepaliveNow();
    this.schedule();
  }

  private inflight: Promise<'ok' | 'lease-gone' | 'unreachable'> | undefined;

  /** One keep-alive now; concurrent callers share it. */
  private keepaliveNow(): Promise<'ok' | 'lease-gone' | 'unreachable'> {
    this.inflight ??= (async () => {
      const lease = this.lease;
      if (!lease || this.stateValue !== 'live') return 'unreachable' as const;
      const sentAt = monotonicMs(this.deps.clock);
      try {
        this.requests++;
        await lease.keepaliveOnce();
        // A late answer to an old lease's keep-alive proves nothing about the current one.
        if (lease !== this.lease || this.stateValue !== 'live') return 'unreachable' as const;
        this.lastKeepaliveOk = Math.max(this.lastKeepaliveOk, sentAt);
        this.armDeadline();
        return 'ok' as const;
      } catch (e) {
        this.keepaliveFailures++;
        const msg = describeError(e);
        if (/lease.*(not found|expired|invalid)|EtcdLeaseInvalidError|requested lease not found/i.test(msg)) {
          if (lease === this.lease && this.stateValue === 'live') {
            this.deadline?.cancel();
            this.deps.log.warn({ err: msg, lease: this.leaseIdValue }, 'etcd lease is gone (revoked or expired): we own nothing');
            this.setState('lost', 'lease-gone');
          }
          return 'lease-gone' as const;
        }
        return 'unreachable' as const;
      }
    })().finally(() => (this.inflight = undefined));
    return this.inflight;
  }

  /**
   * After a late wake-up: ask the store now whether our lease still stands
   * (renewing it if so), instead of trusting a clock that was not running.
   */
  async verify(): Promise<'ok' | 'lease-gone' | 'unreachable'> {
    if (this.disposed || this.stateValue !== 'live') return this.stateValue === 'lost' && this.lostReasonValue === 'lease-gone' ? 'lease-gone' : 'unreachable';
    return await this.keepaliveNow();
  }

  /** Gives up the lease now: every key attached to it disappears at once. */
  async revoke(): Promise<void> {
    const lease = this.lease;
    if (!lease || this.stateValue !== 'live') return;
    this.deadline?.cancel();
    this.setState('lost', 'released');
    try {
      this.requests++;
      await lease.revoke();
    } catch (e) {
      this.deps.log.warn({ err: describeError(e) }, 'etcd lease revoke failed; it expires by itself');
    }
  }

  dispose(): void {
    this.disposed = true;
    this.timer?.cancel();
    this.deadline?.cancel();
    this.listeners.clear();
    void this.client.close();
    void this.keepaliveClient.close();
  }
}
