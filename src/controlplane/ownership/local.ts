/**
 * Local ownership (one node, the embedded default): the node owns every IP it
 * qualifies for. Releasing on stop changes nothing in the datapath: with no
 * other node to take over, a restarting agent keeps answering throughout.
 */
import type { OwnershipBackend, OwnershipView } from './backend.js';

export class LocalOwnership implements OwnershipBackend {
  readonly kind = 'local' as const;
  private owned: ReadonlySet<string> = new Set();
  private onChange: ((view: OwnershipView) => void | Promise<void>) | undefined;

  constructor(private readonly nodeName: string) {}

  async start(onChange: (view: OwnershipView) => void | Promise<void>): Promise<void> {
    this.onChange = onChange;
  }

  setCandidates(candidates: ReadonlyMap<string, readonly string[]>): void {
    const ips = new Set(candidates.keys());
    const same = ips.size === this.owned.size && [...ips].every((ip) => this.owned.has(ip));
    if (same) return;
    this.owned = new Set(ips);
    void this.onChange?.(this.view());
  }

  view(): OwnershipView {
    return { owned: this.owned, owners: new Map([...this.owned].map((ip) => [ip, this.nodeName])) };
  }

  async release(): Promise<void> {}

  dispose(): void {
    this.onChange = undefined;
  }
}
