/** FrameSender over AF_PACKET: one socket per interface, opened on first use. */
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { DROP_ALL } from '../net/socket-filter.js';
import { ETH_P_ARP, PacketSocket } from '../os/packet-socket.js';
import type { FrameSender } from './garp.js';

export class PacketFrameSender implements FrameSender, Disposable {
  private readonly sockets = new DisposableMap<number, PacketSocket>();

  send(ifindex: number, frame: Buffer): void {
    let socket = this.sockets.get(ifindex);
    if (!socket) {
      // Send-only: a drop-all filter keeps the kernel from queueing every ARP on the segment for it.
      socket = PacketSocket.open(ifindex, ETH_P_ARP, { filter: DROP_ALL });
      this.sockets.set(ifindex, socket);
    }
    try {
      socket.send(frame);
    } catch (e) {
      // The interface may have been recreated under a new ifindex: reopen next time.
      this.sockets.deleteAndDispose(ifindex);
      throw e;
    }
  }

  /** Forget the socket of an interface that went away. */
  forget(ifindex: number): void {
    this.sockets.deleteAndDispose(ifindex);
  }

  dispose(): void {
    this.sockets.dispose();
  }
}
