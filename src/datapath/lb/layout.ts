/**
 * Byte layouts of the load balancer's maps, mirroring bpf/lb.bpf.c. Keep both
 * in sync: BpfMap checks the sizes against the kernel at open time.
 * Addresses are in network order as the packet carries them; ids, counters and
 * times in host order (x86_64/arm64: little endian). IPv6 layouts are defined
 * now (ct_key6, lb6_key) so the IPv6 path is a program change, not a map change.
 */
import type { MapCodec } from '../../os/bpf-map.js';
import { bytesToIpv4, bytesToIpv6, ipv4ToBytes, ipv6ToBytes } from '../../net/addr.js';
import { u32Codec, u32Key, u64Codec } from '../../os/map-codecs.js';

export const LB_INGRESS_PROGRAM = 'herald_lb_ingress';
export const LB_EGRESS_PROGRAM = 'herald_lb_egress';
/** The XDP program (opt-in): the forward path of DNAT services, the same maps. */
export const LB_XDP_PROGRAM = 'herald_lb_xdp';
/** ifindex → ifindex: the interfaces the XDP program may redirect to. */
export const MAP_LB_XDP_TARGETS = 'lb_xdp_targets';
/** The service policy's svc_v4 / svc_v6, shared (pinned at the policy's paths) so XDP never bypasses a policed IP. */
export const MAP_LB_POL_SVC_V4 = 'pol_svc_v4';
export const MAP_LB_POL_SVC_V6 = 'pol_svc_v6';
export const MAP_LB4_SERVICES = 'lb4_services';
export const MAP_LB6_SERVICES = 'lb6_services';
export const MAP_LB_BACKENDS = 'lb_backends';
export const MAP_LB_MAGLEV = 'lb_maglev';
export const MAP_CT4 = 'ct4';
export const MAP_CT6 = 'ct6';
export const MAP_LB_CONFIG = 'lb_config';
export const MAP_LB_STATS = 'lb_stats';
export const MAP_LB4_AFFINITY = 'lb4_affinity';
export const MAP_LB6_AFFINITY = 'lb6_affinity';

export type L4Proto = 'TCP' | 'UDP';
export const PROTO_NUMBER: Record<L4Proto, number> = { TCP: 6, UDP: 17 };
export function protoName(n: number): string {
  return n === 6 ? 'TCP' : n === 17 ? 'UDP' : String(n);
}

export interface ServiceKey {
  vip: string;
  /** 0 with proto 0: the VIP marker (fragments to the VIP are dropped). */
  port: number;
  proto: number;
}

export interface ServiceValue {
  id: number;
  backends: number;
  flags: number;
  affinityTimeoutS: number;
}

export const service4Codec: MapCodec<ServiceKey, ServiceValue> = {
  keySize: 8,
  valueSize: 16,
  encodeKey(k) {
    const b = Buffer.alloc(8);
    ipv4ToBytes(k.vip).copy(b, 0);
    b.writeUInt16BE(k.port, 4);
    b[6] = k.proto;
    return b;
  },
  decodeKey(b) {
    return { vip: bytesToIpv4(b.subarray(0, 4)), port: b.readUInt16BE(4), proto: b[6] ?? 0 };
  },
  encodeValue(v) {
    const b = Buffer.alloc(16);
    b.writeUInt32LE(v.id, 0);
    b.writeUInt16LE(v.backends, 4);
    b.writeUInt16LE(v.flags, 6);
    b.writeUInt32LE(v.affinityTimeoutS, 8);
    return b;
  },
  decodeValue(b) {
    return { id: b.readUInt32LE(0), backends: b.readUInt16LE(4), flags: b.readUInt16LE(6), affinityTimeoutS: b.readUInt32LE(8) };
  },
};

export const service6Codec: MapCodec<ServiceKey, ServiceValue> = {
  ...service4Codec,
  keySize: 20,
  encodeKey(k) {
    const b = Buffer.alloc(20);
    ipv6ToBytes(k.vip).copy(b, 0);
    b.writeUInt16BE(k.port, 16);
    b[18] = k.proto;
    return b;
  },
  decodeKey(b) {
    return { vip: bytesToIpv6(b.subarray(0, 16)), port: b.readUInt16BE(16), proto: b[18] ?? 0 };
  },
};

export const BACKEND_F_TERMINATING = 1;

export interface BackendValue {
  ip: string;
  port: number;
  family: 4 | 6;
  flags: number;
}

function addrBytes(ip: string, family: 4 | 6): Buffer {
  const b = Buffer.alloc(16);
  (family === 4 ? ipv4ToBytes(ip) : ipv6ToBytes(ip)).copy(b, 0);
  return b;
}
function addrText(b: Buffer, family: number): string {
  return family === 6 ? bytesToIpv6(b.subarray(0, 16)) : bytesToIpv4(b.subarray(0, 4));
}

export const backendCodec: MapCodec<number, BackendValue> = {
  ...u32Key,
  valueSize: 24,
  encodeValue(v) {
    const b = Buffer.alloc(24);
    addrBytes(v.ip, v.family).copy(b, 0);
    b.writeUInt16BE(v.port, 16);
    b[18] = v.family;
    b[19] = v.flags;
    return b;
  },
  decodeValue(b) {
    const family = b[18] === 6 ? 6 : 4;
    return { ip: addrText(b, family), port: b.readUInt16BE(16), family, flags: b[19] ?? 0 };
  },
};

export const CT_SERVICE = 1;
export const CT_EGRESS = 2;
/** SNAT services: the reply as it arrives (backend → node:port) → the client. */
export const CT_SNAT = 3;
export const SVC_F_SNAT = 1;
/** Direct server return: only the destination MAC changes; replies bypass the node. */
export const SVC_F_DSR = 2;
/**
 * Backend selection for new flows (none of the two: Maglev, the flow's hash). With
 * either, the service's table holds its active backends in slots 0..backends-1 and
 * a new flow takes slot random % backends, or the next slot in turn (round robin).
 */
export const SVC_F_RANDOM = 4;
export const SVC_F_ROUND_ROBIN = 8;

export const CT_F_SYN_SEEN = 1;
export const CT_F_ESTABLISHED = 2;
export const CT_F_TX_CLOSING = 4;
export const CT_F_RX_CLOSING = 8;
export const CT_F_SEEN_NON_SYN = 16;

export interface CtKey {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
  /** CT_SERVICE (client → VIP) or CT_EGRESS (client → backend). */
  dir: number;
}

export interface CtEntry {
  expiresNs: bigint;
  packetsFwd: bigint;
  bytesFwd: bigint;
  packetsRev: bigint;
  bytesRev: bigint;
  backendId: number;
  serviceId: number;
  /** CT_EGRESS: the VIP; CT_SERVICE: the backend. */
  natAddr: string;
  natPort: number;
  flags: number;
  createdS: number;
  /** CT_EGRESS of an SNAT service: the node's port toward the backend (0: none). */
  snatPort: number;
}

export const CT_KEY4_SIZE = 16;
export const CT_KEY6_SIZE = 40;
export const CT_ENTRY_SIZE = 80;
/** Offsets inside a raw entry, for the GC's scan without decoding. */
export const CT_ENTRY_EXPIRES_OFF = 0;
export const CT_ENTRY_BACKEND_OFF = 40;
export const CT_ENTRY_SNAT_PORT_OFF = 72;

function encodeEntry(v: CtEntry, family: 4 | 6): Buffer {
  const b = Buffer.alloc(CT_ENTRY_SIZE);
  b.writeBigUInt64LE(v.expiresNs, 0);
  b.writeBigUInt64LE(v.packetsFwd, 8);
  b.writeBigUInt64LE(v.bytesFwd, 16);
  b.writeBigUInt64LE(v.packetsRev, 24);
  b.writeBigUInt64LE(v.bytesRev, 32);
  b.writeUInt32LE(v.backendId, 40);
  b.writeUInt32LE(v.serviceId, 44);
  addrBytes(v.natAddr, family).copy(b, 48);
  b.writeUInt16BE(v.natPort, 64);
  b.writeUInt16LE(v.flags, 66);
  b.writeUInt32LE(v.createdS, 68);
  b.writeUInt16BE(v.snatPort, 72);
  return b;
}

function decodeEntry(b: Buffer, family: 4 | 6): CtEntry {
  return {
    expiresNs: b.readBigUInt64LE(0),
    packetsFwd: b.readBigUInt64LE(8),
    bytesFwd: b.readBigUInt64LE(16),
    packetsRev: b.readBigUInt64LE(24),
    bytesRev: b.readBigUInt64LE(32),
    backendId: b.readUInt32LE(40),
    serviceId: b.readUInt32LE(44),
    natAddr: addrText(b.subarray(48, 64), family),
    natPort: b.readUInt16BE(64),
    flags: b.readUInt16LE(66),
    createdS: b.readUInt32LE(68),
    snatPort: b.readUInt16BE(72),
  };
}

/**
 * struct ct_key4 / ct_key6: source and destination addresses (4 or 16 bytes,
 * network order), ports (network order), proto, dir, pad — one field walk for
 * both families, the address width the only difference.
 */
function ctCodec(family: 4 | 6): MapCodec<CtKey, CtEntry> {
  const w = family === 4 ? 4 : 16;
  const keySize = family === 4 ? CT_KEY4_SIZE : CT_KEY6_SIZE;
  const toBytes = family === 4 ? ipv4ToBytes : ipv6ToBytes;
  const toText = family === 4 ? bytesToIpv4 : bytesToIpv6;
  const writeKey = (k: CtKey, b: Buffer, o: number): void => {
    b.fill(0, o, o + keySize);
    toBytes(k.saddr).copy(b, o);
    toBytes(k.daddr).copy(b, o + w);
    b.writeUInt16BE(k.sport, o + 2 * w);
    b.writeUInt16BE(k.dport, o + 2 * w + 2);
    b[o + 2 * w + 4] = k.proto;
    b[o + 2 * w + 5] = k.dir;
  };
  return {
    keySize,
    valueSize: CT_ENTRY_SIZE,
    encodeKey(k) {
      const b = Buffer.alloc(keySize);
      writeKey(k, b, 0);
      return b;
    },
    writeKey,
    decodeKey(b) {
      return {
        saddr: toText(b.subarray(0, w)),
        daddr: toText(b.subarray(w, 2 * w)),
        sport: b.readUInt16BE(2 * w),
        dport: b.readUInt16BE(2 * w + 2),
        proto: b[2 * w + 4] ?? 0,
        dir: b[2 * w + 5] ?? 0,
      };
    },
    encodeValue: (v) => encodeEntry(v, family),
    decodeValue: (b) => decodeEntry(b, family),
  };
}

export const ct4Codec: MapCodec<CtKey, CtEntry> = ctCodec(4);
export const ct6Codec: MapCodec<CtKey, CtEntry> = ctCodec(6);

/** lb_config slots (nanoseconds, and the Maglev table size). */
export const CFG_TCP_SYN_NS = 0;
export const CFG_TCP_ESTABLISHED_NS = 1;
export const CFG_TCP_CLOSING_NS = 2;
export const CFG_NON_TCP_NS = 3;
export const CFG_MAGLEV_M = 4;
export const CFG_SNAT_ADDR4 = 5;
/** The node's IPv6 for SNAT services: bytes 0..7 and 8..15, each read as a little-endian u64. */
export const CFG_SNAT_ADDR6_LO = 6;
export const CFG_SNAT_ADDR6_HI = 7;
/** SNAT source ports [min, max] (0: 32768 and 60999). */
export const CFG_SNAT_PORT_MIN = 8;
export const CFG_SNAT_PORT_MAX = 9;
export const CFG_SLOTS = 10;

/** lb_config and (per CPU) lb_stats: `__u32` slot → `__u64`. */
export const configCodec: MapCodec<number, bigint> = u64Codec;

export const LB_STAT_NAMES = ['forwarded', 'revnat', 'no_backend', 'fragment', 'truncated', 'fib_pass', 'ct_created', 'ct_full', 'ttl', 'icmp_xlate', 'ct_deleted', 'ct_user_deleted', 'snat_exhausted', 'xdp_forwarded', 'xdp_pass'] as const;
/** The lb_stats slot user space adds its conntrack deletions to (GC, flushes). */
export const ST_CT_USER_DELETED = 11;

/**
 * Entries the LRU evicted (table pressure), from the kernel's counters and the
 * live count: every entry was created once (ct_created) and left by exactly one
 * way — deleted by the datapath (ct_deleted), by the GC or a flush
 * (ct_user_deleted), evicted, or it is still there. Exact when the table is
 * quiet; while flows come and go during the count it is off by at most the
 * entries created or removed meanwhile (never below 0).
 */
export function ctEvictions(stats: Readonly<Record<string, bigint>>, live: number): number {
  const n = (stats.ct_created ?? 0n) - (stats.ct_deleted ?? 0n) - (stats.ct_user_deleted ?? 0n) - BigInt(live);
  return n > 0n ? Number(n) : 0;
}

/** A u32 → u32 array (one Maglev table). */
export const maglevTableCodec: MapCodec<number, number> = u32Codec;
/** lb_xdp_targets: ifindex → ifindex. */
export const xdpTargetsCodec: MapCodec<number, number> = u32Codec;

export interface AffinityKey {
  client: string;
  serviceId: number;
}
export interface AffinityEntry {
  backendId: number;
  lastUsedNs: bigint;
}

/** struct affinity_key4 → struct affinity_entry (sessionAffinity: ClientIP). */
export const affinity4Codec: MapCodec<AffinityKey, AffinityEntry> = {
  keySize: 8,
  valueSize: 16,
  encodeKey(k) {
    const b = Buffer.alloc(8);
    ipv4ToBytes(k.client).copy(b, 0);
    b.writeUInt32LE(k.serviceId, 4);
    return b;
  },
  decodeKey(b) {
    return { client: bytesToIpv4(b.subarray(0, 4)), serviceId: b.readUInt32LE(4) };
  },
  encodeValue(v) {
    const b = Buffer.alloc(16);
    b.writeUInt32LE(v.backendId, 0);
    b.writeBigUInt64LE(v.lastUsedNs, 8);
    return b;
  },
  decodeValue(b) {
    return { backendId: b.readUInt32LE(0), lastUsedNs: b.readBigUInt64LE(8) };
  },
};

export interface Affinity6Key {
  client: string;
  serviceId: number;
}

/** struct affinity_key6 (client 16 bytes, service id) → struct affinity_entry. */
export const affinity6Codec: MapCodec<Affinity6Key, AffinityEntry> = {
  keySize: 20,
  valueSize: 16,
  encodeKey(k) {
    const b = Buffer.alloc(20);
    ipv6ToBytes(k.client).copy(b, 0);
    b.writeUInt32LE(k.serviceId, 16);
    return b;
  },
  decodeKey(b) {
    return { client: bytesToIpv6(b.subarray(0, 16)), serviceId: b.readUInt32LE(16) };
  },
  encodeValue: affinity4Codec.encodeValue,
  decodeValue: affinity4Codec.decodeValue,
};
