/**
 * Byte layouts of the L2 responder's maps, mirroring bpf/l2_responder.bpf.c.
 * Keep both in sync: BpfMap checks the sizes against the kernel at open time.
 */
import type { MapCodec } from '../../os/bpf-map.js';
import { formatMac, ipv4ToBytes, bytesToIpv4, parseMac } from '../../net/addr.js';

/** Names of the maps in the object file; also their pin file names. */
export const MAP_RESPONDER_V4 = 'responder_v4';
export const MAP_INTERFACES = 'interfaces';
export const MAP_RUNTIME_CONFIG = 'runtime_config';
export const PROGRAM_NAME = 'herald_l2_ingress';
/** Ring buffer of conflict events (not pinned: events are transient). */
export const MAP_CONFLICT_EVENTS = 'conflict_events';

export interface ResponderKey {
  /** Dotted-quad IPv4 address. */
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
    ipv4ToBytes(key.ip).copy(b, 0); // network byte order, as the packet carries it
    b.writeUInt32LE(key.ifindex, 4); // host order (x86_64/arm64: little endian)
    return b;
  },
  decodeKey(b) {
    return { ip: bytesToIpv4(b.subarray(0, 4)), ifindex: b.readUInt32LE(4) };
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

export interface InterfaceInfo {
  mac: string;
}

/** A `__u32` key in host order (an ifindex, a config slot), as both array-like maps use. */
const u32Key: Pick<MapCodec<number, unknown>, 'keySize' | 'encodeKey' | 'decodeKey'> = {
  keySize: 4,
  encodeKey(n) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    return b;
  },
  decodeKey(b) {
    return b.readUInt32LE(0);
  },
};

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

export const CONFIG_LIVENESS_NS = 0;
export const CONFIG_MAX_AGE_NS = 1;

export const runtimeConfigCodec: MapCodec<number, bigint> = {
  ...u32Key,
  valueSize: 8,
  encodeValue(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(v);
    return b;
  },
  decodeValue(b) {
    return b.readBigUInt64LE(0);
  },
};

/** A foreign claim of an IP the node answers for, as the program reports it. */
export interface ConflictEvent {
  ip: string;
  ifindex: number;
  /** The MAC the claim asks caches to use (ARP sender hardware address). */
  mac: string;
  /** ARP opcode of the claim: 1 request (announcement), 2 reply. */
  op: number;
  /** CLOCK_MONOTONIC ns of the frame. */
  ktimeNs: bigint;
}

export const CONFLICT_EVENT_SIZE = 24;

/** struct conflict_event: ip4 (network order), ifindex, sha[6], op (network order), ktime_ns. */
export function decodeConflictEvent(b: Buffer): ConflictEvent {
  if (b.length < CONFLICT_EVENT_SIZE) throw new Error(`conflict event of ${b.length} bytes, expected ${CONFLICT_EVENT_SIZE}`);
  return {
    ip: bytesToIpv4(b.subarray(0, 4)),
    ifindex: b.readUInt32LE(4),
    mac: formatMac(b.subarray(8, 14)),
    op: b.readUInt16BE(14),
    ktimeNs: b.readBigUInt64LE(16),
  };
}
