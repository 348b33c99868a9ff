/**
 * IPv6 Neighbor Discovery over Ethernet (RFC 4861): Neighbor Solicitation and
 * Advertisement frame builders, the ICMPv6 checksum, solicited-node groups,
 * and a strict parser. Pure byte work, shared by the unsolicited-NA sender,
 * tests and benches (the eBPF program has its own C copy of the rules).
 */
import { bytesToIpv6, formatMac, ipv6ToBytes, parseMac } from './addr.js';

export const ETHERTYPE_IPV6 = 0x86dd;
export const IPPROTO_ICMPV6 = 58;
export const ND_NEIGHBOR_SOLICIT = 135;
export const ND_NEIGHBOR_ADVERT = 136;
export const ND_OPT_SOURCE_LL = 1;
export const ND_OPT_TARGET_LL = 2;
export const NA_FLAG_ROUTER = 0x80000000;
export const NA_FLAG_SOLICITED = 0x40000000;
export const NA_FLAG_OVERRIDE = 0x20000000;
export const ALL_NODES = 'ff02::1';
export const ALL_NODES_MAC = '33:33:00:00:00:01';
const ETH_HLEN = 14;
const IPV6_HLEN = 40;
const ND_HDR_LEN = 24;

export interface NdOption {
  type: number;
  /** The option body after type and length; padded with zeros to a multiple of 8 with the header. */
  body: Buffer;
  /** Overrides the length field (units of 8 bytes), to craft malformed options. */
  lengthUnits?: number;
}

export interface NdFields {
  ethDst: string;
  ethSrc: string;
  ipSrc: string;
  ipDst: string;
  hopLimit: number;
  type: number;
  code: number;
  /** The 32-bit word after the checksum: NA flags, reserved (0) in an NS. */
  flags: number;
  target: string;
  options: NdOption[];
}

/** The ICMPv6 checksum of `msg` (its checksum field read as zero) between `src` and `dst` (RFC 8200 8.1). */
export function icmpv6Checksum(src: string | Buffer, dst: string | Buffer, msg: Buffer): number {
  const pseudo = Buffer.alloc(40);
  addrBytes(src).copy(pseudo, 0);
  addrBytes(dst).copy(pseudo, 16);
  pseudo.writeUInt32BE(msg.length, 32);
  pseudo.writeUInt32BE(IPPROTO_ICMPV6, 36);
  const copy = Buffer.from(msg);
  if (copy.length >= 4) copy.writeUInt16BE(0, 2);
  let sum = 0;
  for (const b of [pseudo, copy]) {
    for (let i = 0; i < b.length; i += 2) sum += ((b[i] ?? 0) << 8) | (b[i + 1] ?? 0);
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + Math.floor(sum / 0x10000);
  return ~sum & 0xffff;
}

const ALL_NODES_BYTES = ipv6ToBytes(ALL_NODES);

/**
 * An address's 16 bytes: parsed once per frame, not once per use (parsing the
 * text is most of what building a frame costs — a failover of 1,000 IPs built
 * 1,000 advertisements at ~70 µs each, parsing each address four times).
 */
function addrBytes(ip: string | Buffer): Buffer {
  if (typeof ip !== 'string') return ip;
  return ip === ALL_NODES ? ALL_NODES_BYTES : ipv6ToBytes(ip);
}

function encodeOption(o: NdOption): Buffer {
  const total = Math.ceil((o.body.length + 2) / 8) * 8;
  const b = Buffer.alloc(total);
  b[0] = o.type;
  b[1] = o.lengthUnits ?? total / 8;
  o.body.copy(b, 2);
  return b;
}

/** A link-layer address option (source or target) carrying an Ethernet MAC. */
export function lladdrOption(type: number, mac: string): NdOption {
  return { type, body: parseMac(mac) };
}

/**
 * Builds an NS/NA frame from every field, so tests can also craft malformed
 * ones. `checksum` overrides the computed one; `truncateTo` cuts the frame
 * while the IPv6 payload length still claims the whole message.
 */
export function buildNdFrame(f: NdFields, craft: { checksum?: number; truncateTo?: number } = {}): Buffer {
  const msg = Buffer.concat([Buffer.alloc(ND_HDR_LEN), ...f.options.map(encodeOption)]);
  msg[0] = f.type;
  msg[1] = f.code;
  msg.writeUInt32BE(f.flags >>> 0, 4);
  const src = addrBytes(f.ipSrc);
  const dst = addrBytes(f.ipDst);
  (f.target === f.ipSrc ? src : addrBytes(f.target)).copy(msg, 8);
  msg.writeUInt16BE(craft.checksum ?? icmpv6Checksum(src, dst, msg), 2);
  const head = Buffer.alloc(ETH_HLEN + IPV6_HLEN);
  parseMac(f.ethDst).copy(head, 0);
  parseMac(f.ethSrc).copy(head, 6);
  head.writeUInt16BE(ETHERTYPE_IPV6, 12);
  head[14] = 0x60;
  head.writeUInt16BE(msg.length, 18);
  head[20] = IPPROTO_ICMPV6;
  head[21] = f.hopLimit;
  src.copy(head, 22);
  dst.copy(head, 38);
  const frame = Buffer.concat([head, msg]);
  return craft.truncateTo === undefined ? frame : frame.subarray(0, craft.truncateTo);
}

/** ff02::1:ffXX:XXXX, the group an NS for `ip` is sent to (RFC 4291 2.7.1). */
export function solicitedNodeAddress(ip: string): string {
  const b = ipv6ToBytes(ip);
  const g = Buffer.from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, b[13]!, b[14]!, b[15]!]);
  return bytesToIpv6(g);
}

/** 33:33 + the low 32 bits of an IPv6 multicast group (RFC 2464 7). */
export function multicastMac(group: string): string {
  const b = ipv6ToBytes(group);
  return formatMac(Buffer.from([0x33, 0x33, b[12]!, b[13]!, b[14]!, b[15]!]));
}

/** The Ethernet group an NS for `ip` arrives on: 33:33:ff:XX:XX:XX. */
export function solicitedNodeMac(ip: string): string {
  // 33:33 + ff + the low 24 bits of the address (the group's low 32 bits), from one parse.
  const b = ipv6ToBytes(ip);
  return formatMac(Buffer.from([0x33, 0x33, 0xff, b[13]!, b[14]!, b[15]!]));
}

/** A standard solicitation as ndisc6 sends it: multicast to the solicited-node group, with SLLA. DAD form when `srcIp` is `::`. */
export function neighborSolicitation(opts: { srcMac: string; srcIp: string; target: string; unicast?: { dstMac: string } }): Buffer {
  const dad = opts.srcIp === '::';
  return buildNdFrame({
    ethDst: opts.unicast?.dstMac ?? solicitedNodeMac(opts.target),
    ethSrc: opts.srcMac,
    ipSrc: opts.srcIp,
    ipDst: opts.unicast ? opts.target : solicitedNodeAddress(opts.target),
    hopLimit: 255,
    type: ND_NEIGHBOR_SOLICIT,
    code: 0,
    flags: 0,
    target: opts.target,
    options: dad ? [] : [lladdrOption(ND_OPT_SOURCE_LL, opts.srcMac)],
  });
}

/**
 * The unsolicited advertisement of an ownership change (RFC 4861 7.2.6): to
 * all-nodes, Override set so caches replace the old MAC, Solicited clear,
 * with the Target Link-Layer Address option.
 */
export function unsolicitedAdvertisement(mac: string, ip: string): Buffer {
  return buildNdFrame({
    ethDst: ALL_NODES_MAC,
    ethSrc: mac,
    ipSrc: ip,
    ipDst: ALL_NODES,
    hopLimit: 255,
    type: ND_NEIGHBOR_ADVERT,
    code: 0,
    flags: NA_FLAG_OVERRIDE,
    target: ip,
    options: [lladdrOption(ND_OPT_TARGET_LL, mac)],
  });
}

export interface ParsedNd extends Omit<NdFields, 'options'> {
  checksum: number;
  checksumOk: boolean;
  options: Array<{ type: number; lengthUnits: number; body: Buffer }>;
  /** The link-layer address option: source (NS) or target (NA), if present. */
  lladdr?: string;
  router: boolean;
  solicited: boolean;
  override: boolean;
}

/**
 * Parses an NS or NA frame; undefined for anything else or anything RFC 4861
 * 7.1 says to discard (hop limit, code, checksum, length, options).
 */
export function parseNdFrame(b: Buffer): ParsedNd | undefined {
  if (b.length < ETH_HLEN + IPV6_HLEN + ND_HDR_LEN || b.readUInt16BE(12) !== ETHERTYPE_IPV6) return undefined;
  if (b[14]! >> 4 !== 6 || b[20] !== IPPROTO_ICMPV6) return undefined;
  const len = b.readUInt16BE(18);
  if (len < ND_HDR_LEN || b.length < ETH_HLEN + IPV6_HLEN + len) return undefined;
  const msg = b.subarray(ETH_HLEN + IPV6_HLEN, ETH_HLEN + IPV6_HLEN + len);
  const type = msg[0]!;
  if (type !== ND_NEIGHBOR_SOLICIT && type !== ND_NEIGHBOR_ADVERT) return undefined;
  const ipSrc = bytesToIpv6(b.subarray(22, 38));
  const ipDst = bytesToIpv6(b.subarray(38, 54));
  const options: ParsedNd['options'] = [];
  for (let off = ND_HDR_LEN; off < len; ) {
    if (off + 2 > len) return undefined;
    const units = msg[off + 1]!;
    if (units === 0 || off + units * 8 > len) return undefined;
    options.push({ type: msg[off]!, lengthUnits: units, body: Buffer.from(msg.subarray(off + 2, off + units * 8)) });
    off += units * 8;
  }
  const want = type === ND_NEIGHBOR_SOLICIT ? ND_OPT_SOURCE_LL : ND_OPT_TARGET_LL;
  const ll = options.find((o) => o.type === want && o.lengthUnits === 1);
  const flags = msg.readUInt32BE(4);
  const checksum = msg.readUInt16BE(2);
  const parsed: ParsedNd = {
    ethDst: formatMac(b.subarray(0, 6)),
    ethSrc: formatMac(b.subarray(6, 12)),
    ipSrc,
    ipDst,
    hopLimit: b[21]!,
    type,
    code: msg[1]!,
    flags,
    target: bytesToIpv6(msg.subarray(8, 24)),
    options,
    checksum,
    checksumOk: checksum === icmpv6Checksum(ipSrc, ipDst, msg),
    ...(ll ? { lladdr: formatMac(ll.body) } : {}),
    router: (flags & NA_FLAG_ROUTER) !== 0,
    solicited: (flags & NA_FLAG_SOLICITED) !== 0,
    override: (flags & NA_FLAG_OVERRIDE) !== 0,
  };
  if (parsed.hopLimit !== 255 || parsed.code !== 0 || !parsed.checksumOk) return undefined;
  if (type === ND_NEIGHBOR_SOLICIT && ipSrc === '::' && ll) return undefined;
  return parsed;
}
