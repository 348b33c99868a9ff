/**
 * The L2 responder's map codecs: exact byte layouts (they mirror
 * bpf/l2_responder.bpf.c) and round-trips.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeConflictEvent, interfacesCodec, responderKeyCodec, runtimeConfigCodec } from '../../src/datapath/l2-responder/layout.js';

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

test('conflict event: the struct as the program writes it; a short one is refused', () => {
  const b = Buffer.alloc(24);
  Buffer.from([192, 0, 2, 10]).copy(b, 0);
  b.writeUInt32LE(7, 4);
  Buffer.from([2, 0, 0, 0, 0, 0xbb]).copy(b, 8);
  b.writeUInt16BE(2, 14);
  b.writeBigUInt64LE(123n, 16);
  assert.deepEqual(decodeConflictEvent(b), { ip: '192.0.2.10', ifindex: 7, mac: '02:00:00:00:00:bb', op: 2, ktimeNs: 123n });
  assert.throws(() => decodeConflictEvent(b.subarray(0, 20)), /conflict event of 20 bytes, expected 24/);
});
