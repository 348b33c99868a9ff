/** Announcement policy matching, table-driven, built through the real manifest parser. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeCandidates, nodeIdentity } from '../../src/controlplane/announce/candidates.js';
import { parseManifests } from '../../src/intent/parse.js';
import type { IntentSnapshot } from '../../src/intent/snapshot.js';
import type { LinkInfo } from '../../src/os/links.js';

function snapshot(yaml: string): IntentSnapshot {
  const load = parseManifests(yaml, 'test.yaml');
  assert.deepEqual(load.errors, []);
  return load.snapshot!;
}

const link = (name: string, over: Partial<LinkInfo> = {}): LinkInfo => ({
  name,
  ifindex: name.length,
  mac: '02:00:5e:00:53:01',
  ethernet: true,
  up: true,
  carrier: true,
  arp: true,
  ...over,
});
const LINKS = [link('eth0'), link('eth1'), link('bond0.100')];

const svc = (name: string, extra = '', ns = 'default') => `
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: ${ns}, labels: { app: ${name} } }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]
${extra}
---`;
const policy = (name: string, spec: string) => `
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: ${name} }
spec:
${spec}
---`;
const node = (name: string, labels: string) => `
apiVersion: v1
kind: Node
metadata: { name: ${name}, labels: { ${labels} } }
---`;

const INGRESS = new Map([
  ['default/web', ['198.51.100.10']],
  ['default/db', ['198.51.100.11']],
  ['other/web', ['198.51.100.12']],
]);

function run(yaml: string, opts: { node?: string; links?: LinkInfo[] } = {}) {
  const snap = snapshot(yaml);
  const out = computeCandidates({ snapshot: snap, ingress: INGRESS, node: nodeIdentity(snap, opts.node ?? 'n1'), links: opts.links ?? LINKS });
  return Object.fromEntries([...out].map(([ip, c]) => [ip, { interfaces: c.interfaces.join(','), services: c.services.join(',') }]));
}

const cases: Array<{ name: string; yaml: string; node?: string; links?: LinkInfo[]; want: Record<string, { interfaces: string; services: string }> }> = [
  {
    name: 'a policy with no selectors announces every LB ingress IP on every eligible interface',
    yaml: svc('web') + svc('db') + policy('all', '  loadBalancerIPs: true'),
    want: {
      '198.51.100.10': { interfaces: 'bond0.100,eth0,eth1', services: 'default/web' },
      '198.51.100.11': { interfaces: 'bond0.100,eth0,eth1', services: 'default/db' },
    },
  },
  {
    name: 'interface regexes are OR-ed and unanchored, like Go',
    yaml: svc('web') + policy('p', `  loadBalancerIPs: true\n  interfaces: ['^eth1$', 'bond']`),
    want: { '198.51.100.10': { interfaces: 'bond0.100,eth1', services: 'default/web' } },
  },
  {
    name: 'interfaces without carrier, down, non-Ethernet or NOARP are not eligible',
    yaml: svc('web') + policy('p', '  loadBalancerIPs: true'),
    links: [link('eth0', { carrier: false }), link('eth1', { up: false }), link('tun0', { ethernet: false }), link('eth2', { arp: false }), link('eth3')],
    want: { '198.51.100.10': { interfaces: 'eth3', services: 'default/web' } },
  },
  {
    name: 'no eligible interface: nothing to announce',
    yaml: svc('web') + policy('p', `  loadBalancerIPs: true\n  interfaces: ['^wlan']`),
    want: {},
  },
  {
    name: 'service selector matches labels',
    yaml: svc('web') + svc('db') + policy('p', '  loadBalancerIPs: true\n  serviceSelector: { matchLabels: { app: db } }'),
    want: { '198.51.100.11': { interfaces: 'bond0.100,eth0,eth1', services: 'default/db' } },
  },
  {
    name: 'service selector sees the synthetic io.kubernetes.service.namespace label',
    yaml: svc('web') + svc('web', '', 'other') + policy('p', "  loadBalancerIPs: true\n  serviceSelector: { matchLabels: { 'io.kubernetes.service.namespace': other } }"),
    want: { '198.51.100.12': { interfaces: 'bond0.100,eth0,eth1', services: 'other/web' } },
  },
  {
    name: "node selector against the Node manifest's labels",
    yaml: svc('web') + node('n1', 'rack: r1') + policy('r1', '  loadBalancerIPs: true\n  nodeSelector: { matchLabels: { rack: r1 } }') + policy('r2', '  loadBalancerIPs: true\n  nodeSelector: { matchLabels: { rack: r2 } }\n  interfaces: [eth1]'),
    want: { '198.51.100.10': { interfaces: 'bond0.100,eth0,eth1', services: 'default/web' } },
  },
  {
    name: 'node selector does not match: nothing',
    yaml: svc('web') + node('n1', 'rack: r1') + policy('p', '  loadBalancerIPs: true\n  nodeSelector: { matchExpressions: [{ key: rack, operator: NotIn, values: [r1] }] }'),
    want: {},
  },
  {
    name: 'kubernetes.io/hostname is a node label even without a Node manifest',
    yaml: svc('web') + policy('p', "  loadBalancerIPs: true\n  nodeSelector: { matchLabels: { 'kubernetes.io/hostname': n2 } }"),
    node: 'n2',
    want: { '198.51.100.10': { interfaces: 'bond0.100,eth0,eth1', services: 'default/web' } },
  },
  {
    name: 'externalIPs are announced only when the policy says so',
    yaml: svc('web', '  externalIPs: [203.0.113.5]') + policy('lb', '  loadBalancerIPs: true\n  interfaces: [eth0]') + policy('ext', '  externalIPs: true\n  interfaces: [eth1]'),
    want: {
      '198.51.100.10': { interfaces: 'eth0', services: 'default/web' },
      '203.0.113.5': { interfaces: 'eth1', services: 'default/web' },
    },
  },
  {
    name: 'a policy announcing neither kind announces nothing',
    yaml: svc('web') + policy('p', '  interfaces: [eth0]'),
    want: {},
  },
  {
    name: 'a foreign loadBalancerClass is not announced; the L2 announcer class is',
    yaml: svc('web', '  loadBalancerClass: io.cilium/bgp-control-plane') + svc('db', '  loadBalancerClass: io.cilium/l2-announcer') + policy('p', '  loadBalancerIPs: true\n  interfaces: [eth0]'),
    want: { '198.51.100.11': { interfaces: 'eth0', services: 'default/db' } },
  },
  {
    name: 'an IP shared by two services is one candidate with both services (one owner, Cilium #48419)',
    yaml: svc('web') + svc('db') + policy('p', '  loadBalancerIPs: true\n  interfaces: [eth0]'),
    want: {
      '198.51.100.10': { interfaces: 'eth0', services: 'default/web' },
      '198.51.100.11': { interfaces: 'eth0', services: 'default/db' },
    },
  },
  {
    name: 'several policies selecting one IP merge their interfaces',
    yaml: svc('web') + policy('a', '  loadBalancerIPs: true\n  interfaces: [eth0]') + policy('b', '  loadBalancerIPs: true\n  interfaces: [eth1]'),
    want: { '198.51.100.10': { interfaces: 'eth0,eth1', services: 'default/web' } },
  },
];

for (const c of cases) {
  test(c.name, () => {
    assert.deepEqual(run(c.yaml, { ...(c.node ? { node: c.node } : {}), ...(c.links ? { links: c.links } : {}) }), c.want);
  });
}

test('a shared IP merges the services of both into one candidate', () => {
  const snap = snapshot(svc('web') + svc('db') + policy('p', '  loadBalancerIPs: true\n  interfaces: [eth0]'));
  const out = computeCandidates({
    snapshot: snap,
    ingress: new Map([['default/web', ['198.51.100.20']], ['default/db', ['198.51.100.20']]]),
    node: nodeIdentity(snap, 'n1'),
    links: LINKS,
  });
  assert.deepEqual([...out.keys()], ['198.51.100.20']);
  assert.deepEqual(out.get('198.51.100.20')!.services, ['default/db', 'default/web']);
});
