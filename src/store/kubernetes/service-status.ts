/**
 * Write-back of LB-IPAM results through the status subresource:
 * `Service.status.loadBalancer.ingress` (with `ipMode: VIP`) and the
 * `cilium.io/IPAMRequestSatisfied` condition (Cilium's reasons), and the
 * pool conditions Cilium's operator writes on CiliumLoadBalancerIPPool
 * (`cilium.io/PoolConflict`, `IPsTotal`, `IPsAvailable`, `IPsUsed`). A
 * Service condition turning False is also a Warning Event (events.ts).
 * Conditions of other types are left alone; a condition's
 * lastTransitionTime moves only when its status does.
 *
 * - Only the LB-IPAM leader writes (`active`). Desired state comes from the
 *   control plane (every Service LB-IPAM looked at, with the IPs it holds,
 *   possibly none; every pool); the current state from the
 *   intent source's informer cache. Only a difference is written, so the
 *   steady state writes nothing.
 * - A write is a PUT of the cached object with its resourceVersion: a `409
 *   Conflict` (the object changed meanwhile) reads the object again and
 *   retries, up to `conflictRetries` times.
 * - Rate-limited: a token bucket (`qps`, `burst`) over all writes (at most
 *   `concurrency` in flight), and one write per object per `perServiceMs`
 *   at most, so a flapping Service
 *   cannot flood the API server. What is held back is written later (the
 *   latest desired state, not every step).
 * - A refused write (RBAC 403, validation 422, 404) is logged with the API
 *   server's reason and retried only when the desired state changes again.
 */
import { monotonicMs, systemClock, type Clock, type TimerHandle } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { Disposable } from '../../core/disposable.js';
import type { IpamCondition } from '../../controlplane/ipam/types.js';
import { KubeApiError, isConflict, type KubeClient, type KubeObject } from '../../intent/sources/kube-client.js';
import type { EventRecorder } from './events.js';

export interface ServiceStatusOptions {
  readonly qps: number;
  readonly burst: number;
  readonly perServiceMs: number;
  readonly conflictRetries: number;
  /** Writes in flight at once (each waits for its token first). */
  readonly concurrency: number;
}

/**
 * qps/burst: the budget Cilium's operator runs with (100/200, cilium#33777) —
 * like it, the LB-IPAM leader is the one status writer in the cluster, so
 * 1,000 new Services' statuses take ~8 s, not the 50 s of 20 QPS.
 */
export const serviceStatusDefaults: ServiceStatusOptions = { qps: 100, burst: 200, perServiceMs: 1000, conflictRetries: 5, concurrency: 8 };

export interface ServiceStatusStats {
  writes: number;
  conflicts: number;
  refused: number;
  failures: number;
  pending: number;
}

type Ingress = { ip: string; ipMode?: string }[];
type Condition = { type: string; status: string; reason?: string; message?: string; lastTransitionTime?: string; observedGeneration?: number };

function ingressOf(obj: KubeObject | undefined): Ingress {
  const status = obj?.status as { loadBalancer?: { ingress?: Ingress } } | undefined;
  return status?.loadBalancer?.ingress ?? [];
}

function conditionsOf(obj: KubeObject | undefined): Condition[] {
  const c = (obj?.status as { conditions?: Condition[] } | undefined)?.conditions;
  return Array.isArray(c) ? c : [];
}

function sameIngress(a: Ingress, b: Ingress): boolean {
  return a.length === b.length && a.every((x, i) => x.ip === b[i]!.ip && (x.ipMode ?? 'VIP') === (b[i]!.ipMode ?? 'VIP'));
}

/** Every wanted condition is there with the same status, reason and message. */
function hasConditions(obj: KubeObject, want: readonly IpamCondition[]): boolean {
  const have = conditionsOf(obj);
  return want.every((w) => have.some((h) => h.type === w.type && h.status === w.status && (h.reason ?? '') === w.reason && (h.message ?? '') === w.message));
}

/** `have` with the wanted conditions set (metav1 semantics: lastTransitionTime kept while the status is). */
function withConditions(obj: KubeObject, want: readonly IpamCondition[]): Condition[] {
  const have = conditionsOf(obj);
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const generation = typeof obj.metadata.generation === 'number' ? { observedGeneration: obj.metadata.generation } : {};
  const out = have.filter((h) => !want.some((w) => w.type === h.type));
  for (const w of want) {
    const prev = have.find((h) => h.type === w.type);
    out.push({ type: w.type, status: w.status, reason: w.reason, message: w.message, lastTransitionTime: prev && prev.status === w.status && prev.lastTransitionTime ? prev.lastTransitionTime : now, ...generation });
  }
  return out;
}

/** What one kind's write-back needs to know. */
interface StatusKind<W> {
  /** The informer's copy (raw). */
  cached(key: string): KubeObject | undefined;
  /** The object's own path (its status subresource is `<path>/status`). */
  path(key: string): string;
  apiVersion: string;
  kind: string;
  /** The object already shows `want`. */
  shows(obj: KubeObject, want: W): boolean;
  /** The status to write. */
  status(obj: KubeObject, want: W): Record<string, unknown>;
  /** After a successful write (`before`: the object as it was). */
  written?(key: string, before: KubeObject, want: W): void;
}

interface WriterDeps {
  client: KubeClient;
  log: Logger;
  clock?: Clock;
  /** Whether this node is the one writer now (default: always); looked at on every pass. */
  active?: () => boolean;
  /** Desired and cached state are compared again this often (a new writer takes over; a status someone overwrote is restored). */
  resyncMs?: number;
}

/** Writes a desired status per object as the file header says (shared by the Service and pool writers). */
class StatusWriter<W> implements Disposable {
  protected desired = new Map<string, W>();
  private readonly due = new Set<string>();
  private readonly lastWrite = new Map<string, number>();
  private readonly refused = new Map<string, string>();
  private tokens: number;
  private tokensAt: number;
  private timer: TimerHandle | undefined;
  private resyncTimer: TimerHandle | undefined;
  private running = false;
  private disposed = false;
  readonly stats: ServiceStatusStats = { writes: 0, conflicts: 0, refused: 0, failures: 0, pending: 0 };

  constructor(
    private readonly what: StatusKind<W>,
    protected readonly deps: WriterDeps,
    private readonly opts: ServiceStatusOptions,
  ) {
    this.tokens = opts.burst;
    this.tokensAt = this.now();
    this.scheduleResync();
  }

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

  protected setDesired(next: Map<string, W>): void {
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
      const obj = this.what.cached(key);
      if (!obj) continue;
      if (this.what.shows(obj, want)) {
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
    const inFlight = new Set<Promise<void>>();
    try {
      for (const key of [...this.due]) {
        if (this.disposed) return;
        if (this.deps.active && !this.deps.active()) break;
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
        const p: Promise<void> = this.write(key)
          .catch((e: unknown) => this.fail(key, e))
          .finally(() => inFlight.delete(p));
        inFlight.add(p);
        if (inFlight.size >= Math.max(1, this.opts.concurrency)) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
    } finally {
      this.running = false;
      this.stats.pending = this.due.size;
    }
    if (this.due.size > 0) this.kick(Math.max(wait, 10));
  }

  private async write(key: string): Promise<void> {
    const want = this.desired.get(key);
    if (want === undefined) return;
    const path = this.what.path(key);
    let obj = this.what.cached(key);
    for (let attempt = 0; obj && attempt <= this.opts.conflictRetries; attempt++) {
      if (this.what.shows(obj, want)) return;
      const status = this.what.status(obj, want);
      const body = { ...obj, apiVersion: this.what.apiVersion, kind: this.what.kind, status };
      try {
        await this.deps.client.request('PUT', `${path}/status`, body);
        this.stats.writes++;
        this.deps.log.debug({ object: `${this.what.kind}/${key}` }, 'status written');
        this.what.written?.(key, obj, want);
        return;
      } catch (e) {
        if (isConflict(e)) {
          // Someone wrote first: read the object as it is now and try again.
          this.stats.conflicts++;
          try {
            obj = await this.deps.client.request<KubeObject>('GET', path);
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
      this.deps.log.error({ object: `${this.what.kind}/${key}`, status: e.status, reason: e.reason, err: e.message }, 'the API server refused the status write');
      return;
    }
    this.stats.failures++;
    this.deps.log.warn({ object: `${this.what.kind}/${key}`, err: describeError(e) }, 'status write failed; retrying');
    this.due.add(key);
  }
}

interface ServiceWant {
  ingress: Ingress;
  /** cilium.io/IPAMRequestSatisfied; absent: the condition is left as it is. */
  condition?: IpamCondition;
}

/** Service status: `status.loadBalancer.ingress` and the IPAMRequestSatisfied condition (key `namespace/name`). */
export class ServiceStatusWriter extends StatusWriter<ServiceWant> {
  constructor(
    deps: WriterDeps & {
      /** The informer's copy of a Service (raw). */
      cached: (name: string, namespace: string) => KubeObject | undefined;
      /** Warning Events for a request that turned unsatisfied. */
      events?: EventRecorder;
    },
    opts: ServiceStatusOptions = serviceStatusDefaults,
  ) {
    super(
      {
        apiVersion: 'v1',
        kind: 'Service',
        cached: (key) => {
          const [namespace, name] = splitKey(key);
          return deps.cached(name, namespace);
        },
        path: (key) => {
          const [namespace, name] = splitKey(key);
          return `/api/v1/namespaces/${encodeURIComponent(namespace)}/services/${encodeURIComponent(name)}`;
        },
        shows: (obj, want) => sameIngress(ingressOf(obj), want.ingress) && (!want.condition || hasConditions(obj, [want.condition])),
        status: (obj, want) => ({
          ...((obj.status as Record<string, unknown>) ?? {}),
          loadBalancer: { ingress: want.ingress },
          ...(want.condition ? { conditions: withConditions(obj, [want.condition]) } : {}),
        }),
        written: (_key, before, want) => {
          const c = want.condition;
          if (!c || c.status !== 'False' || !deps.events) return;
          const prev = conditionsOf(before).find((h) => h.type === c.type);
          if (prev && prev.status === c.status && prev.reason === c.reason && prev.message === c.message) return;
          deps.events.warn({ ...before, apiVersion: 'v1', kind: 'Service' }, 'IPAMRequestNotSatisfied', `${c.reason}: ${c.message}`);
        },
      },
      deps,
      opts,
    );
  }

  /** The IPs (and, when given, the IPAMRequestSatisfied condition) every Service LB-IPAM looked at should show. */
  update(ingress: ReadonlyMap<string, readonly string[]>, conditions?: ReadonlyMap<string, IpamCondition>): void {
    const next = new Map<string, ServiceWant>();
    for (const [key, ips] of ingress) {
      const condition = conditions?.get(key);
      next.set(key, { ingress: ips.map((ip) => ({ ip, ipMode: 'VIP' })), ...(condition ? { condition } : {}) });
    }
    this.setDesired(next);
  }
}

/** CiliumLoadBalancerIPPool status conditions, as Cilium's operator writes them (key: the pool's name). */
export class PoolStatusWriter extends StatusWriter<readonly IpamCondition[]> {
  constructor(
    deps: WriterDeps & {
      cached: (name: string) => KubeObject | undefined;
      /** The pools' collection (`/apis/cilium.io/v2alpha1/ciliumloadbalancerippools`). */
      collection: string;
      apiVersion: string;
    },
    opts: ServiceStatusOptions = serviceStatusDefaults,
  ) {
    super(
      {
        apiVersion: deps.apiVersion,
        kind: 'CiliumLoadBalancerIPPool',
        cached: (key) => deps.cached(key),
        path: (key) => `${deps.collection}/${encodeURIComponent(key)}`,
        shows: (obj, want) => hasConditions(obj, want),
        status: (obj, want) => ({ ...((obj.status as Record<string, unknown>) ?? {}), conditions: withConditions(obj, want) }),
      },
      deps,
      opts,
    );
  }

  update(pools: ReadonlyMap<string, { readonly conditions: readonly IpamCondition[] }>): void {
    this.setDesired(new Map([...pools].map(([name, p]) => [name, p.conditions] as const)));
  }
}

function splitKey(key: string): [string, string] {
  const slash = key.indexOf('/');
  return [key.slice(0, slash), key.slice(slash + 1)];
}
