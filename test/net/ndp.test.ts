/**
 * NDP codec (src/net/ndp.ts) byte by byte. The expected frames were produced by
 * scapy (an independent implementation), so the checksum is checked against
 * another stack's arithmetic, not against itself.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ND_NEIGHBOR_ADVERT,
  ND_NEIGHBOR_SOLICIT,
  ND_OPT_SOURCE_LL,
  buildNdFrame,
  icmpv6Checksum,
  lladdrOption,
  multicastMac,
  neighborSolicitation,
  parseNdFrame,
  solicitedNodeAddress,
  solicitedNodeMac,
  unsolicitedAdvertisement,
} from '../../src/net/ndp.js';

const MAC = '02:00:5e:00:53:0a';
const CLIENT_MAC = '02:00:5e:00:53:01';
// scapy: Ether/IPv6(hlim=255)/ICMPv6ND_NA(tgt, R=0, S=0, O=1)/ICMPv6NDOptDstLLAddr
const SCAPY_NA =
  '33330000000102005e00530a86dd6000000000203aff20010db8000000000000000000000007ff020000000000000000000000000001' +
  '880048152000000020010db8000000000000000000000007020102005e00530a';
// scapy: Ether/IPv6(hlim=255)/ICMPv6ND_NS(tgt)/ICMPv6NDOptSrcLLAddr, to the solicited-node group
const SCAPY_NS =
  '3333ff00000702005e00530186dd6000000000203aff20010db8000000000000000000000001ff0200000000000000000001ff000007' +
  '87006b1c0000000020010db8000000000000000000000007010102005e005301';

test('the unsolicited NA is byte-identical to scapy\'s: all-nodes, hop limit 255, O set, S and R clear, TLLA, checksum', () => {
  const f = unsolicitedAdvertisement(MAC, '2001:db8::7');
  assert.equal(f.toString('hex'), SCAPY_NA);
  assert.equal(f.length, 86);
  const p = parseNdFrame(f)!;
  assert.deepEqual(
    { type: p.type, code: p.code, hop: p.hopLimit, o: p.override, s: p.solicited, r: p.router, lladdr: p.lladdr, dst: p.ipDst, ethDst: p.ethDst, target: p.target },
    { type: ND_NEIGHBOR_ADVERT, code: 0, hop: 255, o: true, s: false, r: false, lladdr: MAC, dst: 'ff02::1', ethDst: '33:33:00:00:00:01', target: '2001:db8::7' },
  );
  assert.equal(p.checksumOk, true);
});

test('a solicitation is byte-identical to scapy\'s: solicited-node group and MAC, SLLA, checksum', () => {
  const f = neighborSolicitation({ srcMac: CLIENT_MAC, srcIp: '2001:db8::1', target: '2001:db8::7' });
  assert.equal(f.toString('hex'), SCAPY_NS);
  const p = parseNdFrame(f)!;
  assert.equal(p.type, ND_NEIGHBOR_SOLICIT);
  assert.equal(p.lladdr, CLIENT_MAC);
  assert.equal(p.ipDst, 'ff02::1:ff00:7');
});

test('the checksum covers the pseudo-header: the same message between other addresses has another checksum', () => {
  const msg = Buffer.from(SCAPY_NA.slice(108), 'hex');
  assert.equal(icmpv6Checksum('2001:db8::7', 'ff02::1', msg), 0x4815);
  assert.notEqual(icmpv6Checksum('2001:db8::8', 'ff02::1', msg), 0x4815);
  assert.notEqual(icmpv6Checksum('2001:db8::7', 'ff02::2', msg), 0x4815);
});

test('solicited-node groups: ff02::1:ff + the low 24 bits, and 33:33 + the low 32 bits', () => {
  assert.equal(solicitedNodeAddress('2001:db8:100::1:2345'), 'ff02::1:ff01:2345');
  assert.equal(solicitedNodeMac('2001:db8:100::1:2345'), '33:33:ff:01:23:45');
  assert.equal(solicitedNodeMac('2001:db8:100::10'), '33:33:ff:00:00:10');
  assert.equal(multicastMac('ff02::1'), '33:33:00:00:00:01');
});

test('a DAD probe has the unspecified source and no SLLA', () => {
  const p = parseNdFrame(neighborSolicitation({ srcMac: CLIENT_MAC, srcIp: '::', target: '2001:db8::7' }))!;
  assert.equal(p.ipSrc, '::');
  assert.equal(p.lladdr, undefined);
  assert.deepEqual(p.options, []);
});

test('the parser refuses what RFC 4861 7.1 says to discard', () => {
  const base = {
    ethDst: '33:33:ff:00:00:07', ethSrc: CLIENT_MAC, ipSrc: '2001:db8::1', ipDst: 'ff02::1:ff00:7', hopLimit: 255,
    type: ND_NEIGHBOR_SOLICIT, code: 0, flags: 0, target: '2001:db8::7', options: [lladdrOption(ND_OPT_SOURCE_LL, CLIENT_MAC)],
  };
  assert.ok(parseNdFrame(buildNdFrame(base)), 'the baseline is valid');
  assert.equal(parseNdFrame(buildNdFrame({ ...base, hopLimit: 254 })), undefined, 'hop limit 254');
  assert.equal(parseNdFrame(buildNdFrame({ ...base, code: 1 })), undefined, 'code 1');
  assert.equal(parseNdFrame(buildNdFrame(base, { checksum: 0x1234 })), undefined, 'wrong checksum');
  assert.equal(parseNdFrame(buildNdFrame(base, { truncateTo: 80 })), undefined, 'truncated frame');
  assert.equal(parseNdFrame(buildNdFrame({ ...base, options: [{ ...lladdrOption(ND_OPT_SOURCE_LL, CLIENT_MAC), lengthUnits: 0 }] })), undefined, 'option length 0');
  assert.equal(parseNdFrame(buildNdFrame({ ...base, options: [{ ...lladdrOption(ND_OPT_SOURCE_LL, CLIENT_MAC), lengthUnits: 2 }] })), undefined, 'option past the end');
  assert.equal(parseNdFrame(buildNdFrame({ ...base, ipSrc: '::' })), undefined, 'SLLA with the unspecified source');
  const arp = Buffer.from(SCAPY_NS, 'hex');
  arp.writeUInt16BE(0x0806, 12);
  assert.equal(parseNdFrame(arp), undefined, 'not IPv6');
});

test('crafted options keep their length field; the checksum stays right for what is sent', () => {
  const f = buildNdFrame({
    ethDst: '33:33:ff:00:00:07', ethSrc: CLIENT_MAC, ipSrc: '2001:db8::1', ipDst: 'ff02::1:ff00:7', hopLimit: 255,
    type: ND_NEIGHBOR_SOLICIT, code: 0, flags: 0, target: '2001:db8::7', options: [{ type: 14, body: Buffer.from('010203040506', 'hex') }],
  });
  assert.equal(f.length, 86);
  assert.equal(f.readUInt16BE(18), 32, 'IPv6 payload length');
  const p = parseNdFrame(f)!;
  assert.deepEqual(p.options.map((o) => [o.type, o.lengthUnits, o.body.toString('hex')]), [[14, 1, '010203040506']]);
  assert.equal(p.lladdr, undefined);
});
