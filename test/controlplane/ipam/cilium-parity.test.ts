/**
 * Cases of Cilium's LB-IPAM test suite (cilium:operator/pkg/lbipam/
 * lbipam_test.go, service_store_test.go) replayed against the pure
 * allocator. Cilium's tests are event sequences against a fake API server;
 * here each event is a new intent snapshot allocated with the state the
 * previous step returned (what the agent does on every change). Addresses
 * are moved to documentation ranges (10.0.10.0/24 → 192.0.2.0/24,
 * 10.0.20.0/24 → 198.51.100.0/24, FF::0/48 → 2001:db8::/48).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import { incompatibility, serviceView } from '../../../src/controlplane/ipam/service-view.js';
import { EMPTY_ALLOCATION_STATE, type AllocationState } from '../../../src/controlplane/ipam/state.js';
import type { IpamResult } from '../../../src/controlplane/ipam/types.js';
import { ignoredCiliumAnnotations, type ServiceManifest } from '../../../src/intent/index.js';
import { pool, service, snapshot, type ServiceSpec } from './fixtures.js';

const T0 = '2024-01-01T00:00:00Z';
const T1 = '2024-02-01T00:00:00Z';
const T2 = '2024-03-01T00:00:00Z';
const poolA = pool('pool-a', { blocks: ['192.0.2.0/24'] });

/** A sequence of intent snapshots, each allocated with the state of the one before. */
class Cluster {
  state: AllocationState = EMPTY_ALLOCATION_STATE;
  result!: IpamResult;
  constructor(private readonly classes: { lbClasses?: readonly string[] } = {}) {}
  apply(...objects: object[]): IpamResult {
    this.result = allocate(snapshot(...objects), this.state, this.classes);
    this.state = this.result.state;
    return this.result;
  }
  ingress(key: string): readonly string[] {
    return this.result.services.get(key)?.ingress ?? [];
  }
  reason(key: string): string | undefined {
    return this.result.services.get(key)?.condition.reason;
  }
}

describe('Cilium LB-IPAM suite: sharing', () => {
  // mirrors TestSharedServiceUpdatedSharingKey
  it('two services with one sharing key share; changing the key moves one away', () => {
    const c = new Cluster();
    const a = service('service-a', { sharingKey: 'key-1', ports: [80], created: T0 });
    c.apply(poolA, a, service('service-b', { sharingKey: 'key-1', ports: [81], created: T1 }));
    assert.deepEqual(c.ingress('default/service-b'), c.ingress('default/service-a'));
    c.apply(poolA, a, service('service-b', { sharingKey: 'key-2', ports: [81], created: T1 }));
    assert.equal(c.ingress('default/service-b').length, 1);
    assert.notDeepEqual(c.ingress('default/service-b'), c.ingress('default/service-a'));
  });

  // mirrors TestSharedServiceUpdatedPorts
  it('a port change to an overlapping port moves the joiner to another IP', () => {
    const c = new Cluster();
    const a = service('service-a', { sharingKey: 'key-1', ports: [80], created: T0 });
    c.apply(poolA, a, service('service-b', { sharingKey: 'key-1', ports: [81], created: T1 }));
    const shared = c.ingress('default/service-a');
    assert.deepEqual(c.ingress('default/service-b'), shared);
    c.apply(poolA, a, service('service-b', { sharingKey: 'key-1', ports: [80], created: T1 }));
    assert.deepEqual(c.ingress('default/service-a'), shared, 'the older service keeps its IP');
    assert.equal(c.ingress('default/service-b').length, 1);
    assert.notDeepEqual(c.ingress('default/service-b'), shared);
  });

  // mirrors TestSharingKey
  it('a key reuses its IP; another key with a port conflict does not; delete and re-create', () => {
    const c = new Cluster();
    const a = service('service-a', { sharingKey: 'key-a', ports: [81], created: T0 });
    const b = service('service-b', { sharingKey: 'key-a', ports: [82], created: T1 });
    const svcC = service('service-c', { sharingKey: 'key-b', ports: [80], created: T2 });
    c.apply(poolA, a, b, svcC);
    const ip = c.ingress('default/service-a');
    assert.deepEqual(c.ingress('default/service-b'), ip);
    assert.notDeepEqual(c.ingress('default/service-c'), ip);
    const ip2 = c.ingress('default/service-c');
    // a and b deleted: their IP is free again.
    c.apply(poolA, svcC);
    assert.deepEqual([...c.result.ipOwners.keys()], [...ip2]);
    // a re-created on key-b with the same port as c: another IP; b on key-b with another port: c's IP.
    c.apply(poolA, svcC, service('service-a', { sharingKey: 'key-b', ports: [80] }), service('service-b', { sharingKey: 'key-b', ports: [81] }));
    assert.notDeepEqual(c.ingress('default/service-a'), ip2);
    assert.deepEqual(c.ingress('default/service-b'), ip2);
    // c deleted: b still holds the IP.
    c.apply(poolA, service('service-a', { sharingKey: 'key-b', ports: [80] }), service('service-b', { sharingKey: 'key-b', ports: [81] }));
    assert.deepEqual(c.result.ipOwners.get(ip2[0]!), ['default/service-b']);
  });

  // mirrors TestRegressionSharedKeyReaddBug
  it('a sharing service deleted and re-added gets the shared IP again', () => {
    const c = new Cluster();
    const a = service('service-a', { sharingKey: 'key-a', ports: [81], created: T0 });
    const b = service('service-b', { sharingKey: 'key-a', ports: [82], created: T1 });
    c.apply(poolA, a, b);
    const ip = c.ingress('default/service-a');
    assert.deepEqual(c.ingress('default/service-b'), ip);
    c.apply(poolA, a);
    c.apply(poolA, a, b);
    assert.deepEqual(c.ingress('default/service-b'), ip);
  });

  // mirrors TestSharingCrossNamespace
  it('cross-namespace sharing when both allow it; a third namespace without it gets another IP', () => {
    const c = new Cluster();
    c.apply(
      poolA,
      service('service-a', { namespace: 'ns-a', sharingKey: 'key-a', crossNamespace: 'ns-b', ports: [81], created: T0 }),
      service('service-b', { namespace: 'ns-b', sharingKey: 'key-a', crossNamespace: '*', ports: [82], created: T1 }),
      service('service-c', { namespace: 'ns-c', sharingKey: 'key-a', ports: [80], created: T2 }),
    );
    assert.deepEqual(c.ingress('ns-b/service-b'), c.ingress('ns-a/service-a'));
    assert.notDeepEqual(c.ingress('ns-c/service-c'), c.ingress('ns-a/service-a'));
  });

  // mirrors TestAllocSharedOnInit
  it('on init, two services of one key with the same ingress IP both keep it', () => {
    const c = new Cluster();
    c.apply(
      poolA,
      service('service-a', { sharingKey: 'key-1', ports: [81], policy: 'SingleStack', families: ['IPv4'], ingress: ['192.0.2.123'] }),
      service('service-b', { sharingKey: 'key-1', ports: [82], policy: 'SingleStack', families: ['IPv4'], ingress: ['192.0.2.123'] }),
    );
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.123']);
    assert.deepEqual(c.ingress('default/service-b'), ['192.0.2.123']);
  });

  // mirrors TestSharedServicesUpdateSharingKeyAndRequestedIP
  it('changing both the key and the requested IP joins the other key', () => {
    const c = new Cluster();
    const a = service('service-a', { ips: '192.0.2.22', sharingKey: 'key-1', ports: [80], created: T0 });
    const b = service('service-b', { ips: '192.0.2.33', sharingKey: 'key-2', ports: [81], created: T1 });
    c.apply(poolA, a, b, service('service-c', { ips: '192.0.2.33', sharingKey: 'key-2', ports: [82], created: T2 }));
    assert.deepEqual(c.ingress('default/service-c'), c.ingress('default/service-b'));
    c.apply(poolA, a, b, service('service-c', { ips: '192.0.2.22', sharingKey: 'key-1', ports: [82], created: T2 }));
    assert.deepEqual(c.ingress('default/service-c'), ['192.0.2.22']);
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.22']);
    assert.deepEqual(c.ingress('default/service-b'), ['192.0.2.33']);
  });

  // Cilium offers a key's IPs in allocation order (the order they were added
  // to the key), not address order.
  it("a joining service gets the key's oldest IP, not its lowest", () => {
    const c = new Cluster();
    const a = service('service-a', { sharingKey: 'k', ports: [80], ips: '192.0.2.200', created: T0 });
    c.apply(poolA, a);
    const b = service('service-b', { sharingKey: 'k', ports: [80], created: T1 });
    c.apply(poolA, a, b);
    assert.deepEqual(c.ingress('default/service-b'), ['192.0.2.0'], 'same port: b needs a second IP of the key');
    c.apply(poolA, a, b, service('service-c', { sharingKey: 'k', ports: [443], created: T2 }));
    assert.deepEqual(c.ingress('default/service-c'), ['192.0.2.200']);
  });

  it('the oldest IP stays first after a restart (state imported oldest service first)', () => {
    const c = new Cluster();
    const a = service('service-a', { sharingKey: 'k', ports: [80], ips: '192.0.2.200', created: T0 });
    const b = service('service-b', { sharingKey: 'k', ports: [80], created: T1 });
    c.apply(poolA, a);
    c.apply(poolA, a, b);
    c.state = JSON.parse(JSON.stringify(c.state)) as AllocationState;
    c.apply(poolA, a, b, service('service-c', { sharingKey: 'k', ports: [443], created: T2 }));
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.200']);
    assert.deepEqual(c.ingress('default/service-b'), ['192.0.2.0']);
    assert.deepEqual(c.ingress('default/service-c'), ['192.0.2.200']);
  });
});

describe('Cilium LB-IPAM suite: isCompatible (service_store_test.go)', () => {
  const view = (name: string, spec: ServiceSpec): ReturnType<typeof serviceView> => {
    const svc = snapshot(service(name, spec)).services.get(`${spec.namespace ?? 'default'}/${name}`) as ServiceManifest;
    return serviceView(`${spec.namespace ?? 'default'}/${name}`, svc);
  };
  const permit = { 'lbipam.cilium.io/sharing-permit-different-pods': 'true' };
  const base: ServiceSpec = { sharingKey: 'k', ports: [80] };
  // mirrors TestIsCompatibleReasons
  const cases: [string, ServiceSpec, ServiceSpec, RegExp | undefined][] = [
    ['different sharing keys', { ...base, sharingKey: 'key-a' }, { ...base, ports: [81], sharingKey: 'key-b' }, /different sharing key/],
    ['namespaces differ without mutual permission', { ...base, namespace: 'ns-a' }, { ...base, ports: [81], namespace: 'ns-b', crossNamespace: 'ns-a' }, /namespace/],
    ['same port and protocol', { ...base, ports: [{ port: 80, protocol: 'TCP' }] }, { ...base, ports: [{ port: 80, protocol: 'TCP' }] }, /same port and protocol 80\/TCP/],
    ['same port, different protocol (Cilium >= 1.17)', { ...base, ports: [{ port: 53, protocol: 'TCP' }] }, { ...base, ports: [{ port: 53, protocol: 'UDP' }] }, undefined],
    ['different external traffic policies', { ...base, etp: 'Local', selector: { app: 'a' } }, { ...base, ports: [81], etp: 'Cluster' }, /externalTrafficPolicy/],
    ['local policy and one service has no selector', { ...base, etp: 'Local', selector: { app: 'a' }, annotations: permit }, { ...base, ports: [81], etp: 'Local', annotations: permit }, /pod selector on both/],
    ['local policy and selectors differ without the opt-in', { ...base, etp: 'Local', selector: { app: 'a' } }, { ...base, ports: [81], etp: 'Local', selector: { app: 'b' } }, /sharing-permit-different-pods on both/],
    ['local policy and selectors differ with the opt-in on one side only', { ...base, etp: 'Local', selector: { app: 'a' }, annotations: permit }, { ...base, ports: [81], etp: 'Local', selector: { app: 'b' } }, /sharing-permit-different-pods on both/],
    ['local policy and selectors differ with the opt-in on both', { ...base, etp: 'Local', selector: { app: 'a' }, annotations: permit }, { ...base, ports: [81], etp: 'Local', selector: { app: 'b' }, annotations: permit }, undefined],
    ['identical services', { ...base, etp: 'Local', selector: { app: 'a' } }, { ...base, ports: [81], etp: 'Local', selector: { app: 'a' } }, undefined],
  ];
  for (const [name, a, b, want] of cases) {
    it(name, () => {
      const why = incompatibility(view('a', a), view('b', b));
      if (want === undefined) assert.equal(why, undefined);
      else assert.match(why ?? 'compatible', want);
    });
  }

  it('permit-different-pods on both: ETP=Local services with different selectors share one IP', () => {
    const c = new Cluster();
    c.apply(
      poolA,
      service('a', { ...base, etp: 'Local', selector: { app: 'a' }, annotations: permit, created: T0 }),
      service('b', { ...base, ports: [81], etp: 'Local', selector: { app: 'b' }, annotations: permit, created: T1 }),
    );
    assert.deepEqual(c.ingress('default/b'), c.ingress('default/a'));
  });

  it('same port and protocol on one key: a second IP; same port, other protocol: the same IP', () => {
    const c = new Cluster();
    c.apply(
      poolA,
      service('dns-tcp', { sharingKey: 'dns', ports: [{ port: 53, protocol: 'TCP' }], created: T0 }),
      service('dns-udp', { sharingKey: 'dns', ports: [{ port: 53, protocol: 'UDP' }], created: T1 }),
      service('dns-tcp-2', { sharingKey: 'dns', ports: [{ port: 53, protocol: 'TCP' }], created: T2 }),
    );
    assert.deepEqual(c.ingress('default/dns-udp'), c.ingress('default/dns-tcp'));
    assert.notDeepEqual(c.ingress('default/dns-tcp-2'), c.ingress('default/dns-tcp'));
  });
});

describe('Cilium LB-IPAM suite: requests, init, classes, families', () => {
  // mirrors TestAllocOnInit
  it('ingress IPs inside a pool are imported', () => {
    const c = new Cluster();
    c.apply(poolA, service('service-a', { policy: 'SingleStack', families: ['IPv4'], ingress: ['192.0.2.123'] }), service('service-b', { loadBalancerIP: '192.0.2.124', ingress: ['192.0.2.124'] }));
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.123']);
    assert.deepEqual(c.ingress('default/service-b'), ['192.0.2.124']);
  });

  // mirrors TestReallocOnInit
  it('an ingress IP of no pool is replaced by a valid one, satisfied', () => {
    const c = new Cluster();
    c.apply(poolA, service('service-a', { policy: 'SingleStack', families: ['IPv4'], ingress: ['203.0.113.12'] }));
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.0']);
    assert.equal(c.reason('default/service-a'), 'satisfied');
  });

  // mirrors TestRequestIPs
  it('specific IPs from loadBalancerIP and the ips annotation; an already allocated one is refused', () => {
    const c = new Cluster();
    c.apply(
      poolA,
      service('service-a', { loadBalancerIP: '192.0.2.20', created: T0 }),
      service('service-b', { loadBalancerIP: '192.0.2.21', annotations: { 'io.cilium/lb-ipam-ips': '192.0.2.22,192.0.2.23' }, created: T1 }),
      service('service-c', { loadBalancerIP: '192.0.2.21', created: T2 }),
    );
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.20']);
    assert.deepEqual(c.ingress('default/service-b'), ['192.0.2.21', '192.0.2.22', '192.0.2.23']);
    assert.deepEqual(c.ingress('default/service-c'), []);
    assert.equal(c.reason('default/service-c'), 'already_allocated');
  });

  // mirrors TestRemoveRequestedIP
  it('an IP no longer requested is released', () => {
    const c = new Cluster();
    c.apply(poolA, service('service-a', { loadBalancerIP: '192.0.2.123', annotations: { 'io.cilium/lb-ipam-ips': '192.0.2.124,192.0.2.125' } }));
    assert.equal(c.ingress('default/service-a').length, 3);
    c.apply(poolA, service('service-a', { loadBalancerIP: '192.0.2.123', annotations: { 'io.cilium/lb-ipam-ips': '192.0.2.124' } }));
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.123', '192.0.2.124']);
    assert.equal(c.result.ipOwners.has('192.0.2.125'), false);
  });

  // mirrors TestRequestIPWithMismatchedLabel
  it('a requested IP of a pool that does not select the service: pool_selector_mismatch', () => {
    const c = new Cluster();
    c.apply(pool('pool-a', { blocks: ['192.0.2.0/24'], selector: { matchLabels: { color: 'blue' } } }), service('service-a', { labels: { color: 'red' }, loadBalancerIP: '192.0.2.123' }));
    assert.equal(c.reason('default/service-a'), 'pool_selector_mismatch');
  });

  // mirrors TestChangeServiceType
  it('ClusterIP is ignored, LoadBalancer served, NodePort released', () => {
    const c = new Cluster();
    c.apply(poolA, service('service-a', { type: 'ClusterIP' }));
    assert.equal(c.result.services.has('default/service-a'), false);
    c.apply(poolA, service('service-a'));
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.0']);
    c.apply(poolA, service('service-a', { type: 'NodePort' }));
    assert.equal(c.result.services.has('default/service-a'), false);
    assert.equal(c.result.ipOwners.size, 0);
  });

  // mirrors TestUpdateAllowFirstAndLastIPs
  it('a reserved first IP is refused, then given once allowFirstLastIPs is Yes', () => {
    const c = new Cluster();
    const svc = service('service-a', { policy: 'SingleStack', families: ['IPv4'], loadBalancerIP: '192.0.2.16' });
    c.apply(pool('pool-a', { blocks: ['192.0.2.16/30'], allowFirstLastIPs: 'No' }), svc);
    assert.deepEqual(c.ingress('default/service-a'), []);
    assert.equal(c.result.services.get('default/service-a')?.condition.status, 'False');
    c.apply(pool('pool-a', { blocks: ['192.0.2.16/30'], allowFirstLastIPs: 'Yes' }), svc);
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.16']);
    assert.equal(c.reason('default/service-a'), 'satisfied');
  });

  // mirrors TestNonMatchingLBClass
  it('a foreign loadBalancerClass is ignored', () => {
    const c = new Cluster();
    c.apply(poolA, service('service-a', { lbClass: 'net.example/some-other-class' }));
    assert.equal(c.result.services.has('default/service-a'), false);
  });

  it("Cilium's own classes are served by default", () => {
    const c = new Cluster();
    c.apply(poolA, service('l2', { lbClass: 'io.cilium/l2-announcer' }), service('bgp', { lbClass: 'io.cilium/bgp-control-plane' }), service('none'));
    assert.deepEqual([...c.result.services.keys()].sort(), ['default/bgp', 'default/l2', 'default/none']);
  });

  // mirrors TestRequiredLBClass
  it('with a class list (--lb-classes), a class-less service is left alone until it sets a listed class', () => {
    const c = new Cluster({ lbClasses: ['io.cilium/bgp-control-plane'] });
    c.apply(poolA, service('service-a'));
    assert.equal(c.result.services.has('default/service-a'), false);
    assert.equal(c.result.ipOwners.size, 0);
    c.apply(poolA, service('service-a', { lbClass: 'io.cilium/bgp-control-plane' }));
    assert.deepEqual(c.ingress('default/service-a'), ['192.0.2.0']);
    c.apply(poolA, service('service-a', { lbClass: 'io.cilium/l2-announcer' }));
    assert.equal(c.result.services.has('default/service-a'), false, 'a class not in the list is not served');
  });

  // mirrors TestLBIPAM_serviceIPFamilyRequest (both families enabled, as herald assumes) and
  // TestAllocHappyPath (family switches)
  const v4v6 = pool('pool-a', { blocks: ['192.0.2.0/24', '2001:db8::/48'] });
  const v4only = pool('pool-a', { blocks: ['192.0.2.0/24'] });
  const familyCases: [string, object, ServiceSpec, string[], string][] = [
    ['No policy, No families, IPv4/IPv6: IPv4', v4v6, {}, ['192.0.2.0'], 'satisfied'],
    ['No policy, IPv6/IPv4 families: the first, IPv6', v4v6, { families: ['IPv6', 'IPv4'] }, ['2001:db8::'], 'satisfied'],
    ['Single stack, No families: IPv4', v4v6, { policy: 'SingleStack' }, ['192.0.2.0'], 'satisfied'],
    ['PreferDual, No families: both', v4v6, { policy: 'PreferDualStack' }, ['192.0.2.0', '2001:db8::'], 'satisfied'],
    ['PreferDual against an IPv4-only pool: IPv4, no_pool', v4only, { policy: 'PreferDualStack' }, ['192.0.2.0'], 'no_pool'],
    ['RequireDual against an IPv4-only pool: IPv4, no_pool', v4only, { policy: 'RequireDualStack', families: ['IPv4'] }, ['192.0.2.0'], 'no_pool'],
  ];
  for (const [name, p, spec, ingress, reason] of familyCases) {
    it(name, () => {
      const c = new Cluster();
      c.apply(p, service('service-a', spec));
      assert.deepEqual(c.ingress('default/service-a'), ingress);
      assert.equal(c.reason('default/service-a'), reason, c.result.services.get('default/service-a')?.condition.message);
    });
  }
});

describe('Cilium annotations herald ignores are reported, never dropped', () => {
  const cases: [string, Record<string, string>, RegExp | undefined][] = [
    ['lbipam.cilium.io/ips is implemented', { 'lbipam.cilium.io/ips': '192.0.2.1' }, undefined],
    ['io.cilium/lb-ipam-ips (alias) is implemented', { 'io.cilium/lb-ipam-ips': '192.0.2.1' }, undefined],
    ['lbipam.cilium.io/sharing-key is implemented', { 'lbipam.cilium.io/sharing-key': 'k' }, undefined],
    ['io.cilium/lb-ipam-sharing-key (alias) is implemented', { 'io.cilium/lb-ipam-sharing-key': 'k' }, undefined],
    ['lbipam.cilium.io/sharing-cross-namespace is implemented', { 'lbipam.cilium.io/sharing-cross-namespace': '*' }, undefined],
    ['io.cilium/lb-ipam-sharing-cross-namespace (alias) is implemented', { 'io.cilium/lb-ipam-sharing-cross-namespace': '*' }, undefined],
    ['lbipam.cilium.io/sharing-permit-different-pods "true" is implemented', { 'lbipam.cilium.io/sharing-permit-different-pods': 'true' }, undefined],
    ['lbipam.cilium.io/sharing-permit-different-pods with another value is reported', { 'lbipam.cilium.io/sharing-permit-different-pods': 'yes' }, /only "true" permits sharing, got "yes"/],
    ['a shadowed alias is reported', { 'lbipam.cilium.io/sharing-key': 'a', 'io.cilium/lb-ipam-sharing-key': 'b' }, /"lbipam.cilium.io\/sharing-key" is also set and takes precedence/],
    ['io.cilium/global-service is reported', { 'io.cilium/global-service': 'true' }, /cluster mesh global services are not implemented/],
    ['io.cilium/shared-service is reported', { 'io.cilium/shared-service': 'false' }, /cluster mesh shared services/],
    ['io.cilium/service-affinity is reported', { 'io.cilium/service-affinity': 'local' }, /service affinity/],
    ['io.cilium/lb-l7 is reported', { 'io.cilium/lb-l7': 'enabled' }, /L7 load balancing/],
    ['an unknown lbipam.cilium.io/ annotation is reported', { 'lbipam.cilium.io/future-thing': 'x' }, /herald does not implement this annotation/],
    ['an unknown io.cilium/ annotation is reported', { 'io.cilium/something': 'x' }, /herald does not implement this annotation/],
    ['other prefixes are not Cilium LB-IPAM business', { 'metallb.universe.tf/address-pool': 'x', 'service.cilium.io/global': 'true' }, undefined],
  ];
  for (const [name, annotations, want] of cases) {
    it(name, () => {
      const got = ignoredCiliumAnnotations(annotations);
      if (want === undefined) assert.deepEqual(got, []);
      else {
        assert.equal(got.length, 1, JSON.stringify(got));
        assert.match(got[0]!.message, want);
      }
    });
  }

  it('validate (the manifest parser) warns with the annotation path; status carries the warning', async () => {
    const { parseManifests, formatErrors } = await import('../../../src/intent/index.js');
    const text = [JSON.stringify(poolA), JSON.stringify(service('web', { annotations: { 'io.cilium/global-service': 'true' } }))].join('\n---\n');
    const load = parseManifests(text, 'svc.yaml');
    assert.equal(formatErrors(load.errors), '');
    assert.match(formatErrors(load.warnings), /\(Service "default\/web"\): warning: metadata\.annotations\["io\.cilium\/global-service"\]: ignored: cluster mesh global services/);
    const result = allocate(load.snapshot!);
    assert.deepEqual(result.services.get('default/web')?.warnings, ['io.cilium/global-service: ignored: cluster mesh global services are not implemented (service.cilium.io/global)']);
  });
});
