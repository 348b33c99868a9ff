/**
 * The policy maps' names and byte layouts against bpf/policy.bpf.c: every map
 * and program name the agent opens exists in the C source, and each codec
 * writes the exact bytes of its C struct and reads them back.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  decodeDropKey,
  encodeDropKey,
  familyOfIp,
  genCodec,
  lpm4Codec,
  lpm6Codec,
  svc4Codec,
  svc6Codec,
  writeLpmValue,
  MAP_DROPS,
  MAP_GEN_HW,
  MAP_LPM_V4,
  MAP_LPM_V6,
  MAP_SVC_V4,
  MAP_SVC_V6,
  MAX_L4,
  POL_VAL_SIZE,
  PROGRAM_NAME,
} from '../../../src/datapath/policy/layout.js';
import { bpfSource, declaredMaps, entryPoint } from '../../helpers/bpf-source.js';

const C_SOURCE = bpfSource('policy.bpf.c');

test('every map name is a map declared in bpf/policy.bpf.c', () => {
  const declared = declaredMaps(C_SOURCE);
  assert.ok(declared.size >= 6, 'the C source declares its maps');
  for (const name of [MAP_SVC_V4, MAP_SVC_V6, MAP_LPM_V4, MAP_LPM_V6, MAP_DROPS, MAP_GEN_HW]) {
    assert.ok(declared.has(name), `map ${JSON.stringify(name)} declared in the C source (has ${[...declared].join(', ')})`);
  }
  assert.equal(new Set([MAP_SVC_V4, MAP_SVC_V6, MAP_LPM_V4, MAP_LPM_V6, MAP_DROPS, MAP_GEN_HW]).size, 6, 'six distinct maps');
});

test('the program name is the tc entry point of bpf/policy.bpf.c', () => {
  assert.ok(PROGRAM_NAME.length > 0);
  assert.match(C_SOURCE, entryPoint('tc', PROGRAM_NAME));
});

test('MAX_L4 and the LPM value size match struct pol_val', () => {
  const m = /#define\s+MAX_L4\s+(\d+)/.exec(C_SOURCE);
  assert.ok(m);
  assert.equal(MAX_L4, Number(m[1]));
  // struct pol_val { u32 n; u32 pad; struct l4_entry e[MAX_L4]; }, l4_entry = 12 bytes
  assert.equal(POL_VAL_SIZE, 8 + MAX_L4 * 12);
  assert.equal(lpm4Codec.valueSize, POL_VAL_SIZE);
  assert.equal(lpm6Codec.valueSize, POL_VAL_SIZE);
});

test('svc_val: slot, svc_id (u32 LE) then gen (u64 LE), 16 bytes, round trip', () => {
  for (const codec of [svc4Codec, svc6Codec]) {
    assert.equal(codec.valueSize, 16);
    const v = { slot: 0x01020304, svcId: 0xa0b0c0d0, gen: 0x1122334455667788n };
    const b = codec.encodeValue(v);
    assert.deepEqual([...b], [0x04, 0x03, 0x02, 0x01, 0xd0, 0xc0, 0xb0, 0xa0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
    assert.deepEqual(codec.decodeValue(b), v);
    assert.deepEqual(codec.decodeValue(Buffer.from(b)), { slot: 0x01020304, svcId: 0xa0b0c0d0, gen: 0x1122334455667788n });
  }
  assert.equal(svc4Codec.keySize, 4);
  assert.equal(svc6Codec.keySize, 16);
});

test('gen_hw: a u32 key and a u64 LE value, round trip', () => {
  assert.equal(genCodec.keySize, 4);
  assert.equal(genCodec.valueSize, 8);
  const k = genCodec.encodeKey(0x01020304);
  assert.deepEqual([...k], [0x04, 0x03, 0x02, 0x01]);
  assert.equal(genCodec.decodeKey(k), 0x01020304);
  assert.equal(genCodec.decodeKey(genCodec.encodeKey(0)), 0);
  const v = genCodec.encodeValue(0x0102030405060708n);
  assert.deepEqual([...v], [8, 7, 6, 5, 4, 3, 2, 1]);
  assert.equal(genCodec.decodeValue(v), 0x0102030405060708n);
  assert.equal(genCodec.decodeValue(genCodec.encodeValue(2n ** 64n - 1n)), 2n ** 64n - 1n);
});

test('familyOfIp: only IPv6 text has a colon', () => {
  assert.equal(familyOfIp('192.0.2.1'), 4);
  assert.equal(familyOfIp('0.0.0.0'), 4);
  assert.equal(familyOfIp('2001:db8::1'), 6);
  assert.equal(familyOfIp('::'), 6);
  assert.equal(familyOfIp('::ffff:192.0.2.1'), 6);
});

test('lpm_key4 / lpm_key6: prefixlen (32 + len) and slot LE, then the address in network order', () => {
  assert.equal(lpm4Codec.keySize, 12);
  const k4 = lpm4Codec.encodeKey({ slot: 0x0a0b, family: 4, addr: 0xc0000280n, len: 25 });
  assert.deepEqual([...k4], [57, 0, 0, 0, 0x0b, 0x0a, 0, 0, 0xc0, 0x00, 0x02, 0x80]);
  assert.deepEqual(lpm4Codec.decodeKey(k4), { slot: 0x0a0b, family: 4, addr: 0xc0000280n, len: 25 });

  assert.equal(lpm6Codec.keySize, 24);
  const addr = (0x20010db8n << 96n) | 0x0102n;
  const k6 = lpm6Codec.encodeKey({ slot: 7, family: 6, addr, len: 64 });
  assert.equal(k6.length, 24);
  assert.deepEqual([...k6], [96, 0, 0, 0, 7, 0, 0, 0, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x02]);
  assert.deepEqual(lpm6Codec.decodeKey(k6), { slot: 7, family: 6, addr, len: 64 });
});

test('pol_val: n, then 12-byte l4_entry records (proto, flags, lo, hi, pad, rule), zero padded to POL_VAL_SIZE', () => {
  const entries = [
    { proto: 6, deny: true, any: false, lo: 0x0150, hi: 0x01bb, rule: 0x01020304 },
    { proto: 0, deny: true, any: true, lo: 0, hi: 65535, rule: 70000 },
    { proto: 17, deny: false, any: false, lo: 53, hi: 53, rule: 1 },
  ];
  const b = lpm6Codec.encodeValue(entries);
  assert.equal(b.length, POL_VAL_SIZE);
  assert.deepEqual([...b.subarray(0, 8)], [3, 0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual([...b.subarray(8, 20)], [6, 1, 0x50, 0x01, 0xbb, 0x01, 0, 0, 0x04, 0x03, 0x02, 0x01]);
  assert.deepEqual([...b.subarray(20, 32)], [0, 3, 0, 0, 0xff, 0xff, 0, 0, 0x70, 0x11, 0x01, 0x00]);
  assert.deepEqual([...b.subarray(32, 44)], [17, 0, 53, 0, 53, 0, 0, 0, 1, 0, 0, 0]);
  assert.ok(b.subarray(44).every((x) => x === 0), 'unused entries are zero');
  assert.deepEqual(lpm6Codec.decodeValue(b), entries);
  assert.deepEqual(lpm4Codec.decodeValue(lpm4Codec.encodeValue(entries)), entries);
  assert.deepEqual(lpm4Codec.decodeValue(lpm4Codec.encodeValue([])), []);
});

test('a prefix holds exactly MAX_L4 L4 entries; one more is a RangeError naming both counts', () => {
  const e = { proto: 6, deny: false, any: false, lo: 1, hi: 2, rule: 3 };
  const full = Array.from({ length: MAX_L4 }, (_, i) => ({ ...e, rule: i + 1 }));
  const b = Buffer.alloc(POL_VAL_SIZE);
  writeLpmValue(full, b, 0);
  assert.equal(b.readUInt32LE(0), MAX_L4);
  assert.deepEqual(lpm4Codec.decodeValue(b), full);
  const over = [...full, e];
  assert.throws(() => writeLpmValue(over, Buffer.alloc(POL_VAL_SIZE + 12), 0), (err: unknown) => {
    assert.ok(err instanceof RangeError);
    assert.equal(err.message, `at most ${MAX_L4} L4 entries per prefix, got ${MAX_L4 + 1}`);
    return true;
  });
  assert.throws(() => lpm6Codec.encodeValue(over), RangeError);
});

test('drop_key: svc_id then rule, u32 LE each, round trip', () => {
  const b = encodeDropKey({ svcId: 0x01020304, rule: 0x0a0b0c0d });
  assert.deepEqual([...b], [4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a]);
  assert.deepEqual(decodeDropKey(b), { svcId: 0x01020304, rule: 0x0a0b0c0d });
  assert.deepEqual(decodeDropKey(encodeDropKey({ svcId: 0, rule: 0 })), { svcId: 0, rule: 0 });
});
