import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { labelSelectorSchema, matchesSelector, type LabelSelectorLike, type Labels } from '../../src/intent/selector.js';

const labels: Labels = { color: 'blue', tier: 'web', 'kubernetes.io/hostname': 'worker-1', empty: '' };

describe('matchesSelector', () => {
  const cases: readonly [string, LabelSelectorLike | undefined, boolean][] = [
    ['nil selector matches everything', undefined, true],
    ['empty selector matches everything', {}, true],
    ['empty lists match everything', { matchLabels: {}, matchExpressions: [] }, true],
    ['matchLabels equal', { matchLabels: { color: 'blue' } }, true],
    ['matchLabels all must hold', { matchLabels: { color: 'blue', tier: 'db' } }, false],
    ['matchLabels absent key', { matchLabels: { zone: 'a' } }, false],
    ['matchLabels empty value is a value', { matchLabels: { empty: '' } }, true],
    ['In hit', { matchExpressions: [{ key: 'color', operator: 'In', values: ['red', 'blue'] }] }, true],
    ['In miss', { matchExpressions: [{ key: 'color', operator: 'In', values: ['red'] }] }, false],
    ['In absent key', { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] }, false],
    ['NotIn hit', { matchExpressions: [{ key: 'color', operator: 'NotIn', values: ['blue'] }] }, false],
    ['NotIn miss', { matchExpressions: [{ key: 'color', operator: 'NotIn', values: ['red'] }] }, true],
    ['NotIn absent key matches', { matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }] }, true],
    ['Exists', { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'Exists' }] }, true],
    ['Exists with empty value', { matchExpressions: [{ key: 'empty', operator: 'Exists' }] }, true],
    ['Exists absent', { matchExpressions: [{ key: 'zone', operator: 'Exists' }] }, false],
    ['DoesNotExist absent', { matchExpressions: [{ key: 'node-role.kubernetes.io/control-plane', operator: 'DoesNotExist' }] }, true],
    ['DoesNotExist present', { matchExpressions: [{ key: 'tier', operator: 'DoesNotExist' }] }, false],
    ['inherited properties are not labels', { matchExpressions: [{ key: 'constructor', operator: 'Exists' }] }, false],
    [
      'labels and expressions are AND-ed',
      { matchLabels: { color: 'blue' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['db'] }] },
      false,
    ],
  ];
  for (const [name, selector, expected] of cases) {
    it(name, () => assert.equal(matchesSelector(selector, labels), expected));
  }

  const key = fc.constantFrom('a', 'b', 'c', 'd');
  const value = fc.constantFrom('x', 'y', 'z', '');
  const labelsArb = fc.dictionary(key, value);

  it('property: an empty selector matches any labels', () => {
    fc.assert(fc.property(labelsArb, (l) => matchesSelector({}, l) && matchesSelector(undefined, l)));
  });

  it('property: matchLabels matches exactly when it is a subset of the labels', () => {
    fc.assert(
      fc.property(labelsArb, fc.dictionary(key, value), (l, want) => {
        const subset = Object.entries(want).every(([k, v]) => Object.hasOwn(l, k) && l[k] === v);
        return matchesSelector({ matchLabels: want }, l) === subset;
      }),
    );
  });

  it('property: In and NotIn are complements, as are Exists and DoesNotExist', () => {
    fc.assert(
      fc.property(labelsArb, key, fc.array(value, { minLength: 1 }), (l, k, values) => {
        const inSel = matchesSelector({ matchExpressions: [{ key: k, operator: 'In', values }] }, l);
        const notIn = matchesSelector({ matchExpressions: [{ key: k, operator: 'NotIn', values }] }, l);
        const exists = matchesSelector({ matchExpressions: [{ key: k, operator: 'Exists' }] }, l);
        const absent = matchesSelector({ matchExpressions: [{ key: k, operator: 'DoesNotExist' }] }, l);
        return inSel !== notIn && exists !== absent;
      }),
    );
  });

  it('property: matchLabels {k: v} is the same as In(k, [v])', () => {
    fc.assert(
      fc.property(labelsArb, key, value, (l, k, v) => {
        return (
          matchesSelector({ matchLabels: { [k]: v } }, l) ===
          matchesSelector({ matchExpressions: [{ key: k, operator: 'In', values: [v] }] }, l)
        );
      }),
    );
  });
});

describe('labelSelectorSchema', () => {
  it('fills defaults and keeps requirements', () => {
    const parsed = labelSelectorSchema.parse({ matchExpressions: [{ key: 'a', operator: 'Exists' }] });
    assert.deepEqual(parsed, { matchLabels: {}, matchExpressions: [{ key: 'a', operator: 'Exists' }] });
  });

  const bad: readonly [string, unknown, string][] = [
    ['unknown operator', { matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] }, 'matchExpressions.0.operator'],
    ['In without values', { matchExpressions: [{ key: 'a', operator: 'In' }] }, 'matchExpressions.0.values'],
    ['DoesNotExist with values', { matchExpressions: [{ key: 'a', operator: 'DoesNotExist', values: ['x'] }] }, 'matchExpressions.0.values'],
    ['bad value in values', { matchExpressions: [{ key: 'a', operator: 'In', values: ['-x'] }] }, 'matchExpressions.0.values.0'],
    ['bad key', { matchExpressions: [{ key: 'a/b/c', operator: 'Exists' }] }, 'matchExpressions.0.key'],
    ['key prefix not a subdomain', { matchLabels: { 'Example.com/x': 'y' } }, 'matchLabels.Example.com/x'],
    ['name part too long', { matchLabels: { ['k'.repeat(64)]: 'y' } }, `matchLabels.${'k'.repeat(64)}`],
    ['value not a string', { matchLabels: { a: 1 } }, 'matchLabels.a'],
  ];
  for (const [name, input, path] of bad) {
    it(`rejects: ${name}`, () => {
      const r = labelSelectorSchema.safeParse(input);
      assert.equal(r.success, false);
      assert.deepEqual(
        r.error?.issues.map((i) => i.path.join('.')),
        [path],
      );
    });
  }
});
