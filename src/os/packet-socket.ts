/**
 * AF_PACKET sockets bound to one interface: raw Ethernet frames out (gratuitous
 * ARP works on interfaces with no IPv4 address, Cilium #31691 / #41641) and in
 * (benchmarks, tools). Non-blocking; receiving is driven by libuv's poll.
 */
import koffi from 'koffi';
import type { Disposable } from '../core/disposable.js';
import { HeraldError } from '../core/errors.js';
import { DROP_ALL, encodeFilter, type BpfInsn } from '../net/socket-filter.js';
import { errnoName } from './libbpf.js';

export const ETH_P_ALL = 0x0003;
export const ETH_P_ARP = 0x0806;
export const ETH_P_IPV6 = 0x86dd;
const AF_PACKET = 17;
const SOCK_RAW = 3;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const SOL_SOCKET = 1;
const SO_ATTACH_FILTER = 26;
export const PACKET_OUTGOING = 4;
const SOL_PACKET = 263;
const PACKET_ADD_MEMBERSHIP = 1;
const PACKET_DROP_MEMBERSHIP = 2;
const PACKET_MR_MULTICAST = 0;
/** sizeof(struct sockaddr_ll): family 2, protocol 2, ifindex 4, hatype 2, pkttype 1, halen 1, addr 8. */
const SOCKADDR_LL_SIZE = 20;

interface SockaddrLl {
  sll_family: number;
  sll_protocol: number;
  sll_ifindex: number;
  sll_hatype: number;
  sll_pkttype: number;
  sll_halen: number;
  sll_addr: number[];
}

let libc: ReturnType<typeof bindLibc> | undefined;
function bindLibc() {
  const lib = koffi.load('libc.so.6');
  const sockaddrLl = koffi.struct('sockaddr_ll', {
    sll_family: 'uint16_t',
    sll_protocol: 'uint16_be_t', // koffi byte-swaps to network order
    sll_ifindex: 'int',
    sll_hatype: 'uint16_t',
    sll_pkttype: 'uint8_t',
    sll_halen: 'uint8_t',
    sll_addr: koffi.array('uint8_t', 8),
  });
  const packetMreq = koffi.struct('packet_mreq', {
    mr_ifindex: 'int',
    mr_type: 'uint16_t',
    mr_alen: 'uint16_t',
    mr_address: koffi.array('uint8_t', 8),
  });
  const sockFprog = koffi.struct('sock_fprog', { len: 'uint16_t', filter: 'void *' });
  if (koffi.sizeof(sockaddrLl) !== SOCKADDR_LL_SIZE) throw new Error(`sockaddr_ll is ${koffi.sizeof(sockaddrLl)} bytes, expected ${SOCKADDR_LL_SIZE}`);
  return {
    sockaddrLlSize: koffi.sizeof(sockaddrLl),
    socket: lib.func('int socket(int domain, int type, int protocol)'),
    bind: lib.func('int bind(int fd, const sockaddr_ll *addr, uint32_t addrlen)'),
    // The address as raw bytes: each socket keeps its sockaddr_ll in a Buffer and
    // rewrites only the destination per frame (no object, array or struct encoding per send).
    sendto: lib.func('intptr_t sendto(int fd, const void *buf, size_t len, int flags, const void *addr, uint32_t addrlen)'),
    recvfrom: lib.func(
      'intptr_t recvfrom(int fd, _Out_ void *buf, size_t len, int flags, _Out_ sockaddr_ll *addr, _Inout_ uint32_t *addrlen)',
    ),
    // struct sock_fprog { unsigned short len; struct sock_filter *filter; }
    setsockoptFilter: lib.func('int setsockopt(int fd, int level, int name, const sock_fprog *val, uint32_t len)'),
    sockFprogSize: koffi.sizeof(sockFprog),
    setsockoptMreq: lib.func('int setsockopt(int fd, int level, int name, const packet_mreq *val, uint32_t len)'),
    packetMreqSize: koffi.sizeof(packetMreq),
    close: lib.func('int close(int fd)'),
    strerror: lib.func('const char *strerror(int errnum)'),
  };
}
function c() {
  libc ??= bindLibc();
  return libc;
}

function sysError(op: string): HeraldError & { errno: number } {
  const errno = koffi.errno();
  const e = new HeraldError('HERALD_PACKET_SOCKET', `${op}: ${errnoName(errno)} (${c().strerror(errno)})`);
  return Object.assign(e, { errno });
}

const htons = (x: number) => ((x & 0xff) << 8) | ((x >> 8) & 0xff);

function sockaddr(ifindex: number, ethType: number, mac: Buffer | undefined): SockaddrLl {
  const addr = [0, 0, 0, 0, 0, 0, 0, 0];
  if (mac) for (let i = 0; i < 6; i++) addr[i] = mac[i] ?? 0;
  return {
    sll_family: AF_PACKET,
    sll_protocol: ethType,
    sll_ifindex: ifindex,
    sll_hatype: 0,
    sll_pkttype: 0,
    sll_halen: mac ? 6 : 0,
    sll_addr: addr,
  };
}

export interface ReceivedFrame {
  frame: Buffer;
  /** PACKET_HOST 0, BROADCAST 1, MULTICAST 2, OTHERHOST 3, OUTGOING 4. */
  packetType: number;
}

export class PacketSocket implements Disposable {
  private closed = false;
  private poller: { close(): void } | undefined;
  private readonly rxBuf = Buffer.alloc(65536);
  /** struct sockaddr_ll for sendto, filled once; send() writes the protocol and destination MAC. */
  private readonly txAddr = Buffer.alloc(SOCKADDR_LL_SIZE);

  private constructor(
    readonly ifindex: number,
    readonly ethType: number,
    private readonly fd: number,
  ) {
    this.txAddr.writeUInt16LE(AF_PACKET, 0); // sll_family (host order; x86 and arm64 are little-endian)
    this.txAddr.writeInt32LE(ifindex, 4); // sll_ifindex
    this.txAddr.writeUInt8(6, 11); // sll_halen
  }

  /**
   * Opens a socket in the calling thread's network namespace. With `filter`,
   * the socket never delivers a frame the filter rejects: the kernel starts
   * queueing frames the moment socket() returns, so a drop-all filter goes on
   * first, whatever slipped in before it is drained, and then the real filter
   * replaces it. `filter: DROP_ALL` makes a send-only socket (the kernel then
   * queues nothing for it). `ethType` 0 receives nothing either: a socket only
   * to send (the frame's own EtherType is then used) or to hold multicast
   * memberships.
   */
  static open(ifindex: number, ethType: number, opts: { filter?: readonly BpfInsn[] } = {}): PacketSocket {
    const lib = c();
    const fd = lib.socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ethType)) as number;
    if (fd < 0) throw sysError('socket(AF_PACKET)');
    const sock = new PacketSocket(ifindex, ethType, fd);
    try {
      if (opts.filter) sock.setFilter(DROP_ALL);
      if ((lib.bind(fd, sockaddr(ifindex, ethType, undefined), lib.sockaddrLlSize) as number) < 0) {
        throw sysError(`bind(AF_PACKET, ifindex ${ifindex})`);
      }
      if (opts.filter) {
        while (sock.tryReceive()) sock.drained++;
        if (opts.filter !== DROP_ALL) sock.setFilter(opts.filter);
      }
    } catch (e) {
      sock.dispose();
      throw e;
    }
    return sock;
  }

  /** Frames read and thrown away while the first filter went on (for tests). */
  drained = 0;

  /**
   * Attaches a classic BPF program, atomically replacing the one before (the
   * kernel swaps the pointer under RCU: no frame sees "no filter" in between).
   */
  setFilter(prog: readonly BpfInsn[]): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', 'packet socket is closed');
    const lib = c();
    const code = encodeFilter(prog);
    const r = lib.setsockoptFilter(this.fd, SOL_SOCKET, SO_ATTACH_FILTER, { len: prog.length, filter: code }, lib.sockFprogSize) as number;
    if (r < 0) throw sysError(`setsockopt(SO_ATTACH_FILTER, ${prog.length} instructions)`);
  }

  /** Sends one complete Ethernet frame (header included). Throws on failure. */
  send(frame: Buffer): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', 'packet socket is closed');
    const lib = c();
    const ethType = this.ethType !== 0 ? this.ethType : frame.length >= 14 ? frame.readUInt16BE(12) : 0;
    const addr = this.txAddr;
    addr.writeUInt16BE(ethType, 2); // sll_protocol, network order
    frame.copy(addr, 12, 0, 6); // sll_addr: the frame's destination MAC
    if (frame.length < 6) addr.fill(0, 12 + frame.length, 18);
    const n = Number(lib.sendto(this.fd, frame, frame.length, 0, addr, SOCKADDR_LL_SIZE));
    if (n < 0) throw sysError(`sendto(ifindex ${this.ifindex})`);
  }

  /**
   * Makes the interface receive frames sent to this multicast MAC (the kernel
   * counts memberships; they end with the socket). Interfaces that filter
   * multicast (macvlan, NICs) otherwise drop them before tc ingress.
   */
  addMembership(mac: Buffer): void {
    this.membership(PACKET_ADD_MEMBERSHIP, mac, 'PACKET_ADD_MEMBERSHIP');
  }

  dropMembership(mac: Buffer): void {
    this.membership(PACKET_DROP_MEMBERSHIP, mac, 'PACKET_DROP_MEMBERSHIP');
  }

  private membership(op: number, mac: Buffer, name: string): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', 'packet socket is closed');
    const lib = c();
    const address = [0, 0, 0, 0, 0, 0, 0, 0];
    for (let i = 0; i < 6; i++) address[i] = mac[i] ?? 0;
    const mreq = { mr_ifindex: this.ifindex, mr_type: PACKET_MR_MULTICAST, mr_alen: 6, mr_address: address };
    if ((lib.setsockoptMreq(this.fd, SOL_PACKET, op, mreq, lib.packetMreqSize) as number) < 0) throw sysError(`${name}(ifindex ${this.ifindex})`);
  }

  /** One frame if one is queued, else undefined (never blocks). */
  tryReceive(): ReceivedFrame | undefined {
    if (this.closed) return undefined;
    const lib = c();
    const from: Partial<SockaddrLl> = {};
    const len = [lib.sockaddrLlSize];
    const n = Number(lib.recvfrom(this.fd, this.rxBuf, this.rxBuf.length, 0, from, len));
    if (n < 0) {
      if (koffi.errno() === koffi.os.errno.EAGAIN) return undefined;
      throw sysError('recvfrom');
    }
    return { frame: Buffer.from(this.rxBuf.subarray(0, n)), packetType: from.sll_pkttype ?? 0 };
  }

  /** Calls back for every received frame until disposed. */
  onFrames(cb: (rx: ReceivedFrame) => void): void {
    if (this.poller) throw new Error('onFrames already set');
    this.poller = koffi.node.poll(this.fd, { readable: true } as never, () => {
      for (;;) {
        const rx = this.tryReceive();
        if (!rx) break;
        cb(rx);
      }
    }) as unknown as { close(): void };
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    this.poller?.close();
    c().close(this.fd);
  }
}
