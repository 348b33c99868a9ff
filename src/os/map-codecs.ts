/**
 * The small codecs every program's array-like maps share: a `__u32` key in
 * host order (an ifindex, a config slot, an id, a table index) and `__u32` /
 * `__u64` values. One copy, so the byte order of these keys is decided once.
 */
import type { MapCodec } from './bpf-map.js';

/** A `__u32` key in host order (x86_64/arm64: little endian). */
export const u32Key: Pick<MapCodec<number, unknown>, 'keySize' | 'encodeKey' | 'decodeKey' | 'writeKey'> = {
  keySize: 4,
  encodeKey(n) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    return b;
  },
  writeKey(n, buf, offset) {
    buf.writeUInt32LE(n, offset);
  },
  decodeKey(b) {
    return b.readUInt32LE(0);
  },
};

/** `__u32` → `__u32` (an id table, a map-in-map's inner fd on write / id on read). */
export const u32Codec: MapCodec<number, number> = {
  ...u32Key,
  valueSize: 4,
  encodeValue(v) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    return b;
  },
  decodeValue(b) {
    return b.readUInt32LE(0);
  },
};

/** `__u32` → `__u64` (config slots: nanoseconds, sizes, addresses). */
export const u64Codec: MapCodec<number, bigint> = {
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
