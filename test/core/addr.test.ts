/**
 * core/addr.ts: the one parser and formatter of IP addresses and CIDRs.
 * Round-trips between text, bytes and bigint; IPv4-mapped IPv6 stays IPv6;
 * canonical text; precise reasons for bad input.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  addrOf,
  cidrRange,
  compareAddrs,
  familyOf,
  formatAddr,
  formatIpBytes,
  fromBigInt,
  ipProblem,
  isIp,
  isIpv4,
  mustParseIp,
  normalizeIp,
  parseCidr,
  parseCidrMasking,
  parseIp,
  prefixSize,
  rangesOverlap,
  toAddr,
  toBigInt,
  compareIps,
  formatIpv4At,
  readCanonicalIpv4,
  readCanonicalIpv6,
  specialRange,
  writeIp,
} from '../../src/core/addr.js';
import { isHeraldError } from '../../src/core/errors.js';

describe('parsing and canonical text', () => {
  it('normalizes IPv6 to RFC 5952 and keeps dotted quads', () => {
    const cases: readonly [string, string][] = [
      ['2001:DB8::1', '2001:db8::1'],
      ['2001:0db8:0:0:0:0:0:0001', '2001:db8::1'],
      // The longest zero run is compressed; of two equal runs, the first.
      ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
      ['2001:db8:0:1:0:0:0:1', '2001:db8:0:1::1'],
      // A single zero hextet is not compressed.
      ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
      ['203.0.113.7', '203.0.113.7'],
    ];
    for (const [input, want] of cases) assert.equal(normalizeIp(input), want, input);
  });

  it('keeps an IPv4-mapped IPv6 address IPv6, printed ::ffff:a.b.c.d, and distinct from the IPv4 address', () => {
    for (const input of ['::ffff:192.0.2.1', '::FFFF:C000:201', '0:0:0:0:0:ffff:c000:0201']) {
      const ip = parseIp(input);
      assert.equal(ip?.text, '::ffff:192.0.2.1', input);
      assert.equal(ip?.family, 'IPv6');
      assert.equal(ip?.bytes.length, 16);
    }
    assert.equal(familyOf('::ffff:192.0.2.1'), 'IPv6');
    assert.equal(isIpv4('::ffff:192.0.2.1'), false);
    const mapped = addrOf('::ffff:192.0.2.1')!;
    const plain = addrOf('192.0.2.1')!;
    assert.equal(mapped.value, (0xffffn << 32n) | plain.value);
    assert.notEqual(compareAddrs(mapped, plain), 0);
    assert.equal(formatAddr(mapped), '::ffff:192.0.2.1');
    // An IPv4 address embedded in a non-mapped IPv6 address is printed as hextets.
    assert.equal(normalizeIp('2001:db8::192.0.2.1'), '2001:db8::c000:201');
  });

  it('round-trips text → bigint → text and text → bytes → text', () => {
    const arb = fc.oneof(fc.ipV4(), fc.ipV6());
    fc.assert(
      fc.property(arb, (s) => {
        const ip = parseIp(s)!;
        const addr = addrOf(s)!;
        assert.deepEqual(addr, toAddr(ip));
        assert.equal(formatAddr(addr), ip.text);
        assert.equal(formatIpBytes(ip.bytes), ip.text);
        assert.deepEqual(fromBigInt(addr.value, addr.family), ip.bytes);
        assert.equal(toBigInt(ip.bytes), addr.value);
        assert.equal(normalizeIp(ip.text), ip.text, 'canonical text is a fixed point');
      }),
      { numRuns: 2000 },
    );
  });

  it('formats the ends of both families', () => {
    assert.equal(formatAddr({ family: 'IPv4', value: 0n }), '0.0.0.0');
    assert.equal(formatAddr({ family: 'IPv4', value: 0xffffffffn }), '255.255.255.255');
    assert.equal(formatAddr({ family: 'IPv6', value: 0n }), '::');
    assert.equal(formatAddr({ family: 'IPv6', value: (1n << 128n) - 1n }), 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff');
  });

  it('refuses a value outside the family with a coded error', () => {
    assert.throws(() => formatAddr({ family: 'IPv4', value: 1n << 32n }), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && /not an IPv4 address/.test(e.message));
    assert.throws(() => fromBigInt(-1n, 'IPv6'), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
    assert.throws(() => formatIpBytes([192, 0, 2]), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && e.message === 'an address has 4 or 16 bytes, not 3');
  });
});

describe('invalid input', () => {
  const cases: readonly [string, string][] = [
    ['', 'an empty string is not an IP address'],
    ['192.0.2.01', '"192.0.2.01" has a leading zero in an octet (ambiguous: octal or decimal)'],
    ['192.0.2.256', '"192.0.2.256" has an octet over 255 (256)'],
    ['192.0.2', '"192.0.2" is not a dotted quad (an IPv4 address has 4 parts, this has 3)'],
    ['3221225985', '"3221225985" is not a dotted quad (an IPv4 address has 4 parts, this has 1)'],
    ['fe80::1%eth0', '"fe80::1%eth0" has a zone ("%…"), which a service IP cannot have'],
    ['192.0.2.0/24', '"192.0.2.0/24" is a CIDR, not a single IP address'],
    [' 192.0.2.1', '" 192.0.2.1" has surrounding white space'],
    ['0x7f.0.0.1', '"0x7f.0.0.1" is not an IPv4 or IPv6 address'],
    ['2001:db8::g', '"2001:db8::g" is not an IPv4 or IPv6 address'],
    ['1:2:3:4:5:6:7:8:9', '"1:2:3:4:5:6:7:8:9" is not an IPv4 or IPv6 address'],
    // ipaddr.js alone would read this as ::ffff:1.2.3.4; Go's netip refuses it.
    ['::ffff:01.2.3.4', '"::ffff:01.2.3.4" has an embedded IPv4 part that is not a plain dotted quad (four decimal octets, no leading zeros)'],
    ['2001:db8::1.2.3', '"2001:db8::1.2.3" has an embedded IPv4 part that is not a plain dotted quad (four decimal octets, no leading zeros)'],
  ];
  for (const [input, reason] of cases) {
    it(`${JSON.stringify(input)}: ${reason}`, () => {
      assert.equal(parseIp(input), undefined);
      assert.equal(addrOf(input), undefined);
      assert.equal(isIp(input), false);
      assert.equal(ipProblem(input), reason);
      assert.throws(
        () => mustParseIp(input),
        (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && e.message === reason,
      );
    });
  }

  it('quotes a huge input bounded', () => {
    const huge = '1'.repeat(100_000);
    assert.ok(ipProblem(huge)!.length < 400);
  });

  it('has no problem with a valid address', () => {
    assert.equal(ipProblem('2001:db8::1'), undefined);
    assert.equal(mustParseIp('2001:DB8::1').text, '2001:db8::1');
  });
});

describe('CIDRs and ranges', () => {
  it('masks host bits and says so', () => {
    const r = parseCidrMasking('198.51.100.7/24');
    assert.ok(r.ok);
    assert.equal(r.cidr.text, '198.51.100.0/24');
    assert.equal(r.maskedFrom, '198.51.100.7/24');
    const exact = parseCidrMasking('2001:db8::/32');
    assert.ok(exact.ok);
    assert.equal(exact.maskedFrom, undefined);
    assert.deepEqual(parseCidr('2001:db8::1/32'), { ok: false, reason: 'host bits are set (did you mean "2001:db8::/32"?)' });
  });

  it('gives the first and last address of a prefix', () => {
    const v4 = parseCidr('192.0.2.4/30');
    assert.ok(v4.ok);
    const r4 = cidrRange(v4.cidr);
    assert.deepEqual([formatAddr({ family: 'IPv4', value: r4.first }), formatAddr({ family: 'IPv4', value: r4.last })], ['192.0.2.4', '192.0.2.7']);
    const v6 = parseCidr('2001:db8::/64');
    assert.ok(v6.ok);
    const r6 = cidrRange(v6.cidr);
    assert.equal(r6.last - r6.first + 1n, 1n << 64n);
    assert.equal(formatAddr({ family: 'IPv6', value: r6.last }), '2001:db8::ffff:ffff:ffff:ffff');
    assert.equal(prefixSize('IPv4', 0), 1n << 32n);
    assert.equal(prefixSize('IPv6', 128), 1n);
  });

  it('overlap needs the same family and a shared address', () => {
    assert.ok(rangesOverlap({ family: 'IPv4', first: 1n, last: 5n }, { family: 'IPv4', first: 5n, last: 9n }));
    assert.ok(!rangesOverlap({ family: 'IPv4', first: 1n, last: 4n }, { family: 'IPv4', first: 5n, last: 9n }));
    assert.ok(!rangesOverlap({ family: 'IPv4', first: 1n, last: 5n }, { family: 'IPv6', first: 1n, last: 5n }));
  });

  it('property: masking clears exactly the host bits', () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.integer({ min: 0, max: 32 }), (ip, prefix) => {
        const r = parseCidrMasking(`${ip}/${prefix}`);
        assert.ok(r.ok);
        const value = addrOf(ip)!.value;
        const { first, last } = cidrRange(r.cidr);
        assert.ok(first <= value && value <= last);
        assert.equal(last - first + 1n, prefixSize('IPv4', prefix));
        assert.equal(r.maskedFrom !== undefined, value !== first);
      }),
    );
  });
});

describe('ordering and CIDR refusals', () => {
  it('orders IPv4 before IPv6, then numerically (text and numeric forms agree)', () => {
    const texts = ['2001:db8::1', '198.51.100.7', '192.0.2.10', '2001:db8::', '192.0.2.9'];
    const sorted = ['192.0.2.9', '192.0.2.10', '198.51.100.7', '2001:db8::', '2001:db8::1'];
    assert.deepEqual([...texts].map((t) => mustParseIp(t)).sort(compareIps).map((p) => p.text), sorted);
    assert.deepEqual([...texts].map((t) => addrOf(t)!).sort(compareAddrs).map(formatAddr), sorted);
    assert.equal(compareIps(mustParseIp('192.0.2.1'), mustParseIp('192.0.2.1')), 0);
    assert.equal(compareAddrs(addrOf('2001:db8::1')!, addrOf('2001:db8::1')!), 0);
  });

  it('refuses a CIDR without a prefix, with a bad address or a prefix out of range, saying which', () => {
    assert.deepEqual(parseCidrMasking('192.0.2.0'), { ok: false, reason: 'missing "/prefix-length"' });
    assert.deepEqual(parseCidrMasking('192.0.2.300/24'), { ok: false, reason: '"192.0.2.300" is not an IP address' });
    assert.deepEqual(parseCidrMasking('192.0.2.0/33'), { ok: false, reason: 'prefix length must be 0-32' });
    assert.deepEqual(parseCidrMasking('2001:db8::/129'), { ok: false, reason: 'prefix length must be 0-128' });
    assert.deepEqual(parseCidrMasking('192.0.2.0/024'), { ok: false, reason: 'prefix length must be 0-32' });
  });
});

// Aimed at the mutants the first mutation run left (README "Mutation testing").
describe('the fast IPv4 path and the small predicates', () => {
  it('readCanonicalIpv4 takes exactly the canonical dotted quads, at the shortest and longest length', () => {
    const out = new Uint8Array(8).fill(7);
    assert.equal(readCanonicalIpv4('0.0.0.0', out, 2), true);
    assert.deepEqual([...out], [7, 7, 0, 0, 0, 0, 7, 7]);
    assert.equal(readCanonicalIpv4('255.255.255.255', out, 4), true);
    assert.deepEqual([...out], [7, 7, 0, 0, 255, 255, 255, 255]);
    assert.equal(readCanonicalIpv4('192.0.2.1', undefined, 0), true);
    for (const bad of ['1.2.3', '1.2.3.', '.1.2.3', '1..2.3', '1.2.3.4.5', '01.2.3.4', '1.2.3.00', '1.2.3.256', '1.2.3.4 ', 'a.b.c.d', '1.2.3.4/32', '255.255.255.2555', '1.2.3.-4']) {
      const buf = new Uint8Array(4);
      assert.equal(readCanonicalIpv4(bad, buf, 0), false, bad);
    }
    assert.equal(formatIpv4At(Uint8Array.from([9, 192, 0, 2, 1]), 1), '192.0.2.1');
  });

  it('property: the fast path agrees with the strict parser on dotted quads and near-misses', () => {
    const octet = fc.oneof(fc.integer({ min: 0, max: 300 }).map(String), fc.constantFrom('00', '01', '', '-1', 'x', '0255', '1e2'));
    const text = fc.oneof(fc.ipV4(), fc.array(octet, { minLength: 1, maxLength: 6 }).map((o) => o.join('.')), fc.string({ maxLength: 16 }));
    fc.assert(
      fc.property(text, (t) => {
        assert.equal(readCanonicalIpv4(t, undefined, 0), parseIp(t)?.family === 'IPv4', t);
        assert.equal(isIpv4(t), parseIp(t)?.family === 'IPv4', t);
      }),
      { numRuns: 2000 },
    );
  });

  it('property: writeIp gives the strict parser\'s bytes for any address text (IPv6 canonical text on its fast path), and throws on a non-address', () => {
    const text = fc.oneof(
      fc.ipV6().map((t) => parseIp(t)?.text ?? t), // canonical: the fast path
      fc.ipV6(), // any spelling (upper case, dotted tail): the full parser
      fc.ipV4(),
    );
    fc.assert(
      fc.property(text, (t) => {
        const buf = new Uint8Array(20).fill(9);
        const p = parseIp(t)!;
        writeIp(t, buf, 2);
        assert.deepEqual([...buf.subarray(2, 2 + p.bytes.length)], [...p.bytes], t);
        assert.equal(buf[2 + p.bytes.length], 9, 'nothing written past the address');
        if (p.text === t && p.family === 'IPv6' && !t.includes('.')) assert.equal(readCanonicalIpv6(t, buf, 0), true, t);
      }),
      { numRuns: 2000 },
    );
    // Near-misses: whatever the fast path takes, the strict parser reads as the same IPv6 bytes.
    const hex = fc.constantFrom('0', '1', 'a', 'f', 'ff', '1234', 'ffff', '12345', 'g', 'A', '', '1.2.3.4');
    fc.assert(
      fc.property(fc.array(hex, { minLength: 1, maxLength: 10 }), fc.constantFrom(':', '::'), fc.nat(9), (parts, sep, at) => {
        const t = parts.map((g, i) => (i === at ? `${sep}${g}` : i === 0 ? g : `:${g}`)).join('');
        const buf = new Uint8Array(16);
        if (readCanonicalIpv6(t, buf, 0)) {
          const p = parseIp(t);
          assert.equal(p?.family, 'IPv6', t);
          assert.deepEqual([...buf], [...p!.bytes], t);
        }
      }),
      { numRuns: 3000 },
    );
    for (const bad of ['2001:db8::1::2', '2001:db8:0:0:0:0:0:0:1', '2001:DB8::1', '2001:db8::12345', '1:2:3:4:5:6:7', ':1::2', '2001:db8::g', '1:', ':1', '1:2:3:4:5:6:7:8:9', '::ffff:1.2.3.4', ':::']) {
      assert.equal(readCanonicalIpv6(bad, new Uint8Array(16), 0), false, bad);
    }
    assert.throws(() => writeIp('2001:db8::g', new Uint8Array(16), 0), (e) => isHeraldError(e), 'a non-address');
  });

  it('isIp / isIpv4 / normalizeIp / familyOf on good and bad text', () => {
    assert.equal(isIp('192.0.2.1'), true);
    assert.equal(isIp('2001:db8::1'), true);
    assert.equal(isIp('192.0.2.x'), false);
    assert.equal(isIpv4('192.0.2.1'), true);
    assert.equal(isIpv4('255.255.255.255'), true);
    assert.equal(isIpv4('01.2.3.4'), false);
    assert.equal(isIpv4('::ffff:192.0.2.1'), false);
    assert.equal(isIpv4('1.2.3'), false);
    assert.equal(normalizeIp('not an ip'), undefined);
    assert.equal(familyOf('not an ip'), undefined);
    assert.equal(familyOf('::ffff:192.0.2.1'), 'IPv6');
  });

  it('an all-digit text with an empty octet is not "over 255", and 256 is', () => {
    assert.equal(ipProblem('255.1.2.'), '"255.1.2." is not an IPv4 or IPv6 address');
    assert.equal(ipProblem('1.2.3.256'), '"1.2.3.256" has an octet over 255 (256)');
  });

  it('compareAddrs: family first even when the IPv6 value is smaller; each direction', () => {
    assert.equal(compareAddrs(addrOf('192.0.2.1')!, addrOf('::1')!), -1);
    assert.equal(compareAddrs(addrOf('::1')!, addrOf('192.0.2.1')!), 1);
    assert.equal(compareAddrs(addrOf('192.0.2.2')!, addrOf('192.0.2.1')!), 1);
    assert.equal(compareAddrs(addrOf('192.0.2.1')!, addrOf('192.0.2.2')!), -1);
  });

  it('rangesOverlap: a range wholly after the other does not overlap; touching ends do', () => {
    assert.ok(!rangesOverlap({ family: 'IPv4', first: 10n, last: 20n }, { family: 'IPv4', first: 0n, last: 5n }));
    assert.ok(rangesOverlap({ family: 'IPv4', first: 5n, last: 20n }, { family: 'IPv4', first: 0n, last: 5n }));
    assert.ok(rangesOverlap({ family: 'IPv4', first: 0n, last: 5n }, { family: 'IPv4', first: 5n, last: 5n }));
  });

  it('a CIDR that is only "/24" has no address (not a missing prefix)', () => {
    assert.deepEqual(parseCidrMasking('/24'), { ok: false, reason: '"" is not an IP address' });
  });

  it('specialRange names the documentation and private ranges', () => {
    assert.equal(specialRange(mustParseIp('192.0.2.1')), 'reserved');
    assert.equal(specialRange(mustParseIp('10.0.0.1')), 'private');
  });
});
