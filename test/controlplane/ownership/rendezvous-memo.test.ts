/**
 * The rendezvous memo keeps every key of a node: scoring a new key for a node
 * already in the memo adds to that node's entries rather than starting them
 * over (which would re-hash the earlier pairs on the next ownership pass and
 * count them twice towards the memo's bound).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { rendezvousMemoSize, rendezvousScore } from '../../../src/controlplane/ownership/rendezvous.js';

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

test('a node keeps its earlier keys memoized when new keys are scored for it', () => {
  const keys = ['198.18.0.1', '198.18.0.2', '2001:db8:18::3'];
  for (const k of keys) rendezvousScore('memo-keeper', k);
  const size = rendezvousMemoSize();
  for (const k of keys) assert.equal(rendezvousScore('memo-keeper', k), sha(`memo-keeper#${k}`));
  assert.equal(rendezvousMemoSize(), size, 'every pair of the node was still held: all hits');
  // Another node in between changes nothing for the first one.
  rendezvousScore('memo-other', keys[0]!);
  rendezvousScore('memo-keeper', keys[0]!);
  assert.equal(rendezvousMemoSize(), size + 1);
});
