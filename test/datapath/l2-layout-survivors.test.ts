/**
 * The L2 responder's layout beyond layout.test.ts: every map and program name
 * and config slot against bpf/l2_responder.bpf.c, keys written at an offset
 * (as a batch packs them), exact value bytes, an address of the wrong family
 * refused rather than written as zeros, and the conflict event's size bound.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CONFIG_LIVENESS_NS,
  CONFIG_MAX_AGE_NS,
  CONFLICT_EVENT_SIZE,
  MAP_CONFLICT_EVENTS,
  MAP_INTERFACES,
  MAP_RESPONDER_V4,
  MAP_RESPONDER_V6,
  MAP_RUNTIME_CONFIG,
  PROGRAM_NAME,
  decodeConflictEvent,
  interfacesCodec,
  responderKey6Codec,
  responderKeyCodec,
} from '../../src/datapath/l2-responder/layout.js';
import { bpfSource, declaredMaps, entryPoint } from '../helpers/bpf-source.js';

const source = bpfSource('l2_responder.bpf.c');

test('every map, the program and the config slots are named as bpf/l2_responder.bpf.c declares them', () => {
  const maps = declaredMaps(source);
  for (const name of [MAP_RESPONDER_V4, MAP_RESPONDER_V6, MAP_INTERFACES, MAP_RUNTIME_CONFIG, MAP_CONFLICT_EVENTS]) assert.ok(maps.has(name), name);
  assert.match(source, entryPoint('tc', PROGRAM_NAME));
  assert.match(source, new RegExp(`CONFIG_LIVENESS_NS = ${CONFIG_LIVENESS_NS},`));
  assert.match(source, new RegExp(`CONFIG_MAX_AGE_NS = ${CONFIG_MAX_AGE_NS},`));
  assert.equal(CONFLICT_EVENT_SIZE, 1 + 1 + 2 + 4 + 16 + 6 + 2 + 8, 'struct conflict_event, field by field');
});

test('keys written at an offset (a batch buffer) land there and nowhere else', () => {
  const b = Buffer.alloc(24, 0xee);
  responderKeyCodec.writeKey!({ ip: '198.51.100.7', ifindex: 0x01020304 }, b, 8);
  assert.deepEqual([...b.subarray(0, 8)], Array(8).fill(0xee));
  assert.deepEqual([...b.subarray(8, 16)], [198, 51, 100, 7, 4, 3, 2, 1]);
  assert.deepEqual([...b.subarray(16)], Array(8).fill(0xee));
  const b6 = Buffer.alloc(60, 0xee);
  responderKey6Codec.writeKey!({ ip: '2001:db8::7', ifindex: 0x01020304 }, b6, 20);
  assert.deepEqual([...b6.subarray(20, 40)], [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 4, 3, 2, 1]);
  assert.ok(b6.subarray(0, 20).every((x) => x === 0xee) && b6.subarray(40).every((x) => x === 0xee));
  assert.deepEqual(responderKey6Codec.decodeKey(b6.subarray(20, 40)), { ip: '2001:db8::7', ifindex: 0x01020304 });
});

test('an IPv4 key that is not a canonical dotted quad is refused, never written as 0.0.0.0', () => {
  for (const ip of ['198.51.100.07', '2001:db8::7', 'eth0']) {
    assert.throws(() => responderKeyCodec.encodeKey({ ip, ifindex: 1 }), /not an IPv4 address/, ip);
  }
});

test('values: replies then conflicts, each a little-endian u64; the sizes match the C structs', () => {
  assert.deepEqual([responderKeyCodec.keySize, responderKeyCodec.valueSize, responderKey6Codec.keySize, responderKey6Codec.valueSize], [8, 16, 20, 16]);
  const v = responderKeyCodec.encodeValue({ replies: 0x0102n, conflicts: 0x0304n });
  assert.deepEqual([...v], [2, 1, 0, 0, 0, 0, 0, 0, 4, 3, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(responderKey6Codec.decodeValue(v), { replies: 0x0102n, conflicts: 0x0304n });
  assert.equal(interfacesCodec.valueSize, 8);
  assert.deepEqual(interfacesCodec.decodeValue(Buffer.from([2, 0, 0x5e, 0, 0x53, 1, 0xff, 0xff])), { mac: '02:00:5e:00:53:01' }, 'the padding is not part of the MAC');
});

test('a conflict event of exactly 40 bytes is read; the IPv4 address is the first 4 of its 16 bytes', () => {
  const b = Buffer.alloc(CONFLICT_EVENT_SIZE);
  b[0] = 4;
  b.writeUInt16BE(1, 2);
  Buffer.from([198, 51, 100, 9, 1, 1, 1, 1]).copy(b, 8);
  assert.equal(decodeConflictEvent(b).ip, '198.51.100.9');
  assert.equal(decodeConflictEvent(b).op, 1);
  assert.throws(() => decodeConflictEvent(b.subarray(0, 39)), { message: 'conflict event of 39 bytes, expected 40' });
  b[0] = 0;
  assert.throws(() => decodeConflictEvent(b), { message: 'conflict event of family 0, expected 4 or 6' });
});
