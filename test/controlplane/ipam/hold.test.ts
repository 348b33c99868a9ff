/** Holds on restored allocations, and parsing stored states (issue 9). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { applyHold, withHeld } from '../../../src/controlplane/ipam/hold.js';
import { parseAllocationState, quoteBounded, sameAllocations, type AllocationState } from '../../../src/controlplane/ipam/state.js';

const restored: AllocationState = {
  version: 1,
  allocations: { 'default/a': ['198.51.100.10'], 'default/b': ['198.51.100.11'] },
  fingerprints: { 'default/a': 'fa', 'default/b': 'fb' },
  generation: 7,
  held: ['default/a', 'default/b'],
};

describe('restore holds', () => {
  test('Services missing from the intent keep their IPs while held', () => {
    const r = applyHold({ version: 1, allocations: {} }, restored);
    assert.ok(r.ok);
    assert.deepEqual(r.state.allocations, restored.allocations);
    assert.deepEqual(r.state.fingerprints, restored.fingerprints);
    assert.deepEqual(r.state.held, ['default/a', 'default/b']);
  });

  test('a Service applied again leaves the hold; later it is an ordinary allocation', () => {
    const r = applyHold({ version: 1, allocations: { 'default/a': ['198.51.100.10'] } }, restored);
    assert.ok(r.ok);
    assert.deepEqual(r.state.held, ['default/b']);
    assert.deepEqual(r.state.allocations['default/b'], ['198.51.100.11']);
    const all = applyHold({ version: 1, allocations: { 'default/a': ['198.51.100.10'], 'default/b': ['198.51.100.11'] } }, r.state);
    assert.ok(all.ok);
    assert.equal(all.state.held, undefined);
    const deleted = applyHold({ version: 1, allocations: { 'default/a': ['198.51.100.10'] } }, all.state);
    assert.ok(deleted.ok);
    assert.deepEqual(Object.keys(deleted.state.allocations), ['default/a'], 'deleting a Service that is no longer held releases it');
  });

  test('a state giving a held IP to another Service is refused', () => {
    const r = applyHold({ version: 1, allocations: { 'default/new': ['198.51.100.11'] } }, restored);
    assert.equal(r.ok, false);
    assert.match(r.ok ? '' : r.conflict, /198\.51\.100\.11 is held for default\/b but was given to default\/new/);
  });

  // Aimed at the mutants the first mutation run left (README "Mutation testing").
  test('the persisted state is canonical: keys sorted, the allocator\'s fingerprints kept, a hold without a fingerprint adds none', () => {
    const current: AllocationState = { version: 1, allocations: { 'default/m': ['198.51.100.12'], 'default/held-nofp': ['198.51.100.13'] }, held: ['default/m', 'default/held-nofp'], fingerprints: { 'default/m': 'fm' } };
    const next: AllocationState = { version: 1, allocations: { 'default/z': ['198.51.100.20'], 'default/c': ['198.51.100.21'] }, fingerprints: { 'default/z': 'fz', 'default/c': 'fc' } };
    const r = applyHold(next, current);
    assert.ok(r.ok);
    assert.deepEqual(Object.keys(r.state.allocations), ['default/c', 'default/held-nofp', 'default/m', 'default/z']);
    assert.deepEqual(Object.entries(r.state.fingerprints ?? {}), [['default/c', 'fc'], ['default/m', 'fm'], ['default/z', 'fz']]);
    assert.deepEqual(r.state.held, ['default/held-nofp', 'default/m']);
    // Without fingerprints on either side, none appear.
    const bare = applyHold({ version: 1, allocations: { 'default/b2': ['198.51.100.30'], 'default/a2': ['198.51.100.31'] } }, { version: 1, allocations: { 'default/h': ['198.51.100.32'] }, held: ['default/h'] });
    assert.ok(bare.ok);
    assert.deepEqual(bare.state.fingerprints, {});
    assert.deepEqual(Object.keys(bare.state.allocations), ['default/a2', 'default/b2', 'default/h']);
  });

  test('a held Service with no stored allocation is held with none; a repeated hold is listed once', () => {
    const r = applyHold({ version: 1, allocations: {} }, { version: 1, allocations: {}, held: ['default/ghost'] });
    assert.ok(r.ok);
    assert.deepEqual(r.state.allocations, { 'default/ghost': [] });
    assert.deepEqual(withHeld(restored, ['default/b', 'default/a', 'default/b']).held, ['default/a', 'default/b']);
  });

  test('withHeld with nothing drops the field', () => {
    assert.equal('held' in withHeld(restored, []), false);
  });
});

describe('stored allocation states', () => {
  test('a generation and holds are optional (states written before them still parse)', () => {
    const r = parseAllocationState('{"version":1,"allocations":{"default/a":["198.51.100.10"]}}');
    assert.ok(r.ok);
    assert.equal(r.state.generation, undefined);
  });

  test('not JSON, or schema-invalid: a precise error quoting the value up to a bound', () => {
    const long = parseAllocationState('y'.repeat(5000));
    assert.equal(long.ok, false);
    assert.match(long.ok ? '' : long.error, /^not JSON .*: "y{200}"… \(5000 characters\)$/);
    const bad = parseAllocationState('{"version":1,"allocations":{"default/a":["nope"]},"generation":-1}');
    assert.equal(bad.ok, false);
    assert.match(bad.ok ? '' : bad.error, /^invalid \(.*allocations\.default\/a\.0: not an IP address.*generation/);
    assert.equal(quoteBounded('short'), '"short"');
  });

  test('sameAllocations ignores generation, holds and key order', () => {
    const a: AllocationState = { version: 1, allocations: { x: ['198.51.100.1'], y: ['198.51.100.2'] }, generation: 1 };
    const b: AllocationState = { version: 1, allocations: { y: ['198.51.100.2'], x: ['198.51.100.1'] }, generation: 9, held: ['x'] };
    assert.ok(sameAllocations(a, b));
    assert.ok(!sameAllocations(a, { version: 1, allocations: { x: ['198.51.100.1'] } }));
  });
});
