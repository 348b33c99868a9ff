/**
 * Status says the truth (issue 9: a lease-less allocator key left services
 * shown as "SATISFIED False / REASON satisfied"). Every Service condition
 * LB-IPAM can produce — the allocator's own, and a non-allocator's view of a
 * result the allocator has not persisted — has status True exactly when its
 * reason is `satisfied`, and a False condition names its cause.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import { onlyPersisted } from '../../../src/controlplane/ipam/report.js';
import type { AllocationState } from '../../../src/controlplane/ipam/state.js';
import type { IpamResult, RequestReason } from '../../../src/controlplane/ipam/types.js';
import { pool, service, snapshot, type BlockSpec, type PoolSpec, type ServiceSpec } from './fixtures.js';

const REASONS: readonly RequestReason[] = [
  'satisfied',
  'no_pool',
  'out_of_ips',
  'pool_selector_mismatch',
  'already_allocated',
  'already_allocated_incompatible_service',
  'waiting_for_allocator',
];

function assertTruthful(result: IpamResult, where: string): void {
  for (const [key, { ingress, condition }] of result.services) {
    const at = `${where}: ${key} ${JSON.stringify(condition)}`;
    assert.ok(REASONS.includes(condition.reason), at);
    assert.equal(condition.status === 'True', condition.reason === 'satisfied', `status True ⇔ reason satisfied (${at})`);
    if (condition.status === 'False') assert.ok(condition.message.length > 0, `a False condition says why (${at})`);
    else assert.ok(ingress.length > 0, `a satisfied service has IPs (${at})`);
  }
}

const BLOCKS: readonly BlockSpec[] = ['192.0.2.0/30', '192.0.2.0/29', { start: '198.51.100.5' }, '2001:db8::/127', '203.0.113.0/31'];
const IPS = ['192.0.2.1', '192.0.2.6', '198.51.100.5', '2001:db8::1', '203.0.113.9'];

const poolArb = fc.record({
  blocks: fc.uniqueArray(fc.constantFrom(...BLOCKS), { minLength: 1, maxLength: 2 }),
  tier: fc.constantFrom(undefined, 'web'),
  disabled: fc.constantFrom(false, false, true),
  no: fc.boolean(),
  created: fc.constantFrom(undefined, '2024-01-01T00:00:00Z', '2024-01-02T00:00:00Z'),
}).map((r): PoolSpec => ({
  blocks: r.blocks,
  ...(r.tier ? { selector: { matchLabels: { tier: r.tier } } } : {}),
  disabled: r.disabled,
  ...(r.no ? { allowFirstLastIPs: 'No' as const } : {}),
  ...(r.created ? { created: r.created } : {}),
}));

const serviceArb = fc.record({
  tier: fc.constantFrom(undefined, 'web'),
  ips: fc.option(fc.uniqueArray(fc.constantFrom(...IPS), { minLength: 1, maxLength: 2 }), { nil: undefined }),
  sharingKey: fc.constantFrom(undefined, 'k'),
  port: fc.constantFrom(80, 443),
  policy: fc.constantFrom<ServiceSpec['policy']>(undefined, 'PreferDualStack', 'RequireDualStack'),
}).map((r): ServiceSpec => ({
  ...(r.tier ? { labels: { tier: r.tier } } : {}),
  ...(r.ips ? { ips: r.ips.join(',') } : {}),
  ...(r.sharingKey ? { sharingKey: r.sharingKey } : {}),
  ports: [r.port],
  ...(r.policy ? { policy: r.policy } : {}),
}));

describe('Service conditions tell the truth', () => {
  it('for every result of the allocator, and of a node announcing only what the allocator persisted', () => {
    const seen = new Set<string>();
    fc.assert(
      fc.property(
        fc.array(poolArb, { maxLength: 3 }),
        fc.array(serviceArb, { minLength: 1, maxLength: 5 }),
        fc.func(fc.boolean()),
        fc.constantFrom(undefined, 'n2'),
        (pools, services, keepPersisted, allocator) => {
          const snap = snapshot(...pools.map((p, i) => pool(`p${i}`, p)), ...services.map((s, i) => service(`s${i}`, s)));
          const result = allocate(snap);
          assertTruthful(result, 'allocator');
          for (const s of result.services.values()) seen.add(s.condition.reason);
          // The allocator has persisted some of it (possibly nothing: no allocator elected, or a lease-less key).
          const persisted: AllocationState = {
            version: 1,
            allocations: Object.fromEntries(Object.entries(result.state.allocations).filter(([key]) => keepPersisted(key))),
            fingerprints: {},
          };
          const view = onlyPersisted(result, persisted, allocator);
          assertTruthful(view, 'non-allocator');
          for (const s of view.services.values()) seen.add(s.condition.reason);
        },
      ),
      { numRuns: 300, seed: 9 },
    );
    // The scan reached the reasons that matter here.
    for (const reason of ['satisfied', 'no_pool', 'out_of_ips', 'waiting_for_allocator'] as const) assert.ok(seen.has(reason), `reached ${reason}`);
  });

  it('a node whose allocator never persisted anything says what it waits for, naming the allocator', () => {
    const snap = snapshot(pool('p', { blocks: ['192.0.2.0/30'] }), service('web'));
    const result = allocate(snap);
    const empty: AllocationState = { version: 1, allocations: {}, fingerprints: {} };
    assert.deepEqual(onlyPersisted(result, empty, 'n2').services.get('default/web'), {
      ingress: [],
      condition: {
        type: 'cilium.io/IPAMRequestSatisfied',
        status: 'False',
        reason: 'waiting_for_allocator',
        message: 'waiting for the LB-IPAM allocator (n2) to persist 192.0.2.0',
      },
    });
    assert.equal(
      onlyPersisted(result, empty, undefined).services.get('default/web')?.condition.message,
      'no LB-IPAM allocator is elected, so 192.0.2.0 is not persisted and not announced yet',
    );
  });

  it('a request that fails because its pool is conflicting or disabled says so', () => {
    const snap = snapshot(
      pool('old', { blocks: ['192.0.2.0/28'], created: '2024-01-01T00:00:00Z' }),
      pool('new', { blocks: ['192.0.2.8/29'], created: '2024-01-02T00:00:00Z' }),
      pool('off', { blocks: ['198.51.100.0/30'], disabled: true }),
      service('a', { ips: '192.0.2.1' }),
      service('b', { ips: '198.51.100.1' }),
    );
    const r = allocate(snap);
    assert.equal(r.services.get('default/a')?.condition.reason, 'satisfied');
    const b = r.services.get('default/b')?.condition;
    assert.equal(b?.reason, 'no_pool');
    assert.equal(b?.message, "No enabled, non-conflicting pool has a block containing '198.51.100.1' ('off' is disabled)");
    const c = allocate(snapshot(pool('old', { blocks: ['192.0.2.0/28'], created: '2024-01-01T00:00:00Z', selector: { matchLabels: { tier: 'y' } } }), pool('new', { blocks: ['192.0.2.8/29'], created: '2024-01-02T00:00:00Z', selector: { matchLabels: { tier: 'x' } } }), service('c', { labels: { tier: 'x' } })));
    assert.equal(
      c.services.get('default/c')?.condition.message,
      "There are no enabled pools with IPv4 blocks that match this service ('new': Pool conflicts since range '192.0.2.8 - 192.0.2.15' overlaps range '192.0.2.0 - 192.0.2.15' from IP Pool 'old')",
    );
  });
});
