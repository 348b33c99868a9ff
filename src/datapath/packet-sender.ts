/**
 * FrameSender over AF_PACKET: one socket per interface, opened on first use.
 * The sockets receive nothing (protocol 0); each frame goes out with its own
 * EtherType (ARP, or IPv6 for neighbor advertisements).
 */
import { DisposableMap, type Disposable } from '../core/disposable.js';
import { PacketSocket } from '../os/packet-socket.js';
import type { FrameSender } from './garp.js';

/** A non-blocking send refused for now: the send buffer is full of frames the interface has not sent yet. */
const EAGAIN = 11;
/** The interface's queue (qdisc) dropped the frame: full. */
const ENOBUFS = 105;

export class PacketFrameSender implements FrameSender, Disposable {
  private readonly sockets = new DisposableMap<number, PacketSocket>();

  /** False when the socket's send buffer or the interface's queue is full (EAGAIN, ENOBUFS): try again shortly. */
  send(ifindex: number, frame: Buffer): boolean {
    let socket = this.sockets.get(ifindex);
    if (!socket) {
      // Send-only: bound to protocol 0 the kernel queues nothing for it (no
      // filter needed, unlike an ARP-bound socket, which would get every ARP).
      socket = PacketSocket.open(ifindex, 0);
      this.sockets.set(ifindex, socket);
    }
    try {
      socket.send(frame);
      return true;
    } catch (e) {
      const errno = (e as { errno?: number }).errno;
      if (errno === EAGAIN || errno === ENOBUFS) return false;
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
