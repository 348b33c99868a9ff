/**
 * The policy maps' byte layouts as the batch writer encodes them in place:
 * service IPs (canonical text fast paths against the full parser) and LPM
 * keys/values (round trip through the codecs the map reads with).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mustParseIp } from '../../../src/core/addr.js';
import { lpm4Codec, lpm6Codec, svc4Codec, svc6Codec, writeIp, writeLpmKey, writeLpmValue, POL_VAL_SIZE } from '../../../src/datapath/policy/layout.js';

test('service IPs are written as the full parser reads them, canonical or not', () => {
  for (const ip of ['2001:db8:ffff::1', '::1', '::', '2001:db8::', '1:2:3:4:5:6:7:8', '2001:db8::a:0:0:1', '::ffff:192.0.2.1', '2001:DB8::1', '192.0.2.1', '198.51.100.255', '0.0.0.0']) {
    const want = Buffer.from(mustParseIp(ip).bytes);
    const b = Buffer.alloc(want.length + 4, 0xee);
    writeIp(ip, b, 2);
    assert.deepEqual(b.subarray(2, 2 + want.length), want, ip);
    assert.equal(b[0], 0xee, 'nothing written before the offset');
    assert.equal(b[want.length + 2], 0xee, 'nothing written after the key');
  }
  assert.equal(svc6Codec.decodeKey(svc6Codec.encodeKey('2001:db8::10')), '2001:db8::10');
  assert.equal(svc4Codec.decodeKey(svc4Codec.encodeKey('198.51.100.10')), '198.51.100.10');
});

test('LPM keys and values encoded in place decode back to themselves', () => {
  const v6 = { slot: 17, family: 6 as const, addr: (0x20010db8n << 96n) | (0xabcdn << 64n) | 0x1234n, len: 127 };
  const v4 = { slot: 3, family: 4 as const, addr: 0xc0000280n, len: 25 };
  const b = Buffer.alloc(64);
  writeLpmKey(v6, b, 5);
  assert.deepEqual(lpm6Codec.decodeKey(b.subarray(5, 5 + lpm6Codec.keySize)), v6);
  writeLpmKey(v4, b, 1);
  assert.deepEqual(lpm4Codec.decodeKey(b.subarray(1, 1 + lpm4Codec.keySize)), v4);
  const entries = [
    { proto: 6, deny: true, any: false, lo: 80, hi: 443, rule: 9 },
    { proto: 0, deny: false, any: true, lo: 0, hi: 65535, rule: 70000 },
  ];
  const v = Buffer.alloc(POL_VAL_SIZE * 2);
  writeLpmValue(entries, v, POL_VAL_SIZE);
  assert.deepEqual(lpm4Codec.decodeValue(v.subarray(POL_VAL_SIZE)), entries);
  assert.throws(() => writeLpmValue(Array.from({ length: 17 }, () => entries[0]!), v, 0), RangeError);
});
