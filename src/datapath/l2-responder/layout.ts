/**
 * Byte layouts of the L2 responder's maps, mirroring bpf/l2_responder.bpf.c.
 * Keep both in sync: BpfMap checks the sizes against the kernel at open time.
 */
import type { MapCodec } from '../../os/bpf-map.js';
import { u32Key, u64Codec } from '../../os/map-codecs.js';
import { formatMac, ipv4ToBytes, bytesToIpv4, bytesToIpv6, ipv6ToBytes, parseMac } from '../../net/addr.js';
import { formatIpv4At, readCanonicalIpv4 } from '../../core/addr.js';

/** Names of the maps in the object file; also their pin file names. */
export const MAP_RESPONDER_V4 = 'responder_v4';
/** IPv6 addresses answered with Neighbor Advertisements (struct responder_key6). */
export const MAP_RESPONDER_V6 = 'responder_v6';
export const MAP_INTERFACES = 'interfaces';
/** The MACs of the interfaces in `interfaces`, as keys (not pinned: filled by the loading agent). */
export const MAP_OUR_MACS = 'our_macs';
export const MAP_RUNTIME_CONFIG = 'runtime_config';
export const PROGRAM_NAME = 'herald_l2_ingress';
/** Ring buffer of conflict events (not pinned: events are transient). */
export const MAP_CONFLICT_EVENTS = 'conflict_events';

export interface ResponderKey {
  /** Dotted-quad IPv4 address (responder_v4) or canonical IPv6 address (responder_v6). */
  ip: string;
  ifindex: number;
}

export interface ResponderStats {
  replies: bigint;
  conflicts: bigint;
}

export const responderKeyCodec: MapCodec<ResponderKey, ResponderStats> = {
  keySize: 8,
  valueSize: 16,
  encodeKey(key) {
    const b = Buffer.alloc(8);
    this.writeKey!(key, b, 0);
    return b;
  },
  writeKey(key, b, offset) {
    // network byte order, as the packet carries it (a canonical dotted quad without the full parser)
    if (!readCanonicalIpv4(key.ip, b, offset)) ipv4ToBytes(key.ip).copy(b, offset);
    b.writeUInt32LE(key.ifindex, offset + 4); // host order (x86_64/arm64: little endian)
  },
  decodeKey(b) {
    return { ip: formatIpv4At(b, 0), ifindex: b.readUInt32LE(4) };
  },
  encodeValue(v) {
    const b = Buffer.alloc(16);
    b.writeBigUInt64LE(v.replies, 0);
    b.writeBigUInt64LE(v.conflicts, 8);
    return b;
  },
  decodeValue(b) {
    return { replies: b.readBigUInt64LE(0), conflicts: b.readBigUInt64LE(8) };
  },
};

/** struct responder_key6: the 16 address bytes in network order, then the ifindex in host order. */
export const responderKey6Codec: MapCodec<ResponderKey, ResponderStats> = {
  ...responderKeyCodec,
  keySize: 20,
  encodeKey(key) {
    const b = Buffer.alloc(20);
    this.writeKey!(key, b, 0);
    return b;
  },
  writeKey(key, b, offset) {
    ipv6ToBytes(key.ip).copy(b, offset);
    b.writeUInt32LE(key.ifindex, offset + 16);
  },
  decodeKey(b) {
    return { ip: bytesToIpv6(b.subarray(0, 16)), ifindex: b.readUInt32LE(16) };
  },
};

export interface InterfaceInfo {
  mac: string;
}

export const interfacesCodec: MapCodec<number, InterfaceInfo> = {
  ...u32Key,
  valueSize: 8,
  encodeValue(v) {
    const b = Buffer.alloc(8);
    parseMac(v.mac).copy(b, 0);
    return b;
  },
  decodeValue(b) {
    return { mac: formatMac(b.subarray(0, 6)) };
  },
};

/** struct mac_key: the MAC, two zero bytes; the value (__u32) is unused. */
export const ourMacsCodec: MapCodec<string, number> = {
  keySize: 8,
  valueSize: 4,
  encodeKey(mac) {
    const b = Buffer.alloc(8);
    parseMac(mac).copy(b, 0);
    return b;
  },
  decodeKey(b) {
    return formatMac(b.subarray(0, 6));
  },
  encodeValue(v) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v, 0);
    return b;
  },
  decodeValue(b) {
    return b.readUInt32LE(0);
  },
};

export const CONFIG_LIVENESS_NS = 0;
export const CONFIG_MAX_AGE_NS = 1;

/** Runtime config slots (`__u64`, host order). */
export const runtimeConfigCodec: MapCodec<number, bigint> = u64Codec;

/** A foreign claim of an IP the node answers for, as the program reports it. */
export interface ConflictEvent {
  family: 4 | 6;
  ip: string;
  ifindex: number;
  /** The MAC the claim asks caches to use (ARP sender hardware address; NDP link-layer option or frame source). */
  mac: string;
  /** IPv4: ARP opcode of the claim (1 request/announcement, 2 reply). IPv6: ICMPv6 type (135 NS, 136 NA). */
  op: number;
  /** CLOCK_MONOTONIC ns of the frame. */
  ktimeNs: bigint;
}

export const CONFLICT_EVENT_SIZE = 40;

/** struct conflict_event: family, pad, op (network order), ifindex, ip[16], sha[6], pad[2], ktime_ns. */
export function decodeConflictEvent(b: Buffer): ConflictEvent {
  if (b.length < CONFLICT_EVENT_SIZE) throw new Error(`conflict event of ${b.length} bytes, expected ${CONFLICT_EVENT_SIZE}`);
  const family = b[0];
  if (family !== 4 && family !== 6) throw new Error(`conflict event of family ${family}, expected 4 or 6`);
  return {
    family,
    ip: family === 4 ? bytesToIpv4(b.subarray(8, 12)) : bytesToIpv6(b.subarray(8, 24)),
    ifindex: b.readUInt32LE(4),
    mac: formatMac(b.subarray(24, 30)),
    op: b.readUInt16BE(2),
    ktimeNs: b.readBigUInt64LE(32),
  };
}
