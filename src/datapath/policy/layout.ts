/**
 * Byte layouts of bpf/policy.bpf.c's maps (keep in sync with the C structs).
 * Multi-byte integers are host order (little-endian on every platform herald
 * runs on) except addresses, which are network order.
 */
import { mustParseIp, writeIp } from '../../core/addr.js';
import type { MapCodec } from '../../os/bpf-map.js';
import type { PolicyL4Entry } from '../tables/service-policy.js';

export const PROGRAM_NAME = 'herald_policy';
export const MAP_SVC_V4 = 'svc_v4';
export const MAP_SVC_V6 = 'svc_v6';
export const MAP_LPM_V4 = 'lpm_v4';
export const MAP_LPM_V6 = 'lpm_v6';
export const MAP_DROPS = 'drops';
export const MAP_GEN_HW = 'gen_hw';

export const MAX_L4 = 16;
const F_DENY = 1;
const F_ANY = 2;
const ENTRY_SIZE = 12;
export const POL_VAL_SIZE = 8 + MAX_L4 * ENTRY_SIZE;

export interface SvcValue {
  readonly slot: number;
  readonly svcId: number;
  /** The generation of the revision in that slot: stamps the program's verdict cache (never reused, across runs too). */
  readonly gen: bigint;
}

export interface LpmKey {
  readonly slot: number;
  readonly family: 4 | 6;
  readonly addr: bigint;
  /** Source prefix length (the slot's 32 bits are added in the encoding). */
  readonly len: number;
}

function bytesAddr(b: Buffer): bigint {
  if (b.length === 4) return BigInt(b.readUInt32BE(0));
  return (b.readBigUInt64BE(0) << 64n) | b.readBigUInt64BE(8);
}

const svcValue = {
  valueSize: 16,
  encodeValue(v: SvcValue): Buffer {
    const b = Buffer.alloc(16);
    b.writeUInt32LE(v.slot, 0);
    b.writeUInt32LE(v.svcId, 4);
    b.writeBigUInt64LE(v.gen, 8);
    return b;
  },
  decodeValue(b: Buffer): SvcValue {
    return { slot: b.readUInt32LE(0), svcId: b.readUInt32LE(4), gen: b.readBigUInt64LE(8) };
  },
};

/** gen_hw: one u64, the generation high-water mark. */
export const genCodec: MapCodec<number, bigint> = {
  keySize: 4,
  valueSize: 8,
  encodeKey(k) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(k, 0);
    return b;
  },
  decodeKey: (b) => b.readUInt32LE(0),
  encodeValue(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(v, 0);
    return b;
  },
  decodeValue: (b) => b.readBigUInt64LE(0),
};

/** A service IP's bytes at `offset` (core/addr's writeIp: canonical text parsed in place). */
export { writeIp };

function svcCodec(keySize: 4 | 16, decodeKey: (b: Buffer) => string): MapCodec<string, SvcValue> {
  return {
    keySize,
    encodeKey(ip) {
      const b = Buffer.alloc(keySize);
      writeIp(ip, b, 0);
      return b;
    },
    writeKey: writeIp,
    decodeKey,
    ...svcValue,
  };
}

/** Keys are service IPs as text. */
export const svc4Codec = svcCodec(4, (b) => [...b].join('.'));
export const svc6Codec = svcCodec(16, (b) => mustParseIp(formatV6(b)).text);

function formatV6(b: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  return groups.join(':');
}

/** Service IPs are canonical text: only IPv6 has a colon. */
export function familyOfIp(ip: string): 4 | 6 {
  return ip.includes(':') ? 6 : 4;
}

const MASK64 = (1n << 64n) - 1n;

/** Encodes an LPM key at `offset` (no Buffer per key). */
export function writeLpmKey(k: LpmKey, b: Buffer, offset: number): void {
  b.writeUInt32LE(32 + k.len, offset);
  b.writeUInt32LE(k.slot, offset + 4);
  if (k.family === 4) b.writeUInt32BE(Number(k.addr), offset + 8);
  else {
    b.writeBigUInt64BE(k.addr >> 64n, offset + 8);
    b.writeBigUInt64BE(k.addr & MASK64, offset + 16);
  }
}

/** Encodes a prefix's L4 entry list at `offset` (POL_VAL_SIZE bytes, zero padded: `b` must be zeroed there). */
export function writeLpmValue(entries: readonly PolicyL4Entry[], b: Buffer, offset: number): void {
  if (entries.length > MAX_L4) throw new RangeError(`at most ${MAX_L4} L4 entries per prefix, got ${entries.length}`);
  b.writeUInt32LE(entries.length, offset);
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    const o = offset + 8 + i * ENTRY_SIZE;
    b[o] = e.proto;
    b[o + 1] = (e.deny ? F_DENY : 0) | (e.any ? F_ANY : 0);
    b.writeUInt16LE(e.lo, o + 2);
    b.writeUInt16LE(e.hi, o + 4);
    b.writeUInt32LE(e.rule, o + 8);
  }
}

function lpmCodec(family: 4 | 6): MapCodec<LpmKey, readonly PolicyL4Entry[]> {
  const bytes = family === 4 ? 4 : 16;
  return {
    keySize: 8 + bytes,
    valueSize: POL_VAL_SIZE,
    encodeKey(k) {
      const b = Buffer.alloc(8 + bytes);
      writeLpmKey(k, b, 0);
      return b;
    },
    writeKey: writeLpmKey,
    decodeKey(b) {
      return { len: b.readUInt32LE(0) - 32, slot: b.readUInt32LE(4), family, addr: bytesAddr(b.subarray(8)) };
    },
    encodeValue(entries) {
      const b = Buffer.alloc(POL_VAL_SIZE);
      writeLpmValue(entries, b, 0);
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
