/**
 * The L2 responder's map codecs: exact byte layouts (they mirror
 * bpf/l2_responder.bpf.c) and round-trips.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeConflictEvent, interfacesCodec, responderKey6Codec, responderKeyCodec, runtimeConfigCodec } from '../../src/datapath/l2-responder/layout.js';

test('responder key: IPv4 in network order, ifindex in host (little-endian) order', () => {
  const b = responderKeyCodec.encodeKey({ ip: '198.51.100.7', ifindex: 0x0102 });
  assert.deepEqual([...b], [198, 51, 100, 7, 0x02, 0x01, 0, 0]);
  assert.deepEqual(responderKeyCodec.decodeKey(b), { ip: '198.51.100.7', ifindex: 0x0102 });
  const v = responderKeyCodec.encodeValue({ replies: 3n, conflicts: 1n << 40n });
  assert.deepEqual(responderKeyCodec.decodeValue(v), { replies: 3n, conflicts: 1n << 40n });
});

test('interfaces and runtime_config: __u32 keys in host order', () => {
  for (const codec of [interfacesCodec, runtimeConfigCodec]) {
    assert.equal(codec.keySize, 4);
    const k = codec.encodeKey(0x01020304);
    assert.deepEqual([...k], [4, 3, 2, 1]);
    assert.equal(codec.decodeKey(k), 0x01020304);
  }
  const mac = interfacesCodec.encodeValue({ mac: '02:00:00:00:02:fa' });
  assert.deepEqual([...mac], [2, 0, 0, 0, 2, 0xfa, 0, 0]);
  assert.deepEqual(interfacesCodec.decodeValue(mac), { mac: '02:00:00:00:02:fa' });
  assert.equal(runtimeConfigCodec.decodeValue(runtimeConfigCodec.encodeValue(5_000_000_000n)), 5_000_000_000n);
});

test('responder key (IPv6): 16 address bytes in network order, then the ifindex in host order', () => {
  assert.equal(responderKey6Codec.keySize, 20);
  assert.equal(responderKey6Codec.valueSize, 16);
  const b = responderKey6Codec.encodeKey({ ip: '2001:db8::7', ifindex: 0x0102 });
  assert.deepEqual([...b], [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0x02, 0x01, 0, 0]);
  assert.deepEqual(responderKey6Codec.decodeKey(b), { ip: '2001:db8::7', ifindex: 0x0102 });
  assert.throws(() => responderKey6Codec.encodeKey({ ip: '198.51.100.7', ifindex: 1 }), /not an IPv6 address/);
});

test('conflict event: the struct as the program writes it, both families; a short one is refused', () => {
  const b = Buffer.alloc(40);
  b[0] = 4;
  b.writeUInt16BE(2, 2);
  b.writeUInt32LE(7, 4);
  Buffer.from([192, 0, 2, 10]).copy(b, 8);
  Buffer.from([2, 0, 0, 0, 0, 0xbb]).copy(b, 24);
  b.writeBigUInt64LE(123n, 32);
  assert.deepEqual(decodeConflictEvent(b), { family: 4, ip: '192.0.2.10', ifindex: 7, mac: '02:00:00:00:00:bb', op: 2, ktimeNs: 123n });
  b[0] = 6;
  b.writeUInt16BE(136, 2);
  Buffer.from([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]).copy(b, 8);
  assert.deepEqual(decodeConflictEvent(b), { family: 6, ip: '2001:db8::10', ifindex: 7, mac: '02:00:00:00:00:bb', op: 136, ktimeNs: 123n });
  assert.throws(() => decodeConflictEvent(b.subarray(0, 24)), /conflict event of 24 bytes, expected 40/);
  b[0] = 5;
  assert.throws(() => decodeConflictEvent(b), /family 5/);
});
