/**
 * Crafted Ethernet frames for BPF_PROG_TEST_RUN: IPv4/IPv6 with a TCP, UDP,
 * SCTP or ICMP header (checksums are not computed: the policy program does
 * not read them).
 */
export interface FrameSpec {
  family: 4 | 6;
  src: bigint;
  dst: bigint;
  proto: number;
  dport?: number;
  sport?: number;
  /** IPv4 only: a non-first fragment (offset 8 bytes, no L4 header in it). */
  fragment?: boolean;
  /** A fragment carrying the L4 header (IPv4: MF set, offset 0; IPv6: via a fragment header in `ext`). */
  more?: boolean;
  /** Fragment id (IPv4 16 bits, IPv6 32 bits). */
  id?: number;
  /** IPv6 extension headers before the L4 header, in order: 0 hop-by-hop, 43 routing, 60 destination options, 51 AH, 44 fragment (uses `more`, `id`; with `fragment`, a later fragment). */
  ext?: number[];
  /** ICMP / ICMPv6 type, when proto is 1 or 58 (else `dport`, the L4 key, is taken as the type). */
  icmpType?: number;
}

function putAddr(buf: Buffer, offset: number, value: bigint, bytes: number): void {
  let v = value;
  for (let i = bytes - 1; i >= 0; i--) {
    buf[offset + i] = Number(v & 255n);
    v >>= 8n;
  }
}

export function buildFrame(s: FrameSpec): Buffer {
  const l4 = Buffer.alloc(20);
  if (s.proto === 6 || s.proto === 17 || s.proto === 132) {
    l4.writeUInt16BE(s.sport ?? 40000, 0);
    l4.writeUInt16BE(s.dport ?? 0, 2);
  } else if (s.proto === 1 || s.proto === 58) {
    l4[0] = s.icmpType ?? s.dport ?? (s.proto === 1 ? 8 : 128);
  }
  const eth = Buffer.alloc(14);
  Buffer.from([2, 0, 0, 0, 0, 1]).copy(eth, 0);
  Buffer.from([2, 0, 0, 0, 0, 2]).copy(eth, 6);
  if (s.family === 4) {
    eth.writeUInt16BE(0x0800, 12);
    const ip = Buffer.alloc(20);
    ip[0] = 0x45;
    ip.writeUInt16BE(20 + l4.length, 2);
    ip.writeUInt16BE(s.id ?? 0, 4);
    if (s.fragment) ip.writeUInt16BE(1 | (s.more ? 0x2000 : 0), 6); // offset 1 (× 8 bytes)
    else if (s.more) ip.writeUInt16BE(0x2000, 6);
    ip[8] = 64;
    ip[9] = s.proto;
    putAddr(ip, 12, s.src, 4);
    putAddr(ip, 16, s.dst, 4);
    return Buffer.concat([eth, ip, l4]);
  }
  eth.writeUInt16BE(0x86dd, 12);
  // Extension headers, last first: each names the next header.
  let next = s.proto;
  const exts: Buffer[] = [];
  for (const type of [...(s.ext ?? [])].reverse()) {
    const h = Buffer.alloc(type === 51 ? 12 : 8);
    h[0] = next;
    if (type === 51) h[1] = 1; // AH: (1 + 2) × 4 = 12 bytes
    else if (type === 44) {
      h.writeUInt16BE((s.fragment ? 1 << 3 : 0) | (s.more ? 1 : 0), 2);
      h.writeUInt32BE(s.id ?? 0, 4);
    } else {
      h[2] = 1; // PadN option filling the 6 bytes
      h[3] = 4;
    }
    exts.unshift(h);
    next = type;
  }
  const ip = Buffer.alloc(40);
  ip[0] = 0x60;
  ip.writeUInt16BE(l4.length + exts.reduce((n, h) => n + h.length, 0), 4);
  ip[6] = next;
  ip[7] = 64;
  putAddr(ip, 8, s.src, 16);
  putAddr(ip, 24, s.dst, 16);
  return Buffer.concat([eth, ip, ...exts, l4]);
}
