/**
 * What LB-IPAM reports, pinned where the allocator's suites only check the
 * outcome: condition messages, the order of services and addresses, pool
 * counts with reserved addresses, what a non-allocator may announce
 * (onlyPersisted), what a dormant allocator keeps (dormantResult), the
 * stored state's parser and the service view's fingerprint inputs.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import { dormantResult, onlyPersisted } from '../../../src/controlplane/ipam/report.js';
import { compareAge, incompatibility, isHandledService, serviceView, wantedFamilies } from '../../../src/controlplane/ipam/service-view.js';
import {
  EMPTY_ALLOCATION_STATE,
  fingerprint,
  generationOf,
  parseAllocationState,
  QUOTE_LIMIT,
  quoteBounded,
  sameAllocations,
  type AllocationState,
} from '../../../src/controlplane/ipam/state.js';
import type { ServiceManifest } from '../../../src/intent/index.js';
import { countsOf, pool, service, snapshot, type ServiceSpec } from './fixtures.js';

const manifestOf = (name: string, spec: ServiceSpec = {}): ServiceManifest => {
  const snap = snapshot(service(name, spec));
  return snap.services.get(`${spec.namespace ?? 'default'}/${name}`)!;
};
const viewOf = (name: string, spec: ServiceSpec = {}) => serviceView(`${spec.namespace ?? 'default'}/${name}`, manifestOf(name, spec));

describe('LB-IPAM report: conditions, order and counts', () => {
  test('a satisfied Service says which IPs it got, in address order (IPv4 before IPv6, numeric within a family)', () => {
    const r = allocate(
      snapshot(
        pool('p', { blocks: ['192.0.2.0/24', '2001:db8::/120'] }),
        service('dual', { ips: '192.0.2.10,2001:db8::5,192.0.2.9', policy: 'RequireDualStack' }),
      ),
      EMPTY_ALLOCATION_STATE,
    );
    const svc = r.services.get('default/dual')!;
    assert.deepEqual(svc.ingress, ['192.0.2.9', '192.0.2.10', '2001:db8::5']);
    assert.deepEqual(svc.condition, { type: 'cilium.io/IPAMRequestSatisfied', status: 'True', reason: 'satisfied', message: 'Allocated 192.0.2.9, 192.0.2.10, 2001:db8::5' });
  });

  test('a Service refused for two reasons names the first reason and lists both messages, separated by "; "', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/30'] }), service('two', { ips: '198.51.100.1,203.0.113.1' })), EMPTY_ALLOCATION_STATE);
    const c = r.services.get('default/two')!.condition;
    assert.equal(c.status, 'False');
    const parts = c.message.split('; ');
    assert.equal(parts.length, 2, c.message);
    assert.match(parts[0]!, /198\.51\.100\.1/);
    assert.match(parts[1]!, /203\.0\.113\.1/);
  });

  test('services are reported in key order whatever order the manifests list them in', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24'] }), service('zz'), service('aa'), service('mm', { namespace: 'b' })), EMPTY_ALLOCATION_STATE);
    assert.deepEqual([...r.services.keys()], ['b/mm', 'default/aa', 'default/zz']);
    assert.deepEqual(Object.keys(r.state.allocations), ['b/mm', 'default/aa', 'default/zz']);
  });

  test('allowFirstLastIPs: No — the two reserved addresses count as used (Cilium updatePoolCounts), each once', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/29'], allowFirstLastIPs: 'No' }), service('a')), EMPTY_ALLOCATION_STATE);
    assert.deepEqual(countsOf(r, 'p'), ['8', '3', '5']);
    const open = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/29'] }), service('a')), EMPTY_ALLOCATION_STATE);
    assert.deepEqual(countsOf(open, 'p'), ['8', '1', '7']);
    // A /32 has no reserved address to count: its one address is the usable one.
    const single = allocate(snapshot(pool('p', { blocks: ['192.0.2.7/32'], allowFirstLastIPs: 'No' })), EMPTY_ALLOCATION_STATE);
    assert.deepEqual(countsOf(single, 'p'), ['1', '0', '1']);
  });
});

describe('LB-IPAM report: onlyPersisted (what a node may announce before the allocator persisted)', () => {
  const result = allocate(
    snapshot(
      pool('p', { blocks: ['192.0.2.0/24'] }),
      service('both', { ips: '192.0.2.20,192.0.2.21' }),
      service('one', { ips: '192.0.2.30', annotations: { 'io.cilium/lb-ipam-ips': '192.0.2.30' } }),
      service('half', { policy: 'RequireDualStack' }),
    ),
    EMPTY_ALLOCATION_STATE,
  );

  test('a fully persisted Service is passed through as it is', () => {
    const out = onlyPersisted(result, result.state, 'n1');
    for (const [k, v] of result.services) assert.equal(out.services.get(k), v, k);
  });

  test('an IP not persisted is not announced, and the condition says who it waits for', () => {
    const persisted: AllocationState = { version: 1, allocations: { 'default/both': ['192.0.2.20'] } };
    const out = onlyPersisted(result, persisted, 'node-a');
    const both = out.services.get('default/both')!;
    assert.deepEqual(both.ingress, ['192.0.2.20']);
    assert.deepEqual(both.condition, {
      type: 'cilium.io/IPAMRequestSatisfied',
      status: 'False',
      reason: 'waiting_for_allocator',
      message: 'waiting for the LB-IPAM allocator (node-a) to persist 192.0.2.21',
    });
    const none = onlyPersisted(result, persisted, undefined).services.get('default/one')!;
    assert.deepEqual(none.ingress, []);
    assert.equal(none.condition.message, 'no LB-IPAM allocator is elected, so 192.0.2.30 is not persisted and not announced yet');
    assert.ok(none.warnings && none.warnings.length > 0, 'the warnings stay with the service');
  });

  test('a Service already refused keeps its reason; the waiting is appended to its message', () => {
    const half = result.services.get('default/half')!;
    assert.equal(half.condition.status, 'False', JSON.stringify(half));
    assert.equal(half.ingress.length, 1);
    const out = onlyPersisted(result, EMPTY_ALLOCATION_STATE, 'node-a').services.get('default/half')!;
    assert.equal(out.condition.reason, half.condition.reason);
    assert.equal(out.condition.message, `${half.condition.message}; waiting for the LB-IPAM allocator (node-a) to persist ${half.ingress[0]}`);
    assert.equal(out.warnings, undefined);
  });
});

describe('LB-IPAM report: dormantResult (an allocator that may not allocate keeps what was stored)', () => {
  test('only Services with a stored allocation, in key order, with their stored fingerprints where there are any', () => {
    const views = [viewOf('zz'), viewOf('gone'), viewOf('aa'), viewOf('mm')];
    const previous: AllocationState = {
      version: 1,
      allocations: { 'default/zz': ['192.0.2.3'], 'default/aa': ['192.0.2.1'], 'default/mm': [], 'default/other': ['192.0.2.9'] },
      fingerprints: { 'default/aa': 'f-aa' },
    };
    const r = dormantResult(views, previous);
    assert.equal(r.dormant, true);
    assert.deepEqual(Object.entries(r.state.allocations), [['default/aa', ['192.0.2.1']], ['default/mm', []], ['default/zz', ['192.0.2.3']]]);
    assert.deepEqual(r.state.fingerprints, { 'default/aa': 'f-aa' });
  });
});

describe('LB-IPAM stored state', () => {
  test('sameAllocations: key order and generation do not matter; fingerprints do (a missing record equals an empty one)', () => {
    const a: AllocationState = { version: 1, allocations: { x: ['192.0.2.1'], y: ['192.0.2.2'] }, generation: 1 };
    assert.ok(sameAllocations(a, { version: 1, allocations: { y: ['192.0.2.2'], x: ['192.0.2.1'] }, generation: 9, fingerprints: {} }));
    assert.ok(!sameAllocations(a, { ...a, fingerprints: { x: 'f' } }));
    assert.ok(!sameAllocations({ ...a, fingerprints: { x: 'f' } }, { ...a, fingerprints: { x: 'g' } }));
    assert.ok(!sameAllocations(a, { version: 1, allocations: { x: ['192.0.2.1'] } }));
    assert.equal(generationOf(a), 1);
    assert.equal(generationOf(EMPTY_ALLOCATION_STATE), 0);
  });

  test('fingerprint is a fixed 53-bit hash in 14 hex digits (stored in etcd: it must not change between versions)', () => {
    assert.equal(fingerprint(''), '0bdcb81aee8d83');
    assert.equal(fingerprint('default/svc'), '16b85ae21e2c5d');
    assert.equal(fingerprint('default/svc'), fingerprint('default/svc'));
    assert.notEqual(fingerprint('ab'), fingerprint('ba'));
    assert.match(fingerprint('x'.repeat(1000)), /^[0-9a-f]{14}$/);
  });

  test('quoteBounded quotes up to QUOTE_LIMIT characters whole, and cuts longer values saying how long they were', () => {
    const edge = 'a'.repeat(QUOTE_LIMIT);
    assert.equal(quoteBounded(edge), JSON.stringify(edge));
    assert.equal(quoteBounded(`${edge}b`), `${JSON.stringify(edge)}… (${QUOTE_LIMIT + 1} characters)`);
  });

  test('a bad stored state names at most three problems with their paths ((root) for the value itself)', () => {
    const bad = parseAllocationState(JSON.stringify({ version: 2, allocations: { s: ['not-an-ip'] }, fingerprints: 5, generation: -1 }));
    assert.equal(bad.ok, false);
    const error = (bad as { error: string }).error;
    const listed = /^invalid \((.*)\): /.exec(error)![1]!.split('; ');
    assert.equal(listed.length, 3, error);
    assert.match(listed[0]!, /^version: /);
    assert.match(listed[1]!, /^allocations\.s\.0: /);
    const root = parseAllocationState('[]');
    assert.match((root as { error: string }).error, /^invalid \(\(root\): .*\): "\[\]"$/);
    assert.match((parseAllocationState('{') as { error: string }).error, /^not JSON \(.*\): "\{"$/);
  });
});

describe('LB-IPAM service view', () => {
  test('an lbClasses policy handles only the listed classes — a Service without a class is not among them', () => {
    assert.equal(isHandledService(manifestOf('a'), { lbClasses: ['x'] }), false);
    assert.equal(isHandledService(manifestOf('a', { lbClass: 'x' }), { lbClasses: ['x'] }), true);
    assert.equal(isHandledService(manifestOf('a')), true);
  });

  test('PreferDualStack keeps the listed families, once each, IPv4 first', () => {
    assert.deepEqual(wantedFamilies('PreferDualStack', ['IPv6', 'IPv4', 'IPv6']), ['IPv4', 'IPv6']);
    assert.deepEqual(wantedFamilies('PreferDualStack', ['IPv6']), ['IPv6']);
    assert.deepEqual(wantedFamilies('PreferDualStack', ['IPv6', 'IPv6']), ['IPv6']);
  });

  test('creation time: unset or unparsable counts as newest; older first, then by key', () => {
    assert.equal(viewOf('a').created, Number.POSITIVE_INFINITY);
    // The parser refuses such a timestamp; a view built from an unchecked object still sorts it last.
    const unchecked = manifestOf('a');
    assert.equal(serviceView('default/a', { ...unchecked, metadata: { ...unchecked.metadata, creationTimestamp: 'yesterday' } }).created, Number.POSITIVE_INFINITY);
    assert.equal(viewOf('a', { created: '2024-01-01T00:00:00Z' }).created, Date.parse('2024-01-01T00:00:00Z'));
    const old = viewOf('z', { created: '2024-01-01T00:00:00Z' });
    const young = viewOf('a', { created: '2024-06-01T00:00:00Z' });
    assert.equal(compareAge(old, young), -1);
    assert.equal(compareAge(young, old), 1);
    assert.equal(compareAge(viewOf('a'), viewOf('b')), -1);
    assert.equal(compareAge(viewOf('b'), viewOf('a')), 1);
    assert.equal(compareAge(viewOf('a'), viewOf('a')), 0);
  });

  test('ports are listed in order; the fingerprint ignores the order of labels, selectors and namespaces but not the requested IPs', () => {
    // (The parser refuses a port listed twice.)
    const v = viewOf('a', { ports: [443, { port: 80, protocol: 'UDP' }, 80] });
    assert.deepEqual(v.ports, ['443/TCP', '80/TCP', '80/UDP']);
    const fp = (spec: ServiceSpec) => viewOf('a', spec).fingerprint;
    assert.equal(fp({ labels: { a: '1', b: '2' } }), fp({ labels: { b: '2', a: '1' } }));
    assert.equal(fp({ selector: { a: '1', b: '2' } }), fp({ selector: { b: '2', a: '1' } }));
    assert.equal(fp({ sharingKey: 'k', crossNamespace: 'x,y' }), fp({ sharingKey: 'k', crossNamespace: 'y,x' }));
    assert.notEqual(fp({ ips: '192.0.2.1' }), fp({ ips: '192.0.2.2' }));
    assert.notEqual(fp({}), fp({ sharingKey: 'k' }));
    assert.notEqual(fp({ sharingKey: 'k' }), fp({ sharingKey: 'k', crossNamespace: 'x' }));
    assert.notEqual(fp({ labels: { a: '1' } }), fp({ labels: { a: '2' } }));
  });

  test('sharing: no key on either side is "different sharing key"; Local needs equal non-empty selectors', () => {
    assert.equal(incompatibility(viewOf('a'), viewOf('b')), 'different sharing key');
    const local = (name: string, selector: Record<string, string>, port: number) => viewOf(name, { sharingKey: 'k', etp: 'Local', selector, ports: [port] });
    assert.equal(incompatibility(local('a', { app: 'x' }, 80), local('b', { app: 'x' }, 81)), undefined);
    assert.match(incompatibility(local('a', { app: 'x' }, 80), local('b', { app: 'y' }, 81))!, /selecting different sets of pods/);
    assert.match(incompatibility(local('a', { app: 'x' }, 80), local('b', { tier: 'x' }, 81))!, /selecting different sets of pods/);
    assert.match(incompatibility(local('a', { app: 'x', tier: 'y' }, 80), local('b', { app: 'x' }, 81))!, /selecting different sets of pods/);
    assert.match(incompatibility(local('a', { app: 'x' }, 80), local('b', { app: 'x', tier: 'y' }, 81))!, /selecting different sets of pods/);
    assert.match(incompatibility(local('a', { app: 'x', tier: 'y' }, 80), local('b', { app: 'x', tier: 'z' }, 81))!, /selecting different sets of pods/);
    assert.match(incompatibility(local('a', {}, 80), local('b', { app: 'x' }, 81))!, /needs a pod selector on both/);
    assert.match(incompatibility(local('a', { app: 'x' }, 80), local('b', {}, 81))!, /needs a pod selector on both/);
  });
});
