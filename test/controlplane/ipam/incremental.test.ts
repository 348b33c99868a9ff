/**
 * The incremental allocator: the cases its closure exists for (each fails
 * when that part of the closure is removed), and that it reconsiders only
 * what changed. The random-sequence equality with a full run is in
 * property.test.ts ("LB-IPAM incremental").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import { IncrementalAllocator } from '../../../src/controlplane/ipam/incremental.js';
import type { IntentSnapshot } from '../../../src/intent/index.js';
import { ingressOf, pool, service, snapshot } from './fixtures.js';

const T0 = '2024-01-01T00:00:00Z';
const T1 = '2024-01-02T00:00:00Z';
const T2 = '2024-01-03T00:00:00Z';

/** The snapshot with `from`'s objects kept where `keep` says (as the Kubernetes source keeps unchanged objects). */
function reusing(snap: IntentSnapshot, from: IntentSnapshot, keepServices: readonly string[]): IntentSnapshot {
  return {
    ...snap,
    pools: from.pools,
    services: new Map([...snap.services].map(([k, v]) => [k, keepServices.includes(k) ? (from.services.get(k) ?? v) : v])),
  };
}

describe('LB-IPAM incremental allocator', () => {
  it('reconsiders a Service that claimed an IP a deleted Service freed (its status named two)', () => {
    const p = pool('p', { blocks: ['192.0.2.0/28'] });
    const t = service('t', { created: T0, ingress: ['192.0.2.2'] });
    const s = service('s', { created: T1, ingress: ['192.0.2.1', '192.0.2.2'] });
    const first = snapshot(p, t, s);
    const inc = new IncrementalAllocator();
    // No state: both import their status; t (older) keeps .2, s keeps .1 and is refused .2.
    assert.deepEqual(ingressOf(inc.allocate(first)), ingressOf(allocate(first)));
    assert.deepEqual(ingressOf(allocate(first)), { 'default/s': ['192.0.2.1'], 'default/t': ['192.0.2.2'] });
    // t is deleted: a full run lets s keep both of its status IPs.
    const second = reusing(snapshot(p, s), first, ['default/s']);
    assert.deepEqual(ingressOf(allocate(second)), { 'default/s': ['192.0.2.1', '192.0.2.2'] });
    assert.deepEqual(inc.allocate(second), allocate(second));
    assert.equal(inc.stats.incremental, 1);
  });

  it('redoes a sharing key together, so its IPs are offered in the order a full run takes them', () => {
    const p = pool('p', { blocks: ['192.0.2.0/28'] });
    const a = (labels: Record<string, string>) => service('a', { created: T0, sharingKey: 'k', ports: [80], ingress: ['192.0.2.1'], labels });
    const b = service('b', { created: T1, sharingKey: 'k', ports: [443], ingress: ['192.0.2.5'] });
    const c = service('c', { created: T2, sharingKey: 'k', ports: [53] });
    const first = snapshot(p, a({}), b);
    const inc = new IncrementalAllocator();
    assert.deepEqual(inc.allocate(first), allocate(first));
    // a changes (a label) and c arrives: a full run offers c a's .1 first (a was imported first).
    const second = reusing(snapshot(p, a({ x: 'y' }), b, c), first, ['default/b']);
    assert.deepEqual(ingressOf(allocate(second))['default/c'], ['192.0.2.1']);
    assert.deepEqual(inc.allocate(second), allocate(second));
    assert.equal(inc.stats.incremental, 1);
  });

  it('reconsiders only the changed Services of 2,000, and keeps everyone else exactly', () => {
    const p = pool('big', { blocks: ['2001:db8::/112'] });
    const objects = [p];
    for (let i = 0; i < 2000; i++) objects.push(service(`s${i}`, { created: T0, families: ['IPv6'] }));
    const first = snapshot(...objects);
    const inc = new IncrementalAllocator();
    const r1 = inc.allocate(first);
    // The leader's next run: fed its own state (each Service is re-imported once, then settled).
    const r2 = inc.allocate(first, r1.state);
    assert.deepEqual(r2, allocate(first, r1.state));
    const before = inc.stats.reconsidered;
    const r3 = inc.allocate(first, r2.state);
    assert.equal(inc.stats.reconsidered, before, 'nothing changed: nothing reconsidered');
    assert.deepEqual(r3, r2);
    // One new Service and one deleted: those two only.
    const next = snapshot(...objects.filter((o) => o !== objects[7]), service('new', { created: T1, families: ['IPv6'] }));
    const kept = [...first.services.keys()];
    const r4 = inc.allocate(reusing(next, first, kept), r3.state);
    assert.equal(inc.stats.reconsidered - before, 2);
    assert.deepEqual(r4, allocate(next, r3.state));
    assert.equal(r4.services.get('default/new')?.ingress[0], r3.services.get('default/s6')?.ingress[0], 'the freed lowest address');
    for (const [key, svc] of r3.services) if (key !== 'default/s6') assert.deepEqual(r4.services.get(key), svc, key);
  });
});
