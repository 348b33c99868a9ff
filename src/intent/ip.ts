/**
 * What the intent layer adds to addresses: which ones can never be a
 * service IP. Parsing and formatting live in `core/addr.ts`; they are
 * re-exported here because manifests' callers reach them through the
 * intent index.
 */
import {
  cidrRange,
  parseCidr,
  prefixSize,
  rangesOverlap,
  specialRange,
  toBigInt,
  type AddrRange,
  type IpFamily,
  type ParsedIp,
} from '../core/addr.js';

export {
  compareIps,
  isIp,
  normalizeIp,
  parseCidr,
  parseCidrMasking,
  parseIp,
  type CidrResult,
  type IpFamily,
  type ParsedCidr,
  type ParsedIp,
} from '../core/addr.js';

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
  const range = specialRange(ip);
  const hit = NEVER_SERVICE[ip.family].find((r) => r.range === range);
  return hit ? `${ip.text} is ${hit.what}: it can never be a service IP` : undefined;
}

/**
 * Why a pool block (`first`..`last`, one family) can never be right, or
 * undefined: the whole address space, or any overlap with the ranges above,
 * whose addresses would be handed out. A block's own first and last
 * addresses (a /24's .0 and .255) are fine: Cilium allows them.
 */
export function neverServiceRangeReason(first: ParsedIp, last: ParsedIp): string | undefined {
  const block: AddrRange = { family: first.family, first: toBigInt(first.bytes), last: toBigInt(last.bytes) };
  if (block.first === 0n && block.last === prefixSize(block.family, 0) - 1n) {
    return `it is the whole ${first.family} address space, which includes unspecified, loopback and multicast addresses`;
  }
  for (const r of NEVER_SERVICE[first.family]) {
    const parsed = parseCidr(r.cidr);
    if (parsed.ok && rangesOverlap(block, cidrRange(parsed.cidr))) return `it includes ${r.what}, which can never be a service IP`;
  }
  return undefined;
}
