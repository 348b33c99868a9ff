/**
 * ARP for IPv4 over Ethernet (RFC 826, RFC 5227): frame builders and a strict
 * parser. Pure byte work, shared by the gratuitous-ARP sender, tests and benches.
 */
import { BROADCAST_MAC, bytesToIpv4, formatMac, ipv4ToBytes, parseMac } from './addr.js';

export const ETHERTYPE_ARP = 0x0806;
export const ARP_FRAME_LEN = 42; // 14 Ethernet + 28 ARP
export const ARPOP_REQUEST = 1;
export const ARPOP_REPLY = 2;

export interface ArpFields {
  ethDst: string;
  ethSrc: string;
  htype: number;
  ptype: number;
  hlen: number;
  plen: number;
  op: number;
  sha: string;
  spa: string;
  tha: string;
  tpa: string;
}

/** Builds a frame from every field, so tests can also craft malformed ones. */
export function buildArpFrame(f: ArpFields): Buffer {
  const b = Buffer.alloc(ARP_FRAME_LEN);
  parseMac(f.ethDst).copy(b, 0);
  parseMac(f.ethSrc).copy(b, 6);
  b.writeUInt16BE(ETHERTYPE_ARP, 12);
  b.writeUInt16BE(f.htype, 14);
  b.writeUInt16BE(f.ptype, 16);
  b[18] = f.hlen;
  b[19] = f.plen;
  b.writeUInt16BE(f.op, 20);
  parseMac(f.sha).copy(b, 22);
  ipv4ToBytes(f.spa).copy(b, 28);
  parseMac(f.tha).copy(b, 32);
  ipv4ToBytes(f.tpa).copy(b, 38);
  return b;
}

const ZERO_MAC = '00:00:00:00:00:00';

/** A standard who-has request, as arping sends it. */
export function arpRequest(opts: { srcMac: string; srcIp: string; targetIp: string; dstMac?: string }): Buffer {
  return buildArpFrame({
    ethDst: opts.dstMac ?? BROADCAST_MAC,
    ethSrc: opts.srcMac,
    htype: 1,
    ptype: 0x0800,
    hlen: 6,
    plen: 4,
    op: ARPOP_REQUEST,
    sha: opts.srcMac,
    spa: opts.srcIp,
    tha: ZERO_MAC,
    tpa: opts.targetIp,
  });
}

/** RFC 5227 announcement: broadcast request with sender = target = the IP. */
export function gratuitousRequest(mac: string, ip: string): Buffer {
  return arpRequest({ srcMac: mac, srcIp: ip, targetIp: ip });
}

/** The broadcast reply form of gratuitous ARP, for stacks that honour only replies. */
export function gratuitousReply(mac: string, ip: string): Buffer {
  return buildArpFrame({
    ethDst: BROADCAST_MAC,
    ethSrc: mac,
    htype: 1,
    ptype: 0x0800,
    hlen: 6,
    plen: 4,
    op: ARPOP_REPLY,
    sha: mac,
    spa: ip,
    tha: BROADCAST_MAC,
    tpa: ip,
  });
}

/** Parses an IPv4-over-Ethernet ARP frame; undefined for anything else. */
export function parseArpFrame(b: Buffer): ArpFields | undefined {
  if (b.length < ARP_FRAME_LEN || b.readUInt16BE(12) !== ETHERTYPE_ARP) return undefined;
  const fields: ArpFields = {
    ethDst: formatMac(b.subarray(0, 6)),
    ethSrc: formatMac(b.subarray(6, 12)),
    htype: b.readUInt16BE(14),
    ptype: b.readUInt16BE(16),
    hlen: b[18] ?? 0,
    plen: b[19] ?? 0,
    op: b.readUInt16BE(20),
    sha: formatMac(b.subarray(22, 28)),
    spa: bytesToIpv4(b.subarray(28, 32)),
    tha: formatMac(b.subarray(32, 38)),
    tpa: bytesToIpv4(b.subarray(38, 42)),
  };
  if (fields.htype !== 1 || fields.ptype !== 0x0800 || fields.hlen !== 6 || fields.plen !== 4) return undefined;
  return fields;
}
