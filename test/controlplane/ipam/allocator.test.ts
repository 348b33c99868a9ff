/**
 * LB-IPAM behaviours, table-driven, from Cilium's documented semantics
 * (reference anchors §2–3: IPAMDOC, lbipam.go, service_store.go).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import type { AllocationState } from '../../../src/controlplane/ipam/state.js';
import { countsOf, ingressOf, pool, reasonOf, service, snapshot, type ServiceSpec } from './fixtures.js';

const T0 = '2024-01-01T00:00:00Z';
const T1 = '2024-02-01T00:00:00Z';
const T2 = '2024-03-01T00:00:00Z';

interface Case {
  name: string;
  objects: object[];
  ingress: Record<string, string[]>;
  reasons?: Record<string, string>;
}

function runCases(cases: readonly Case[]): void {
  for (const c of cases) {
    it(c.name, () => {
      const result = allocate(snapshot(...c.objects));
      assert.deepEqual(ingressOf(result), c.ingress);
      for (const [key, reason] of Object.entries(c.reasons ?? {})) {
        assert.equal(reasonOf(result, key), reason, `${key}: ${result.services.get(key)?.condition.message}`);
      }
    });
  }
}

const svcs = (names: string[], spec: ServiceSpec = {}): object[] => names.map((n) => service(n, spec));

describe('LB-IPAM: blocks and the first free address', () => {
  runCases([
    { name: 'first free address of a CIDR, unset allowFirstLastIPs = Yes (Cilium >= 1.16)', objects: [pool('p', { blocks: ['192.0.2.0/24'] }), ...svcs(['a', 'b'])], ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'] } },
    { name: 'allowFirstLastIPs: No reserves network and broadcast of a /24', objects: [pool('p', { blocks: ['192.0.2.0/24'], allowFirstLastIPs: 'No' }), ...svcs(['a'])], ingress: { 'default/a': ['192.0.2.1'] } },
    {
      name: 'allowFirstLastIPs: No on a /30 leaves two addresses, then out_of_ips',
      objects: [pool('p', { blocks: ['192.0.2.0/30'], allowFirstLastIPs: 'No' }), ...svcs(['a', 'b', 'c'])],
      ingress: { 'default/a': ['192.0.2.1'], 'default/b': ['192.0.2.2'], 'default/c': [] },
      reasons: { 'default/a': 'satisfied', 'default/c': 'out_of_ips' },
    },
    { name: 'allowFirstLastIPs: No does not reserve in a /31', objects: [pool('p', { blocks: ['192.0.2.4/31'], allowFirstLastIPs: 'No' }), ...svcs(['a', 'b'])], ingress: { 'default/a': ['192.0.2.4'], 'default/b': ['192.0.2.5'] } },
    { name: 'allowFirstLastIPs: No does not reserve a /32', objects: [pool('p', { blocks: ['192.0.2.9/32'], allowFirstLastIPs: 'No' }), ...svcs(['a'])], ingress: { 'default/a': ['192.0.2.9'] } },
    {
      name: 'allowFirstLastIPs: No never reserves in a start/stop range',
      objects: [pool('p', { blocks: [{ start: '192.0.2.0', stop: '192.0.2.3' }], allowFirstLastIPs: 'No' }), ...svcs(['a', 'b', 'c', 'd'])],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'], 'default/c': ['192.0.2.2'], 'default/d': ['192.0.2.3'] },
    },
    { name: 'start without stop is a single address', objects: [pool('p', { blocks: [{ start: '198.51.100.7' }] }), ...svcs(['a', 'b'])], ingress: { 'default/a': ['198.51.100.7'], 'default/b': [] }, reasons: { 'default/b': 'out_of_ips' } },
    {
      name: 'blocks are used in spec order, pools in name order',
      objects: [pool('b-pool', { blocks: ['198.51.100.0/31'] }), pool('a-pool', { blocks: [{ start: '203.0.113.5' }, '192.0.2.0/32'] }), ...svcs(['s1', 's2', 's3', 's4'])],
      ingress: { 'default/s1': ['203.0.113.5'], 'default/s2': ['192.0.2.0'], 'default/s3': ['198.51.100.0'], 'default/s4': ['198.51.100.1'] },
    },
    { name: 'IPv6 allowFirstLastIPs: No on a /64 skips the subnet-router anycast address', objects: [pool('p', { blocks: ['2001:db8:1::/64'], allowFirstLastIPs: 'No' }), service('a', { families: ['IPv6'] })], ingress: { 'default/a': ['2001:db8:1::1'] } },
  ]);
});

describe('LB-IPAM: disabled pools and selectors', () => {
  runCases([
    {
      name: 'a disabled pool keeps an existing allocation but gives no new one',
      objects: [pool('p', { blocks: ['192.0.2.0/24'], disabled: true }), service('old', { ingress: ['192.0.2.50'] }), service('new')],
      ingress: { 'default/new': [], 'default/old': ['192.0.2.50'] },
      reasons: { 'default/old': 'satisfied', 'default/new': 'no_pool' },
    },
    { name: 'a disabled pool is skipped for the next one', objects: [pool('a', { blocks: ['192.0.2.0/24'], disabled: true }), pool('b', { blocks: ['198.51.100.0/24'] }), service('s')], ingress: { 'default/s': ['198.51.100.0'] } },
    {
      name: 'pool serviceSelector matchLabels',
      objects: [
        pool('blue', { blocks: ['192.0.2.0/24'], selector: { matchLabels: { color: 'blue' } } }),
        service('b', { labels: { color: 'blue' } }),
        service('r', { labels: { color: 'red' } }),
      ],
      ingress: { 'default/b': ['192.0.2.0'], 'default/r': [] },
      reasons: { 'default/r': 'no_pool' },
    },
    {
      name: 'the synthetic io.kubernetes.service.namespace and .name labels select',
      objects: [
        pool('tenant-a', { blocks: ['192.0.2.0/24'], selector: { matchLabels: { 'io.kubernetes.service.namespace': 'tenant-a' } } }),
        pool('dns', { blocks: ['198.51.100.53/32'], selector: { matchLabels: { 'io.kubernetes.service.name': 'dns' } } }),
        service('web', { namespace: 'tenant-a' }),
        service('web', { namespace: 'tenant-b' }),
        service('dns', { namespace: 'tenant-b' }),
      ],
      ingress: { 'tenant-a/web': ['192.0.2.0'], 'tenant-b/dns': ['198.51.100.53'], 'tenant-b/web': [] },
    },
    {
      name: 'matchExpressions NotIn matches a service without the label',
      objects: [pool('p', { blocks: ['192.0.2.0/24'], selector: { matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['db'] }] } }), service('a'), service('d', { labels: { tier: 'db' } })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/d': [] },
    },
  ]);
});

describe('LB-IPAM: specific IP requests', () => {
  const p = pool('p', { blocks: ['192.0.2.0/24', '2001:db8::/120'], allowFirstLastIPs: 'No' });
  const blue = pool('blue', { blocks: ['198.51.100.0/24'], selector: { matchLabels: { color: 'blue' } } });
  runCases([
    { name: 'annotation lbipam.cilium.io/ips, v4 and v6', objects: [p, service('a', { ips: '192.0.2.10, 2001:db8::10', policy: 'PreferDualStack' })], ingress: { 'default/a': ['192.0.2.10', '2001:db8::10'] }, reasons: { 'default/a': 'satisfied' } },
    { name: 'spec.loadBalancerIP is honoured', objects: [p, service('a', { loadBalancerIP: '192.0.2.77' })], ingress: { 'default/a': ['192.0.2.77'] } },
    { name: 'an IP in no pool: no_pool', objects: [p, service('a', { ips: '203.0.113.1' })], ingress: { 'default/a': [] }, reasons: { 'default/a': 'no_pool' } },
    { name: 'an IP in a disabled pool: no_pool', objects: [pool('d', { blocks: ['203.0.113.0/24'], disabled: true }), service('a', { ips: '203.0.113.1' })], ingress: { 'default/a': [] }, reasons: { 'default/a': 'no_pool' } },
    { name: 'an IP in a pool that does not select the service: pool_selector_mismatch', objects: [blue, service('a', { ips: '198.51.100.9' })], ingress: { 'default/a': [] }, reasons: { 'default/a': 'pool_selector_mismatch' } },
    { name: 'a reserved first address: already_allocated', objects: [p, service('a', { ips: '192.0.2.0' })], ingress: { 'default/a': [] }, reasons: { 'default/a': 'already_allocated' } },
    {
      name: 'a taken IP without a sharing key: already_allocated (the older service keeps it)',
      objects: [p, service('a', { ips: '192.0.2.5', created: T0 }), service('b', { ips: '192.0.2.5', created: T1, ports: [443] })],
      ingress: { 'default/a': ['192.0.2.5'], 'default/b': [] },
      reasons: { 'default/b': 'already_allocated' },
    },
    {
      name: 'a taken IP with an incompatible sharing key: already_allocated_incompatible_service',
      objects: [p, service('a', { ips: '192.0.2.5', sharingKey: 'k', created: T0 }), service('b', { ips: '192.0.2.5', sharingKey: 'k', created: T1 })],
      ingress: { 'default/a': ['192.0.2.5'], 'default/b': [] },
      reasons: { 'default/b': 'already_allocated_incompatible_service' },
    },
    {
      name: 'specific requests are served before generic ones',
      objects: [pool('tiny', { blocks: ['192.0.2.0/31'] }), service('a-generic', { created: T0 }), service('b-specific', { ips: '192.0.2.0', created: T1 })],
      ingress: { 'default/a-generic': ['192.0.2.1'], 'default/b-specific': ['192.0.2.0'] },
    },
    {
      name: 'one failing IP of several: unsatisfied, the others allocated',
      objects: [p, service('a', { ips: '192.0.2.3,203.0.113.3' })],
      ingress: { 'default/a': ['192.0.2.3'] },
      reasons: { 'default/a': 'no_pool' },
    },
  ]);
});

describe('LB-IPAM: sharing (isCompatible)', () => {
  const p = pool('p', { blocks: ['192.0.2.0/24'] });
  runCases([
    {
      name: 'same sharing key, different ports: one IP',
      objects: [p, service('a', { sharingKey: 'k', ports: [80] }), service('b', { sharingKey: 'k', ports: [443] })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.0'] },
      reasons: { 'default/a': 'satisfied', 'default/b': 'satisfied' },
    },
    {
      name: 'port conflict under the same key allocates a second IP; a third service joins the first',
      objects: [p, service('a', { sharingKey: 'k', ports: [80] }), service('b', { sharingKey: 'k', ports: [80] }), service('c', { sharingKey: 'k', ports: [443] })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'], 'default/c': ['192.0.2.0'] },
    },
    {
      // Cilium ≥ 1.17 tells protocols apart (cilium/cilium#9207 was the old limit).
      name: 'the same port number with another protocol shares',
      objects: [p, service('tcp', { sharingKey: 'k', ports: [{ port: 53, protocol: 'TCP' }] }), service('udp', { sharingKey: 'k', ports: [{ port: 53, protocol: 'UDP' }] })],
      ingress: { 'default/tcp': ['192.0.2.0'], 'default/udp': ['192.0.2.0'] },
    },
    { name: 'different sharing keys never share', objects: [p, service('a', { sharingKey: 'k1', ports: [80] }), service('b', { sharingKey: 'k2', ports: [443] })], ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'] } },
    {
      name: 'different sharing keys never share a requested IP',
      objects: [p, service('a', { sharingKey: 'k1', ports: [80], ips: '192.0.2.9', created: T0 }), service('b', { sharingKey: 'k2', ports: [443], ips: '192.0.2.9', created: T1 })],
      ingress: { 'default/a': ['192.0.2.9'], 'default/b': [] },
      reasons: { 'default/b': 'already_allocated_incompatible_service' },
    },
    {
      name: 'different sharing keys never share an imported IP',
      objects: [p, service('a', { sharingKey: 'k1', ports: [80], ingress: ['192.0.2.9'], created: T0 }), service('b', { sharingKey: 'k2', ports: [443], ingress: ['192.0.2.9'], created: T1 })],
      ingress: { 'default/a': ['192.0.2.9'], 'default/b': ['192.0.2.0'] },
    },
    {
      name: 'externalTrafficPolicy mismatch: another IP',
      objects: [p, service('a', { sharingKey: 'k', ports: [80], etp: 'Cluster' }), service('b', { sharingKey: 'k', ports: [443], etp: 'Local', selector: { app: 'x' } })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'] },
    },
    {
      name: 'Local with identical pod selectors shares',
      objects: [p, service('a', { sharingKey: 'k', ports: [80], etp: 'Local', selector: { app: 'x' } }), service('b', { sharingKey: 'k', ports: [443], etp: 'Local', selector: { app: 'x' } })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.0'] },
    },
    {
      name: 'Local with different pod selectors does not share',
      objects: [p, service('a', { sharingKey: 'k', ports: [80], etp: 'Local', selector: { app: 'x' } }), service('b', { sharingKey: 'k', ports: [443], etp: 'Local', selector: { app: 'y' } })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'] },
    },
    {
      name: 'Local without pod selectors does not share',
      objects: [p, service('a', { sharingKey: 'k', ports: [80], etp: 'Local' }), service('b', { sharingKey: 'k', ports: [443], etp: 'Local' })],
      ingress: { 'default/a': ['192.0.2.0'], 'default/b': ['192.0.2.1'] },
    },
    {
      name: 'cross-namespace sharing needs the annotation on both services',
      objects: [
        p,
        service('a', { namespace: 'ns-a', sharingKey: 'k', ports: [80], crossNamespace: 'ns-b' }),
        service('b', { namespace: 'ns-b', sharingKey: 'k', ports: [443], crossNamespace: 'ns-a' }),
        service('c', { namespace: 'ns-c', sharingKey: 'k', ports: [8080], crossNamespace: '*' }),
      ],
      // ns-c allows everyone, but ns-a and ns-b do not name ns-c.
      ingress: { 'ns-a/a': ['192.0.2.0'], 'ns-b/b': ['192.0.2.0'], 'ns-c/c': ['192.0.2.1'] },
    },
    {
      name: 'cross-namespace with * on both sides shares',
      objects: [p, service('a', { namespace: 'ns-a', sharingKey: 'k', ports: [80], crossNamespace: '*' }), service('b', { namespace: 'ns-b', sharingKey: 'k', ports: [443], crossNamespace: '*' })],
      ingress: { 'ns-a/a': ['192.0.2.0'], 'ns-b/b': ['192.0.2.0'] },
    },
    {
      name: 'cross-namespace allowed on one side only: a specific request is incompatible',
      objects: [
        p,
        service('a', { namespace: 'ns-a', sharingKey: 'k', ports: [80], ips: '192.0.2.9', created: T0 }),
        service('b', { namespace: 'ns-b', sharingKey: 'k', ports: [443], ips: '192.0.2.9', crossNamespace: 'ns-a', created: T1 }),
      ],
      ingress: { 'ns-a/a': ['192.0.2.9'], 'ns-b/b': [] },
      reasons: { 'ns-b/b': 'already_allocated_incompatible_service' },
    },
    {
      name: 'specific request with a compatible sharing key shares the IP',
      objects: [p, service('a', { sharingKey: 'k', ports: [80], ips: '192.0.2.9' }), service('b', { sharingKey: 'k', ports: [443], ips: '192.0.2.9' })],
      ingress: { 'default/a': ['192.0.2.9'], 'default/b': ['192.0.2.9'] },
      reasons: { 'default/b': 'satisfied' },
    },
  ]);

  it('ipOwners lists every holder of a shared IP', () => {
    const r = allocate(snapshot(p, service('a', { sharingKey: 'k', ports: [80] }), service('b', { sharingKey: 'k', ports: [443] })));
    assert.deepEqual([...r.ipOwners], [['192.0.2.0', ['default/a', 'default/b']]]);
    assert.deepEqual(countsOf(r, 'p'), ['256', '1', '255']);
  });

  it('a refused service names the holders in one order, whichever way they were restored (a restart changes no message)', () => {
    // Found by the property test (seed 507048157): the holders were listed in
    // allocation order at first and in restored-state order after a restart.
    const objects = [
      pool('p0', { blocks: ['192.0.2.0/29'] }),
      service('s0', { ports: [{ port: 53, protocol: 'TCP' }], sharingKey: 'k1', ips: '192.0.2.1', created: T1, ingress: ['192.0.2.1'] }),
      service('s4', { ports: [{ port: 53, protocol: 'TCP' }], ips: '192.0.2.1' }),
      service('s2', { ports: [{ port: 53, protocol: 'UDP' }], sharingKey: 'k1', ips: '192.0.2.1', created: T0 }),
    ];
    const first = allocate(snapshot(...objects));
    const restarted = allocate(snapshot(...objects), JSON.parse(JSON.stringify(first.state)));
    assert.deepEqual(restarted, first);
    assert.match(first.services.get('default/s4')?.condition.message ?? '', /\(default\/s0, default\/s2\)/);
  });

  it('a refused service names the holders the IP has at the end of the run, not those it had when refused (a restart changes no message)', () => {
    // Found by the property test (seed -1924312394): s3's request was refused
    // while only s0 held the IP; s1 joined it later in the same run (sharing
    // key, another protocol), and a restart — which imports both first —
    // named both.
    const objects = [
      pool('p0', { blocks: ['192.0.2.16/28'] }),
      service('s0', { namespace: 'a', ports: [{ port: 53, protocol: 'TCP' }], sharingKey: 'k1', etp: 'Cluster', ingress: ['192.0.2.17'] }),
      service('s1', { namespace: 'a', ports: [{ port: 53, protocol: 'UDP' }], sharingKey: 'k1', etp: 'Cluster' }),
      service('s3', { namespace: 'a', ports: [{ port: 53, protocol: 'TCP' }], ips: '192.0.2.17', etp: 'Cluster' }),
    ];
    const first = allocate(snapshot(...objects));
    assert.deepEqual(first.services.get('a/s1')?.ingress, ['192.0.2.17']);
    assert.match(first.services.get('a/s3')?.condition.message ?? '', /\(a\/s0, a\/s1\)/);
    const restarted = allocate(snapshot(...objects), JSON.parse(JSON.stringify(first.state)));
    assert.deepEqual(restarted, first);
  });
});

describe('LB-IPAM: which services, and IP families', () => {
  const v4 = pool('v4', { blocks: ['192.0.2.0/24'] });
  const v6 = pool('v6', { blocks: ['2001:db8::/64'] });
  runCases([
    {
      name: 'foreign loadBalancerClass and non-LoadBalancer types are ignored (no allocation, no condition)',
      objects: [v4, service('foreign', { lbClass: 'example.com/other' }), service('cluster', { type: 'ClusterIP' }), service('l2', { lbClass: 'io.cilium/l2-announcer' }), service('bgp', { lbClass: 'io.cilium/bgp-control-plane' })],
      ingress: { 'default/bgp': ['192.0.2.0'], 'default/l2': ['192.0.2.1'] },
    },
    { name: 'no policy and no families: IPv4', objects: [v4, v6, service('a')], ingress: { 'default/a': ['192.0.2.0'] } },
    { name: 'SingleStack takes ipFamilies[0]', objects: [v4, v6, service('a', { policy: 'SingleStack', families: ['IPv6'] })], ingress: { 'default/a': ['2001:db8::'] } },
    { name: 'PreferDualStack gets both families when pools offer both', objects: [v4, v6, service('a', { policy: 'PreferDualStack' })], ingress: { 'default/a': ['192.0.2.0', '2001:db8::'] }, reasons: { 'default/a': 'satisfied' } },
    { name: 'PreferDualStack with listed families gets only those', objects: [v4, v6, service('a', { policy: 'PreferDualStack', families: ['IPv6'] })], ingress: { 'default/a': ['2001:db8::'] } },
    // Cilium requests every family PreferDualStack lists (both, on a dual-stack cluster: TestLBIPAM_serviceIPFamilyRequest);
    // a family no pool offers leaves the request unsatisfied with no_pool, the other family is still given.
    { name: 'PreferDualStack with an IPv4 pool only gets IPv4 and reports no_pool', objects: [v4, service('a', { policy: 'PreferDualStack', families: ['IPv4', 'IPv6'] })], ingress: { 'default/a': ['192.0.2.0'] }, reasons: { 'default/a': 'no_pool' } },
    { name: 'PreferDualStack without families, IPv6 pool only: IPv6 and no_pool', objects: [v6, service('a', { policy: 'PreferDualStack' })], ingress: { 'default/a': ['2001:db8::'] }, reasons: { 'default/a': 'no_pool' } },
    { name: 'PreferDualStack with no matching pool: no_pool', objects: [pool('x', { blocks: ['192.0.2.0/24'], selector: { matchLabels: { x: 'y' } } }), service('a', { policy: 'PreferDualStack' })], ingress: { 'default/a': [] }, reasons: { 'default/a': 'no_pool' } },
    { name: 'RequireDualStack with both pools gets both', objects: [v4, v6, service('a', { policy: 'RequireDualStack' })], ingress: { 'default/a': ['192.0.2.0', '2001:db8::'] }, reasons: { 'default/a': 'satisfied' } },
    { name: 'RequireDualStack with an IPv4 pool only is unsatisfied', objects: [v4, service('a', { policy: 'RequireDualStack' })], ingress: { 'default/a': ['192.0.2.0'] }, reasons: { 'default/a': 'no_pool' } },
    { name: 'one pool may mix IPv4 and IPv6 blocks', objects: [pool('mix', { blocks: ['2001:db8::/126', '198.51.100.0/30'] }), service('a', { policy: 'RequireDualStack' })], ingress: { 'default/a': ['198.51.100.0', '2001:db8::'] } },
  ]);
});

describe('LB-IPAM: overlapping pools (PoolConflict)', () => {
  it('the newer pool is conflicting and gives no new IPs; Cilium message', () => {
    const r = allocate(
      snapshot(
        pool('old', { blocks: ['192.0.2.0/28'], created: T0, selector: { matchLabels: { pick: 'old' } } }),
        pool('new', { blocks: ['198.51.100.0/24', '192.0.2.8/29'], created: T1, selector: { matchLabels: { pick: 'new' } } }),
        service('s', { labels: { pick: 'new' } }),
      ),
    );
    assert.equal(r.pools.get('new')?.conflicting, true);
    assert.equal(r.pools.get('old')?.conflicting, false);
    assert.deepEqual(r.pools.get('new')?.conditions[0], {
      type: 'cilium.io/PoolConflict',
      status: 'True',
      reason: 'cidr_overlap',
      message: "Pool conflicts since range '192.0.2.8 - 192.0.2.15' overlaps range '192.0.2.0 - 192.0.2.15' from IP Pool 'old'",
    });
    assert.deepEqual(r.pools.get('old')?.conditions[0], { type: 'cilium.io/PoolConflict', status: 'False', reason: 'resolved', message: '' });
    assert.equal(reasonOf(r, 'default/s'), 'no_pool');
  });

  it('a tie on creationTimestamp is broken by name (the later name conflicts)', () => {
    const r = allocate(snapshot(pool('b', { blocks: ['192.0.2.0/24'], created: T0 }), pool('a', { blocks: ['192.0.2.128/25'], created: T0 })));
    assert.deepEqual([r.pools.get('a')?.conflicting, r.pools.get('b')?.conflicting], [false, true]);
  });

  it('a pool whose own blocks overlap conflicts with itself', () => {
    const r = allocate(snapshot(pool('self', { blocks: ['192.0.2.0/24', { start: '192.0.2.10', stop: '192.0.2.20' }] })));
    assert.equal(r.pools.get('self')?.conditions[0]?.message, "Pool conflicts since range '192.0.2.0 - 192.0.2.255' overlaps range '192.0.2.10 - 192.0.2.20' from IP Pool 'self'");
  });

  it('a conflicting pool keeps existing allocations; resolving the overlap re-enables it', () => {
    const objects = (newBlocks: string[]): object[] => [
      pool('old', { blocks: ['192.0.2.0/28'], created: T0 }),
      pool('new', { blocks: newBlocks, created: T1 }),
      service('kept', { ingress: ['198.51.100.20'], created: T0 }),
      service('fresh', { created: T2, ips: '198.51.100.30' }),
    ];
    const conflicting = allocate(snapshot(...objects(['198.51.100.0/24', '192.0.2.0/24'])));
    assert.deepEqual(ingressOf(conflicting), { 'default/fresh': [], 'default/kept': ['198.51.100.20'] });
    assert.equal(reasonOf(conflicting, 'default/fresh'), 'no_pool');
    const resolved = allocate(snapshot(...objects(['198.51.100.0/24'])), conflicting.state);
    assert.equal(resolved.pools.get('new')?.conflicting, false);
    assert.deepEqual(ingressOf(resolved), { 'default/fresh': ['198.51.100.30'], 'default/kept': ['198.51.100.20'] });
  });

  it('a pool overlapping only a conflicting pool is not conflicting', () => {
    const r = allocate(
      snapshot(
        pool('a', { blocks: ['192.0.2.0/25'], created: T0 }),
        pool('b', { blocks: ['192.0.2.0/24'], created: T1 }),
        pool('c', { blocks: ['192.0.2.128/25'], created: T2 }),
      ),
    );
    assert.deepEqual(['a', 'b', 'c'].map((n) => r.pools.get(n)?.conflicting), [false, true, false]);
  });
});

describe('LB-IPAM: pool counts', () => {
  it('IPsTotal / IPsAvailable / IPsUsed conditions; reserved addresses count as used, as in Cilium', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24'], allowFirstLastIPs: 'No' }), ...svcs(['a', 'b', 'c'])));
    assert.deepEqual(countsOf(r, 'p'), ['256', '5', '251']);
    assert.deepEqual(r.pools.get('p')?.conditions.slice(1), [
      { type: 'cilium.io/IPsTotal', status: 'Unknown', reason: 'noreason', message: '256' },
      { type: 'cilium.io/IPsAvailable', status: 'Unknown', reason: 'noreason', message: '251' },
      { type: 'cilium.io/IPsUsed', status: 'Unknown', reason: 'noreason', message: '5' },
    ]);
  });

  it('big IPv6 pools count as bigint without enumerating', () => {
    const r = allocate(snapshot(pool('v6', { blocks: ['2001:db8::/64', '2001:db8:1::/48'], allowFirstLastIPs: 'No' }), service('a', { families: ['IPv6'] })));
    const total = (1n << 64n) + (1n << 80n);
    assert.deepEqual(countsOf(r, 'v6'), [total.toString(), '5', (total - 5n).toString()]);
    assert.equal(r.pools.get('v6')?.conditions[1]?.message, '1208944266358702884257792');
  });

  it('a disabled pool still reports its counts', () => {
    const r = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/30'], disabled: true }), service('a', { ingress: ['192.0.2.1'] })));
    assert.deepEqual(countsOf(r, 'p'), ['4', '1', '3']);
    assert.equal(r.pools.get('p')?.disabled, true);
  });
});

describe('LB-IPAM: dormant until a pool exists', () => {
  it('without pools nothing is allocated, stripped or reported', () => {
    const r = allocate(snapshot(service('a', { ingress: ['192.0.2.10'] })), { version: 1, allocations: { 'default/a': ['192.0.2.10'], 'default/gone': ['192.0.2.11'] } });
    assert.equal(r.dormant, true);
    assert.equal(r.services.size, 0);
    assert.deepEqual(r.state.allocations, { 'default/a': ['192.0.2.10'] });
  });
});

describe('condition messages name exactly what concerns the Service', () => {
  const msg = (objects: object[], key: string, state?: AllocationState) => allocate(snapshot(...objects), state).services.get(key)?.condition;

  it('no pool for a family: the closed pools listed are those selecting the Service with a block of that family, in pool order (by name here)', () => {
    const x = { matchLabels: { tier: 'x' } };
    const c = msg(
      [
        pool('off-v4', { blocks: ['192.0.2.0/30'], selector: x, disabled: true }),
        pool('off-dual', { blocks: ['2001:db8::/126', '192.0.2.8/30'], selector: x, disabled: true }),
        pool('off-v6', { blocks: ['2001:db8:1::/126'], selector: x, disabled: true }),
        pool('off-other', { blocks: ['192.0.2.16/30'], selector: { matchLabels: { tier: 'y' } }, disabled: true }),
        service('web', { labels: { tier: 'x' } }),
      ],
      'default/web',
    );
    assert.deepEqual(c && [c.reason, c.message], ['no_pool', "There are no enabled pools with IPv4 blocks that match this service ('off-dual' is disabled; 'off-v4' is disabled)"]);
  });

  it('no pool, none closed: nothing in parentheses', () => {
    const c = msg([pool('p', { blocks: ['192.0.2.0/30'] }), service('web', { ips: '203.0.113.1' })], 'default/web');
    assert.deepEqual(c && [c.reason, c.message], ['no_pool', "No enabled, non-conflicting pool has a block containing '203.0.113.1'"]);
  });

  it('a requested IP in a pool that does not select the Service names that pool', () => {
    const c = msg([pool('gold', { blocks: ['192.0.2.0/28'], selector: { matchLabels: { tier: 'gold' } } }), service('web', { ips: '192.0.2.3' })], 'default/web');
    assert.deepEqual(c && [c.reason, c.message], ['pool_selector_mismatch', "The pool containing '192.0.2.3' ('gold') doesn't select this service"]);
  });

  it('a requested first or last address of a pool without allowFirstLastIPs is reserved, naming the pool', () => {
    const c = msg([pool('p', { blocks: ['192.0.2.0/28'], allowFirstLastIPs: 'No' }), service('web', { ips: '192.0.2.15' })], 'default/web');
    assert.deepEqual(c && [c.reason, c.message], ['already_allocated', "The IP '192.0.2.15' is reserved: pool 'p' has allowFirstLastIPs: No"]);
  });

  it('an incompatible sharer is named by its key, then why', () => {
    const c = msg(
      [
        pool('p', { blocks: ['192.0.2.0/28'] }),
        service('a', { ips: '192.0.2.5', sharingKey: 'k', created: T0 }),
        service('b', { ips: '192.0.2.5', sharingKey: 'k', created: T1 }),
      ],
      'default/b',
    );
    assert.deepEqual(c && [c.reason, c.message], ['already_allocated_incompatible_service', "The IP '192.0.2.5' is already allocated to an incompatible service: default/a: same port and protocol 80/TCP"]);
  });
});

describe('re-validating previous IPs', () => {
  const state = (allocations: Record<string, string[]>): AllocationState => ({ version: 1, allocations, fingerprints: {} });

  it('an unparsable or repeated previous IP is skipped; the valid one is kept once (a port-less sharer too, which nothing else stops from joining itself)', () => {
    const r = allocate(
      snapshot(pool('p', { blocks: ['192.0.2.0/28'] }), service('web'), service('bare', { ports: [], sharingKey: 'k' })),
      state({ 'default/web': ['not-an-ip', '192.0.2.9', '192.0.2.9'], 'default/bare': ['192.0.2.11', '192.0.2.11'] }),
    );
    assert.deepEqual(ingressOf(r), { 'default/bare': ['192.0.2.11'], 'default/web': ['192.0.2.9'] });
    assert.deepEqual(r.state.allocations, { 'default/bare': ['192.0.2.11'], 'default/web': ['192.0.2.9'] });
  });

  it('a previous shared IP is kept only with every holder compatible (one conflict is enough to move)', () => {
    const r = allocate(
      snapshot(
        pool('p', { blocks: ['192.0.2.0/28'] }),
        service('a', { sharingKey: 'k', ports: [80], created: T0 }),
        service('b', { sharingKey: 'k', ports: [443], created: T1 }),
        service('c', { sharingKey: 'k', ports: [80], created: T2 }),
      ),
      state({ 'default/a': ['192.0.2.5'], 'default/b': ['192.0.2.5'], 'default/c': ['192.0.2.5'] }),
    );
    const ingress = ingressOf(r);
    assert.deepEqual([ingress['default/a'], ingress['default/b']], [['192.0.2.5'], ['192.0.2.5']]);
    assert.equal(ingress['default/c']?.length, 1);
    assert.notEqual(ingress['default/c']?.[0], '192.0.2.5', 'c shares port 80 with a');
  });
});
