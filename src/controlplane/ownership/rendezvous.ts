/**
 * Rendezvous (highest random weight) preference, the same on every node and
 * every store: an IP's preferred owner is the candidate with the highest
 * sha256(node#key) as lowercase hex (MetalLB hashes the same way since
 * MetalLB PR 976). `key` is the IP, or for a dual-stack service the address
 * its family members share. Changing the formula splits a mixed-version
 * cluster's preferences, so it is pinned by a test.
 *
 * Memoized: every ownership pass ranks each IP's candidates, and right after a
 * mass take-over the successors would otherwise hash the same pairs again
 * (3,000 pairs ≈ 3 ms warm, 10 ms on cold code). Bounded: past MEMO_LIMIT
 * pairs the memo is dropped whole, so node names or IPs that never repeat
 * cannot grow it.
 */
import { createHash } from 'node:crypto';

export const MEMO_LIMIT = 65_536;

/** node → key → score. */
const memo = new Map<string, Map<string, string>>();
let memoSize = 0;

export function rendezvousScore(node: string, key: string): string {
  let byKey = memo.get(node);
  const known = byKey?.get(key);
  if (known !== undefined) return known;
  const score = createHash('sha256').update(`${node}#${key}`).digest('hex');
  if (memoSize >= MEMO_LIMIT) {
    memo.clear();
    memoSize = 0;
    byKey = undefined;
  }
  if (byKey === undefined) {
    byKey = new Map();
    memo.set(node, byKey);
  }
  byKey.set(key, score);
  memoSize++;
  return score;
}

/** Pairs held in the memo (for tests). */
export function rendezvousMemoSize(): number {
  return memoSize;
}

/** Whether the pair's score is memoized (for tests: what was hashed ahead). */
export function rendezvousMemoHas(node: string, key: string): boolean {
  return memo.get(node)?.has(key) ?? false;
}
