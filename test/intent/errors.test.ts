/**
 * Every class of bad manifest → the exact printed error: file, line:column,
 * document number, object, field path and message.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatErrors } from '../../src/intent/diagnostics.js';
import { parseManifests } from '../../src/intent/parse.js';

const POOL = (spec: string, name = 'blue', apiVersion = 'cilium.io/v2'): string =>
  `apiVersion: ${apiVersion}\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: ${name}\nspec:\n${spec}`;
const SVC = (spec: string, metadata = '  name: web\n'): string =>
  `apiVersion: v1\nkind: Service\nmetadata:\n${metadata}spec:\n${spec}`;
const POLICY = (spec: string): string =>
  `apiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata:\n  name: p1\nspec:\n${spec}`;

interface Case {
  readonly name: string;
  readonly text: string;
  readonly errors: readonly string[];
}

const cases: readonly Case[] = [
  {
    name: 'YAML syntax error (line and column, document number)',
    text: `${POOL('  blocks:\n  - cidr: 192.0.2.0/24\n')}---\nkind: [Service\n`,
    errors: [
      'f.yaml:10:1: document 2: YAML syntax error: Flow sequence in block collection must be sufficiently indented and end with a ]',
    ],
  },
  {
    name: 'duplicate key inside a mapping is refused, naming the key, its path and its first line',
    text: POOL('  disabled: true\n  disabled: false\n'),
    errors: ['f.yaml:7:3: document 1: spec.disabled: duplicate key "disabled" (first at line 6): a mapping may have each key once; remove one'],
  },
  {
    name: 'duplicate key in a mapping inside a list item',
    text: POOL('  blocks:\n  - cidr: 192.0.2.0/24\n    cidr: 192.0.2.0/25\n'),
    errors: ['f.yaml:8:5: document 1: spec.blocks[0].cidr: duplicate key "cidr" (first at line 7): a mapping may have each key once; remove one'],
  },
  {
    name: 'duplicate key in a flow mapping',
    text: POOL('  serviceSelector: { matchLabels: { app: a, app: b } }\n'),
    errors: ['f.yaml:6:45: document 1: spec.serviceSelector.matchLabels.app: duplicate key "app" (first at line 6): a mapping may have each key once; remove one'],
  },
  {
    name: 'a kind herald does not read, without an apiVersion, is not an object at all',
    text: 'kind: Deployment\nmetadata:\n  name: web\n',
    errors: [
      'f.yaml:1:1: document 1 (Deployment "web"): apiVersion: required (kind "Deployment" is not one herald reads, but every object needs an apiVersion)',
    ],
  },
  {
    name: 'missing kind and apiVersion',
    text: 'metadata:\n  name: web\n',
    errors: ['f.yaml:1:1: document 1: kind: required', 'f.yaml:1:1: document 1: apiVersion: required'],
  },
  {
    name: 'unknown apiVersion for a known kind',
    text: POOL('  blocks:\n  - cidr: 192.0.2.0/24\n', 'blue', 'cilium.io/v1'),
    errors: [
      'f.yaml:1:13: document 1 (CiliumLoadBalancerIPPool "blue"): apiVersion: unknown apiVersion "cilium.io/v1" for CiliumLoadBalancerIPPool: expected "cilium.io/v2" or "cilium.io/v2alpha1"',
    ],
  },
  {
    name: 'the L2 policy exists only in v2alpha1',
    text: 'apiVersion: cilium.io/v2\nkind: CiliumL2AnnouncementPolicy\nmetadata:\n  name: p1\n',
    errors: [
      'f.yaml:1:13: document 1 (CiliumL2AnnouncementPolicy "p1"): apiVersion: unknown apiVersion "cilium.io/v2" for CiliumL2AnnouncementPolicy: expected "cilium.io/v2alpha1"',
    ],
  },
  {
    name: 'a document that is not a mapping',
    text: '- a\n- b\n',
    errors: [
      'f.yaml:1:1: document 1: expected a Kubernetes object (a mapping with apiVersion, kind and metadata), got a list',
    ],
  },
  {
    name: 'missing name',
    text: 'apiVersion: v1\nkind: Node\nmetadata:\n  labels: {a: b}\n',
    errors: ['f.yaml:3:1: document 1 (Node): metadata.name: required'],
  },
  {
    name: 'missing metadata',
    text: 'apiVersion: v1\nkind: Node\n',
    errors: ['f.yaml:1:1: document 1 (Node): metadata: required'],
  },
  {
    name: 'bad pool name (DNS-1123 subdomain)',
    text: POOL('  blocks: []\n', 'Blue_Pool'),
    errors: [
      `f.yaml:4:9: document 1 (CiliumLoadBalancerIPPool "Blue_Pool"): metadata.name: invalid name "Blue_Pool": must be an RFC 1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)`,
    ],
  },
  {
    name: 'bad service name (DNS-1035 label: no leading digit, no dots)',
    text: SVC('  ports: [{port: 80}]\n', '  name: 1web.shop\n'),
    errors: [
      `f.yaml:4:9: document 1 (Service "default/1web.shop"): metadata.name: invalid name "1web.shop": must be an RFC 1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit)`,
    ],
  },
  {
    name: 'bad namespace (DNS-1123 label)',
    text: SVC('  ports: [{port: 80}]\n', '  name: web\n  namespace: Shop.A\n'),
    errors: [
      `f.yaml:5:14: document 1 (Service "Shop.A/web"): metadata.namespace: invalid namespace "Shop.A": must be an RFC 1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)`,
    ],
  },
  {
    name: 'bad IP in externalIPs',
    text: SVC('  externalIPs:\n  - 198.51.100.7\n  - 198.51.100.300\n  - fe80::1%eth0\n  ports: [{port: 80}]\n'),
    errors: [
      'f.yaml:8:5: document 1 (Service "default/web"): spec.externalIPs[1]: invalid IP address "198.51.100.300"',
      'f.yaml:9:5: document 1 (Service "default/web"): spec.externalIPs[2]: invalid IP address "fe80::1%eth0"',
    ],
  },
  {
    name: 'bad loadBalancerIP (leading zeros are not an address)',
    text: SVC('  type: LoadBalancer\n  loadBalancerIP: 203.0.113.010\n  ports: [{port: 80}]\n'),
    errors: ['f.yaml:7:19: document 1 (Service "default/web"): spec.loadBalancerIP: invalid IP address "203.0.113.010"'],
  },
  {
    name: 'bad CIDR',
    text: POOL('  blocks:\n  - cidr: "10.0.0.300/24"\n  - cidr: 192.0.2.0/33\n  - cidr: 192.0.2.0\n'),
    errors: [
      'f.yaml:7:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].cidr: invalid CIDR "10.0.0.300/24": "10.0.0.300" is not an IP address',
      'f.yaml:8:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[1].cidr: invalid CIDR "192.0.2.0/33": prefix length must be 0-32',
      'f.yaml:9:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[2].cidr: invalid CIDR "192.0.2.0": missing "/prefix-length"',
    ],
  },
  {
    name: 'range with start after stop',
    text: POOL('  blocks:\n  - start: 192.0.2.200\n    stop: 192.0.2.100\n'),
    errors: [
      'f.yaml:8:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].stop: stop "192.0.2.100" is before start "192.0.2.200"',
    ],
  },
  {
    // The off-by-one edge: stop one below start is an empty range, not a one-address block.
    name: 'range with stop one below start (IPv4 and IPv6)',
    text: POOL('  blocks:\n  - start: 192.0.2.10\n    stop: 192.0.2.9\n  - start: "2001:db8::10"\n    stop: "2001:db8::f"\n'),
    errors: [
      'f.yaml:8:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].stop: stop "192.0.2.9" is before start "192.0.2.10"',
      'f.yaml:10:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[1].stop: stop "2001:db8::f" is before start "2001:db8::10"',
    ],
  },
  {
    name: 'mixed-family range',
    text: POOL('  blocks:\n  - start: 192.0.2.1\n    stop: "2001:db8::ff"\n'),
    errors: [
      'f.yaml:8:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].stop: stop "2001:db8::ff" is IPv6 but start "192.0.2.1" is IPv4',
    ],
  },
  {
    name: 'bad range endpoints',
    text: POOL('  blocks:\n  - start: 192.0.2\n    stop: 192.0.2.x\n'),
    errors: [
      'f.yaml:7:12: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].start: invalid IP address "192.0.2"',
      'f.yaml:8:11: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].stop: invalid IP address "192.0.2.x"',
    ],
  },
  {
    name: 'block with both cidr and start, block with neither, stop without start',
    text: POOL('  blocks:\n  - cidr: 192.0.2.0/24\n    start: 192.0.2.1\n  - {}\n  - stop: 192.0.2.9\n'),
    errors: [
      'f.yaml:7:5: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0]: a block has either cidr or start/stop, not both',
      'f.yaml:9:5: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[1]: a block needs cidr, or start (and optionally stop)',
      'f.yaml:10:5: document 1 (CiliumLoadBalancerIPPool "blue"): spec.blocks[2].start: required when stop is set',
    ],
  },
  {
    name: 'removed spec.cidrs field',
    text: POOL('  cidrs:\n  - cidr: 192.0.2.0/24\n', 'old', 'cilium.io/v2alpha1'),
    errors: [
      'f.yaml:6:3: document 1 (CiliumLoadBalancerIPPool "old"): spec.cidrs: removed in Cilium 1.16: rename it to spec.blocks (the {cidr: ...} entries stay the same)',
    ],
  },
  {
    name: 'pool without spec',
    text: 'apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: blue\n',
    errors: ['f.yaml:1:1: document 1 (CiliumLoadBalancerIPPool "blue"): spec: required'],
  },
  {
    name: 'allowFirstLastIPs: unquoted No is a YAML boolean',
    text: POOL('  blocks: []\n  allowFirstLastIPs: No\n'),
    errors: [
      'f.yaml:7:22: document 1 (CiliumLoadBalancerIPPool "blue"): spec.allowFirstLastIPs: invalid value boolean false: expected "Yes" or "No" (quote the value: unquoted Yes/No/On/Off are booleans in YAML)',
    ],
  },
  {
    name: 'wrong type for a boolean',
    text: POOL('  blocks: []\n  disabled: "false"\n'),
    errors: [
      'f.yaml:7:13: document 1 (CiliumLoadBalancerIPPool "blue"): spec.disabled: expected a boolean (true or false), got string "false"',
    ],
  },
  {
    name: 'bad selector operator',
    text: POOL('  blocks: []\n  serviceSelector:\n    matchExpressions:\n    - {key: color, operator: Equals, values: [blue]}\n'),
    errors: [
      'f.yaml:9:30: document 1 (CiliumLoadBalancerIPPool "blue"): spec.serviceSelector.matchExpressions[0].operator: invalid value "Equals": expected "In", "NotIn", "Exists" or "DoesNotExist"',
    ],
  },
  {
    name: 'In with no values, NotIn with an empty list, Exists with values',
    text: POLICY(
      '  loadBalancerIPs: true\n  nodeSelector:\n    matchExpressions:\n    - key: zone\n      operator: In\n    - {key: zone, operator: NotIn, values: []}\n    - {key: gpu, operator: Exists, values: ["yes"]}\n',
    ),
    errors: [
      'f.yaml:9:7: document 1 (CiliumL2AnnouncementPolicy "p1"): spec.nodeSelector.matchExpressions[0].values: operator In needs at least one value',
      'f.yaml:11:36: document 1 (CiliumL2AnnouncementPolicy "p1"): spec.nodeSelector.matchExpressions[1].values: operator NotIn needs at least one value',
      'f.yaml:12:36: document 1 (CiliumL2AnnouncementPolicy "p1"): spec.nodeSelector.matchExpressions[2].values: operator Exists must not have values',
    ],
  },
  {
    name: 'bad label value, bad label key (reported on the entry\'s line)',
    text: POOL('  blocks: []\n  serviceSelector:\n    matchLabels:\n      color: "blue green"\n      example.com/: x\n'),
    errors: [
      `f.yaml:9:14: document 1 (CiliumLoadBalancerIPPool "blue"): spec.serviceSelector.matchLabels.color: invalid label value "blue green": must be empty or consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`,
      `f.yaml:10:21: document 1 (CiliumLoadBalancerIPPool "blue"): spec.serviceSelector.matchLabels["example.com/"]: invalid label key "example.com/": the name part must not be empty`,
    ],
  },
  {
    name: 'label value longer than 63 characters, in metadata.labels',
    text: `apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels:\n    rack: ${'r'.repeat(64)}\n`,
    errors: [`f.yaml:6:11: document 1 (Node "n1"): metadata.labels.rack: invalid label value "${'r'.repeat(64)}": must be at most 63 characters`],
  },
  {
    name: 'bad interface regex',
    text: POLICY('  loadBalancerIPs: true\n  interfaces:\n  - ^eth[0-9]+\n  - "eth[0-9"\n  - ^(bond)\\1$\n'),
    errors: [
      'f.yaml:9:5: document 1 (CiliumL2AnnouncementPolicy "p1"): spec.interfaces[1]: invalid interface regex "eth[0-9": unterminated character class',
      'f.yaml:10:5: document 1 (CiliumL2AnnouncementPolicy "p1"): spec.interfaces[2]: invalid interface regex "^(bond)\\\\1$": backreferences are not supported by RE2',
    ],
  },
  {
    name: 'bad ports: out of range, not an integer, bad protocol, duplicate',
    text: SVC(
      '  ports:\n  - {name: a, port: 0}\n  - {name: b, port: 70000}\n  - {name: c, port: 80.5}\n  - {name: d, port: 53, protocol: ICMP}\n  - {name: e, port: 443, targetPort: 0}\n',
    ),
    errors: [
      'f.yaml:7:21: document 1 (Service "default/web"): spec.ports[0].port: must be at least 1, got 0',
      'f.yaml:8:21: document 1 (Service "default/web"): spec.ports[1].port: must be at most 65535, got 70000',
      'f.yaml:9:21: document 1 (Service "default/web"): spec.ports[2].port: expected an integer, got number 80.5',
      'f.yaml:10:35: document 1 (Service "default/web"): spec.ports[3].protocol: invalid value "ICMP": expected "TCP", "UDP" or "SCTP"',
      'f.yaml:11:38: document 1 (Service "default/web"): spec.ports[4].targetPort: must be between 1 and 65535, got 0',
    ],
  },
  {
    name: 'bad targetPort name and type',
    text: SVC('  ports:\n  - {name: a, port: 80, targetPort: Web_Port}\n  - {name: b, port: 81, targetPort: [1]}\n'),
    errors: [
      `f.yaml:7:37: document 1 (Service "default/web"): spec.ports[0].targetPort: invalid port name "Web_Port": must be at most 15 lowercase letters, digits and single '-', with at least one letter`,
      'f.yaml:8:25: document 1 (Service "default/web"): spec.ports[1].targetPort: expected a port number or name, got a list',
    ],
  },
  {
    name: 'duplicate port and unnamed ports in a multi-port Service',
    text: SVC('  ports:\n  - {name: http, port: 80}\n  - {name: http, port: 80}\n  - {port: 443}\n'),
    errors: [
      'f.yaml:8:12: document 1 (Service "default/web"): spec.ports[1].name: duplicate port name "http" (also ports[0])',
      'f.yaml:8:24: document 1 (Service "default/web"): spec.ports[1].port: duplicate port 80/TCP (also ports[0])',
      'f.yaml:9:5: document 1 (Service "default/web"): spec.ports[2].name: required when a Service has more than one port',
    ],
  },
  {
    name: 'bad ipFamilies: unknown family, too many',
    text: SVC('  ipFamilies: [IPv4, IPv6, IPv4]\n  ports: [{port: 80}]\n---\n' + SVC('  ipFamilies: [IPv5]\n  ports: [{port: 80}]\n', '  name: api\n')),
    errors: [
      'f.yaml:6:3: document 1 (Service "default/web"): spec.ipFamilies: must have at most 2 item(s), got 3',
      'f.yaml:14:16: document 2 (Service "default/api"): spec.ipFamilies[0]: invalid value "IPv5": expected "IPv4" or "IPv6"',
    ],
  },
  {
    name: 'bad ipFamilies: duplicate family, two families with SingleStack',
    text: SVC('  ipFamilies: [IPv6, IPv6]\n  ports: [{port: 80}]\n---\n' + SVC('  ipFamilies: [IPv4, IPv6]\n  ipFamilyPolicy: SingleStack\n  ports: [{port: 80}]\n', '  name: api\n')),
    errors: [
      'f.yaml:6:22: document 1 (Service "default/web"): spec.ipFamilies[1]: duplicate family "IPv6"',
      'f.yaml:14:3: document 2 (Service "default/api"): spec.ipFamilies: SingleStack allows only one family',
    ],
  },
  {
    name: 'bad externalTrafficPolicy and type',
    text: SVC('  type: Loadbalancer\n  externalTrafficPolicy: Global\n  ports: [{port: 80}]\n'),
    errors: [
      'f.yaml:6:9: document 1 (Service "default/web"): spec.type: invalid value "Loadbalancer": expected "ClusterIP", "NodePort", "LoadBalancer" or "ExternalName"',
      'f.yaml:7:26: document 1 (Service "default/web"): spec.externalTrafficPolicy: invalid value "Global": expected "Cluster" or "Local"',
    ],
  },
  {
    name: 'bad annotation IP (current name and old alias)',
    text:
      SVC('  ports: [{port: 80}]\n', '  name: web\n  annotations:\n    lbipam.cilium.io/ips: "203.0.113.5,203.0.113.500"\n') +
      '---\n' +
      SVC('  ports: [{port: 80}]\n', '  name: api\n  annotations:\n    io.cilium/lb-ipam-ips: "2001:db8::g"\n'),
    errors: [
      'f.yaml:6:27: document 1 (Service "default/web"): metadata.annotations["lbipam.cilium.io/ips"]: invalid IP address "203.0.113.500"',
      'f.yaml:15:28: document 2 (Service "default/api"): metadata.annotations["io.cilium/lb-ipam-ips"]: invalid IP address "2001:db8::g"',
    ],
  },
  {
    name: 'bad sharing-cross-namespace entry',
    text: SVC('  ports: [{port: 80}]\n', '  name: web\n  annotations:\n    lbipam.cilium.io/sharing-cross-namespace: "shop, Tenant_B"\n'),
    errors: [
      `f.yaml:6:47: document 1 (Service "default/web"): metadata.annotations["lbipam.cilium.io/sharing-cross-namespace"]: invalid namespace "Tenant_B": must be an RFC 1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)`,
    ],
  },
  {
    name: 'bad status ingress IP and condition status',
    text: SVC('  ports: [{port: 80}]\n') + 'status:\n  loadBalancer:\n    ingress:\n    - ip: 203.0.113.300\n  conditions:\n  - {type: x, status: Yes}\n',
    errors: [
      'f.yaml:10:11: document 1 (Service "default/web"): status.loadBalancer.ingress[0].ip: invalid IP address "203.0.113.300"',
      'f.yaml:12:23: document 1 (Service "default/web"): status.conditions[0].status: invalid value boolean true: expected "True", "False" or "Unknown" (quote the value: unquoted Yes/No/On/Off are booleans in YAML)',
    ],
  },
  {
    name: 'duplicate object in one file names both places',
    text: `${POOL('  blocks: []\n')}\n---\n${POOL('  blocks: []\n')}\n`,
    errors: [
      'f.yaml:12:9: document 2 (CiliumLoadBalancerIPPool "blue"): metadata.name: duplicate CiliumLoadBalancerIPPool "blue": already defined in f.yaml document 1 (line 1)',
    ],
  },
  {
    name: 'v2 and v2alpha1 pools of one name are the same object',
    text: `${POOL('  blocks: []\n')}\n---\n${POOL('  blocks: []\n', 'blue', 'cilium.io/v2alpha1')}\n`,
    errors: [
      'f.yaml:12:9: document 2 (CiliumLoadBalancerIPPool "blue"): metadata.name: duplicate CiliumLoadBalancerIPPool "blue": already defined in f.yaml document 1 (line 1)',
    ],
  },
  {
    name: 'errors in List items are addressed as document and item',
    text: 'apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: ok}\n- apiVersion: v1\n  kind: Node\n  metadata: {name: Bad_Node}\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n',
    errors: [
      `f.yaml:9:20: document 1, item 2 (Node "Bad_Node"): metadata.name: invalid name "Bad_Node": must be an RFC 1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)`,
    ],
  },
  {
    name: 'a List whose items is not a list (a typed list of a kind herald does not read is ignored)',
    text: 'apiVersion: v1\nkind: List\nitems: {}\n---\napiVersion: apps/v1\nkind: DeploymentList\nitems: []\n',
    errors: [
      'f.yaml:3:1: document 1 (List): items: expected a list, got a mapping',
    ],
  },
  {
    name: 'a List without items; a List inside a List',
    text: 'apiVersion: v1\nkind: ServiceList\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: []}\n',
    errors: [
      'f.yaml:1:1: document 1 (ServiceList): items: required',
      'f.yaml:7:26: document 2, item 1: kind: a List item cannot be a List',
    ],
  },
];

describe('bad manifests: exact error text', () => {
  for (const c of cases) {
    it(c.name, () => {
      const load = parseManifests(c.text, 'f.yaml');
      assert.deepEqual(formatErrors(load.errors).split('\n'), [...c.errors]);
      assert.equal(load.snapshot, undefined);
    });
  }
});

describe('error collection', () => {
  it('collects every error of every document, not just the first', () => {
    const text = cases.map((c) => c.text).join('\n---\n');
    const load = parseManifests(text, 'f.yaml');
    // Line and document numbers shift; everything after them must be there.
    const rest = (line: string): string =>
      line.replace(/^f\.yaml:\d+:\d+: document \d+(, item \d+)?/, '').replace(/\(first at line \d+\)/, '(first at line N)');
    const got = new Set(formatErrors(load.errors).split('\n').map(rest));
    for (const c of cases) for (const e of c.errors) assert.ok(got.has(rest(e)), `missing: ${e}`);
  });

  it('structured fields match the printed numbers', () => {
    const load = parseManifests(`---\n${POOL('  blocks:\n  - cidr: "10.0.0.300/24"\n')}`, 'pools.yaml');
    assert.equal(load.errors.length, 1);
    const e = load.errors[0];
    assert.deepEqual(
      { ...e },
      {
        severity: 'error',
        file: 'pools.yaml',
        document: 1,
        line: 8,
        column: 11,
        object: { kind: 'CiliumLoadBalancerIPPool', name: 'blue' },
        path: 'spec.blocks[0].cidr',
        message: 'invalid CIDR "10.0.0.300/24": "10.0.0.300" is not an IP address',
      },
    );
  });

  it('a range whose stop equals start is one address, not an error', () => {
    const load = parseManifests(POOL('  blocks:\n  - start: 192.0.2.10\n    stop: 192.0.2.10\n'), 'f.yaml');
    assert.deepEqual(load.errors, []);
    assert.equal(load.objects.length, 1);
  });

  it('valid documents still load next to broken ones', () => {
    const text = `${POOL('  blocks: [{cidr: 192.0.2.0/24}]\n', 'good')}\n---\n${POOL('  blocks: [{cidr: bad}]\n', 'bad')}\n`;
    const load = parseManifests(text, 'f.yaml');
    assert.equal(load.errors.length, 1);
    assert.deepEqual(
      load.objects.map((o) => o.metadata.name),
      ['good'],
    );
  });
});
