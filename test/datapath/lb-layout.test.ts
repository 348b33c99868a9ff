/**
 * The load balancer's map codecs mirror bpf/lb.bpf.c byte for byte.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { backendCodec, configCodec, ct4Codec, ct6Codec, maglevTableCodec, service4Codec, service6Codec, CT_EGRESS } from '../../src/datapath/lb/layout.js';

test('lb4_key: VIP and port in network order, then the protocol', () => {
  const k = service4Codec.encodeKey({ vip: '198.51.100.10', port: 80, proto: 6 });
  assert.deepEqual([...k], [198, 51, 100, 10, 0, 80, 6, 0]);
  assert.deepEqual(service4Codec.decodeKey(k), { vip: '198.51.100.10', port: 80, proto: 6 });
  assert.equal(service6Codec.keySize, 20);
  assert.deepEqual(service6Codec.decodeKey(service6Codec.encodeKey({ vip: '2001:db8::1', port: 443, proto: 17 })), { vip: '2001:db8::1', port: 443, proto: 17 });
});

test('ct keys (16 / 40 bytes) and entries (80 bytes) round-trip', () => {
  const key = { saddr: '192.0.2.1', daddr: '203.0.113.130', sport: 40000, dport: 8080, proto: 6, dir: CT_EGRESS };
  const kb = ct4Codec.encodeKey(key);
  assert.equal(kb.length, 16);
  assert.deepEqual([...kb.subarray(8, 14)], [0x9c, 0x40, 0x1f, 0x90, 6, 2]);
  assert.deepEqual(ct4Codec.decodeKey(kb), key);
  const key6 = { ...key, saddr: '2001:db8::1', daddr: '2001:db8::2' };
  assert.deepEqual(ct6Codec.decodeKey(ct6Codec.encodeKey(key6)), key6);
  const e = { expiresNs: 123n, packetsFwd: 1n, bytesFwd: 2n, packetsRev: 3n, bytesRev: 4n, backendId: 7, serviceId: 9, natAddr: '198.51.100.10', natPort: 80, flags: 3, createdS: 5, snatPort: 40000 };
  const eb = ct4Codec.encodeValue(e);
  assert.equal(eb.length, 80);
  assert.deepEqual([...eb.subarray(72, 74)], [0x9c, 0x40]);
  assert.equal(eb.readUInt32LE(40), 7);
  assert.deepEqual(ct4Codec.decodeValue(eb), e);
});

test('backend: 16-byte address, port in network order, family, flags', () => {
  const b = backendCodec.encodeValue({ ip: '203.0.113.130', port: 8080, family: 4, flags: 1 });
  assert.equal(b.length, 24);
  assert.deepEqual([...b.subarray(16, 20)], [0x1f, 0x90, 4, 1]);
  assert.deepEqual(backendCodec.decodeValue(b), { ip: '203.0.113.130', port: 8080, family: 4, flags: 1 });
});

test('ct_key6: ports at 32, proto and dir at 36; writeKey (the batch path) writes what encodeKey does, pad zeroed', () => {
  const key6 = { saddr: '2001:db8::1', daddr: '2001:db8::2', sport: 40000, dport: 8080, proto: 17, dir: CT_EGRESS };
  const kb = ct6Codec.encodeKey(key6);
  assert.equal(kb.length, 40);
  assert.deepEqual([...kb.subarray(0, 2)], [0x20, 0x01]);
  assert.equal(kb[31], 2);
  assert.deepEqual([...kb.subarray(32, 40)], [0x9c, 0x40, 0x1f, 0x90, 17, 2, 0, 0]);
  for (const [codec, key] of [
    [ct6Codec, key6],
    [ct4Codec, { ...key6, saddr: '192.0.2.1', daddr: '192.0.2.2' }],
  ] as const) {
    const buf = Buffer.alloc(codec.keySize * 2, 0xff);
    codec.writeKey!(key, buf, codec.keySize);
    assert.deepEqual(buf.subarray(codec.keySize), codec.encodeKey(key));
  }
});

test('the u32 tables share one codec: slot and value in host order', () => {
  assert.deepEqual([...maglevTableCodec.encodeKey(16380)], [0xfc, 0x3f, 0, 0]);
  assert.equal(maglevTableCodec.decodeValue(maglevTableCodec.encodeValue(0xdeadbeef)), 0xdeadbeef);
  assert.equal(configCodec.decodeValue(configCodec.encodeValue(21600n * 1_000_000_000n)), 21600n * 1_000_000_000n);
});
