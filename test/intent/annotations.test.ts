import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { annotationValue, checkLbIpamAnnotations, lbIpamRequest, type LbIpamRequest } from '../../src/intent/annotations.js';

const svc = (annotations: Record<string, string>, loadBalancerIP?: string) => ({
  metadata: { annotations },
  spec: loadBalancerIP === undefined ? {} : { loadBalancerIP },
});

describe('lbIpamRequest', () => {
  const cases: readonly [string, ReturnType<typeof svc>, LbIpamRequest][] = [
    ['nothing requested', svc({}), { requestedIPs: [], sharingCrossNamespace: [], sharingPermitDifferentPods: false }],
    [
      'ips annotation, canonicalised, blanks and empty entries ignored',
      svc({ 'lbipam.cilium.io/ips': ' 203.0.113.10 , 2001:DB8::0:10,,' }),
      { requestedIPs: ['203.0.113.10', '2001:db8::10'], sharingCrossNamespace: [], sharingPermitDifferentPods: false },
    ],
    [
      'spec.loadBalancerIP is honoured too, after the annotation, without duplicates',
      svc({ 'lbipam.cilium.io/ips': '203.0.113.10,203.0.113.11' }, '203.0.113.10'),
      { requestedIPs: ['203.0.113.10', '203.0.113.11'], sharingCrossNamespace: [], sharingPermitDifferentPods: false },
    ],
    ['only spec.loadBalancerIP', svc({}, '2001:db8::5'), { requestedIPs: ['2001:db8::5'], sharingCrossNamespace: [], sharingPermitDifferentPods: false }],
    [
      'old aliases',
      svc({
        'io.cilium/lb-ipam-ips': '198.51.100.1',
        'io.cilium/lb-ipam-sharing-key': 'k1',
        'io.cilium/lb-ipam-sharing-cross-namespace': '*',
      }),
      { requestedIPs: ['198.51.100.1'], sharingKey: 'k1', sharingCrossNamespace: ['*'], sharingPermitDifferentPods: false },
    ],
    [
      'the current name wins over the alias',
      svc({
        'lbipam.cilium.io/ips': '198.51.100.2',
        'io.cilium/lb-ipam-ips': '198.51.100.1',
        'lbipam.cilium.io/sharing-key': 'new',
        'io.cilium/lb-ipam-sharing-key': 'old',
        'lbipam.cilium.io/sharing-cross-namespace': 'a, b',
        'io.cilium/lb-ipam-sharing-cross-namespace': '*',
      }),
      { requestedIPs: ['198.51.100.2'], sharingKey: 'new', sharingCrossNamespace: ['a', 'b'], sharingPermitDifferentPods: false },
    ],
    ['an empty sharing key is no key', svc({ 'lbipam.cilium.io/sharing-key': ' ' }), { requestedIPs: [], sharingCrossNamespace: [], sharingPermitDifferentPods: false }],
    [
      'unparseable entries are skipped (they were reported at load)',
      svc({ 'lbipam.cilium.io/ips': 'nope,192.0.2.7' }, ''),
      { requestedIPs: ['192.0.2.7'], sharingCrossNamespace: [], sharingPermitDifferentPods: false },
    ],
  ];
  for (const [name, service, want] of cases) it(name, () => assert.deepEqual(lbIpamRequest(service), want));
});

describe('checkLbIpamAnnotations', () => {
  it('reports each bad entry under the key actually used', () => {
    assert.deepEqual(
      checkLbIpamAnnotations({
        'io.cilium/lb-ipam-ips': '192.0.2.1, 192.0.2.x, 2001:db8::1::2',
        'lbipam.cilium.io/sharing-cross-namespace': 'ok-ns,*,Bad',
      }),
      [
        { key: 'io.cilium/lb-ipam-ips', message: 'invalid IP address "192.0.2.x"' },
        { key: 'io.cilium/lb-ipam-ips', message: 'invalid IP address "2001:db8::1::2"' },
        {
          key: 'lbipam.cilium.io/sharing-cross-namespace',
          message: `invalid namespace "Bad": must be an RFC 1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)`,
        },
      ],
    );
  });

  it('ignores a shadowed alias, even when it is bad', () => {
    assert.deepEqual(checkLbIpamAnnotations({ 'lbipam.cilium.io/ips': '192.0.2.1', 'io.cilium/lb-ipam-ips': 'bad' }), []);
  });

  it('annotationValue says where the value came from', () => {
    assert.deepEqual(annotationValue({ 'io.cilium/lb-ipam-sharing-key': 'k' }, 'lbipam.cilium.io/sharing-key'), {
      key: 'io.cilium/lb-ipam-sharing-key',
      value: 'k',
    });
    assert.equal(annotationValue({}, 'lbipam.cilium.io/sharing-key'), undefined);
  });
});
