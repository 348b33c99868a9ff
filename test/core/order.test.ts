import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { byString, compareStrings, sortedEntries } from '../../src/core/order.js';

describe('core/order: the one order for names and keys', () => {
  test('compareStrings is code-unit order (not locale): upper case before lower, "é" after "z"', () => {
    assert.equal(compareStrings('a', 'b'), -1);
    assert.equal(compareStrings('b', 'a'), 1);
    assert.equal(compareStrings('same', 'same'), 0);
    assert.equal(compareStrings('', 'a'), -1);
    assert.equal(compareStrings('ab', 'a'), 1);
    assert.deepEqual(['é', 'z', 'a', 'Z', 'svc-10', 'svc-9'].sort(compareStrings), ['Z', 'a', 'svc-10', 'svc-9', 'z', 'é']);
    // localeCompare would put 'a' before 'Z' and 'é' before 'z': every node must agree regardless of its locale.
    assert.notDeepEqual(['Z', 'a', 'é', 'z'].sort((x, y) => x.localeCompare(y)), ['Z', 'a', 'é', 'z'].sort(compareStrings));
  });

  test('byString orders values by the string each one carries, equal keys compare 0', () => {
    const cmp = byString<{ name: string; n: number }>((v) => v.name);
    const rows = [{ name: 'b', n: 1 }, { name: 'a', n: 2 }, { name: 'b', n: 0 }];
    assert.deepEqual([...rows].sort(cmp).map((r) => `${r.name}${r.n}`), ['a2', 'b1', 'b0']);
    assert.equal(cmp(rows[0]!, rows[2]!), 0);
    assert.equal(cmp(rows[1]!, rows[0]!), -1);
    assert.equal(cmp(rows[0]!, rows[1]!), 1);
  });

  test('sortedEntries sorts a record, a map and an iterable of pairs by key, without touching the input', () => {
    const record = { zeta: 1, alpha: 2, Mid: 3 };
    assert.deepEqual(sortedEntries(record), [['Mid', 3], ['alpha', 2], ['zeta', 1]]);
    assert.deepEqual(Object.keys(record), ['zeta', 'alpha', 'Mid']);
    const map = new Map([['b', 'x'], ['a', 'y']]);
    assert.deepEqual(sortedEntries(map), [['a', 'y'], ['b', 'x']]);
    assert.deepEqual([...map.keys()], ['b', 'a']);
    const pairs: [string, number][] = [['2', 2], ['10', 10]];
    const out = sortedEntries(pairs);
    assert.deepEqual(out, [['10', 10], ['2', 2]]);
    assert.notEqual(out, pairs);
    assert.deepEqual(pairs, [['2', 2], ['10', 10]]);
    assert.deepEqual(sortedEntries({}), []);
  });
});
