/**
 * Byte forms of addresses for the datapath and packet codecs: IPv4 as a
 * Buffer, and MAC addresses. IP text is parsed and formatted by
 * `core/addr.ts` only.
 */
import { formatIpBytes, isIpv4, parseIp, type IpFamily } from '../core/addr.js';
import { HeraldError } from '../core/errors.js';

// Kept for callers that take all their address helpers from here (the CLI's garp command).
export { isIpv4 };

/**
 * Address bytes by text, for the addresses the datapath handles over and
 * over (a candidate's frames are built by the standby, its map key on the
 * hand-over's path): a full parse of an IPv6 address costs ~10 µs of a
 * 1,000-IP hand-over each. Bounded: emptied when full.
 */
const bytesByText = new Map<string, { family: IpFamily; bytes: Uint8Array }>();
const BYTES_CACHE_MAX = 65_536;

function familyBytes(ip: string, family: IpFamily): Buffer {
  let known = bytesByText.get(ip);
  if (!known) {
    const parsed = parseIp(ip);
    if (!parsed) throw new HeraldError('HERALD_BAD_ARGUMENT', `not an ${family} address: "${ip}"`);
    if (bytesByText.size >= BYTES_CACHE_MAX) bytesByText.clear();
    known = { family: parsed.family, bytes: Uint8Array.from(parsed.bytes) };
    bytesByText.set(ip, known);
  }
  if (known.family !== family) throw new HeraldError('HERALD_BAD_ARGUMENT', `not an ${family} address: "${ip}"`);
  // A copy: callers may write into what they get.
  return Buffer.from(known.bytes);
}

export function ipv4ToBytes(ip: string): Buffer {
  return familyBytes(ip, 'IPv4');
}

export function bytesToIpv4(b: Buffer | Uint8Array): string {
  return formatIpBytes(b.subarray(0, 4));
}

export function ipv6ToBytes(ip: string): Buffer {
  return familyBytes(ip, 'IPv6');
}

export function bytesToIpv6(b: Buffer | Uint8Array): string {
  return formatIpBytes(b.subarray(0, 16));
}

/** The address bytes of either family (4 or 16). */
export function ipToBytes(ip: string): Buffer {
  return isIpv4(ip) ? ipv4ToBytes(ip) : ipv6ToBytes(ip);
}

const MAC_RE = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;

export function isMac(text: string): boolean {
  return MAC_RE.test(text);
}

export function parseMac(mac: string): Buffer {
  if (!isMac(mac)) throw new HeraldError('HERALD_BAD_ARGUMENT', `not a MAC address: "${mac}"`);
  return Buffer.from(mac.split(':').map((h) => parseInt(h, 16)));
}

export function formatMac(b: Buffer | Uint8Array): string {
  return Array.from(b.subarray(0, 6), (x) => x.toString(16).padStart(2, '0')).join(':');
}

/** fe80::/64 with the modified EUI-64 interface identifier of `mac` (RFC 4291 appendix A): an interface's link-local address. */
export function linkLocalOf(mac: string): string {
  const m = parseMac(mac);
  return formatIpBytes(Uint8Array.from([0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0]! ^ 2, m[1]!, m[2]!, 0xff, 0xfe, m[3]!, m[4]!, m[5]!]));
}

export const BROADCAST_MAC = 'ff:ff:ff:ff:ff:ff';
