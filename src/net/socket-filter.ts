/**
 * Classic BPF socket filters (SO_ATTACH_FILTER) for herald's packet sockets,
 * as pure data: the kernel runs them on every frame, so a watcher reads only
 * the frames about addresses it cares about instead of every ARP on the
 * segment (issue #16, "cost of watching the wire").
 *
 * A program is a list of blocks followed by "drop". Each block tests one kind
 * of frame and returns "accept" itself on a match, or falls through to the
 * next block — so blocks compose without long jumps (cBPF jumps reach at most
 * 255 instructions) and a block for ICMPv6 NS/NA can sit beside the ARP one.
 * Offsets are from the Ethernet header: an AF_PACKET SOCK_RAW socket sees the
 * frame with the VLAN tag already taken out into metadata.
 */
import { mustParseIp } from '../core/addr.js';

export interface BpfInsn {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

// linux/filter.h, linux/bpf_common.h
const BPF_LD = 0x00, BPF_ALU = 0x04, BPF_JMP = 0x05, BPF_RET = 0x06;
const BPF_W = 0x00, BPF_H = 0x08, BPF_B = 0x10, BPF_ABS = 0x20;
const BPF_AND = 0x50, BPF_JEQ = 0x10, BPF_JA = 0x00, BPF_K = 0x00;
const EXIT = 0xfff; // placeholder: "to the block's exit jump"
export const OP = {
  ldW: BPF_LD | BPF_W | BPF_ABS,
  ldH: BPF_LD | BPF_H | BPF_ABS,
  ldB: BPF_LD | BPF_B | BPF_ABS,
  and: BPF_ALU | BPF_AND | BPF_K,
  jeq: BPF_JMP | BPF_JEQ | BPF_K,
  ja: BPF_JMP | BPF_JA,
  ret: BPF_RET | BPF_K,
} as const;
/** Bytes of the frame to keep on accept: all of it. */
export const ACCEPT = 0x40000;
export const DROP = 0;
/** The kernel's limit (BPF_MAXINSNS). */
export const MAX_INSNS = 4096;

const ins = (code: number, k: number, jt = 0, jf = 0): BpfInsn => ({ code, jt, jf, k: k >>> 0 });
const accept = () => ins(OP.ret, ACCEPT);

/** Drops everything: attached before bind/drain so nothing unfiltered is ever read. */
export const DROP_ALL: readonly BpfInsn[] = [ins(OP.ret, DROP)];

/** One IPv4 prefix as host-order numbers. */
export interface Ipv4Prefix {
  base: number;
  bits: number;
}

const maskOf = (bits: number) => (bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0);

export function ipv4Prefix(text: string): Ipv4Prefix {
  const [ipText, bitsText] = text.split('/');
  const ip = mustParseIp(ipText!);
  if (ip.family !== 'IPv4') throw new Error(`not IPv4: ${text}`);
  const bits = bitsText === undefined ? 32 : Number(bitsText);
  const raw = ((ip.bytes[0]! << 24) | (ip.bytes[1]! << 16) | (ip.bytes[2]! << 8) | ip.bytes[3]!) >>> 0;
  return { base: (raw & maskOf(bits)) >>> 0, bits };
}

/**
 * The smallest set of prefixes, at most `max`, that covers every input: exact
 * when it fits, else the prefixes are widened (all to the same length, the
 * longest that fits) — a superset, so the filter may let a few extra frames
 * through but never loses one; the watcher still checks every frame it reads.
 */
export function coverPrefixes(input: readonly Ipv4Prefix[], max: number): Ipv4Prefix[] {
  for (let len = 32; len >= 0; len--) {
    const seen = new Map<number, Ipv4Prefix>();
    for (const p of input) {
      const bits = Math.min(p.bits, len);
      const base = (p.base & maskOf(bits)) >>> 0;
      seen.set(base * 64 + bits, { base, bits });
    }
    // Drop prefixes contained in a shorter one.
    const sorted = [...seen.values()].sort((a, b) => a.bits - b.bits || a.base - b.base);
    const kept: Ipv4Prefix[] = [];
    for (const p of sorted) {
      if (!kept.some((q) => ((p.base & maskOf(q.bits)) >>> 0) === q.base)) kept.push(p);
    }
    if (kept.length <= max) return kept.sort((a, b) => a.base - b.base || a.bits - b.bits);
  }
  return [{ base: 0, bits: 0 }];
}

// Ethernet + ARP (IPv4 over Ethernet) offsets.
const ETH_TYPE = 12;
/** htype Ethernet, ptype IPv4, hlen 6 / plen 4: anything else has no IPv4 addresses at 28 and 38. */
const ARP_HTYPE_PTYPE_HLEN_PLEN = [[14, 0x0001], [16, 0x0800], [18, 0x0604]] as const;
const ARP_OP = 20;
const ARP_SPA = 28;
const ARP_TPA = 38;

export interface ArpMatch {
  /** Accept only these ARP operations (1 request, 2 reply); all when absent. */
  ops?: readonly number[];
  /** Accept when the sender protocol address lies in one of these. */
  sender?: readonly Ipv4Prefix[];
  /** Accept when the target protocol address lies in one of these. */
  target?: readonly Ipv4Prefix[];
}

/** Prefixes per address field before they are widened (2–4 instructions each). */
export const MAX_PREFIXES_PER_FIELD = 256;

/** Tests the word at `offset` against each prefix; accepts on a hit, falls through otherwise. */
function prefixTests(offset: number, prefixes: readonly Ipv4Prefix[]): BpfInsn[] {
  const out: BpfInsn[] = [];
  const cover = coverPrefixes(prefixes, MAX_PREFIXES_PER_FIELD);
  const exact = cover.filter((p) => p.bits === 32);
  if (exact.length) {
    out.push(ins(OP.ldW, offset));
    for (const p of exact) out.push(ins(OP.jeq, p.base, 0, 1), accept());
  }
  for (const p of cover.filter((q) => q.bits < 32)) {
    out.push(ins(OP.ldW, offset), ins(OP.and, maskOf(p.bits)), ins(OP.jeq, p.base, 0, 1), accept());
  }
  return out;
}

/**
 * ARP (Ethernet/IPv4) frames with an allowed op whose sender or target address
 * lies in the given prefixes. A frame that is not such ARP falls through.
 */
export function arpBlock(m: ArpMatch): BpfInsn[] {
  const tests = [...prefixTests(ARP_SPA, m.sender ?? []), ...prefixTests(ARP_TPA, m.target ?? [])];
  if (tests.length === 0) return [];
  // Guards and op tests are few, so their jumps to J (the block's exit) are
  // short; J itself is an unconditional jump, which reaches any distance.
  const guards: Array<[number, number, number]> = [[OP.ldH, ETH_TYPE, 0x0806], ...ARP_HTYPE_PTYPE_HLEN_PLEN.map(([o, v]) => [OP.ldH, o, v] as [number, number, number])];
  const ops = m.ops ?? [];
  const head: BpfInsn[] = [];
  for (const [code, off, val] of guards) head.push(ins(code, off), ins(OP.jeq, val, 0, EXIT));
  if (ops.length) {
    head.push(ins(OP.ldH, ARP_OP));
    ops.forEach((op, i) => head.push(ins(OP.jeq, op, ops.length - i, 0))); // a hit skips the rest and J; the last miss falls into J
  } else {
    head[head.length - 1] = { ...head[head.length - 1]!, jt: 1 }; // past J
  }
  const j = head.length;
  for (let i = 0; i < j; i++) if (head[i]!.jf === EXIT) head[i] = { ...head[i]!, jf: j - i - 1 };
  const body = [...head, ins(OP.ja, tests.length), ...tests];
  return body;
}

// Ethernet + IPv6 + ICMPv6 (no extension headers: NDP frames carry none, RFC 4861 hop limit 255).
const IP6_NEXT_HEADER = 20;
const ICMP6_TYPE = 54;
const ND_TARGET = 62;
export const ND_NEIGHBOR_SOLICIT = 135;
export const ND_NEIGHBOR_ADVERT = 136;

/**
 * ICMPv6 neighbour solicitations/advertisements whose target address is one
 * of `targets` (all NS/NA when `targets` is absent). For the NDP watcher: it
 * sits next to `arpBlock` in one program (the socket then binds ETH_P_ALL or
 * one socket per ethertype).
 */
export function ndBlock(m: { types?: readonly number[]; targets?: readonly string[] }): BpfInsn[] {
  const types = m.types ?? [ND_NEIGHBOR_SOLICIT, ND_NEIGHBOR_ADVERT];
  const words = (m.targets ?? []).map((t) => {
    const ip = mustParseIp(t);
    if (ip.family !== 'IPv6') throw new Error(`not IPv6: ${t}`);
    return [0, 1, 2, 3].map((w) => ((ip.bytes[w * 4]! << 24) | (ip.bytes[w * 4 + 1]! << 16) | (ip.bytes[w * 4 + 2]! << 8) | ip.bytes[w * 4 + 3]!) >>> 0);
  });
  const tests: BpfInsn[] = [];
  if (m.targets === undefined) tests.push(accept());
  for (const w of words) {
    // Four words in a row; a miss skips to the next address.
    tests.push(ins(OP.ldW, ND_TARGET), ins(OP.jeq, w[0]!, 0, 7), ins(OP.ldW, ND_TARGET + 4), ins(OP.jeq, w[1]!, 0, 5));
    tests.push(ins(OP.ldW, ND_TARGET + 8), ins(OP.jeq, w[2]!, 0, 3), ins(OP.ldW, ND_TARGET + 12), ins(OP.jeq, w[3]!, 0, 1), accept());
  }
  if (tests.length === 0) return [];
  const head: BpfInsn[] = [ins(OP.ldH, ETH_TYPE), ins(OP.jeq, 0x86dd, 0, EXIT), ins(OP.ldB, IP6_NEXT_HEADER), ins(OP.jeq, 58, 0, EXIT), ins(OP.ldB, ICMP6_TYPE)];
  types.forEach((t, i) => head.push(ins(OP.jeq, t, types.length - i, 0)));
  const j = head.length;
  for (let i = 0; i < j; i++) if (head[i]!.jf === EXIT) head[i] = { ...head[i]!, jf: j - i - 1 };
  return [...head, ins(OP.ja, tests.length), ...tests];
}

/** A complete program: the blocks, then drop. Throws if it cannot be loaded. */
export function socketFilter(blocks: readonly (readonly BpfInsn[])[]): BpfInsn[] {
  const prog = [...blocks.flat(), ins(OP.ret, DROP)];
  if (prog.length > MAX_INSNS) throw new Error(`socket filter has ${prog.length} instructions (max ${MAX_INSNS})`);
  for (const [i, x] of prog.entries()) {
    const reach = x.code === OP.jeq ? Math.max(x.jt, x.jf) : x.code === OP.ja ? x.k : -1;
    if (reach >= 0 && (x.jt > 255 || x.jf > 255 || i + 1 + reach >= prog.length)) throw new Error(`socket filter: bad jump at ${i}`);
  }
  return prog;
}

/** The program as the kernel's struct sock_filter array (host byte order). */
export function encodeFilter(prog: readonly BpfInsn[]): Buffer {
  const b = Buffer.alloc(prog.length * 8);
  prog.forEach((x, i) => {
    b.writeUInt16LE(x.code, i * 8);
    b.writeUInt8(x.jt, i * 8 + 2);
    b.writeUInt8(x.jf, i * 8 + 3);
    b.writeUInt32LE(x.k >>> 0, i * 8 + 4);
  });
  return b;
}

/**
 * Runs a program over a frame the way the kernel does (the subset emitted
 * here): the returned byte count, 0 for drop. For unit tests.
 */
export function runFilter(prog: readonly BpfInsn[], frame: Uint8Array): number {
  let a = 0;
  const dv = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  for (let pc = 0; pc < prog.length; pc++) {
    const x = prog[pc]!;
    switch (x.code) {
      case OP.ldW:
      case OP.ldH:
      case OP.ldB: {
        const size = x.code === OP.ldW ? 4 : x.code === OP.ldH ? 2 : 1;
        if (x.k + size > frame.length) return 0; // the kernel drops on an out-of-bounds load
        a = size === 4 ? dv.getUint32(x.k) : size === 2 ? dv.getUint16(x.k) : dv.getUint8(x.k);
        break;
      }
      case OP.and:
        a = (a & x.k) >>> 0;
        break;
      case OP.jeq:
        pc += a === x.k ? x.jt : x.jf;
        break;
      case OP.ja:
        pc += x.k;
        break;
      case OP.ret:
        return x.k;
      default:
        throw new Error(`runFilter: opcode 0x${x.code.toString(16)} not supported`);
    }
  }
  return 0;
}
