import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { addrOf, formatAddr } from '../../../src/core/addr.js';
import { AddressSet, blockContains, blockSize, blocksOverlap, compileBlock, isReserved } from '../../../src/controlplane/ipam/blocks.js';
import { normalizeIp, parseIp } from '../../../src/intent/index.js';

describe('addresses as bigint', () => {
  it('round-trips canonical text, IPv4 and IPv6', () => {
    for (const ip of ['192.0.2.0', '198.51.100.255', '203.0.113.7', '2001:db8::', '2001:db8::1', '2001:db8:0:1::ff', '::ffff:192.0.2.1', '::']) {
      const addr = addrOf(ip);
      assert.ok(addr, ip);
      assert.equal(formatAddr(addr), ip);
    }
    assert.equal(addrOf('192.0.2.1')?.value, 0xc0000201n);
    assert.equal(addrOf('2001:DB8::0:1')?.value, (0x20010db8n << 96n) | 1n);
    assert.equal(addrOf('192.0.2.01'), undefined);
  });

  it('formatAddr agrees with normalizeIp for any IPv6 value (zero runs included)', () => {
    const hextet = fc.oneof(fc.constant(0n), fc.constant(0n), fc.bigInt({ min: 0n, max: 0xffffn }));
    const value = fc.oneof(
      fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }),
      fc.array(hextet, { minLength: 8, maxLength: 8 }).map((ws) => ws.reduce((acc, w) => (acc << 16n) | w, 0n)),
      fc.bigInt({ min: 0n, max: 0xffffffffn }).map((v) => (0xffffn << 32n) | v),
    );
    fc.assert(
      fc.property(value, (value) => {
        const text = formatAddr({ family: 'IPv6', value });
        assert.equal(normalizeIp(text), text);
        assert.equal(addrOf(text)?.value, value);
      }),
    );
  });
});

describe('addrOf agrees with the intent parser', () => {
  const token = fc.oneof(
    fc.constantFrom('0', '1', 'db8', '2001', 'ffff', 'FFFF', '00000', 'g', '', '192.0.2.1', '1.2.3', '01.2.3.4', '256.1.1.1'),
    fc.integer({ min: 0, max: 0xffff }).map((n) => n.toString(16)),
  );
  const text = fc.tuple(fc.array(token, { maxLength: 9 }), fc.array(fc.constantFrom(':', '::', '.'), { maxLength: 9 })).map(([ts, seps]) =>
    ts.reduce((acc, t, i) => acc + (i > 0 ? (seps[i - 1] ?? ':') : '') + t, ''),
  );
  it('accepts exactly what parseIp accepts, with the same value', () => {
    fc.assert(
      fc.property(fc.oneof(text, fc.string()), (s) => {
        const parsed = parseIp(s);
        const addr = addrOf(s);
        assert.equal(addr === undefined, parsed === undefined, s);
        if (addr && parsed) {
          assert.equal(addr.family, parsed.family);
          assert.equal(formatAddr(addr), parsed.text);
        }
      }),
      { numRuns: 3000 },
    );
  });
});

describe('compileBlock', () => {
  const cases: [string, Parameters<typeof compileBlock>[0], boolean, string, bigint, bigint][] = [
    ['/24 Yes', { type: 'cidr', family: 'IPv4', cidr: '192.0.2.0/24' }, true, '192.0.2.0 - 192.0.2.255', 256n, 0n],
    ['/24 No', { type: 'cidr', family: 'IPv4', cidr: '192.0.2.0/24' }, false, '192.0.2.0 - 192.0.2.255', 256n, 2n],
    ['/30 No', { type: 'cidr', family: 'IPv4', cidr: '192.0.2.4/30' }, false, '192.0.2.4 - 192.0.2.7', 4n, 2n],
    ['/31 No', { type: 'cidr', family: 'IPv4', cidr: '192.0.2.4/31' }, false, '192.0.2.4 - 192.0.2.5', 2n, 0n],
    ['/32 No', { type: 'cidr', family: 'IPv4', cidr: '192.0.2.4/32' }, false, '192.0.2.4 - 192.0.2.4', 1n, 0n],
    ['range No', { type: 'range', family: 'IPv4', start: '198.51.100.0', stop: '198.51.100.9' }, false, '198.51.100.0 - 198.51.100.9', 10n, 0n],
    ['/126 No', { type: 'cidr', family: 'IPv6', cidr: '2001:db8::/126' }, false, '2001:db8:: - 2001:db8::3', 4n, 2n],
    ['/127 No', { type: 'cidr', family: 'IPv6', cidr: '2001:db8::/127' }, false, '2001:db8:: - 2001:db8::1', 2n, 0n],
    ['/64 No', { type: 'cidr', family: 'IPv6', cidr: '2001:db8::/64' }, false, '2001:db8:: - 2001:db8::ffff:ffff:ffff:ffff', 1n << 64n, 2n],
  ];
  for (const [name, block, allow, label, size, reserved] of cases) {
    it(name, () => {
      const b = compileBlock(block, allow);
      assert.equal(b.label, label);
      assert.equal(blockSize(b), size);
      assert.equal(b.reserved, reserved);
      assert.equal(b.hi - b.lo + 1n, size - reserved);
      const first = { family: b.family, value: b.first };
      assert.equal(isReserved(b, first), reserved > 0n);
      assert.ok(blockContains(b, first));
    });
  }

  it('overlap is per family and inclusive', () => {
    const a = compileBlock({ type: 'range', family: 'IPv4', start: '192.0.2.0', stop: '192.0.2.10' }, true);
    const b = compileBlock({ type: 'range', family: 'IPv4', start: '192.0.2.10', stop: '192.0.2.20' }, true);
    const c = compileBlock({ type: 'range', family: 'IPv4', start: '192.0.2.11', stop: '192.0.2.20' }, true);
    const v6 = compileBlock({ type: 'cidr', family: 'IPv6', cidr: '::/96' }, true);
    assert.deepEqual([blocksOverlap(a, b), blocksOverlap(a, c), blocksOverlap(a, v6)], [true, false, false]);
  });
});

describe('AddressSet', () => {
  it('behaves like a naive set (first free, has)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 63 }), { maxLength: 80 }), fc.integer({ min: 0, max: 63 }), fc.integer({ min: 0, max: 63 }), (adds, x, y) => {
        const set = new AddressSet();
        const model = new Set<number>();
        for (const v of adds) {
          set.add(BigInt(v));
          model.add(v);
        }
        for (let v = 0; v < 64; v++) assert.equal(set.has(BigInt(v)), model.has(v));
        const [lo, hi] = x <= y ? [x, y] : [y, x];
        let expected: number | undefined;
        for (let v = lo; v <= hi; v++) {
          if (!model.has(v)) {
            expected = v;
            break;
          }
        }
        assert.equal(set.firstFree(BigInt(lo), BigInt(hi)), expected === undefined ? undefined : BigInt(expected));
      }),
    );
  });

  it('behaves like a naive set under adds and deletes (intervals split and merge)', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 31 })), { maxLength: 120 }), (ops) => {
        const set = new AddressSet();
        const model = new Set<number>();
        for (const [add, v] of ops) {
          if (add) {
            set.add(BigInt(v));
            model.add(v);
          } else {
            set.delete(BigInt(v));
            model.delete(v);
          }
          for (let w = 0; w < 32; w++) assert.equal(set.has(BigInt(w)), model.has(w), `${w} after ${add ? 'add' : 'delete'} ${v}`);
          let runs = 0;
          for (let w = 0; w < 32; w++) if (model.has(w) && !model.has(w - 1)) runs++;
          assert.equal(set.intervals, runs, 'intervals stay disjoint and non-adjacent');
          const free = [...Array(33).keys()].find((w) => !model.has(w));
          assert.equal(set.firstFree(0n, 40n), BigInt(free as number));
        }
      }),
    );
  });

  it('sequential allocation stays one interval', () => {
    const set = new AddressSet();
    for (let i = 0n; i < 1000n; i++) set.add(set.firstFree(0n, 1n << 64n) ?? -1n);
    assert.equal(set.intervals, 1);
    assert.equal(set.firstFree(0n, 999n), undefined);
    assert.equal(set.firstFree(0n, 1000n), 1000n);
  });
});
