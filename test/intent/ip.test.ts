import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { compareIps, normalizeIp, parseCidr, parseIp } from '../../src/core/addr.js';

describe('normalizeIp', () => {
  const good: readonly [string, string][] = [
    ['192.0.2.1', '192.0.2.1'],
    ['0.0.0.0', '0.0.0.0'],
    ['255.255.255.255', '255.255.255.255'],
    ['2001:DB8::1', '2001:db8::1'],
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['::', '::'],
    ['::1', '::1'],
    ['::ffff:192.0.2.1', '::ffff:192.0.2.1'],
    ['::FFFF:C000:0201', '::ffff:192.0.2.1'],
    ['2001:db8::192.0.2.1', '2001:db8::c000:201'],
  ];
  for (const [input, want] of good) it(`${input} → ${want}`, () => assert.equal(normalizeIp(input), want));

  const bad = ['', '1', '1.2.3', '192.0.2.256', '192.0.2.01', '0x7f.0.0.1', ' 192.0.2.1', '192.0.2.1/32', 'fe80::1%eth0', '2001:db8::g', ':::', 'localhost'];
  for (const input of bad) it(`rejects ${JSON.stringify(input)}`, () => assert.equal(normalizeIp(input), undefined));

  it('property: canonical IPv6 is a fixed point and keeps the address', () => {
    fc.assert(
      fc.property(fc.ipV6(), (s) => {
        const n = normalizeIp(s);
        if (n === undefined) return false;
        return normalizeIp(n) === n && n === n.toLowerCase() && compareIps(parseIp(n)!, parseIp(s)!) === 0;
      }),
    );
  });

  it('property: every dotted quad parses to itself', () => {
    fc.assert(fc.property(fc.ipV4(), (s) => normalizeIp(s) === s));
  });
});

describe('parseCidr', () => {
  it('canonicalises proper prefixes', () => {
    const cases: readonly [string, string][] = [
      ['192.0.2.0/24', '192.0.2.0/24'],
      ['198.51.100.7/32', '198.51.100.7/32'],
      ['0.0.0.0/0', '0.0.0.0/0'],
      ['2001:DB8:0::/48', '2001:db8::/48'],
      ['2001:db8::1/128', '2001:db8::1/128'],
      ['::ffff:192.0.2.0/120', '::ffff:192.0.2.0/120'],
    ];
    for (const [input, want] of cases) {
      const r = parseCidr(input);
      assert.ok(r.ok, input);
      assert.equal(r.cidr.text, want);
    }
  });

  it('explains what is wrong', () => {
    const cases: readonly [string, string][] = [
      ['192.0.2.1/24', 'host bits are set (did you mean "192.0.2.0/24"?)'],
      ['2001:db8::1/32', 'host bits are set (did you mean "2001:db8::/32"?)'],
      ['192.0.2.0/33', 'prefix length must be 0-32'],
      ['2001:db8::/129', 'prefix length must be 0-128'],
      ['192.0.2.0/024', 'prefix length must be 0-32'],
      ['192.0.2.0/', 'prefix length must be 0-32'],
      ['192.0.2.0', 'missing "/prefix-length"'],
      ['192.0.2/24', '"192.0.2" is not an IP address'],
    ];
    for (const [input, reason] of cases) assert.deepEqual(parseCidr(input), { ok: false, reason }, input);
  });
});

describe('compareIps', () => {
  it('orders by bytes within a family, IPv4 first', () => {
    const p = (s: string) => parseIp(s)!;
    assert.ok(compareIps(p('192.0.2.9'), p('192.0.2.10')) < 0);
    assert.ok(compareIps(p('2001:db8::ff'), p('2001:db8::1:0')) < 0);
    assert.equal(compareIps(p('2001:db8::1'), p('2001:DB8:0::1')), 0);
    assert.ok(compareIps(p('203.0.113.1'), p('::1')) < 0);
  });
});
