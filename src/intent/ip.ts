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
export function parseCidrMasking(text: string): { ok: true; cidr: ParsedCidr; maskedFrom?: string } | { ok: false; reason: string } {
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
  const cidr = { text: `${network.text}/${prefix}`, family: addr.family, network, prefix };
  return compareIps(network, addr) !== 0 ? { ok: true, cidr, maskedFrom: text } : { ok: true, cidr };
}

function fromBytes(bytes: number[], family: IpFamily): ParsedIp {
  const a = family === 'IPv4' ? new ipaddr.IPv4(bytes) : new ipaddr.IPv6(bytes);
  // Round-trip through text so the canonical-form rules live in parseIp only.
  return parseIp(a.toString()) ?? { text: a.toString(), family, bytes };
}

/**
 * Addresses that can never be a service IP: nothing may answer ARP/NDP for
 * them or hand them out. The keys are ipaddr.js `range()` names.
 */
const NEVER_SERVICE: Record<IpFamily, readonly { range: string; cidr: string; what: string }[]> = {
  IPv4: [
    { range: 'unspecified', cidr: '0.0.0.0/8', what: 'the unspecified range 0.0.0.0/8 ("this network", RFC 1122)' },
    { range: 'loopback', cidr: '127.0.0.0/8', what: 'loopback (127.0.0.0/8)' },
    { range: 'multicast', cidr: '224.0.0.0/4', what: 'multicast (224.0.0.0/4)' },
    { range: 'broadcast', cidr: '255.255.255.255/32', what: 'the limited broadcast address (255.255.255.255)' },
  ],
  IPv6: [
    { range: 'unspecified', cidr: '::/128', what: 'the unspecified address (::)' },
    { range: 'loopback', cidr: '::1/128', what: 'loopback (::1)' },
    { range: 'multicast', cidr: 'ff00::/8', what: 'multicast (ff00::/8)' },
  ],
};

/** Why `ip` can never be a service IP (announced or allocated), or undefined. */
export function neverServiceReason(ip: ParsedIp): string | undefined {
  const range = ipaddr.parse(ip.text).range();
  const hit = NEVER_SERVICE[ip.family].find((r) => r.range === range);
  return hit ? `${ip.text} is ${hit.what}: it can never be a service IP` : undefined;
}

const toBigInt = (bytes: readonly number[]): bigint => bytes.reduce((acc, b) => (acc << 8n) | BigInt(b), 0n);

/**
 * Why a pool block (`first`..`last`, one family) can never be right, or
 * undefined: the whole address space, or any overlap with the ranges above,
 * whose addresses would be handed out. A block's own first and last
 * addresses (a /24's .0 and .255) are fine: Cilium allows them.
 */
export function neverServiceRangeReason(first: ParsedIp, last: ParsedIp): string | undefined {
  const lo = toBigInt(first.bytes);
  const hi = toBigInt(last.bytes);
  const bits = first.family === 'IPv4' ? 32 : 128;
  if (lo === 0n && hi === (1n << BigInt(bits)) - 1n) {
    return `it is the whole ${first.family} address space, which includes unspecified, loopback and multicast addresses`;
  }
  for (const r of NEVER_SERVICE[first.family]) {
    const [net, prefix] = ipaddr.parseCIDR(r.cidr);
    const rlo = toBigInt(net.toByteArray());
    const rhi = rlo + (1n << BigInt(bits - prefix)) - 1n;
    if (lo <= rhi && rlo <= hi) return `it includes ${r.what}, which can never be a service IP`;
  }
  return undefined;
}
