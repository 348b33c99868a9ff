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
import type { Clock, TimerHandle } from '../../core/clock.js';
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

export class EtcdSession implements Disposable {
  /** For everything the agent stores (ownership, allocations). */
  readonly client: Etcd3;
  /**
   * Keep-alives on their own connection, with short deadlines and their own
   * circuit breaker: a burst of slow store writes never starves the lease.
   */
  private readonly keepaliveClient: Etcd3;
  private lease: Lease | undefined;
  private leaseIdValue: string | undefined;
  private lastKeepaliveOk = 0;
  private stateValue: SessionState = 'connecting';
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
    this.keepaliveClient = createEtcdClient({
      endpoints: opts.endpoints,
      // Short enough for several attempts before TTL − margin, long enough for a loaded machine.
      callTimeoutMs: Math.max(250, Math.floor((opts.ttlSeconds * 1000 - opts.marginMs) / 3)),
      noFaultHandling: true,
    });
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

  onState(fn: (s: SessionState) => void): Disposable {
    this.listeners.add(fn);
    return { dispose: () => this.listeners.delete(fn) };
  }

  private setState(s: SessionState): void {
    if (s === this.stateValue) return;
    this.stateValue = s;
    this.deps.log.info({ session: s, lease: this.leaseIdValue }, s === 'live' ? 'etcd session live' : `etcd session ${s}`);
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
        this.leaseIdValue = await lease.grant();
        this.lease = lease;
        this.lastKeepaliveOk = this.deps.clock.now();
        this.armDeadline();
        this.setState('live');
        return;
      } catch (e) {
        if (attempt === 0 || attempt % 20 === 0) this.deps.log.warn({ err: describeError(e) }, 'etcd lease grant failed; retrying');
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
    const ms = this.opts.ttlSeconds * 1000 - this.opts.marginMs - (this.deps.clock.now() - this.lastKeepaliveOk);
    this.deadline = this.deps.clock.setTimeout(() => this.expireLocally(), Math.max(0, ms));
  }

  /** Our own clock says the server may soon expire the lease: act as if it has. */
  private expireLocally(): void {
    if (this.disposed || this.stateValue !== 'live') return;
    this.deps.log.warn({ lastKeepaliveAgoMs: this.deps.clock.now() - this.lastKeepaliveOk }, 'etcd keep-alives failing: stepping down before the lease can expire');
    this.setState('lost');
  }

  private async keepalive(): Promise<void> {
    if (this.disposed) return;
    if (this.stateValue === 'lost') {
      // A fresh lease: whatever the old one held is gone or going.
      await this.grant();
      this.schedule();
      return;
    }
    try {
      this.requests++;
      await this.lease!.keepaliveOnce();
      this.lastKeepaliveOk = this.deps.clock.now();
      this.armDeadline();
    } catch (e) {
      const msg = describeError(e);
      if (/lease.*(not found|expired|invalid)|EtcdLeaseInvalidError|requested lease not found/i.test(msg)) {
        this.deadline?.cancel();
        this.deps.log.warn({ err: msg }, 'etcd lease is gone');
        this.setState('lost');
      }
    }
    this.schedule();
  }

  /** Gives up the lease now: every key attached to it disappears at once. */
  async revoke(): Promise<void> {
    const lease = this.lease;
    if (!lease || this.stateValue !== 'live') return;
    this.deadline?.cancel();
    this.setState('lost');
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
