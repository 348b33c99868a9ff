/** The cBPF builder, run byte by byte over real ARP frames (the kernel runs the same program in socket-filter.lab.test.ts). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ARPOP_REPLY, ARPOP_REQUEST, buildArpFrame, type ArpFields } from '../../src/net/arp.js';
import { ACCEPT, DROP_ALL, ND_NEIGHBOR_ADVERT, ND_NEIGHBOR_SOLICIT, arpBlock, ndBlock, coverPrefixes, encodeFilter, ipv4Prefix, runFilter, socketFilter } from '../../src/net/socket-filter.js';

const base: ArpFields = {
  ethDst: 'ff:ff:ff:ff:ff:ff', ethSrc: '02:00:00:00:00:01', htype: 1, ptype: 0x0800, hlen: 6, plen: 4,
  op: ARPOP_REPLY, sha: '02:00:00:00:00:01', spa: '198.51.100.10', tha: '02:00:00:00:00:02', tpa: '192.0.2.1',
};
const frame = (f: Partial<ArpFields>) => buildArpFrame({ ...base, ...f });
const prefixes = (...t: string[]) => t.map(ipv4Prefix);

describe('socket filter builder', () => {
  const watch = socketFilter([arpBlock({ ops: [ARPOP_REPLY], sender: prefixes('198.51.100.10', '198.51.100.64/26') })]);

  test('accepts replies from a watched IP or range', () => {
    assert.equal(runFilter(watch, frame({})), ACCEPT);
    assert.equal(runFilter(watch, frame({ spa: '198.51.100.64' })), ACCEPT);
    assert.equal(runFilter(watch, frame({ spa: '198.51.100.127' })), ACCEPT);
  });

  test('drops foreign senders, other ops, other ethertypes and malformed ARP', () => {
    assert.equal(runFilter(watch, frame({ spa: '198.51.100.11' })), 0);
    assert.equal(runFilter(watch, frame({ spa: '198.51.100.128' })), 0);
    assert.equal(runFilter(watch, frame({ spa: '203.0.113.10' })), 0);
    assert.equal(runFilter(watch, frame({ op: ARPOP_REQUEST })), 0);
    assert.equal(runFilter(watch, frame({ tpa: '198.51.100.10', spa: '192.0.2.1' })), 0, 'target is not watched here');
    assert.equal(runFilter(watch, frame({ ptype: 0x86dd })), 0);
    assert.equal(runFilter(watch, frame({ plen: 16 })), 0);
    const ipv4 = frame({});
    ipv4.writeUInt16BE(0x0800, 12);
    assert.equal(runFilter(watch, ipv4), 0, 'an IPv4 packet with the same bytes at the ARP offsets');
    assert.equal(runFilter(watch, frame({}).subarray(0, 30)), 0, 'truncated');
  });

  test('sender or target, any op', () => {
    const p = socketFilter([arpBlock({ sender: prefixes('198.51.100.0/24'), target: prefixes('203.0.113.7') })]);
    assert.equal(runFilter(p, frame({ op: ARPOP_REQUEST, spa: '198.51.100.200' })), ACCEPT);
    assert.equal(runFilter(p, frame({ op: ARPOP_REQUEST, spa: '192.0.2.1', tpa: '203.0.113.7' })), ACCEPT);
    assert.equal(runFilter(p, frame({ op: ARPOP_REQUEST, spa: '192.0.2.1', tpa: '203.0.113.8' })), 0);
  });

  test('nothing to watch drops everything', () => {
    const p = socketFilter([arpBlock({ ops: [ARPOP_REPLY], sender: [] })]);
    assert.deepEqual(p, [...DROP_ALL]);
    assert.equal(runFilter(p, frame({})), 0);
  });

  test('10,000 IPs stay loadable: widened to a covering set of prefixes, never losing one', () => {
    const ips = Array.from({ length: 10_000 }, (_, i) => `198.51.${100 + (i >> 8) % 4}.${i & 255}`).slice(0, 1000);
    const many = Array.from({ length: 3000 }, (_, i) => `203.0.113.${i % 256}`).concat(ips, Array.from({ length: 300 }, (_, i) => `192.0.2.${(i * 7) % 256}`));
    const p = socketFilter([arpBlock({ ops: [ARPOP_REPLY], sender: prefixes(...many) })]);
    assert.ok(p.length <= 4096, `${p.length} instructions`);
    for (const ip of new Set(many)) assert.equal(runFilter(p, frame({ spa: ip })), ACCEPT, ip);
    assert.equal(runFilter(p, frame({ spa: '10.1.2.3' })), 0);
  });

  test('coverPrefixes is exact when it fits, and a superset otherwise', () => {
    assert.deepEqual(coverPrefixes(prefixes('192.0.2.1', '192.0.2.0/24', '198.51.100.5'), 8), prefixes('192.0.2.0/24', '198.51.100.5'));
    const wide = coverPrefixes(prefixes('192.0.2.1', '192.0.2.200', '192.0.2.7'), 1);
    assert.deepEqual(wide, prefixes('192.0.2.0/24'));
  });

  test('encodes struct sock_filter', () => {
    const b = encodeFilter(socketFilter([arpBlock({ sender: prefixes('198.51.100.10') })]));
    // ldh [12] → code 0x28, k 12
    assert.deepEqual([...b.subarray(0, 8)], [0x28, 0, 0, 0, 12, 0, 0, 0]);
  });

  test('an NDP block sits beside the ARP block: NS/NA for watched targets only', () => {
    const nd = (type: number, target: string, nextHeader = 58) => {
      const b = Buffer.alloc(86);
      b.writeUInt16BE(0x86dd, 12);
      b.writeUInt8(0x60, 14);
      b.writeUInt8(nextHeader, 20);
      b.writeUInt8(type, 54);
      const words = target === '2001:db8::10' ? [0x20010db8, 0, 0, 0x10] : [0x20010db8, 0, 0, 0x11];
      words.forEach((w, i) => b.writeUInt32BE(w, 62 + i * 4));
      return b;
    };
    const p = socketFilter([arpBlock({ ops: [ARPOP_REPLY], sender: prefixes('198.51.100.10') }), ndBlock({ targets: ['2001:db8::10'] })]);
    assert.equal(runFilter(p, nd(ND_NEIGHBOR_ADVERT, '2001:db8::10')), ACCEPT);
    assert.equal(runFilter(p, nd(ND_NEIGHBOR_SOLICIT, '2001:db8::10')), ACCEPT);
    assert.equal(runFilter(p, nd(ND_NEIGHBOR_ADVERT, '2001:db8::11')), 0);
    assert.equal(runFilter(p, nd(128, '2001:db8::10')), 0, 'echo request');
    assert.equal(runFilter(p, nd(ND_NEIGHBOR_ADVERT, '2001:db8::10', 17)), 0, 'UDP');
    assert.equal(runFilter(p, frame({})), ACCEPT, 'the ARP block still matches');
    assert.equal(runFilter(p, frame({ spa: '198.51.100.11' })), 0);
    assert.equal(runFilter(socketFilter([ndBlock({})]), nd(ND_NEIGHBOR_SOLICIT, '2001:db8::11')), ACCEPT, 'no targets: every NS/NA');
  });

  test('rejects a program the kernel would refuse', () => {
    assert.throws(() => socketFilter([[{ code: 0x15, jt: 3, jf: 0, k: 1 }]]), /bad jump/);
  });
});
