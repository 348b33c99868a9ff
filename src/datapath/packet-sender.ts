/**
 * FrameSender over AF_PACKET: one socket per interface, opened on first use.
 * The sockets receive nothing (protocol 0); each frame goes out with its own
 * EtherType (ARP, or IPv6 for neighbor advertisements).
 */
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { PacketSocket } from '../os/packet-socket.js';
import type { FrameSender } from './garp.js';

export class PacketFrameSender implements FrameSender, Disposable {
  private readonly sockets = new DisposableMap<number, PacketSocket>();

  send(ifindex: number, frame: Buffer): void {
    let socket = this.sockets.get(ifindex);
    if (!socket) {
      // Send-only: bound to protocol 0 the kernel queues nothing for it (no
      // filter needed, unlike an ARP-bound socket, which would get every ARP).
      socket = PacketSocket.open(ifindex, 0);
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
