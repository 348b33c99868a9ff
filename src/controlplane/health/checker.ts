/**
 * Runs the health checks of this node's backends: one probe loop per target
 * (probe, update the rise/fall state, wait the interval), started and stopped
 * as the targets change, and a callback when a backend goes up or down so the
 * consumers (BGP's desired state) recompute. Probes go through the
 * BackendProber edge; the state machine is targets.ts's pure nextHealth.
 */
import type { Clock, TimerHandle } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import type { Logger } from '../../core/logger.js';
import { compareStrings } from '../../core/order.js';
import type { BackendProber } from '../../os/health-probe.js';
import { healthKey, initialHealth, nextHealth, type HealthState, type HealthTarget } from './targets.js';

export interface BackendHealthView {
  readonly service: string;
  readonly address: string;
  readonly port: number;
  readonly type: 'tcp' | 'http';
  readonly up: boolean;
  /** Wall-clock ms of the last transition (or of the first probe). */
  readonly since: number;
  readonly probes: number;
  readonly lastResult?: string;
}

interface Loop {
  target: HealthTarget;
  state: HealthState;
  since: number;
  probes: number;
  lastResult?: string;
  timer?: TimerHandle;
  stopped: boolean;
}

export class HealthChecker implements Disposable {
  private readonly loops = new Map<string, Loop>();
  private disposed = false;

  constructor(
    private readonly deps: { prober: BackendProber; clock: Clock; log: Logger; onChange: () => void },
  ) {}

  /** Starts loops for new targets, stops those gone; a target whose check changed restarts. */
  setTargets(targets: ReadonlyMap<string, HealthTarget>): void {
    if (this.disposed) return;
    for (const [key, loop] of this.loops) {
      const t = targets.get(key);
      if (!t || JSON.stringify(t.spec) !== JSON.stringify(loop.target.spec)) {
        this.stop(loop);
        this.loops.delete(key);
      }
    }
    for (const [key, target] of targets) {
      if (this.loops.has(key)) continue;
      const loop: Loop = { target, state: initialHealth, since: this.deps.clock.now(), probes: 0, stopped: false };
      this.loops.set(key, loop);
      void this.run(loop);
    }
  }

  /** Backends ("service|address") that are down: not ready, whatever their EndpointSlice says. */
  down(): ReadonlySet<string> {
    const out = new Set<string>();
    for (const l of this.loops.values()) if (!l.state.up) out.add(healthKey(l.target.service, l.target.address));
    return out;
  }

  view(): BackendHealthView[] {
    return [...this.loops.values()]
      .map((l) => ({
        service: l.target.service,
        address: l.target.address,
        port: l.target.port,
        type: l.target.spec.type,
        up: l.state.up,
        since: l.since,
        probes: l.probes,
        ...(l.lastResult !== undefined ? { lastResult: l.lastResult } : {}),
      }))
      // Service, then address, then port (not the joined text: "default/a1" + "1.0.0.1" sorted before "default/a" + "2.0.0.1").
      .sort((a, b) => compareStrings(a.service, b.service) || compareStrings(a.address, b.address) || a.port - b.port);
  }

  private async run(loop: Loop): Promise<void> {
    const { target } = loop;
    const { spec } = target;
    const result = await this.deps.prober
      .probe({ type: spec.type, address: target.address, port: target.port, path: spec.path, timeoutMs: spec.timeoutMs })
      .catch((e: unknown) => ({ ok: false, detail: String(e) }));
    if (loop.stopped || this.disposed) return;
    loop.probes++;
    loop.lastResult = result.detail;
    const next = nextHealth(loop.state, result.ok, spec.rise, spec.fall);
    const changed = next.up !== loop.state.up;
    loop.state = next;
    if (changed) {
      loop.since = this.deps.clock.now();
      this.deps.log.info({ service: target.service, backend: `${target.address}:${target.port}`, up: next.up, result: result.detail }, next.up ? 'backend passed its health check: ready' : 'backend failed its health check: not ready');
      this.deps.onChange();
    }
    loop.timer = this.deps.clock.setTimeout(() => void this.run(loop), spec.intervalMs);
  }

  private stop(loop: Loop): void {
    loop.stopped = true;
    loop.timer?.cancel();
  }

  dispose(): void {
    this.disposed = true;
    for (const l of this.loops.values()) this.stop(l);
    this.loops.clear();
  }
}
