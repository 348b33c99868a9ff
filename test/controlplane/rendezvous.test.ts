/**
 * The rendezvous score: the formula every node must compute alike (pinned),
 * and its memo (same answers, bounded).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { MEMO_LIMIT, rendezvousMemoSize, rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

test('the score is sha256(node#key) as lowercase hex, the same on every call', () => {
  // Pinned: a mixed-version cluster must rank candidates alike.
  assert.equal(rendezvousScore('n1', '192.0.2.10'), '9870ca2e99562e2044624725b11711d848b35680626dc334849a3dcce8e4fb1d');
  assert.equal(rendezvousScore('n1', '192.0.2.10'), sha('n1#192.0.2.10'));
  assert.match(rendezvousScore('n1', '192.0.2.10'), /^[0-9a-f]{64}$/);
  assert.equal(rendezvousScore('node-a', '2001:db8::1'), sha('node-a#2001:db8::1'));
});

test('memoized answers are per node and per key, never mixed up', () => {
  const pairs: [string, string][] = [];
  for (const node of ['m1', 'm2', 'm3']) for (let i = 0; i < 50; i++) pairs.push([node, `198.51.100.${i}`]);
  const first = pairs.map(([n, k]) => rendezvousScore(n, k));
  const again = pairs.map(([n, k]) => rendezvousScore(n, k));
  assert.deepEqual(again, first);
  pairs.forEach(([n, k], i) => assert.equal(first[i], sha(`${n}#${k}`), `${n} ${k}`));
  assert.equal(new Set(first).size, pairs.length);
  // The node and the key are not interchangeable: 'a#b' is not 'b#a'.
  assert.notEqual(rendezvousScore('x', 'y'), rendezvousScore('y', 'x'));
});

test('a hit adds nothing to the memo; a new pair adds one', () => {
  rendezvousScore('hit-node', '203.0.113.1');
  const size = rendezvousMemoSize();
  rendezvousScore('hit-node', '203.0.113.1');
  assert.equal(rendezvousMemoSize(), size);
  rendezvousScore('hit-node', '203.0.113.2');
  assert.equal(rendezvousMemoSize(), size + 1);
  rendezvousScore('hit-node-2', '203.0.113.1');
  assert.equal(rendezvousMemoSize(), size + 2);
});

test('the memo is bounded: pairs that never repeat cannot grow it past its limit, and answers stay right', () => {
  const before = rendezvousMemoSize();
  let peak = 0;
  for (let i = 0; i < MEMO_LIMIT + 10; i++) {
    rendezvousScore(`bomb-${i}`, '2001:db8::7');
    peak = Math.max(peak, rendezvousMemoSize());
  }
  assert.equal(peak, MEMO_LIMIT);
  // Dropped whole when full, then filled again: what was held before plus the 10 pairs past the limit.
  assert.equal(rendezvousMemoSize(), before + 10);
  assert.equal(rendezvousScore(`bomb-${MEMO_LIMIT + 9}`, '2001:db8::7'), sha(`bomb-${MEMO_LIMIT + 9}#2001:db8::7`));
  assert.equal(rendezvousScore('bomb-0', '2001:db8::7'), sha('bomb-0#2001:db8::7'));
});
