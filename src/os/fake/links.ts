/** In-memory Links with the real one's semantics: lookups by name, change notifications. */
import type { Disposable } from '../../core/disposable.js';
import type { LinkInfo, Links } from '../links.js';

export class FakeLinks implements Links {
  private readonly byNameMap = new Map<string, LinkInfo>();
  private readonly listeners = new Set<() => void>();
  private nextIndex = 2;
  lookups = 0;

  /** Adds (or recreates) an Ethernet link; a recreated link gets a new ifindex, as in the kernel. */
  add(name: string, opts: Partial<LinkInfo> = {}): LinkInfo {
    const link: LinkInfo = {
      name,
      ifindex: opts.ifindex ?? this.nextIndex++,
      mac: opts.mac ?? `02:00:5e:00:53:${(this.nextIndex & 0xff).toString(16).padStart(2, '0')}`,
      ethernet: opts.ethernet ?? true,
      up: opts.up ?? true,
      carrier: opts.carrier ?? true,
      arp: opts.arp ?? true,
    };
    this.byNameMap.set(name, link);
    this.notify();
    return link;
  }

  remove(name: string): void {
    this.byNameMap.delete(name);
    this.notify();
  }

  private notify(): void {
    for (const l of this.listeners) l();
  }

  async list(): Promise<LinkInfo[]> {
    return [...this.byNameMap.values()];
  }

  async byName(name: string): Promise<LinkInfo | undefined> {
    this.lookups++;
    return this.byNameMap.get(name);
  }

  subscribe(onChange: () => void): Disposable {
    this.listeners.add(onChange);
    return { dispose: () => this.listeners.delete(onChange) };
  }
}
