/**
 * Link-layer multicast memberships per interface, held by one receive-nothing
 * AF_PACKET socket per interface (PACKET_ADD_MEMBERSHIP). A Neighbor
 * Solicitation for a service address goes to its solicited-node group
 * (33:33:ff:XX:XX:XX); the kernel joins that group only for addresses
 * configured on the interface, and devices that filter multicast (macvlan, most
 * NICs) drop the frame before tc ingress sees it. Memberships are counted here
 * and end when the socket closes (the agent stops): a stopped agent's node
 * also stops answering once its liveness stamp ages out.
 */
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { parseMac } from '../net/addr.js';
import { PacketSocket } from './packet-socket.js';

/** The edge the L2 responder uses to receive solicitations for its addresses. */
export interface MulticastGroups {
  /** Counted: every join needs its own leave. */
  join(ifindex: number, mac: string): void;
  leave(ifindex: number, mac: string): void;
  /** Drops everything held on interfaces not in `current` (they are gone). */
  forgetAllBut(current: ReadonlySet<number>): void;
  /** "ifindex|mac" → count, for tests and status. */
  held(): ReadonlyMap<string, number>;
}

export class PacketMulticastGroups implements MulticastGroups, Disposable {
  private readonly sockets = new DisposableMap<number, PacketSocket>();
  private readonly counts = new Map<string, number>();

  join(ifindex: number, mac: string): void {
    const key = `${ifindex}|${mac}`;
    const n = this.counts.get(key) ?? 0;
    if (n === 0) {
      let socket = this.sockets.get(ifindex);
      if (!socket) {
        socket = PacketSocket.open(ifindex, 0);
        this.sockets.set(ifindex, socket);
      }
      socket.addMembership(parseMac(mac));
    }
    this.counts.set(key, n + 1);
  }

  leave(ifindex: number, mac: string): void {
    const key = `${ifindex}|${mac}`;
    const n = this.counts.get(key) ?? 0;
    if (n === 0) return;
    if (n > 1) {
      this.counts.set(key, n - 1);
      return;
    }
    this.counts.delete(key);
    this.sockets.get(ifindex)?.dropMembership(parseMac(mac));
  }

  forgetAllBut(current: ReadonlySet<number>): void {
    for (const ifindex of [...this.sockets.keys()]) {
      if (current.has(ifindex)) continue;
      this.sockets.deleteAndDispose(ifindex);
      for (const key of [...this.counts.keys()]) if (key.startsWith(`${ifindex}|`)) this.counts.delete(key);
    }
  }

  held(): ReadonlyMap<string, number> {
    return this.counts;
  }

  dispose(): void {
    this.sockets.dispose();
    this.counts.clear();
  }
}
