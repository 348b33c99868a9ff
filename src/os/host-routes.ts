/**
 * Host routes for BGP-advertised service IPs (`ip/32`, `ip/128` in the main
 * table, protocol HERALD_ROUTE_PROTO): one next hop is a plain `via` route,
 * several are one RTA_MULTIPATH route (`nexthop via … nexthop via …`) so that
 * the kernel spreads flows across local backends per flow hash. BIRD's
 * `kernel` protocol imports exactly these routes by their protocol number.
 *
 * Written over one long-lived rtnetlink socket (the `netlink` package's raw
 * socket, as os/links.ts): the RTM_NEWROUTE / RTM_DELROUTE messages are
 * encoded here — a few dozen bytes each — and many of them go in one
 * sendmsg, as `ip -batch` does: a failing message is answered with its error,
 * the last of each sendmsg with an ack.
 * No process per change (a spawn cost the agent more CPU than the rest of a
 * readiness change at 10,000 routes). Replace is idempotent; deleting a
 * route that is gone, or whose interface vanished, is success.
 */
import { getSystemErrorMap } from 'node:util';
import { RawNetlinkSocket } from 'netlink/dist/raw.js';
import { formatIpBytes, writeIp } from '../core/addr.js';
import type { Disposable } from '../core/disposable.js';
import { HeraldError } from '../core/errors.js';
import { HERALD_ROUTE_PROTO } from './local-routes.js';
import { inNetns } from './netns.js';

export interface HostRoute {
  /** `ip/32` or `ip/128`. */
  readonly prefix: string;
  /** Gateway addresses, sorted. */
  readonly nextHops: readonly string[];
}

export interface HostRoutes {
  /** Every route herald owns (its protocol number, main table), both families. */
  list(): Promise<HostRoute[]>;
  /** Installs or replaces the route for `prefix` with exactly `nextHops` (at least one). */
  replace(route: HostRoute): Promise<void>;
  /** Removes the route for `prefix`; a missing route is success. */
  del(prefix: string): Promise<void>;
  /** replace() for many routes in one rtnetlink session: one outcome per route (undefined = done, else its error). */
  replaceMany(routes: readonly HostRoute[]): Promise<(Error | undefined)[]>;
  /** del() for many prefixes at once, with the same outcomes. */
  delMany(prefixes: readonly string[]): Promise<(Error | undefined)[]>;
}

const NETLINK_ROUTE = 0;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const RTM_NEWROUTE = 24;
const RTM_DELROUTE = 25;
const RTM_GETROUTE = 26;
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_DUMP = 0x300;
const NLM_F_REPLACE = 0x100;
const NLM_F_CREATE = 0x400;
const AF_UNSPEC = 0;
const AF_INET = 2;
const AF_INET6 = 10;
const RT_TABLE_MAIN = 254;
const RT_SCOPE_UNIVERSE = 0;
const RT_SCOPE_NOWHERE = 255;
const RTN_UNICAST = 1;
const RTA_DST = 1;
const RTA_GATEWAY = 5;
const RTA_MULTIPATH = 9;
const RTA_TABLE = 15;
/** "Already gone": no such route (ESRCH), its device vanished (ENODEV). */
const GONE = new Set([3, 19]);
/**
 * Messages per sendmsg. Only the last asks for an ack: the kernel handles a
 * sendmsg's messages in order and answers a failing one with an error
 * whether asked or not, so the last one's ack means every earlier outcome
 * has arrived — and even a chunk that fails whole fits the receive buffer.
 */
const CHUNK = 256;

const align4 = (n: number) => (n + 3) & ~3;

const addrLen = (ip: string) => (ip.includes(':') ? 16 : 4);

/** One route request: RTM_NEWROUTE (replace) with its next hops, or RTM_DELROUTE without. */
interface RouteMsg {
  readonly type: number;
  readonly prefix: string;
  readonly nextHops: readonly string[];
}

/** Bytes of the message: nlmsghdr, rtmsg, RTA_DST, then RTA_GATEWAY or RTA_MULTIPATH (rtnexthop + RTA_GATEWAY each). */
function routeMsgSize(m: RouteMsg): number {
  const slash = m.prefix.lastIndexOf('/');
  let n = 16 + 12 + 4 + addrLen(slash < 0 ? m.prefix : m.prefix.slice(0, slash));
  if (m.nextHops.length === 1) n += 4 + addrLen(m.nextHops[0]!);
  else if (m.nextHops.length > 1) {
    n += 4;
    for (const h of m.nextHops) n += 8 + 4 + addrLen(h);
  }
  return n;
}

/** An address attribute at `o` (4 or 16 bytes: already aligned); returns the offset after it. */
function writeAddrAttr(b: Buffer, o: number, type: number, ip: string): number {
  const n = addrLen(ip);
  b.writeUInt16LE(4 + n, o);
  b.writeUInt16LE(type, o + 2);
  writeIp(ip, b, o + 4);
  return o + 4 + n;
}

/**
 * Writes one route message at `o` of a zeroed buffer (addresses in place:
 * core/addr writeIp; no closure or buffer per message — at 10,000 routes
 * those were a fifth of the agent's CPU). Returns the offset after it.
 */
function writeRouteMsg(b: Buffer, o: number, seq: number, flags: number, m: RouteMsg): number {
  const len = routeMsgSize(m);
  const slash = m.prefix.lastIndexOf('/');
  const dst = slash < 0 ? m.prefix : m.prefix.slice(0, slash);
  const dstLen = addrLen(dst);
  b.writeUInt32LE(len, o);
  b.writeUInt16LE(m.type, o + 4);
  b.writeUInt16LE(flags, o + 6);
  b.writeUInt32LE(seq, o + 8);
  // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32)
  b[o + 16] = dstLen === 16 ? AF_INET6 : AF_INET;
  b[o + 17] = slash < 0 ? dstLen * 8 : Number(m.prefix.slice(slash + 1));
  b[o + 20] = RT_TABLE_MAIN;
  b[o + 21] = HERALD_ROUTE_PROTO;
  b[o + 22] = m.type === RTM_DELROUTE ? RT_SCOPE_NOWHERE : RT_SCOPE_UNIVERSE;
  b[o + 23] = m.type === RTM_DELROUTE ? 0 : RTN_UNICAST;
  let at = writeAddrAttr(b, o + 28, RTA_DST, dst);
  if (m.nextHops.length === 1) at = writeAddrAttr(b, at, RTA_GATEWAY, m.nextHops[0]!);
  else if (m.nextHops.length > 1) {
    const start = at;
    at += 4;
    for (const h of m.nextHops) {
      // struct rtnexthop { u16 len; u8 flags; u8 hops; int ifindex } (ifindex 0: the kernel resolves the gateway), then its RTA_GATEWAY.
      b.writeUInt16LE(8 + 4 + addrLen(h), at);
      at = writeAddrAttr(b, at + 8, RTA_GATEWAY, h);
    }
    b.writeUInt16LE(at - start, start);
    b.writeUInt16LE(RTA_MULTIPATH, start + 2);
  }
  return o + len;
}

/** A dumped route of herald's in the main table, or undefined for any other. */
function decodeRoute(m: Buffer, off: number, end: number): HostRoute | undefined {
  const family = m[off]!;
  const dstLen = m[off + 1]!;
  let table = m[off + 4]!;
  if (m[off + 5] !== HERALD_ROUTE_PROTO || m[off + 7] !== RTN_UNICAST || (family !== AF_INET && family !== AF_INET6)) return undefined;
  let dst: string | undefined;
  const hops: string[] = [];
  for (let o = off + 12; o + 4 <= end; ) {
    const len = m.readUInt16LE(o);
    const type = m.readUInt16LE(o + 2);
    if (len < 4) break;
    const body = m.subarray(o + 4, o + len);
    if (type === RTA_DST) dst = formatIpBytes(body);
    else if (type === RTA_GATEWAY) hops.push(formatIpBytes(body));
    else if (type === RTA_TABLE) table = body.readUInt32LE(0);
    else if (type === RTA_MULTIPATH) {
      for (let n = 0; n + 8 <= body.length; ) {
        const nlen = body.readUInt16LE(n);
        if (nlen < 8) break;
        for (let a = n + 8; a + 4 <= n + nlen; ) {
          const alen = body.readUInt16LE(a);
          if (alen < 4) break;
          if (body.readUInt16LE(a + 2) === RTA_GATEWAY) hops.push(formatIpBytes(body.subarray(a + 4, a + alen)));
          a += align4(alen);
        }
        n += align4(nlen);
      }
    }
    o += align4(len);
  }
  if (table !== RT_TABLE_MAIN || dst === undefined) return undefined;
  return { prefix: `${dst}/${dstLen}`, nextHops: hops.sort() };
}

const errnoText = (errno: number): string => {
  const e = getSystemErrorMap().get(-errno);
  return e ? `${e[0]} (${e[1]})` : `errno ${errno}`;
};

export class NetlinkHostRoutes implements HostRoutes, Disposable {
  private socket: RawNetlinkSocket | undefined;
  private seq = 1;
  /** The chunk of route messages waiting for its replies: sequence numbers first … first + count - 1. */
  private chunk: { first: number; count: number; reply: (k: number, type: number, msg: Buffer, off: number) => void } | undefined;
  /** seq → what a dump's replies do. */
  private readonly waiting = new Map<number, (type: number, msg: Buffer, off: number, end: number) => void>();
  /** One request or batch at a time on the socket: a dump's replies must not interleave with acks. */
  private queue: Promise<unknown> = Promise.resolve();

  /** `netns`: open the socket in that named network namespace (labs); unset = this process's. */
  constructor(private readonly opts: { netns?: string } = {}) {}

  async list(): Promise<HostRoute[]> {
    return this.serial(() => this.dump());
  }

  async replace(route: HostRoute): Promise<void> {
    const [e] = await this.replaceMany([route]);
    if (e) throw e;
  }

  async del(prefix: string): Promise<void> {
    const [e] = await this.delMany([prefix]);
    if (e) throw e;
  }

  replaceMany(routes: readonly HostRoute[]): Promise<(Error | undefined)[]> {
    return this.serial(() => this.exec(routes.map((r) => ({ type: RTM_NEWROUTE, prefix: r.prefix, nextHops: r.nextHops })), 'replace'));
  }

  delMany(prefixes: readonly string[]): Promise<(Error | undefined)[]> {
    return this.serial(() => this.exec(prefixes.map((p) => ({ type: RTM_DELROUTE, prefix: p, nextHops: [] })), 'delete'));
  }

  dispose(): void {
    this.socket?.close();
    this.socket = undefined;
    this.fail(new HeraldError('HERALD_STOPPED', 'host routes: the rtnetlink socket is closed'));
  }

  private serial<T>(run: () => Promise<T>): Promise<T> {
    const result = this.queue.then(run);
    this.queue = result.catch(() => {});
    return result;
  }

  private sock(): RawNetlinkSocket {
    if (this.socket) return this.socket;
    const open = () => new RawNetlinkSocket(NETLINK_ROUTE);
    const s = this.opts.netns !== undefined ? inNetns(this.opts.netns, open) : open();
    s.on('message', (buf) => this.receive(buf));
    s.on('error', (e) => this.fail(new HeraldError('HERALD_INTERNAL', `rtnetlink socket: ${e.message}`, { cause: e })));
    s.unref(); // referenced only while a request waits
    this.socket = s;
    return s;
  }

  private receive(buf: Buffer): void {
    for (let off = 0; off + 16 <= buf.length; ) {
      const len = buf.readUInt32LE(off);
      if (len < 16 || off + len > buf.length) break;
      const seq = buf.readUInt32LE(off + 8);
      const type = buf.readUInt16LE(off + 4);
      const chunk = this.chunk;
      if (chunk && seq >= chunk.first && seq < chunk.first + chunk.count) chunk.reply(seq - chunk.first, type, buf, off + 16);
      else this.waiting.get(seq)?.(type, buf, off + 16, off + len);
      off += align4(len);
    }
  }

  /** The socket failed or closed: every waiting request ends with that error. */
  private fail(e: Error): void {
    this.lastFailure = e;
    for (const h of [...this.waiting.values()]) h(-1, Buffer.alloc(0), 0, 0);
    this.waiting.clear();
    const chunk = this.chunk;
    this.chunk = undefined;
    // Which of the chunk's messages the kernel took is unknown: all fail (the reconciler retries them; replace is idempotent).
    if (chunk) for (let k = 0; k < chunk.count; k++) chunk.reply(k, -1, Buffer.alloc(0), 0);
  }
  private lastFailure: Error | undefined;

  private nextSeq(): number {
    const s = this.seq;
    this.seq = this.seq >= 0x7fffffff ? 1 : this.seq + 1;
    return s;
  }

  /**
   * Sends the messages CHUNK at a time, one buffer and one sendmsg per chunk:
   * an error reply names a failed message (by its sequence number), the last
   * message's ack ends the chunk.
   */
  private async exec(msgs: readonly RouteMsg[], what: string): Promise<(Error | undefined)[]> {
    const out: (Error | undefined)[] = new Array(msgs.length).fill(undefined);
    const sock = this.sock();
    for (let start = 0; start < msgs.length; start += CHUNK) {
      const end = Math.min(msgs.length, start + CHUNK);
      const sent: number[] = [];
      let size = 0;
      for (let i = start; i < end; i++) {
        const m = msgs[i]!;
        if (m.type === RTM_NEWROUTE && m.nextHops.length === 0) out[i] = new HeraldError('HERALD_INTERNAL', `host route ${m.prefix}: no next hop`);
        else {
          sent.push(i);
          size += routeMsgSize(m);
        }
      }
      if (sent.length === 0) continue;
      if (this.seq + sent.length >= 0x7fffffff) this.seq = 1; // one chunk's sequence numbers are consecutive
      const first = this.seq;
      this.seq += sent.length;
      const buf = Buffer.alloc(size);
      let o = 0;
      let lastAt = -1;
      const bySeq: number[] = []; // k (sequence number - first) → index in msgs
      for (const i of sent) {
        const m = msgs[i]!;
        try {
          const next = writeRouteMsg(buf, o, first + bySeq.length, NLM_F_REQUEST | (m.type === RTM_NEWROUTE ? NLM_F_CREATE | NLM_F_REPLACE : 0), m);
          lastAt = o;
          o = next;
          bySeq.push(i);
        } catch (e) {
          // Not an address (the desired state only holds parsed ones): that message alone fails, unsent.
          buf.fill(0, o);
          out[i] = e as Error;
        }
      }
      if (bySeq.length === 0) continue;
      buf.writeUInt16LE(buf.readUInt16LE(lastAt + 6) | NLM_F_ACK, lastAt + 6); // the last one asks for the ack
      sent.splice(0, sent.length, ...bySeq);
      const lastSeq = first + sent.length - 1;
      sock.ref();
      try {
        await new Promise<void>((resolve, reject) => {
          this.chunk = {
            first,
            count: sent.length,
            reply: (k, type, msg, off) => {
              const errno = type === NLMSG_ERROR ? -msg.readInt32LE(off) : 0;
              const i = sent[k]!;
              if (type === -1) out[i] = new HeraldError('HERALD_INTERNAL', `host route ${what} ${msgs[i]!.prefix}: ${this.lastFailure?.message ?? 'socket closed'}`);
              else if (errno !== 0 && !(what === 'delete' && GONE.has(errno))) out[i] = new HeraldError('HERALD_INTERNAL', `host route ${what} ${msgs[i]!.prefix}: ${errnoText(errno)}`);
              if (first + k === lastSeq || type === -1) resolve();
            },
          };
          sock.send(o < buf.length ? buf.subarray(0, o) : buf, {}, (err) => err && reject(err));
        });
      } catch (e) {
        this.fail(new HeraldError('HERALD_INTERNAL', `rtnetlink send: ${(e as Error).message}`, { cause: e }));
      } finally {
        sock.unref();
        this.chunk = undefined;
      }
    }
    return out;
  }

  /** RTM_GETROUTE dump of both families, filtered to herald's routes in the main table. */
  private dump(): Promise<HostRoute[]> {
    const sock = this.sock();
    const seq = this.nextSeq();
    const req = Buffer.alloc(16 + 12);
    req.writeUInt32LE(req.length, 0);
    req.writeUInt16LE(RTM_GETROUTE, 4);
    req.writeUInt16LE(NLM_F_REQUEST | NLM_F_DUMP, 6);
    req.writeUInt32LE(seq, 8);
    req[16] = AF_UNSPEC;
    const routes: HostRoute[] = [];
    return new Promise<HostRoute[]>((resolve, reject) => {
      const done = (e?: Error) => {
        this.waiting.delete(seq);
        sock.unref();
        if (e) reject(e);
        else resolve(routes);
      };
      this.waiting.set(seq, (type, msg, off, end) => {
        if (type === RTM_NEWROUTE) {
          const r = decodeRoute(msg, off, end);
          if (r) routes.push(r);
        } else if (type === NLMSG_DONE) done();
        else if (type === NLMSG_ERROR || type === -1) {
          const errno = type === -1 ? 0 : -msg.readInt32LE(off);
          done(new HeraldError('HERALD_INTERNAL', `listing host routes: ${type === -1 ? (this.lastFailure?.message ?? 'socket closed') : errnoText(errno)}`));
        }
      });
      sock.ref();
      sock.send(req, {}, (e) => {
        if (e) done(new HeraldError('HERALD_INTERNAL', `listing host routes: ${e.message}`, { cause: e }));
      });
    });
  }
}
