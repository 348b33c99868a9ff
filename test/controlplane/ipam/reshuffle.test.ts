/**
 * Never reshuffle: regression tests named after the Cilium issues where
 * LB-IPAM moved Services' IPs on restart, pool edits or unrelated churn
 * (cilium/cilium#40358, #41458, #39033, #43131; fixed by #41147, #41122,
 * #46262), plus the import of existing `status.loadBalancer.ingress`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import { ingressOf, pool, reasonOf, restart, service, snapshot } from './fixtures.js';

const T0 = '2024-01-01T00:00:00Z';
const T1 = '2024-02-01T00:00:00Z';
const T2 = '2024-03-01T00:00:00Z';

describe('LB-IPAM import of status.loadBalancer.ingress (fresh store)', () => {
  it('keeps a valid ingress IP even when it is not the first free address', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), service('a', { ingress: ['192.0.2.200'] }), service('b')));
    assert.deepEqual(ingressOf(r), { 'default/a': ['192.0.2.200'], 'default/b': ['192.0.2.0'] });
  });

  it('strips an ingress IP outside every pool and allocates a new one', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), service('a', { ingress: ['203.0.113.1'] })));
    assert.deepEqual(ingressOf(r), { 'default/a': ['192.0.2.0'] });
  });

  it('strips an ingress IP of a family the service no longer wants', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24', '2001:db8::/120'] }), service('a', { ingress: ['192.0.2.9', '2001:db8::9'] })));
    assert.deepEqual(ingressOf(r), { 'default/a': ['192.0.2.9'] });
  });

  it('strips an ingress IP the specific request no longer names', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), service('a', { ingress: ['192.0.2.9'], ips: '192.0.2.10' })));
    assert.deepEqual(ingressOf(r), { 'default/a': ['192.0.2.10'] });
  });

  it('two incompatible claims on one IP: the older service keeps it, the newer gets another', () => {
    const r = allocate(
      snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), service('young', { ingress: ['192.0.2.5'], created: T1 }), service('old', { ingress: ['192.0.2.5'], created: T0 })),
    );
    assert.deepEqual(ingressOf(r), { 'default/old': ['192.0.2.5'], 'default/young': ['192.0.2.0'] });
  });

  it('shared IPs survive import (cilium/cilium#46262)', () => {
    const objs = [
      pool('p', { blocks: ['192.0.2.0/24'] }),
      service('a', { sharingKey: 'k', ports: [80], ingress: ['192.0.2.77'] }),
      service('b', { sharingKey: 'k', ports: [443], ingress: ['192.0.2.77'] }),
    ];
    const first = allocate(snapshot(...objs));
    assert.deepEqual(ingressOf(first), { 'default/a': ['192.0.2.77'], 'default/b': ['192.0.2.77'] });
    assert.deepEqual(ingressOf(restart(snapshot(...objs), first.state)), ingressOf(first));
  });

  it('the persisted state wins over a stale status for a known service', () => {
    const snap = snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), service('a', { ingress: ['192.0.2.1'] }));
    const r = allocate(snap, { version: 1, allocations: { 'default/a': ['192.0.2.2'] } });
    assert.deepEqual(ingressOf(r), { 'default/a': ['192.0.2.2'] });
  });
});

describe('LB-IPAM never reshuffles', () => {
  const base = [pool('p', { blocks: ['192.0.2.0/28'], created: T0 })];
  const three = [service('a', { created: T0 }), service('b', { created: T1 }), service('c', { created: T2 })];

  it('restart keeps every IP (cilium/cilium#39033), also after many restarts through JSON', () => {
    const snap = snapshot(...base, ...three);
    const first = allocate(snap);
    let state = first.state;
    for (let i = 0; i < 5; i++) {
      const again = restart(snap, state);
      assert.deepEqual(ingressOf(again), ingressOf(first));
      state = again.state;
    }
  });

  it('restart with services listed in another order keeps every IP (cilium/cilium#41147)', () => {
    const first = allocate(snapshot(...base, ...three));
    const again = restart(snapshot(...[...three].reverse(), ...base), first.state);
    assert.deepEqual(ingressOf(again), ingressOf(first));
  });

  it('an unrelated service deleted or added keeps the others in place (cilium/cilium#43131)', () => {
    const first = allocate(snapshot(...base, ...three));
    const deleted = restart(snapshot(...base, three[0] as object, three[2] as object), first.state);
    assert.deepEqual(ingressOf(deleted), { 'default/a': ['192.0.2.0'], 'default/c': ['192.0.2.2'] });
    // A new, *older* service does not take a held IP: it gets the freed one.
    const added = restart(snapshot(...base, ...three.filter((_, i) => i !== 1), service('aa', { created: '2023-01-01T00:00:00Z' })), deleted.state);
    assert.deepEqual(ingressOf(added), { 'default/a': ['192.0.2.0'], 'default/aa': ['192.0.2.1'], 'default/c': ['192.0.2.2'] });
  });

  it('a pool edit that still covers the IPs keeps them (cilium/cilium#40358, #41458)', () => {
    const first = allocate(snapshot(...base, ...three));
    const edits = [
      pool('p', { blocks: ['192.0.2.0/24'], created: T0 }), // widened
      pool('p', { blocks: ['198.51.100.0/24', '192.0.2.0/28'], created: T0 }), // a block added in front
      pool('p', { blocks: [{ start: '192.0.2.0', stop: '192.0.2.2' }], created: T0 }), // narrowed to exactly the used IPs
      pool('p', { blocks: ['192.0.2.0/28'], created: T0, selector: { matchExpressions: [{ key: 'x', operator: 'DoesNotExist' }] } }),
      pool('p', { blocks: ['192.0.2.0/28'], created: T0, allowFirstLastIPs: 'No' }), // .0 is now reserved: held, not revoked
    ];
    let state = first.state;
    for (const edited of edits) {
      const r = restart(snapshot(edited, ...three), state);
      assert.deepEqual(ingressOf(r), ingressOf(first), JSON.stringify(edited));
      state = r.state;
    }
  });

  it('a pool widened while services are unsatisfied: the satisfied ones keep their IPs (cilium/cilium#41122)', () => {
    const tiny = pool('p', { blocks: [{ start: '192.0.2.1', stop: '192.0.2.2' }] });
    const first = allocate(snapshot(tiny, ...three));
    assert.equal(reasonOf(first, 'default/c'), 'out_of_ips');
    const wide = restart(snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), ...three), first.state);
    assert.deepEqual(ingressOf(wide), { 'default/a': ['192.0.2.1'], 'default/b': ['192.0.2.2'], 'default/c': ['192.0.2.0'] });
  });

  it('a pool disabled, then a restart: existing IPs are kept (Cilium loses them on restart)', () => {
    const first = allocate(snapshot(...base, ...three));
    const disabled = restart(snapshot(pool('p', { blocks: ['192.0.2.0/28'], disabled: true }), ...three, service('d')), first.state);
    assert.deepEqual(ingressOf(disabled), { ...ingressOf(first), 'default/d': [] });
    assert.equal(reasonOf(disabled, 'default/d'), 'no_pool');
  });

  it('an older pool edited to overlap: the now-conflicting pool keeps its services', () => {
    const young = pool('young', { blocks: ['198.51.100.0/28'], created: T1 });
    const y = service('y', { ips: '198.51.100.3' });
    const first = allocate(snapshot(pool('old', { blocks: ['192.0.2.0/28'], created: T0 }), young, y));
    assert.deepEqual(ingressOf(first), { 'default/y': ['198.51.100.3'] });
    const overlap = restart(snapshot(pool('old', { blocks: ['198.51.100.0/24'], created: T0 }), young, y), first.state);
    assert.equal(overlap.pools.get('young')?.conflicting, true);
    assert.deepEqual(ingressOf(overlap), { 'default/y': ['198.51.100.3'] });
    // The IP is counted in the usable pool that also contains it.
    assert.deepEqual(overlap.pools.get('old')?.used, 1n);
  });

  it('all pools deleted, then re-created: the same IPs come back (dormant carries the state)', () => {
    const first = allocate(snapshot(...base, ...three));
    const dormant = restart(snapshot(...three), first.state);
    assert.equal(dormant.dormant, true);
    const back = restart(snapshot(...base, ...three), dormant.state);
    assert.deepEqual(ingressOf(back), ingressOf(first));
  });

  it('two sharers become incompatible: the one that changed moves, whatever their ages', () => {
    const p = pool('p', { blocks: ['192.0.2.0/24'] });
    const old = (ports: number[]): object => service('old', { sharingKey: 'k', ports, created: T0 });
    const young = service('young', { sharingKey: 'k', ports: [443], created: T1 });
    const first = allocate(snapshot(p, old([80]), young));
    assert.deepEqual(ingressOf(first), { 'default/old': ['192.0.2.0'], 'default/young': ['192.0.2.0'] });
    const changed = restart(snapshot(p, old([443]), young), first.state);
    assert.deepEqual(ingressOf(changed), { 'default/old': ['192.0.2.1'], 'default/young': ['192.0.2.0'] });
  });

  it('a new specific request for a held IP does not take it', () => {
    const first = allocate(snapshot(...base, ...three));
    const r = restart(snapshot(...base, ...three, service('thief', { ips: '192.0.2.1', created: '2020-01-01T00:00:00Z' })), first.state);
    assert.deepEqual(ingressOf(r), { ...ingressOf(first), 'default/thief': [] });
    assert.equal(reasonOf(r, 'default/thief'), 'already_allocated');
  });

  it('a service switched to a foreign class releases its IP, and it is reused', () => {
    const first = allocate(snapshot(...base, ...three));
    const r = restart(snapshot(...base, service('a', { created: T0, lbClass: 'example.com/other' }), three[1] as object, three[2] as object, service('d', { created: T2 })), first.state);
    assert.deepEqual(ingressOf(r), { 'default/b': ['192.0.2.1'], 'default/c': ['192.0.2.2'], 'default/d': ['192.0.2.0'] });
  });
});
