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
 * sendmsg, as `ip -batch` does, with an ack per message naming its outcome.
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
/** Messages per sendmsg: their acks (each echoing its request) stay well inside the default receive buffer. */
const CHUNK = 256;

const align4 = (n: number) => (n + 3) & ~3;

const addrLen = (ip: string) => (ip.includes(':') ? 16 : 4);

/** One route message: nlmsghdr, rtmsg, RTA_DST, then the gateway(s) for a replace. Addresses are written in place (core/addr writeIp). */
function encodeRoute(type: number, flags: number, seq: number, prefix: string, nextHops: readonly string[]): Buffer {
  const slash = prefix.lastIndexOf('/');
  const dst = slash < 0 ? prefix : prefix.slice(0, slash);
  const dstLen = addrLen(dst);
  let attrs = 4 + dstLen;
  if (nextHops.length === 1) attrs += 4 + addrLen(nextHops[0]!);
  else if (nextHops.length > 1) attrs += 4 + nextHops.reduce((n, h) => n + 8 + 4 + addrLen(h), 0);
  const len = 16 + 12 + attrs;
  const b = Buffer.alloc(len);
  b.writeUInt32LE(len, 0);
  b.writeUInt16LE(type, 4);
  b.writeUInt16LE(flags, 6);
  b.writeUInt32LE(seq, 8);
  // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32)
  b[16] = dstLen === 16 ? AF_INET6 : AF_INET;
  b[17] = slash < 0 ? dstLen * 8 : Number(prefix.slice(slash + 1));
  b[20] = RT_TABLE_MAIN;
  b[21] = HERALD_ROUTE_PROTO;
  b[22] = type === RTM_DELROUTE ? RT_SCOPE_NOWHERE : RT_SCOPE_UNIVERSE;
  b[23] = type === RTM_DELROUTE ? 0 : RTN_UNICAST;
  let o = 28;
  const attr = (t: number, ip: string) => {
    const n = addrLen(ip);
    b.writeUInt16LE(4 + n, o);
    b.writeUInt16LE(t, o + 2);
    writeIp(ip, b, o + 4);
    o += 4 + n; // 4 or 16 bytes: already aligned
  };
  attr(RTA_DST, dst);
  if (nextHops.length === 1) attr(RTA_GATEWAY, nextHops[0]!);
  else if (nextHops.length > 1) {
    const start = o;
    o += 4;
    for (const h of nextHops) {
      // struct rtnexthop { u16 len; u8 flags; u8 hops; int ifindex } (ifindex 0: the kernel resolves the gateway), then its RTA_GATEWAY.
      b.writeUInt16LE(8 + 4 + addrLen(h), o);
      o += 8;
      attr(RTA_GATEWAY, h);
    }
    b.writeUInt16LE(o - start, start);
    b.writeUInt16LE(RTA_MULTIPATH, start + 2);
  }
  return b;
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
  /** seq → what its ack (or, for a dump, each reply) does. */
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
    return this.serial(() =>
      this.exec(
        routes.map((r) => r.prefix),
        routes.map((r) => (seq) => {
          if (r.nextHops.length === 0) throw new HeraldError('HERALD_INTERNAL', `host route ${r.prefix}: no next hop`);
          return encodeRoute(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, seq, r.prefix, r.nextHops);
        }),
        'replace',
      ),
    );
  }

  delMany(prefixes: readonly string[]): Promise<(Error | undefined)[]> {
    return this.serial(() =>
      this.exec(prefixes, prefixes.map((p) => (seq) => encodeRoute(RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK, seq, p, [])), 'delete'),
    );
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
      const handler = this.waiting.get(buf.readUInt32LE(off + 8));
      handler?.(buf.readUInt16LE(off + 4), buf, off + 16, off + len);
      off += align4(len);
    }
  }

  private fail(e: Error): void {
    for (const h of [...this.waiting.values()]) h(-1, Buffer.alloc(0), 0, 0);
    this.waiting.clear();
    this.lastFailure = e;
  }
  private lastFailure: Error | undefined;

  private nextSeq(): number {
    const s = this.seq;
    this.seq = this.seq >= 0x7fffffff ? 1 : this.seq + 1;
    return s;
  }

  /** Sends the messages CHUNK at a time, one sendmsg per chunk; one outcome per message from its ack. */
  private async exec(prefixes: readonly string[], build: readonly ((seq: number) => Buffer)[], what: string): Promise<(Error | undefined)[]> {
    const out: (Error | undefined)[] = new Array(build.length).fill(undefined);
    const sock = this.sock();
    for (let start = 0; start < build.length; start += CHUNK) {
      const bufs: Buffer[] = [];
      const acks: Promise<void>[] = [];
      for (let i = start; i < Math.min(build.length, start + CHUNK); i++) {
        const seq = this.nextSeq();
        try {
          bufs.push(build[i]!(seq));
        } catch (e) {
          out[i] = e as Error;
          continue;
        }
        acks.push(
          new Promise<void>((resolve) => {
            this.waiting.set(seq, (type, msg, off) => {
              this.waiting.delete(seq);
              if (type === -1) out[i] = new HeraldError('HERALD_INTERNAL', `host route ${what} ${prefixes[i]}: ${this.lastFailure?.message ?? 'socket closed'}`);
              else if (type === NLMSG_ERROR) {
                const errno = -msg.readInt32LE(off);
                if (errno !== 0 && !(what === 'delete' && GONE.has(errno))) {
                  out[i] = new HeraldError('HERALD_INTERNAL', `host route ${what} ${prefixes[i]}: ${errnoText(errno)}`);
                }
              }
              resolve();
            });
          }),
        );
      }
      if (acks.length === 0) continue;
      sock.ref();
      try {
        await new Promise<void>((resolve, reject) => sock.send(Buffer.concat(bufs), {}, (e) => (e ? reject(e) : resolve())));
        await Promise.all(acks);
      } catch (e) {
        this.fail(new HeraldError('HERALD_INTERNAL', `rtnetlink send: ${(e as Error).message}`, { cause: e }));
        await Promise.all(acks);
      } finally {
        sock.unref();
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
