/**
 * Maglev consistent hashing (Eisenbud et al., NSDI 2016, section 3.4): a lookup
 * table of prime size M where every backend fills its preference list
 * (offset + j·skip) mod M in turn until the table is full. Removing one of N
 * backends moves only about 1/N of the table's slots; the others keep theirs.
 *
 * Pure: the same backends (in any order) give the same table, on every node.
 * A backend's identity is its `key` (address and port), so its position in the
 * list does not matter; `id` is what the table holds (the datapath's backend id).
 */
import { createHash } from 'node:crypto';
import { HeraldError } from '../../core/errors.js';
import { byString } from '../../core/order.js';

export interface MaglevBackend {
  /** Stable identity, e.g. "203.0.113.130:8080/TCP". */
  key: string;
  /** The value stored in the table (non-zero: 0 means "no backend"). */
  id: number;
}

export const MAGLEV_DEFAULT_SIZE = 16381;

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  if (n % 2 === 0) return n === 2;
  for (let d = 3; d * d <= n; d += 2) if (n % d === 0) return false;
  return true;
}

function offsetSkip(key: string, m: number): [number, number] {
  const h = createHash('sha256').update(key).digest();
  return [h.readUInt32LE(0) % m, (h.readUInt32LE(4) % (m - 1)) + 1];
}

/** The lookup table: M backend ids (all 0 when there are no backends). */
export function maglevTable(backends: readonly MaglevBackend[], m: number = MAGLEV_DEFAULT_SIZE): Uint32Array {
  if (!isPrime(m)) throw new HeraldError('HERALD_BAD_ARGUMENT', `maglev table size ${m} is not a prime`);
  const sorted = [...backends].sort(byString((b) => b.key));
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i]!.key === sorted[i - 1]!.key) throw new HeraldError('HERALD_BAD_ARGUMENT', `maglev: duplicate backend ${sorted[i]!.key}`);
  }
  const n = sorted.length;
  const table = new Uint32Array(m);
  if (n === 0) return table;
  if (n > m) throw new HeraldError('HERALD_BAD_ARGUMENT', `maglev: ${n} backends exceed the table size ${m}`);
  const pos = new Uint32Array(n);
  const skip = new Uint32Array(n);
  const ids = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const [o, s] = offsetSkip(sorted[i]!.key, m);
    pos[i] = o;
    skip[i] = s;
    ids[i] = sorted[i]!.id;
  }
  const filled = new Uint8Array(m);
  let count = 0;
  for (;;) {
    for (let i = 0; i < n; i++) {
      let c = pos[i]!;
      while (filled[c]) {
        c += skip[i]!;
        if (c >= m) c -= m;
      }
      filled[c] = 1;
      table[c] = ids[i]!;
      c += skip[i]!;
      pos[i] = c >= m ? c - m : c;
      if (++count === m) return table;
    }
  }
}

/** Fraction of slots whose backend differs between two tables of one size. */
export function movedFraction(a: Uint32Array, b: Uint32Array): number {
  if (a.length !== b.length) throw new HeraldError('HERALD_BAD_ARGUMENT', 'maglev: tables of different sizes');
  let moved = 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) moved++;
  return moved / a.length;
}
