/**
 * Byte forms of addresses (src/net/addr.ts): IPs per family, MACs, and the
 * EUI-64 link-local address the owner watch's NS probes come from.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HeraldError } from '../../src/core/errors.js';
import { bytesToIpv4, bytesToIpv6, formatMac, ipToBytes, ipv4ToBytes, ipv6ToBytes, isMac, linkLocalOf, parseMac } from '../../src/net/addr.js';

test('IPv4 and IPv6 to bytes and back; the wrong family is a coded error', () => {
  assert.deepEqual([...ipv4ToBytes('192.0.2.10')], [192, 0, 2, 10]);
  assert.equal(bytesToIpv4(Buffer.from([198, 51, 100, 7, 99])), '198.51.100.7');
  assert.equal(ipv6ToBytes('2001:db8::1').length, 16);
  assert.equal(bytesToIpv6(ipv6ToBytes('2001:db8::1')), '2001:db8::1');
  assert.equal(ipToBytes('203.0.113.1').length, 4);
  assert.equal(ipToBytes('2001:db8::7').length, 16);
  assert.throws(() => ipv4ToBytes('2001:db8::1'), (e: unknown) => e instanceof HeraldError && e.code === 'HERALD_BAD_ARGUMENT' && /not an IPv4 address: "2001:db8::1"/.test(e.message));
  assert.throws(() => ipv6ToBytes('192.0.2.1'), /not an IPv6 address/);
  assert.throws(() => ipToBytes('not-an-ip'), /not an IPv6 address/);
});

test('address bytes are a fresh copy every time: a caller writing into them changes no later answer (the bytes are cached by text, so a shared buffer would leak a write)', () => {
  for (const [ip, toBytes] of [['2001:db8::42', ipv6ToBytes], ['192.0.2.42', ipv4ToBytes]] as const) {
    const first = toBytes(ip);
    const expected = [...first];
    first.fill(0xff);
    assert.deepEqual([...toBytes(ip)], expected);
    assert.notEqual(toBytes(ip), toBytes(ip));
  }
  // A text that does not parse is refused every time (nothing is cached for it).
  assert.throws(() => ipv6ToBytes('2001:db8::g'), /not an IPv6 address/);
  assert.throws(() => ipv6ToBytes('2001:db8::g'), /not an IPv6 address/);
});

test('MACs: parsed and formatted, case-insensitive, malformed ones refused', () => {
  assert.deepEqual([...parseMac('02:00:5E:10:00:01')], [2, 0, 0x5e, 0x10, 0, 1]);
  assert.equal(formatMac(Buffer.from([2, 0, 0x5e, 0x10, 0, 1, 0xff])), '02:00:5e:10:00:01');
  assert.equal(isMac('aa:bb:cc:dd:ee:ff'), true);
  for (const bad of ['aa:bb:cc:dd:ee', 'aa:bb:cc:dd:ee:ff:00', 'aa-bb-cc-dd-ee-ff', 'gg:bb:cc:dd:ee:ff', ' aa:bb:cc:dd:ee:ff']) {
    assert.equal(isMac(bad), false, bad);
    assert.throws(() => parseMac(bad), (e: unknown) => e instanceof HeraldError && e.code === 'HERALD_BAD_ARGUMENT', bad);
  }
});

test('linkLocalOf: fe80::/64 with the modified EUI-64 of the MAC (RFC 4291 appendix A)', () => {
  // The universal/local bit flipped, ff:fe in the middle.
  assert.equal(linkLocalOf('00:1b:21:3c:4d:5e'), 'fe80::21b:21ff:fe3c:4d5e');
  assert.equal(linkLocalOf('02:00:00:00:00:01'), 'fe80::ff:fe00:1');
  assert.equal(linkLocalOf('AA:BB:CC:DD:EE:FF'), 'fe80::a8bb:ccff:fedd:eeff');
  assert.throws(() => linkLocalOf('not-a-mac'), /not a MAC address/);
});
