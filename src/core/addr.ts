/**
 * The one place that parses and formats IP addresses and CIDRs, built on
 * ipaddr.js. Strict (no octal, hex, short or zoned forms, matching what Go's
 * netip and Kubernetes accept) and canonical (dotted quad; IPv6 in RFC 5952
 * compressed lowercase form, IPv4-mapped printed `::ffff:a.b.c.d` and kept
 * IPv6). Two views of an address: `ParsedIp` (text and bytes, for
 * manifests and packets) and `Addr` (a bigint, so pools do range arithmetic
 * with one code path for both families).
 */
import ipaddr from 'ipaddr.js';
import { HeraldError } from './errors.js';
import { quote } from './text.js';

export type IpFamily = 'IPv4' | 'IPv6';

export const FAMILY_BITS: Readonly<Record<IpFamily, number>> = { IPv4: 32, IPv6: 128 };

export interface ParsedIp {
  /** Canonical text: dotted quad, or RFC 5952 IPv6 (IPv4-mapped stays IPv6, printed `::ffff:a.b.c.d`). */
  readonly text: string;
  readonly family: IpFamily;
  readonly bytes: readonly number[];
}

/** One address as a number: what pools count, compare and step through. */
export interface Addr {
  readonly family: IpFamily;
  readonly value: bigint;
}

export interface ParsedCidr {
  /** Canonical `address/prefix`. */
  readonly text: string;
  readonly family: IpFamily;
  readonly network: ParsedIp;
  readonly prefix: number;
}

// Checked before ipaddr.js, which would throw (and catch) on every non-IPv4 text.
const DOTTED_QUAD = /^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/;

function parseAny(text: string): ipaddr.IPv4 | ipaddr.IPv6 | undefined {
  if (DOTTED_QUAD.test(text)) return ipaddr.IPv4.isValid(text) ? ipaddr.IPv4.parse(text) : undefined;
  // A zone ("fe80::1%eth0") is not an address Kubernetes or Cilium accept.
  if (!text.includes(':') || text.includes('%') || hasLenientEmbeddedIpv4(text)) return undefined;
  return ipaddr.IPv6.isValid(text) ? ipaddr.IPv6.parse(text) : undefined;
}

/**
 * ipaddr.js reads "::ffff:010.2.3.4" as ::ffff:10.2.3.4; Go's netip refuses
 * a leading zero there as in a plain dotted quad, and so do we.
 */
function hasLenientEmbeddedIpv4(text: string): boolean {
  const tail = text.slice(text.lastIndexOf(':') + 1);
  return tail.includes('.') && !DOTTED_QUAD.test(tail);
}

function canonical(a: ipaddr.IPv4 | ipaddr.IPv6): ParsedIp {
  if (a.kind() === 'ipv4') return { text: a.toString(), family: 'IPv4', bytes: a.toByteArray() };
  const v6 = a as ipaddr.IPv6;
  const text = v6.isIPv4MappedAddress() ? `::ffff:${v6.toIPv4Address().toString()}` : v6.toString();
  return { text, family: 'IPv6', bytes: v6.toByteArray() };
}

/** Parses one IP address strictly; `undefined` if it is not a plain IPv4 or IPv6 address. */
export function parseIp(text: string): ParsedIp | undefined {
  const a = parseAny(text);
  return a ? canonical(a) : undefined;
}

/** The canonical form of an IP address, or `undefined` if it does not parse. */
export function normalizeIp(text: string): string | undefined {
  return parseIp(text)?.text;
}

export function isIp(text: string): boolean {
  return parseAny(text) !== undefined;
}

/** The family of an address text, or `undefined` if it is not one. An IPv4-mapped IPv6 address is IPv6. */
export function familyOf(text: string): IpFamily | undefined {
  return parseIp(text)?.family;
}

export function isIpv4(text: string): boolean {
  // The fast path accepts exactly what DOTTED_QUAD + ipaddr.js accept (a property test holds them equal).
  return readCanonicalIpv4(text, undefined, 0);
}

/**
 * Fast path for the hot loops (map keys by the ten thousand): when `text` is
 * a canonical dotted quad (four decimals 0–255 without leading zeros), writes
 * its 4 bytes at `offset` of `out` (if given) and returns true; anything else
 * returns false and the caller takes the full parser.
 */
export function readCanonicalIpv4(text: string, out: Uint8Array | undefined, offset: number): boolean {
  const len = text.length;
  if (len < 7 || len > 15) return false;
  let part = 0;
  let value = 0;
  let digits = 0;
  for (let i = 0; i <= len; i++) {
    const c = i < len ? text.charCodeAt(i) : 46; // a virtual '.' closes the last part
    if (c === 46) {
      if (digits === 0 || part > 3) return false;
      if (out) out[offset + part] = value;
      part++;
      value = 0;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      if (digits > 0 && value === 0) return false; // a leading zero
      value = value * 10 + (c - 48);
      if (value > 255) return false;
      digits++;
    } else {
      return false;
    }
  }
  return part === 4;
}

const groups6 = new Uint16Array(8);

/**
 * Fast path for canonical IPv6 text (lower-case hex groups of 1–4 digits, at
 * most one `::`, no dotted tail): writes its 16 bytes at `offset` and returns
 * true; anything else returns false and the caller takes the full parser.
 * One scan of the characters, no allocation (it runs per route message).
 */
export function readCanonicalIpv6(ip: string, buf: Uint8Array, offset: number): boolean {
  const len = ip.length;
  if (len < 2 || len > 39) return false;
  let n = 0;
  let gap = -1;
  let i = 0;
  if (ip.charCodeAt(0) === 58) {
    if (ip.charCodeAt(1) !== 58) return false;
    gap = 0;
    i = 2;
  }
  while (i < len) {
    let value = 0;
    let digits = 0;
    for (; i < len && digits <= 4; i++) {
      const c = ip.charCodeAt(i);
      if (c >= 48 && c <= 57) value = value * 16 + (c - 48);
      else if (c >= 97 && c <= 102) value = value * 16 + (c - 87);
      else break;
      digits++;
    }
    if (digits === 0 || digits > 4 || n === 8) return false;
    groups6[n++] = value;
    if (i === len) break;
    if (ip.charCodeAt(i) !== 58) return false; // a dot, an upper-case digit, anything else
    i++;
    if (i < len && ip.charCodeAt(i) === 58) {
      if (gap >= 0) return false; // a second `::`
      gap = n;
      i++;
    } else if (i === len) return false; // a trailing single colon
  }
  if (gap < 0 ? n !== 8 : n > 7) return false;
  buf.fill(0, offset, offset + 16);
  const tail = gap < 0 ? 0 : n - gap;
  for (let g = 0; g < n; g++) {
    const at = offset + (gap >= 0 && g >= gap ? 16 - (tail - (g - gap)) * 2 : g * 2);
    buf[at] = groups6[g]! >> 8;
    buf[at + 1] = groups6[g]! & 0xff;
  }
  return true;
}

/**
 * An address's bytes (4 or 16) at `offset`: canonical text parsed in place
 * (the hot loops: map keys, route messages by the ten thousand), anything
 * else through the full parser; throws on a non-address.
 */
export function writeIp(ip: string, buf: Uint8Array, offset: number): void {
  if (ip.includes(':') ? readCanonicalIpv6(ip, buf, offset) : readCanonicalIpv4(ip, buf, offset)) return;
  buf.set(mustParseIp(ip).bytes, offset);
}

/** The dotted quad of 4 bytes at `offset` (the canonical text, as formatIpBytes gives it). */
export function formatIpv4At(b: Uint8Array, offset: number): string {
  return `${b[offset]}.${b[offset + 1]}.${b[offset + 2]}.${b[offset + 3]}`;
}

/** Why `text` is not an IP address, precisely enough to fix it; `undefined` if it is one. */
export function ipProblem(text: string): string | undefined {
  if (parseAny(text) !== undefined) return undefined;
  if (text === '') return 'an empty string is not an IP address';
  if (text.includes('%')) return `${quote(text)} has a zone ("%…"), which a service IP cannot have`;
  if (text.includes('/')) return `${quote(text)} is a CIDR, not a single IP address`;
  if (text !== text.trim()) return `${quote(text)} has surrounding white space`;
  if (text.includes(':') && hasLenientEmbeddedIpv4(text)) {
    return `${quote(text)} has an embedded IPv4 part that is not a plain dotted quad (four decimal octets, no leading zeros)`;
  }
  if (/^[0-9.]+$/.test(text)) {
    const octets = text.split('.');
    if (octets.length !== 4) return `${quote(text)} is not a dotted quad (an IPv4 address has 4 parts, this has ${octets.length})`;
    if (octets.some((o) => o.length > 1 && o.startsWith('0'))) return `${quote(text)} has a leading zero in an octet (ambiguous: octal or decimal)`;
    const big = octets.find((o) => Number(o) > 255);
    if (big !== undefined) return `${quote(text)} has an octet over 255 (${big})`;
  }
  return `${quote(text)} is not an IPv4 or IPv6 address`;
}

/** Parses an address or throws a HERALD_BAD_ARGUMENT error that says what is wrong with it. */
export function mustParseIp(text: string): ParsedIp {
  const ip = parseIp(text);
  if (!ip) throw new HeraldError('HERALD_BAD_ARGUMENT', ipProblem(text) ?? `${quote(text)} is not an IP address`);
  return ip;
}

/** Orders two addresses: IPv4 before IPv6, then by bytes. */
export function compareIps(a: ParsedIp, b: ParsedIp): number {
  if (a.family !== b.family) return a.family === 'IPv4' ? -1 : 1;
  for (let i = 0; i < a.bytes.length; i++) {
    const d = (a.bytes[i] ?? 0) - (b.bytes[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** Big-endian bytes as a number. */
export function toBigInt(bytes: ArrayLike<number>): bigint {
  let v = 0n;
  for (let i = 0; i < bytes.length; i++) v = (v << 8n) | BigInt(bytes[i] as number);
  return v;
}

/** A number as the big-endian bytes of an address of `family`; a value out of the family's range is a bug, so it throws. */
export function fromBigInt(value: bigint, family: IpFamily): number[] {
  const bits = FAMILY_BITS[family];
  if (value < 0n || value >> BigInt(bits) !== 0n) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `${value} is not an ${family} address (0 to 2^${bits}-1)`);
  }
  const bytes = new Array<number>(bits / 8);
  let v = value;
  for (let i = bytes.length - 1; i >= 0; i--) {
    bytes[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return bytes;
}

/** An address given as bytes (4 for IPv4, 16 for IPv6). */
export function ipFromBytes(bytes: ArrayLike<number>): ParsedIp {
  const list = Array.from(bytes);
  if (list.length === 4) return canonical(new ipaddr.IPv4(list));
  if (list.length === 16) return canonical(new ipaddr.IPv6(list));
  throw new HeraldError('HERALD_BAD_ARGUMENT', `an address has 4 or 16 bytes, not ${list.length}`);
}

/** The canonical text of an address given as bytes. */
export function formatIpBytes(bytes: ArrayLike<number>): string {
  return ipFromBytes(bytes).text;
}

export function toAddr(ip: ParsedIp): Addr {
  return { family: ip.family, value: toBigInt(ip.bytes) };
}

/** Parses an address (strictly, as `parseIp`) into its numeric form; `undefined` if it is not one. */
export function addrOf(text: string): Addr | undefined {
  const a = parseAny(text);
  if (!a) return undefined;
  return { family: a.kind() === 'ipv4' ? 'IPv4' : 'IPv6', value: toBigInt(a.toByteArray()) };
}

/** Canonical text of an address (the same form `normalizeIp` gives). */
export function formatAddr(addr: Addr): string {
  return formatIpBytes(fromBigInt(addr.value, addr.family));
}

/** IPv4 before IPv6, then numeric order. */
export function compareAddrs(a: Addr, b: Addr): number {
  if (a.family !== b.family) return a.family === 'IPv4' ? -1 : 1;
  return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
}

/** Number of addresses in a prefix of length `prefix`. */
export function prefixSize(family: IpFamily, prefix: number): bigint {
  return 1n << BigInt(FAMILY_BITS[family] - prefix);
}

/** An inclusive range of addresses of one family. */
export interface AddrRange {
  readonly family: IpFamily;
  readonly first: bigint;
  readonly last: bigint;
}

/** First and last address of a CIDR. */
export function cidrRange(cidr: ParsedCidr): AddrRange {
  const first = toBigInt(cidr.network.bytes);
  return { family: cidr.family, first, last: first + prefixSize(cidr.family, cidr.prefix) - 1n };
}

export function rangesOverlap(a: AddrRange, b: AddrRange): boolean {
  return a.family === b.family && a.first <= b.last && b.first <= a.last;
}

/** The ipaddr.js special-range name of an address ("unicast", "loopback", "multicast", …). */
export function specialRange(ip: ParsedIp): string {
  return ipaddr.parse(ip.text).range();
}

export type CidrResult = { ok: true; cidr: ParsedCidr } | { ok: false; reason: string };
export type MaskingCidrResult = { ok: true; cidr: ParsedCidr; maskedFrom?: string } | { ok: false; reason: string };

/**
 * Parses a CIDR strictly. A prefix with host bits set ("192.0.2.1/24") is
 * rejected with the network it probably meant, as Cilium accepts only
 * proper prefixes.
 */
export function parseCidr(text: string): CidrResult {
  const r = parseCidrMasking(text);
  if (r.ok && r.maskedFrom !== undefined) {
    return { ok: false, reason: `host bits are set (did you mean "${r.cidr.text}"?)` };
  }
  return r.ok ? { ok: true, cidr: r.cidr } : r;
}

/**
 * Parses a CIDR as Cilium's pool CRD reads one: host bits are cleared
 * ("198.51.100.7/24" is 198.51.100.0/24), and `maskedFrom` keeps the text as
 * written so the caller can warn about it.
 */
export function parseCidrMasking(text: string): MaskingCidrResult {
  const slash = text.lastIndexOf('/');
  if (slash < 0) return { ok: false, reason: 'missing "/prefix-length"' };
  const addrText = text.slice(0, slash);
  const prefixText = text.slice(slash + 1);
  const addr = parseIp(addrText);
  if (!addr) return { ok: false, reason: `${quote(addrText)} is not an IP address` };
  const max = FAMILY_BITS[addr.family];
  if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText) || Number(prefixText) > max) {
    return { ok: false, reason: `prefix length must be 0-${max}` };
  }
  const prefix = Number(prefixText);
  const hostBits = prefixSize(addr.family, prefix) - 1n;
  const value = toBigInt(addr.bytes);
  const network = ipFromBytes(fromBigInt(value & ~hostBits, addr.family));
  const cidr = { text: `${network.text}/${prefix}`, family: addr.family, network, prefix };
  return (value & hostBits) !== 0n ? { ok: true, cidr, maskedFrom: text } : { ok: true, cidr };
}
