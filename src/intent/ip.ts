/**
 * IP address and CIDR parsing for manifests: strict (no octal, hex, short
 * or zoned forms, matching what Go's netip and Kubernetes accept) and
 * canonical (IPv6 in RFC 5952 compressed lowercase form).
 */
import ipaddr from 'ipaddr.js';
import { quote } from './quote.js';

export type IpFamily = 'IPv4' | 'IPv6';

export interface ParsedIp {
  /** Canonical text: dotted quad, or RFC 5952 IPv6 (IPv4-mapped stays IPv6, printed `::ffff:a.b.c.d`). */
  readonly text: string;
  readonly family: IpFamily;
  readonly bytes: readonly number[];
}

export interface ParsedCidr {
  /** Canonical `address/prefix`. */
  readonly text: string;
  readonly family: IpFamily;
  readonly network: ParsedIp;
  readonly prefix: number;
}

/** Parses one IP address strictly; `undefined` if it is not a plain IPv4 or IPv6 address. */
export function parseIp(text: string): ParsedIp | undefined {
  if (ipaddr.IPv4.isValidFourPartDecimal(text)) {
    const a = ipaddr.IPv4.parse(text);
    return { text: a.toString(), family: 'IPv4', bytes: a.toByteArray() };
  }
  // A zone ("fe80::1%eth0") is not an address Kubernetes or Cilium accept.
  if (!text.includes('%') && ipaddr.IPv6.isValid(text)) {
    const a = ipaddr.IPv6.parse(text);
    const str = a.isIPv4MappedAddress() ? `::ffff:${a.toIPv4Address().toString()}` : a.toString();
    return { text: str, family: 'IPv6', bytes: a.toByteArray() };
  }
  return undefined;
}

/** The canonical form of an IP address, or `undefined` if it does not parse. */
export function normalizeIp(text: string): string | undefined {
  return parseIp(text)?.text;
}

export function isIp(text: string): boolean {
  return parseIp(text) !== undefined;
}

/** Orders two addresses of the same family (negative, zero, positive). */
export function compareIps(a: ParsedIp, b: ParsedIp): number {
  if (a.family !== b.family) return a.family === 'IPv4' ? -1 : 1;
  for (let i = 0; i < a.bytes.length; i++) {
    const d = (a.bytes[i] ?? 0) - (b.bytes[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

export type CidrResult = { ok: true; cidr: ParsedCidr } | { ok: false; reason: string };

/**
 * Parses a CIDR strictly. A prefix with host bits set ("192.0.2.1/24") is
 * rejected with the network it probably meant, as Cilium accepts only
 * proper prefixes.
 */
export function parseCidr(text: string): CidrResult {
  const slash = text.lastIndexOf('/');
  if (slash < 0) return { ok: false, reason: 'missing "/prefix-length"' };
  const addrText = text.slice(0, slash);
  const prefixText = text.slice(slash + 1);
  const addr = parseIp(addrText);
  if (!addr) return { ok: false, reason: `${quote(addrText)} is not an IP address` };
  const max = addr.family === 'IPv4' ? 32 : 128;
  if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText) || Number(prefixText) > max) {
    return { ok: false, reason: `prefix length must be 0-${max}` };
  }
  const prefix = Number(prefixText);
  const bytes = addr.bytes.map((byte, i) => {
    const keep = Math.max(0, Math.min(8, prefix - i * 8));
    return byte & ((0xff << (8 - keep)) & 0xff);
  });
  const network = fromBytes(bytes, addr.family);
  if (compareIps(network, addr) !== 0) {
    return { ok: false, reason: `host bits are set (did you mean "${network.text}/${prefix}"?)` };
  }
  return { ok: true, cidr: { text: `${addr.text}/${prefix}`, family: addr.family, network: addr, prefix } };
}

function fromBytes(bytes: number[], family: IpFamily): ParsedIp {
  const a = family === 'IPv4' ? new ipaddr.IPv4(bytes) : new ipaddr.IPv6(bytes);
  // Round-trip through text so the canonical-form rules live in parseIp only.
  return parseIp(a.toString()) ?? { text: a.toString(), family, bytes };
}
