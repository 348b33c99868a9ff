/**
 * An ownership backend a control-plane test drives: it owns exactly what the
 * test grants (`own`), among the candidates it was given; optionally each
 * setCandidates takes manual-clock time or fails once, as a slow or broken
 * backend would.
 */
import type { OwnershipBackend, OwnershipView } from '../../src/controlplane/ownership/backend.js';
import type { ManualClock } from './manual-clock.js';

export class ScriptedOwnership implements OwnershipBackend {
  readonly kind = 'etcd' as const;
  candidates: ReadonlyMap<string, readonly string[]> = new Map();
  affinity: ReadonlyMap<string, string> = new Map();
  /** Milliseconds of the manual clock each setCandidates takes (needs the clock). */
  passMs = 0;
  /** Thrown by the next setCandidates, once. */
  failNext: Error | undefined;
  private owned = new Set<string>();
  private onChange: (view: OwnershipView) => void | Promise<void> = () => {};
  constructor(private readonly clock?: ManualClock) {}

  async start(onChange: (view: OwnershipView) => void | Promise<void>): Promise<void> {
    this.onChange = onChange;
  }
  setCandidates(candidates: ReadonlyMap<string, readonly string[]>, affinity: ReadonlyMap<string, string> = new Map()): void {
    if (this.passMs) this.clock?.advance(this.passMs);
    const failure = this.failNext;
    this.failNext = undefined;
    if (failure) throw failure;
    this.candidates = new Map(candidates);
    this.affinity = new Map(affinity);
  }
  /** Publishes a new owned set, as a backend does; returns what onChange returned (awaited before giving an IP away). */
  own(...ips: string[]): Promise<void> {
    this.owned = new Set(ips);
    return Promise.resolve(this.onChange(this.view()));
  }
  view(): OwnershipView {
    return { owned: new Set(this.owned), owners: new Map([...this.owned].map((ip) => [ip, 'node-a'])) };
  }
  async release(): Promise<void> {}
  dispose(): void {}
}
