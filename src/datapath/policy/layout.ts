/**
 * Byte layouts of bpf/policy.bpf.c's maps (keep in sync with the C structs).
 * Multi-byte integers are host order (little-endian on every platform herald
 * runs on) except addresses, which are network order.
 */
import { isIpv4, mustParseIp } from '../../core/addr.js';
import type { MapCodec } from '../../os/bpf-map.js';
import type { PolicyL4Entry } from '../tables/service-policy.js';

export const PROGRAM_NAME = 'herald_policy';
export const MAP_SVC_V4 = 'svc_v4';
export const MAP_SVC_V6 = 'svc_v6';
export const MAP_LPM_V4 = 'lpm_v4';
export const MAP_LPM_V6 = 'lpm_v6';
export const MAP_DROPS = 'drops';

export const MAX_L4 = 16;
const F_DENY = 1;
const F_ANY = 2;
const ENTRY_SIZE = 12;
export const POL_VAL_SIZE = 8 + MAX_L4 * ENTRY_SIZE;

export interface SvcValue {
  readonly slot: number;
  readonly svcId: number;
}

export interface LpmKey {
  readonly slot: number;
  readonly family: 4 | 6;
  readonly addr: bigint;
  /** Source prefix length (the slot's 32 bits are added in the encoding). */
  readonly len: number;
}

function addrBytes(addr: bigint, bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  let v = addr;
  for (let i = bytes - 1; i >= 0; i--) {
    b[i] = Number(v & 255n);
    v >>= 8n;
  }
  return b;
}

function bytesAddr(b: Buffer): bigint {
  let v = 0n;
  for (const x of b) v = (v << 8n) | BigInt(x);
  return v;
}

const svcValue = {
  valueSize: 8,
  encodeValue(v: SvcValue): Buffer {
    const b = Buffer.alloc(8);
    b.writeUInt32LE(v.slot, 0);
    b.writeUInt32LE(v.svcId, 4);
    return b;
  },
  decodeValue(b: Buffer): SvcValue {
    return { slot: b.readUInt32LE(0), svcId: b.readUInt32LE(4) };
  },
};

/** Keys are service IPs as text. */
export const svc4Codec: MapCodec<string, SvcValue> = {
  keySize: 4,
  encodeKey: (ip) => Buffer.from(mustParseIp(ip).bytes),
  decodeKey: (b) => [...b].join('.'),
  ...svcValue,
};

export const svc6Codec: MapCodec<string, SvcValue> = {
  keySize: 16,
  encodeKey: (ip) => Buffer.from(mustParseIp(ip).bytes),
  decodeKey: (b) => mustParseIp(formatV6(b)).text,
  ...svcValue,
};

function formatV6(b: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  return groups.join(':');
}

export function familyOfIp(ip: string): 4 | 6 {
  return isIpv4(ip) ? 4 : 6;
}

function lpmCodec(family: 4 | 6): MapCodec<LpmKey, readonly PolicyL4Entry[]> {
  const bytes = family === 4 ? 4 : 16;
  return {
    keySize: 8 + bytes,
    valueSize: POL_VAL_SIZE,
    encodeKey(k) {
      const b = Buffer.alloc(8 + bytes);
      b.writeUInt32LE(32 + k.len, 0);
      b.writeUInt32LE(k.slot, 4);
      addrBytes(k.addr, bytes).copy(b, 8);
      return b;
    },
    decodeKey(b) {
      return { len: b.readUInt32LE(0) - 32, slot: b.readUInt32LE(4), family, addr: bytesAddr(b.subarray(8)) };
    },
    encodeValue(entries) {
      if (entries.length > MAX_L4) throw new RangeError(`at most ${MAX_L4} L4 entries per prefix, got ${entries.length}`);
      const b = Buffer.alloc(POL_VAL_SIZE);
      b.writeUInt32LE(entries.length, 0);
      entries.forEach((e, i) => {
        const o = 8 + i * ENTRY_SIZE;
        b.writeUInt8(e.proto, o);
        b.writeUInt8((e.deny ? F_DENY : 0) | (e.any ? F_ANY : 0), o + 1);
        b.writeUInt16LE(e.lo, o + 2);
        b.writeUInt16LE(e.hi, o + 4);
        b.writeUInt32LE(e.rule, o + 8);
      });
      return b;
    },
    decodeValue(b) {
      const n = Math.min(b.readUInt32LE(0), MAX_L4);
      const out: PolicyL4Entry[] = [];
      for (let i = 0; i < n; i++) {
        const o = 8 + i * ENTRY_SIZE;
        const flags = b.readUInt8(o + 1);
        out.push({ proto: b.readUInt8(o), deny: (flags & F_DENY) !== 0, any: (flags & F_ANY) !== 0, lo: b.readUInt16LE(o + 2), hi: b.readUInt16LE(o + 4), rule: b.readUInt32LE(o + 8) });
      }
      return out;
    },
  };
}

export const lpm4Codec = lpmCodec(4);
export const lpm6Codec = lpmCodec(6);

export interface DropKey {
  readonly svcId: number;
  readonly rule: number;
}

export function encodeDropKey(k: DropKey): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32LE(k.svcId, 0);
  b.writeUInt32LE(k.rule, 4);
  return b;
}

export function decodeDropKey(b: Buffer): DropKey {
  return { svcId: b.readUInt32LE(0), rule: b.readUInt32LE(4) };
}
