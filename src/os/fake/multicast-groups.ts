/** In-memory MulticastGroups with the real one's counting semantics. */
import type { MulticastGroups } from '../multicast-groups.js';

export class FakeMulticastGroups implements MulticastGroups {
  private readonly counts = new Map<string, number>();

  join(ifindex: number, mac: string): void {
    const key = `${ifindex}|${mac}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }

  leave(ifindex: number, mac: string): void {
    const key = `${ifindex}|${mac}`;
    const n = this.counts.get(key) ?? 0;
    if (n <= 1) this.counts.delete(key);
    else this.counts.set(key, n - 1);
  }

  forgetAllBut(current: ReadonlySet<number>): void {
    for (const key of [...this.counts.keys()]) if (!current.has(Number(key.split('|')[0]))) this.counts.delete(key);
  }

  held(): ReadonlyMap<string, number> {
    return this.counts;
  }
}
