/**
 * Kubernetes Events (core/v1) for what users should see in
 * `kubectl describe`: LB-IPAM requests that cannot be satisfied, objects
 * herald refused (the precise errors), and ownership moves (which node now
 * announces an IP, and why) — see KubeIntentEvents below.
 *
 * Rate-limited twice, so a flapping object cannot flood the API server: the
 * same (object, reason, message) is not repeated within `repeatMs`, and all
 * Events share a token bucket (`qps`, `burst`); what the bucket refuses is
 * dropped and counted (an Event is a hint, the condition is the record).
 */
import { monotonicMs, systemClock, type Clock } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { ManifestDiagnostic } from '../../intent/diagnostics.js';
import type { KubeClient, KubeObject } from '../../intent/sources/kube-client.js';
import type { KubeResource } from '../../intent/sources/kubernetes.js';
import { CLUSTER_SEGMENT } from '../../intent/sources/stored-manifest.js';
import { describeFence, describeMove, type FenceRecord, type OwnershipMove } from './lease-ownership.js';

export interface EventOptions {
  readonly qps: number;
  readonly burst: number;
  readonly repeatMs: number;
}

export const eventDefaults: EventOptions = { qps: 1, burst: 20, repeatMs: 5 * 60_000 };

/** Events longer than this are cut (the API server takes up to 1 KiB in a note). */
const MAX_MESSAGE = 1000;

export class EventRecorder {
  private tokens: number;
  private tokensAt: number;
  private readonly last = new Map<string, number>();
  readonly stats = { sent: 0, repeats: 0, dropped: 0, failures: 0 };

  constructor(
    private readonly deps: { client: KubeClient; node: string; log: Logger; clock?: Clock },
    private readonly opts: EventOptions = eventDefaults,
  ) {
    this.tokens = opts.burst;
    this.tokensAt = this.now();
  }

  private now(): number {
    return monotonicMs(this.deps.clock ?? systemClock);
  }

  /** A Warning Event on `obj` (sent in the background; never throws). */
  warn(obj: KubeObject, reason: string, message: string): void {
    this.record(obj, 'Warning', reason, message);
  }

  /** An Event on `obj` (sent in the background; never throws). */
  record(obj: KubeObject, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const text = message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 1)}…` : message;
    const ns = obj.metadata.namespace ?? 'default'; // cluster-scoped objects' Events live in default, as kubectl looks for them
    const key = `${obj.kind}\u0000${ns}\u0000${obj.metadata.name}\u0000${reason}\u0000${text}`;
    const now = this.now();
    const last = this.last.get(key);
    if (last !== undefined && now - last < this.opts.repeatMs) {
      this.stats.repeats++;
      return;
    }
    this.tokens = Math.min(this.opts.burst, this.tokens + ((now - this.tokensAt) / 1000) * this.opts.qps);
    this.tokensAt = now;
    if (this.tokens < 1) {
      this.stats.dropped++;
      return;
    }
    this.tokens -= 1;
    this.last.set(key, now);
    if (this.last.size > 10_000) for (const [k, at] of this.last) if (now - at >= this.opts.repeatMs) this.last.delete(k);
    const stamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const event = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${obj.metadata.name}.`, namespace: ns },
      involvedObject: {
        apiVersion: obj.apiVersion,
        kind: obj.kind,
        name: obj.metadata.name,
        ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}),
        ...(typeof obj.metadata.uid === 'string' ? { uid: obj.metadata.uid } : {}),
      },
      type,
      reason,
      message: text,
      source: { component: 'herald', host: this.deps.node },
      reportingComponent: 'herald',
      reportingInstance: this.deps.node,
      firstTimestamp: stamp,
      lastTimestamp: stamp,
      count: 1,
    };
    void this.deps.client.request('POST', `/api/v1/namespaces/${encodeURIComponent(ns)}/events`, event).then(
      () => void this.stats.sent++,
      (e: unknown) => {
        this.stats.failures++;
        this.deps.log.warn({ object: `${obj.kind}/${obj.metadata.name}`, reason, err: describeError(e) }, 'kubernetes event not recorded');
      },
    );
  }
}

/** Reasons of the Events below (kubectl describe's Reason column). */
export const EVENT_REASONS = { moved: 'IPOwnerChanged', rejected: 'InvalidIntent', warning: 'IntentWarning', fenced: 'OwnerFenced' } as const;

/**
 * Events about intent and ownership, on the objects users look at:
 *
 * - `moved`: an IP Lease this node wrote to a new holder (LeaseOwnership's
 *   onMove: the writer knows the cause) is a Normal Event `IPOwnerChanged`
 *   on every Service the IP is announced for ("node-b now announces
 *   192.0.2.10: took it over from node-a, whose node Lease expired").
 * - `fenced`: this node fenced out an owner that went silent on the wire
 *   while its node Lease still ran (LeaseOwnership's onFence) — a Warning
 *   Event `OwnerFenced` on every Service of every IP it held, with the cause
 *   (the `IPOwnerChanged` of each takeover follows from whoever wins it).
 * - `rejected`: a change the intent source refused is a Warning Event
 *   `InvalidIntent` on each refused object, with every error of that object
 *   (field path and message), sent by the LB-IPAM leader only (every node
 *   reads the same objects and refuses them alike).
 *
 * - `warned`: an accepted object herald applies with less effect than written
 *   for a reason outside it (a CiliumNetworkPolicy naming a CiliumCIDRGroup
 *   that does not exist) is a Warning Event `IntentWarning` on it, from the
 *   LB-IPAM leader only, like `rejected`.
 *
 * All go through the EventRecorder's limits (the same Event not repeated
 * within 5 min; one token bucket for all), so a flapping object or a crash
 * moving a thousand IPs cannot flood the API server.
 */
export class KubeIntentEvents {
  constructor(
    private readonly deps: {
      events: EventRecorder;
      /** The Services (`namespace/name`) an IP is announced for (the control plane's candidates). */
      servicesOf: (ip: string) => readonly string[];
      /** An informer's cached object (raw). */
      cached: (kind: string, name: string, namespace?: string) => KubeObject | undefined;
      resources: readonly KubeResource[];
      /** Rejections are reported by one node (the LB-IPAM leader). */
      active: () => boolean;
      clock?: Clock;
    },
  ) {}

  moved(move: OwnershipMove): void {
    for (const key of this.deps.servicesOf(move.ip)) {
      const slash = key.indexOf('/');
      const svc = this.deps.cached('Service', key.slice(slash + 1), key.slice(0, slash));
      if (svc) this.deps.events.record({ ...svc, apiVersion: 'v1', kind: 'Service' }, 'Normal', EVENT_REASONS.moved, describeMove(move));
    }
  }

  fenced(fence: FenceRecord): void {
    const seen = new Set<string>();
    for (const ip of fence.ips.includes(fence.silentIp) ? fence.ips : [fence.silentIp, ...fence.ips]) {
      for (const key of this.deps.servicesOf(ip)) {
        if (seen.has(key)) continue;
        seen.add(key);
        const slash = key.indexOf('/');
        const svc = this.deps.cached('Service', key.slice(slash + 1), key.slice(0, slash));
        if (svc) this.deps.events.record({ ...svc, apiVersion: 'v1', kind: 'Service' }, 'Warning', EVENT_REASONS.fenced, describeFence(fence));
      }
    }
  }

  rejected(errors: readonly ManifestDiagnostic[]): void {
    if (!this.deps.active()) return;
    const byObject = new Map<string, ManifestDiagnostic[]>();
    for (const e of errors) {
      const list = byObject.get(e.file);
      if (list) list.push(e);
      else byObject.set(e.file, [e]);
    }
    for (const [key, list] of byObject) {
      const ref = this.objectOf(key);
      if (!ref) continue;
      const { resource, obj } = ref;
      const text = list.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join('; ');
      const message = `herald refused this object (the intent in force before the change stays until it is fixed): ${text}`;
      this.deps.events.record({ ...obj, apiVersion: resource.apiVersion, kind: resource.kind }, 'Warning', EVENT_REASONS.rejected, message);
    }
  }

  warned(w: { kind: string; name: string; namespace?: string; message: string }): void {
    if (!this.deps.active()) return;
    const resource = this.deps.resources.find((r) => r.kind === w.kind);
    const obj = resource && this.deps.cached(w.kind, w.name, w.namespace);
    if (!resource || !obj) return;
    this.deps.events.record({ ...obj, apiVersion: resource.apiVersion, kind: resource.kind }, 'Warning', EVENT_REASONS.warning, w.message);
  }

  /** `kubernetes/<Kind>/<namespace or _cluster>/<name>` → the cached object. */
  private objectOf(key: string): { resource: KubeResource; obj: KubeObject } | undefined {
    const parts = key.split('/');
    if (parts.length !== 4 || parts[0] !== 'kubernetes') return undefined;
    const [, kind, ns, name] = parts as [string, string, string, string];
    const resource = this.deps.resources.find((r) => r.kind === kind);
    if (!resource) return undefined;
    const obj = this.deps.cached(kind, name, ns === CLUSTER_SEGMENT ? undefined : ns);
    return obj ? { resource, obj } : undefined;
  }

}
