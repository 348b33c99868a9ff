/**
 * Write-back of LB-IPAM results to `Service.status.loadBalancer.ingress`
 * (with `ipMode: VIP`), through the status subresource.
 *
 * - Desired state comes from the control plane (every Service LB-IPAM looked
 *   at, with the IPs it holds, possibly none); the current state from the
 *   intent source's informer cache. Only a difference is written, so the
 *   steady state writes nothing.
 * - A write is a PUT of the cached object with its resourceVersion: a `409
 *   Conflict` (the object changed meanwhile) reads the object again and
 *   retries, up to `conflictRetries` times.
 * - Rate-limited: a token bucket (`qps`, `burst`) over all writes, and one
 *   write per Service per `perServiceMs` at most, so a flapping Service
 *   cannot flood the API server. What is held back is written later (the
 *   latest desired state, not every step).
 * - A refused write (RBAC 403, validation 422) is logged with the API
 *   server's reason and retried only when the desired state changes again.
 */
import { monotonicMs, systemClock, type Clock, type TimerHandle } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { Disposable } from '../../core/disposable.js';
import { KubeApiError, isConflict, type KubeClient, type KubeObject } from '../../intent/sources/kube-client.js';

export interface ServiceStatusOptions {
  readonly qps: number;
  readonly burst: number;
  readonly perServiceMs: number;
  readonly conflictRetries: number;
}

export const serviceStatusDefaults: ServiceStatusOptions = { qps: 20, burst: 50, perServiceMs: 1000, conflictRetries: 5 };

export interface ServiceStatusStats {
  writes: number;
  conflicts: number;
  refused: number;
  failures: number;
  pending: number;
}

type Ingress = { ip: string; ipMode?: string }[];

function ingressOf(obj: KubeObject | undefined): Ingress {
  const status = obj?.status as { loadBalancer?: { ingress?: Ingress } } | undefined;
  return status?.loadBalancer?.ingress ?? [];
}

function sameIngress(a: Ingress, b: Ingress): boolean {
  return a.length === b.length && a.every((x, i) => x.ip === b[i]!.ip && (x.ipMode ?? 'VIP') === (b[i]!.ipMode ?? 'VIP'));
}

export class ServiceStatusWriter implements Disposable {
  private desired = new Map<string, Ingress>();
  /** Services whose write is due (key → earliest time). */
  private readonly due = new Set<string>();
  private readonly lastWrite = new Map<string, number>();
  /** The desired state a refused write asked for: not asked again until it changes. */
  private readonly refused = new Map<string, string>();
  private tokens: number;
  private tokensAt: number;
  private timer: TimerHandle | undefined;
  private running = false;
  private disposed = false;
  readonly stats: ServiceStatusStats = { writes: 0, conflicts: 0, refused: 0, failures: 0, pending: 0 };

  constructor(
    private readonly deps: {
      client: KubeClient;
      /** The informer's copy of a Service (raw). */
      cached: (name: string, namespace: string) => KubeObject | undefined;
      log: Logger;
      clock?: Clock;
      /** Whether this node is the one writer now (default: always); looked at on every pass. */
      active?: () => boolean;
      /** Desired and cached state are compared again this often (a new writer takes over; a status someone overwrote is restored). */
      resyncMs?: number;
    },
    private readonly opts: ServiceStatusOptions = serviceStatusDefaults,
  ) {
    this.tokens = opts.burst;
    this.tokensAt = this.now();
    this.scheduleResync();
  }

  private resyncTimer: TimerHandle | undefined;

  private scheduleResync(): void {
    if (this.disposed) return;
    this.resyncTimer = this.clock.setTimeout(() => {
      this.recheck();
      this.scheduleResync();
    }, this.deps.resyncMs ?? 5000);
  }

  private get clock(): Clock {
    return this.deps.clock ?? systemClock;
  }

  private now(): number {
    return monotonicMs(this.clock);
  }

  /** The IPs every Service LB-IPAM looked at should show (key `namespace/name`). */
  update(ingress: ReadonlyMap<string, readonly string[]>): void {
    const next = new Map<string, Ingress>();
    for (const [key, ips] of ingress) next.set(key, ips.map((ip) => ({ ip, ipMode: 'VIP' })));
    this.desired = next;
    this.recheck();
  }

  /** Compares desired with the cache (also after the cache changed) and schedules what differs. */
  recheck(): void {
    if (this.deps.active && !this.deps.active()) {
      this.due.clear();
      this.stats.pending = 0;
      return;
    }
    for (const [key, want] of this.desired) {
      const [namespace, name] = splitKey(key);
      const obj = this.deps.cached(name, namespace);
      if (!obj) continue;
      if (sameIngress(ingressOf(obj), want)) {
        this.due.delete(key);
        continue;
      }
      if (this.refused.get(key) === JSON.stringify(want)) continue;
      this.due.add(key);
    }
    this.stats.pending = this.due.size;
    this.kick();
  }

  dispose(): void {
    this.disposed = true;
    this.timer?.cancel();
    this.resyncTimer?.cancel();
  }

  private kick(delayMs = 0): void {
    if (this.disposed || this.running || this.due.size === 0) return;
    if (this.timer && delayMs > 0) return;
    this.timer?.cancel();
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.drain();
    }, delayMs);
  }

  private refill(): void {
    const now = this.now();
    this.tokens = Math.min(this.opts.burst, this.tokens + ((now - this.tokensAt) / 1000) * this.opts.qps);
    this.tokensAt = now;
  }

  private async drain(): Promise<void> {
    if (this.running || this.disposed) return;
    this.running = true;
    let wait = 0;
    try {
      for (const key of [...this.due]) {
        if (this.disposed) return;
        const last = this.lastWrite.get(key);
        const now = this.now();
        if (last !== undefined && now - last < this.opts.perServiceMs) {
          wait = wait === 0 ? this.opts.perServiceMs - (now - last) : Math.min(wait, this.opts.perServiceMs - (now - last));
          continue;
        }
        this.refill();
        if (this.tokens < 1) {
          wait = Math.ceil(((1 - this.tokens) / this.opts.qps) * 1000);
          break;
        }
        this.tokens -= 1;
        this.due.delete(key);
        this.lastWrite.set(key, now);
        await this.write(key);
      }
    } finally {
      this.running = false;
      this.stats.pending = this.due.size;
    }
    if (this.due.size > 0) this.kick(Math.max(wait, 10));
  }

  private async write(key: string): Promise<void> {
    const want = this.desired.get(key);
    if (!want) return;
    const [namespace, name] = splitKey(key);
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/services/${encodeURIComponent(name)}/status`;
    let obj = this.deps.cached(name, namespace);
    for (let attempt = 0; obj && attempt <= this.opts.conflictRetries; attempt++) {
      if (sameIngress(ingressOf(obj), want)) return;
      const status = { ...((obj.status as Record<string, unknown>) ?? {}), loadBalancer: { ingress: want } };
      const body = { ...obj, apiVersion: 'v1', kind: 'Service', status };
      try {
        await this.deps.client.request('PUT', path, body);
        this.stats.writes++;
        this.deps.log.debug({ service: key, ingress: want.map((i) => i.ip) }, 'service status written');
        return;
      } catch (e) {
        if (isConflict(e)) {
          // Someone wrote first: read the object as it is now and try again.
          this.stats.conflicts++;
          try {
            obj = await this.deps.client.request<KubeObject>('GET', path.slice(0, -'/status'.length));
          } catch (e2) {
            obj = undefined;
            this.fail(key, e2);
          }
          continue;
        }
        this.fail(key, e);
        return;
      }
    }
  }

  private fail(key: string, e: unknown): void {
    if (e instanceof KubeApiError && (e.status === 403 || e.status === 422 || e.status === 404)) {
      this.stats.refused++;
      this.refused.set(key, JSON.stringify(this.desired.get(key)));
      this.deps.log.error({ service: key, status: e.status, reason: e.reason, err: e.message }, 'the API server refused the service status write');
      return;
    }
    this.stats.failures++;
    this.deps.log.warn({ service: key, err: describeError(e) }, 'service status write failed; retrying');
    this.due.add(key);
  }
}

function splitKey(key: string): [string, string] {
  const slash = key.indexOf('/');
  return [key.slice(0, slash), key.slice(slash + 1)];
}
