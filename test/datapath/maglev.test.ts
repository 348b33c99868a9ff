/**
 * Maglev consistent hashing (pure): the permutation fills the table evenly,
 * the table is a function of the backend set alone, and removing one of N
 * backends moves about 1/N of the slots — measured here.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isPrime, maglevTable, movedFraction, MAGLEV_DEFAULT_SIZE } from '../../src/datapath/lb/maglev.js';

const backends = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ key: `203.0.113.${130 + from + i}:8080/TCP`, id: from + i + 1 }));

test('every slot is filled, each backend gets within 1 slot of M/N (full permutation rounds)', () => {
  const m = 251;
  for (const n of [1, 2, 3, 7, 50]) {
    const t = maglevTable(backends(n), m);
    const counts = new Map<number, number>();
    for (const id of t) counts.set(id, (counts.get(id) ?? 0) + 1);
    assert.equal(counts.size, n);
    assert.ok(!counts.has(0));
    const lo = Math.floor(m / n);
    for (const c of counts.values()) assert.ok(c === lo || c === lo + 1, `n=${n}: ${c} slots, expected ${lo} or ${lo + 1}`);
  }
});

test('the table depends on the backend set, not its order', () => {
  const b = backends(10);
  const shuffled = [...b].reverse();
  assert.deepEqual(maglevTable(b, 1009), maglevTable(shuffled, 1009));
});

// Measured (M = 16381): N=5 → 1.03/N, N=10 → 1.06/N, N=100 → 2.4/N, N=1000 → 7/N (Maglev's
// disruption grows as M/N shrinks; M = 65537 gives 1.6/N at N=100). Established flows keep their
// backend anyway: the connection entry decides, not the table.
const bound: Record<number, number> = { 5: 1.15, 10: 1.2, 100: 2.6 };
test('removing one of N backends moves about 1/N of the slots (measured), survivors rarely lose slots', () => {
  for (const n of [5, 10, 100]) {
    const all = backends(n);
    const a = maglevTable(all, MAGLEV_DEFAULT_SIZE);
    const removed = all[n - 1]!.id;
    const b = maglevTable(all.slice(0, n - 1), MAGLEV_DEFAULT_SIZE);
    const moved = movedFraction(a, b);
    // Slots of the removed backend must move (1/N); Maglev moves a few more, not many.
    assert.ok(moved >= 1 / n - 0.01 && moved <= bound[n]! / n, `n=${n}: moved ${moved.toFixed(4)} vs 1/N=${(1 / n).toFixed(4)}`);
    let survivorsMoved = 0;
    for (let i = 0; i < a.length; i++) if (a[i] !== removed && a[i] !== b[i]) survivorsMoved++;
    assert.ok(survivorsMoved / a.length < (bound[n]! - 0.9) / n, `n=${n}: ${survivorsMoved} survivor slots moved`);
  }
});

test('no backends: an all-zero table; bad sizes and duplicates are refused with a code', () => {
  assert.ok(maglevTable([], 7).every((x) => x === 0));
  assert.throws(() => maglevTable(backends(2), 100), { code: 'HERALD_BAD_ARGUMENT' });
  assert.throws(() => maglevTable([...backends(2), ...backends(1)], 7), { code: 'HERALD_BAD_ARGUMENT' });
  assert.throws(() => maglevTable(backends(8), 7), { code: 'HERALD_BAD_ARGUMENT' });
  assert.ok(isPrime(16381) && isPrime(251) && !isPrime(16383) && !isPrime(1));
});

test('isPrime at the edges: 2 and 3 are prime, squares of primes and even numbers are not', () => {
  assert.deepEqual([0, 1, 2, 3, 4, 9, 25, 49, 121, 16_129, 7, 13].map(isPrime), [false, false, true, true, false, false, false, false, false, false, true, true]);
  assert.ok(!isPrime(2.5) && !isPrime(-7) && !isPrime(Number.NaN));
});

test('errors say what is wrong: the size, the duplicate backend, the count; as many backends as slots is allowed', () => {
  assert.throws(() => maglevTable(backends(2), 100), { code: 'HERALD_BAD_ARGUMENT', message: 'maglev table size 100 is not a prime' });
  assert.throws(() => maglevTable([...backends(2), ...backends(1)], 7), { message: 'maglev: duplicate backend 203.0.113.130:8080/TCP' });
  assert.throws(() => maglevTable(backends(8), 7), { message: 'maglev: 8 backends exceed the table size 7' });
  const full = maglevTable(backends(7), 7);
  assert.deepEqual([...full].sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7], 'each backend holds exactly one slot');
  assert.throws(() => movedFraction(new Uint32Array(7), new Uint32Array(11)), { code: 'HERALD_BAD_ARGUMENT', message: 'maglev: tables of different sizes' });
  assert.equal(movedFraction(maglevTable(backends(3), 7), maglevTable(backends(3), 7)), 0);
});
