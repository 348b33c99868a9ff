/**
 * Kubernetes Events (core/v1) for what users should see in
 * `kubectl describe`: LB-IPAM requests that cannot be satisfied.
 *
 * Rate-limited twice, so a flapping object cannot flood the API server: the
 * same (object, reason, message) is not repeated within `repeatMs`, and all
 * Events share a token bucket (`qps`, `burst`); what the bucket refuses is
 * dropped and counted (an Event is a hint, the condition is the record).
 */
import { monotonicMs, systemClock, type Clock } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { KubeClient, KubeObject } from '../../intent/sources/kube-client.js';

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
      type: 'Warning',
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
