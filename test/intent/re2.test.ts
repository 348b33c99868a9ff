import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { compileInterfacePattern, compileRe2 } from '../../src/intent/re2.js';

describe('interface patterns (RE2 as JS RegExp)', () => {
  const matches: readonly [string, string[], string[]][] = [
    ['^eth[0-9]+', ['eth0', 'eth12'], ['veth0', 'eth', 'wlan0']],
    ['eth', ['eth0', 'veth1'], ['wlan0']], // unanchored, as Go's MatchString
    ['^(bond|team)\\d+$', ['bond0', 'team3'], ['bond0.100', 'bondx']],
    ['(?i)^ETH', ['eth0', 'Eth1'], ['veth0']],
    ['^(?P<kind>en)p[0-9]+s[0-9]+$', ['enp3s0'], ['enp3']],
    ['\\Aens[[:digit:]]+\\z', ['ens18'], ['ens18a', 'xens1']],
    ['^[^[:space:]]+$', ['br-lan'], ['a b']],
    ['^en[]x]', ['en]', 'enx'], ['eny']],
  ];
  for (const [pattern, yes, no] of matches) {
    it(`${pattern} matches ${yes.join(', ')}, not ${no.join(', ')}`, () => {
      const re = compileInterfacePattern(pattern);
      for (const s of yes) assert.ok(re.test(s), s);
      for (const s of no) assert.ok(!re.test(s), s);
    });
  }

  const rejected: readonly [string, string][] = [
    ['eth[', 'unterminated character class'],
    ['eth(0', 'unterminated group'],
    ['^(?=eth)', 'lookaround is not supported by RE2'],
    ['^(?<!v)eth', 'lookaround is not supported by RE2'],
    ['(a)\\1', 'backreferences are not supported by RE2'],
    ['(?U)eth', 'unsupported inline flag "U"'],
    ['[[:bogus:]]', 'unknown character class "[:bogus:]"'],
    ['*eth', 'nothing to repeat'],
  ];
  for (const [pattern, reason] of rejected) {
    it(`rejects ${JSON.stringify(pattern)}: ${reason}`, () => {
      assert.deepEqual(compileRe2(pattern), { ok: false, reason });
    });
  }

  it('compileInterfacePattern throws HERALD_BAD_MANIFEST', () => {
    assert.throws(
      () => compileInterfacePattern('eth['),
      (e) => isHeraldError(e, 'HERALD_BAD_MANIFEST') && e.message === 'invalid interface regex "eth[": unterminated character class',
    );
  });
});
