/**
 * The conntrack GC's adaptive interval (after Cilium's GetInterval): table-driven.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nextGcInterval } from '../../src/datapath/lb/ct-gc.js';

const b = { minMs: 10_000, maxMs: 300_000 };
const cases: Array<{ name: string; expected: number; actual: number; ratio: number; want: number }> = [
  { name: 'nothing deleted: grows by half', expected: 60_000, actual: 60_000, ratio: 0, want: 90_000 },
  { name: 'little deleted (<5%): grows by half', expected: 60_000, actual: 60_000, ratio: 0.04, want: 90_000 },
  { name: 'growth stops at the maximum', expected: 250_000, actual: 250_000, ratio: 0, want: 300_000 },
  { name: 'between 5% and 25%: unchanged', expected: 60_000, actual: 60_000, ratio: 0.1, want: 60_000 },
  { name: 'half deleted: halves', expected: 60_000, actual: 60_000, ratio: 0.5, want: 30_000 },
  { name: 'almost all deleted: at most 10x shorter', expected: 200_000, actual: 200_000, ratio: 1, want: 20_000 },
  { name: 'shrinking stops at the minimum', expected: 20_000, actual: 20_000, ratio: 0.9, want: 10_000 },
  { name: 'an early (triggered) pass scales its ratio up', expected: 60_000, actual: 15_000, ratio: 0.1, want: 36_000 },
  { name: 'a late pass is not scaled', expected: 60_000, actual: 120_000, ratio: 0.1, want: 60_000 },
  { name: 'no previous interval: the maximum', expected: 0, actual: 0, ratio: 0.1, want: 300_000 },
  { name: 'NaN ratio counts as nothing deleted', expected: 60_000, actual: 60_000, ratio: Number.NaN, want: 90_000 },
];

for (const c of cases) {
  test(`nextGcInterval: ${c.name}`, () => {
    assert.equal(nextGcInterval(c.expected, c.actual, c.ratio, b), c.want);
  });
}
