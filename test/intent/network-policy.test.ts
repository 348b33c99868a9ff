/**
 * Service traffic policy intent (issue 13): CiliumNetworkPolicy,
 * CiliumClusterwideNetworkPolicy and Service.loadBalancerSourceRanges, read
 * through the manifest parser: coded errors naming file, object and field
 * (nothing applied), warnings for every field herald does not enforce.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatErrors } from '../../src/intent/diagnostics.js';
import { parseManifests } from '../../src/intent/parse.js';
import { missingCidrGroups, ruleSetsFromSnapshot } from '../../src/controlplane/policy/intake.js';
import { formatPrefix } from '../../src/controlplane/policy/model.js';

const CNP = (spec: string, kind = 'CiliumNetworkPolicy') =>
  `apiVersion: cilium.io/v2\nkind: ${kind}\nmetadata:\n  name: web-in\n  namespace: shop\nspec:\n  endpointSelector:\n    matchLabels:\n      app: web\n${spec}`;

const NP = (spec: string) => `apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web-in\n  namespace: shop\nspec:\n  podSelector:\n    matchLabels: {app: web}\n${spec}`;

function load(text: string) {
  return parseManifests(text, 'p.yaml');
}

describe('policy kinds are read (no longer ignored)', () => {
  it('a CNP with fromCIDR, fromCIDRSet+except, toPorts becomes rules', () => {
    const r = load(
      CNP(`  ingress:
  - fromCIDR: [192.0.2.0/24]
    fromCIDRSet:
    - cidr: 2001:db8::/32
      except: [2001:db8:1::/48]
    toPorts:
    - ports:
      - port: "80"
        protocol: TCP
      - port: "8000"
        endPort: 8080
  ingressDeny:
  - fromCIDR: [192.0.2.128/25]
`),
    );
    assert.deepEqual(formatErrors(r.errors), '');
    assert.equal(r.ignored.length, 0);
    const sets = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(sets.length, 1);
    assert.equal(sets[0]!.key, 'CiliumNetworkPolicy/shop/web-in');
    const [deny, allow] = sets[0]!.rules;
    assert.equal(deny!.verdict, 'deny');
    assert.deepEqual(deny!.peers.map((b) => formatPrefix(b.cidr)), ['192.0.2.128/25']);
    assert.equal(deny!.ports, undefined);
    assert.equal(allow!.verdict, 'allow');
    assert.deepEqual(allow!.peers.map((b) => [formatPrefix(b.cidr), b.except.map(formatPrefix)]), [
      ['192.0.2.0/24', []],
      ['2001:db8::/32', ['2001:db8:1::/48']],
    ]);
    // port 80/TCP, and 8000-8080 on ANY = TCP, UDP, SCTP
    assert.deepEqual(allow!.ports, [
      { proto: 6, lo: 80, hi: 80 },
      { proto: 6, lo: 8000, hi: 8080 },
      { proto: 17, lo: 8000, hi: 8080 },
      { proto: 132, lo: 8000, hi: 8080 },
    ]);
    assert.deepEqual(allow!.selection, { kind: 'labels', namespace: 'shop', selector: { matchLabels: { app: 'web' }, matchExpressions: [] } });
  });

  it('icmps: types by number or Cilium name, per family, become ICMP / ICMPv6 type ranges', () => {
    const r = load(
      CNP(`  ingress:
  - fromCIDR: [192.0.2.0/24]
    icmps:
    - fields:
      - type: EchoRequest
      - type: "3"
        family: IPv4
      - type: EchoRequest
        family: IPv6
      - type: 2
        family: IPv6
`),
    );
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(r.warnings.map((w) => w.message), []);
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.deepEqual(set!.rules[0]!.ports, [
      { proto: 1, lo: 8, hi: 8 },
      { proto: 1, lo: 3, hi: 3 },
      { proto: 58, lo: 128, hi: 128 },
      { proto: 58, lo: 2, hi: 2 },
    ]);
  });

  it('named ports are kept by name (CNP toPorts with ANY, NetworkPolicy ports), beside the numeric ones', () => {
    const r = load(CNP(`  ingress:
  - toPorts: [{ports: [{port: http}, {port: "9090", protocol: TCP}]}]
`));
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(r.warnings, []);
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.deepEqual(set!.rules[0]!.ports, [{ proto: 6, lo: 9090, hi: 9090 }]);
    assert.deepEqual(set!.rules[0]!.namedPorts, [{ proto: 6, name: 'http' }, { proto: 17, name: 'http' }, { proto: 132, name: 'http' }]);
    const k = load(NP('  ingress:\n  - ports: [{port: dns, protocol: UDP}, {port: "53"}]\n'));
    assert.equal(formatErrors(k.errors), '');
    const rules = ruleSetsFromSnapshot(k.snapshot!)[0]!.rules;
    assert.deepEqual(rules[1]!.namedPorts, [{ proto: 17, name: 'dns' }]);
    assert.deepEqual(rules[1]!.ports, [{ proto: 6, lo: 53, hi: 53 }]);
  });

  it('fromCIDRSet cidrGroupRef / cidrGroupSelector resolve to the CiliumCIDRGroups\' CIDRs, each with the excepts inside it; a missing group adds nothing', () => {
    const groups = `apiVersion: cilium.io/v2alpha1
kind: CiliumCIDRGroup
metadata: {name: office, labels: {site: hq}}
spec:
  externalCIDRs: [192.0.2.0/29, "2001:db8::/120"]
---
apiVersion: cilium.io/v2
kind: CiliumCIDRGroup
metadata: {name: vpn, labels: {site: hq}}
spec:
  externalCIDRs: [203.0.113.0/24]
---
`;
    const r = load(
      groups +
        CNP(`  ingress:
  - fromCIDRSet:
    - cidrGroupRef: office
      except: [192.0.2.5/32]
    - cidrGroupRef: missing
  - fromCIDRSet:
    - cidrGroupSelector: {matchLabels: {site: hq}}
  - fromCIDRSet:
    - cidrGroupRef: missing
`),
    );
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(r.warnings, []);
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    const peers = set!.rules.map((x) => x.peers.map((b) => [formatPrefix(b.cidr), b.except.map(formatPrefix)]));
    assert.deepEqual(peers, [
      [['192.0.2.0/29', ['192.0.2.5/32']], ['2001:db8::/120', []]],
      [['192.0.2.0/29', []], ['2001:db8::/120', []], ['203.0.113.0/24', []]],
    ], 'the rule naming only a missing group has no sources: it allows nothing and is left out');
  });

  it('a cidrGroupRef naming a CiliumCIDRGroup that does not exist is reported with policy, rule and group (the rule goes without it, as Cilium)', () => {
    const group = 'apiVersion: cilium.io/v2alpha1\nkind: CiliumCIDRGroup\nmetadata: {name: office, labels: {site: hq}}\nspec:\n  externalCIDRs: [192.0.2.0/29]\n---\n';
    const r = load(group + CNP('  ingress:\n  - fromCIDRSet: [{cidrGroupRef: office}, {cidrGroupRef: vpn}]\n  ingressDeny:\n  - fromCIDRSet: [{cidrGroupSelector: {matchLabels: {site: branch}}}]\n  - fromCIDRSet: [{cidrGroupSelector: {matchLabels: {site: hq}}}]\n'));
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(
      missingCidrGroups(r.snapshot!).map((w) => [w.policy, w.message]),
      [
        ['CiliumNetworkPolicy shop/web-in', 'spec.ingress[0].fromCIDRSet[1].cidrGroupRef: CiliumCIDRGroup "vpn" does not exist: this rule allows from none of its CIDRs until it is created (as Cilium)'],
        ['CiliumNetworkPolicy shop/web-in', 'spec.ingressDeny[0].fromCIDRSet[0].cidrGroupSelector: selects no CiliumCIDRGroup ({"matchLabels":{"site":"branch"},"matchExpressions":[]}): this deny rule denies none of its CIDRs until one is created (as Cilium)'],
      ],
    );
    // Once the group exists, nothing is reported.
    const ok = load(group + 'apiVersion: cilium.io/v2alpha1\nkind: CiliumCIDRGroup\nmetadata: {name: vpn}\nspec:\n  externalCIDRs: [203.0.113.0/24]\n---\n' + CNP('  ingress:\n  - fromCIDRSet: [{cidrGroupRef: office}, {cidrGroupRef: vpn}]\n'));
    assert.deepEqual(missingCidrGroups(ok.snapshot!), []);
  });

  it('enableDefaultDeny: {ingress: false} marks the rules (the service is not default deny through them); true selects even without ingress rules; egress is reported as not policed', () => {
    const off = load(CNP('  enableDefaultDeny: {ingress: false, egress: false}\n  ingress:\n  - fromCIDR: [192.0.2.0/24]\n  ingressDeny:\n  - fromCIDR: [192.0.2.128/25]\n'));
    assert.equal(formatErrors(off.errors), '');
    assert.deepEqual(off.warnings.map((w) => [w.path, w.message]), [['spec.enableDefaultDeny.egress', 'ignored by herald (herald polices ingress to service IPs only)']]);
    const rules = ruleSetsFromSnapshot(off.snapshot!)[0]!.rules;
    assert.deepEqual(rules.map((x) => [x.verdict, x.defaultDeny]), [['deny', false], ['allow', false]]);
    // Only a switch, no rules: nothing selected (as a spec without ingress rules).
    assert.deepEqual(ruleSetsFromSnapshot(load(CNP('  enableDefaultDeny: {ingress: false}\n  ingress: []\n')).snapshot!)[0]!.rules, []);
    // ingress: true with no ingress rule selects its services into default deny (Cilium).
    const on = ruleSetsFromSnapshot(load(CNP('  enableDefaultDeny: {ingress: true}\n')).snapshot!)[0]!.rules;
    assert.equal(on.length, 1);
    assert.deepEqual(on[0]!.peers, []);
    assert.equal(on[0]!.defaultDeny, undefined);
  });

  it('an ingress section whose rules name no source herald sees still selects (default deny), as in Cilium', () => {
    const r = load(CNP('  ingress:\n  - fromCIDRSet: [{cidrGroupRef: missing}]\n  - fromEndpoints: [{matchLabels: {app: client}}]\n'));
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(set!.rules.length, 1);
    assert.deepEqual(set!.rules[0]!.peers, []);
    assert.match(set!.rules[0]!.origin, /selects: default deny/);
  });

  it('a CIDR group with a bad CIDR, and a CIDR rule naming two sources, are coded errors', () => {
    const g = load('apiVersion: cilium.io/v2alpha1\nkind: CiliumCIDRGroup\nmetadata: {name: office}\nspec:\n  externalCIDRs: [192.0.2.1/24]\n');
    assert.equal(g.errors[0]!.code, 'HERALD_POLICY_INVALID_CIDR');
    assert.equal(g.errors[0]!.path, 'spec.externalCIDRs[0]');
    const c = load(CNP('  ingress:\n  - fromCIDRSet:\n    - cidr: 192.0.2.0/24\n      cidrGroupRef: office\n'));
    assert.match(formatErrors(c.errors), /HERALD_POLICY_INVALID_CIDR: spec.ingress\[0\].fromCIDRSet\[0\].cidr: only one of cidr, cidrGroupRef, cidrGroupSelector/);
    for (const x of [g, c]) assert.equal(x.snapshot, undefined);
  });

  it('a CCNP selects across namespaces; specs[] is read; an ingress rule with only toPorts allows from everywhere', () => {
    const r = load(`apiVersion: cilium.io/v2
kind: CiliumClusterwideNetworkPolicy
metadata:
  name: dns
specs:
- endpointSelector: {matchLabels: {"k8s:role": dns}}
  ingress:
  - toPorts: [{ports: [{port: "53", protocol: UDP}]}]
`);
    assert.equal(formatErrors(r.errors), '');
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(set!.key, 'CiliumClusterwideNetworkPolicy/dns');
    assert.deepEqual(set!.rules[0]!.peers.map((b) => formatPrefix(b.cidr)), ['0.0.0.0/0', '::/0']);
    assert.equal((set!.rules[0]!.selection as { namespace?: string }).namespace, undefined);
  });
});

describe('bad policies: coded errors naming file, object and field; nothing applied', () => {
  const cases: [string, string, string][] = [
    ['invalid CIDR', '  ingress:\n  - fromCIDR: [192.0.2.0/33]\n', 'p.yaml:11:16: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_INVALID_CIDR: spec.ingress[0].fromCIDR[0]: invalid CIDR "192.0.2.0/33": prefix length must be 0-32'],
    ['host bits set', '  ingress:\n  - fromCIDR: [192.0.2.1/24]\n', 'p.yaml:11:16: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_INVALID_CIDR: spec.ingress[0].fromCIDR[0]: invalid CIDR "192.0.2.1/24": host bits are set (did you mean "192.0.2.0/24"?)'],
    ['except outside cidr', '  ingressDeny:\n  - fromCIDRSet:\n    - cidr: 192.0.2.0/24\n      except: [198.51.100.0/28]\n', 'p.yaml:13:16: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_EXCEPT_OUTSIDE_CIDR: spec.ingressDeny[0].fromCIDRSet[0].except[0]: except "198.51.100.0/28" is not inside cidr "192.0.2.0/24"'],
    ['except of another family', '  ingress:\n  - fromCIDRSet:\n    - cidr: 0.0.0.0/0\n      except: ["2001:db8::/32"]\n', 'p.yaml:13:16: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_EXCEPT_OUTSIDE_CIDR: spec.ingress[0].fromCIDRSet[0].except[0]: except "2001:db8::/32" is not inside cidr "0.0.0.0/0"'],
    ['unknown protocol', '  ingress:\n  - toPorts:\n    - ports:\n      - port: "80"\n        protocol: ICMP\n', 'p.yaml:14:19: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_UNKNOWN_PROTOCOL: spec.ingress[0].toPorts[0].ports[0].protocol: unknown protocol "ICMP": expected TCP, UDP, SCTP or ANY'],
    ['port out of range', '  ingress:\n  - toPorts:\n    - ports:\n      - port: "70000"\n', 'p.yaml:13:15: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_PORT_RANGE: spec.ingress[0].toPorts[0].ports[0].port: port 70000 is out of range 0-65535'],
    ['endPort below port', '  ingress:\n  - toPorts:\n    - ports:\n      - port: "8080"\n        endPort: 8000\n', 'p.yaml:14:18: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_PORT_RANGE: spec.ingress[0].toPorts[0].ports[0].endPort: endPort 8000 is below port 8080'],
    ['invalid port name', '  ingress:\n  - toPorts:\n    - ports:\n      - port: Http_1\n', 'p.yaml:13:15: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_NAMED_PORT: spec.ingress[0].toPorts[0].ports[0].port: invalid port name "Http_1": must be at most 15 lowercase letters, digits and single \'-\', with at least one letter'],
    ['named port with endPort', '  ingress:\n  - toPorts:\n    - ports:\n      - port: http\n        endPort: 90\n', 'p.yaml:14:18: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_NAMED_PORT: spec.ingress[0].toPorts[0].ports[0].endPort: endPort needs a numeric port'],
    ['unknown ICMP type name', '  ingress:\n  - icmps:\n    - fields:\n      - type: EchoRequest\n        family: IPv4\n      - type: Ping\n', 'p.yaml:15:15: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_ICMP_TYPE: spec.ingress[0].icmps[0].fields[1].type: unknown IPv4 ICMP type "Ping": a number 0-255 or one of Cilium\'s names (EchoReply, DestinationUnreachable, Redirect, Echo …)'],
    ['ICMP type out of range', '  ingress:\n  - icmps:\n    - fields:\n      - type: 256\n', 'p.yaml:13:15: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_ICMP_TYPE: spec.ingress[0].icmps[0].fields[0].type: ICMP type 256 is out of range 0-255'],
    ['ICMP family', '  ingress:\n  - icmps:\n    - fields:\n      - type: 8\n        family: IPv5\n', 'p.yaml:14:17: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_ICMP_TYPE: spec.ingress[0].icmps[0].fields[0].family: unknown ICMP family "IPv5": expected IPv4 or IPv6'],
    ['icmps with toPorts', '  ingress:\n  - icmps: [{fields: [{type: 8}]}]\n    toPorts: [{ports: [{port: "80"}]}]\n', 'p.yaml:11:5: document 1 (CiliumNetworkPolicy "shop/web-in"): HERALD_POLICY_ICMP_WITH_PORTS: spec.ingress[0].icmps: the icmps block may only be present without toPorts (as Cilium): write a separate rule for the ports'],
  ];
  for (const [name, spec, expected] of cases) {
    it(name, () => {
      const r = load(CNP(spec));
      assert.equal(formatErrors(r.errors), expected);
      assert.equal(r.snapshot, undefined, 'nothing applied');
      assert.ok(r.errors[0]!.code?.startsWith('HERALD_POLICY_'));
    });
  }

  it('a rule without endpointSelector (or nodeSelector) is refused', () => {
    const r = load('apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: x\nspec:\n  ingress: [{}]\n');
    assert.match(formatErrors(r.errors), /HERALD_POLICY_NO_SELECTOR: spec.endpointSelector: required/);
  });
});

describe('fields herald does not enforce are warnings, never dropped silently', () => {
  it('egress, fromEndpoints, L7 rules, non-world entities', () => {
    const r = load(
      CNP(`  egress:
  - toCIDR: [192.0.2.0/24]
  ingress:
  - fromEndpoints: [{matchLabels: {app: client}}]
    fromEntities: [cluster]
  - fromCIDR: [192.0.2.0/24]
    toPorts:
    - ports: [{port: "80", protocol: TCP}]
      rules: {http: [{method: GET}]}
`),
    );
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(
      r.warnings.map((w) => `${w.path}: ${w.message}`),
      [
        'spec.egress: ignored by herald (it polices traffic to service IPs: ingress and ingressDeny only)',
        'spec.ingress[0].fromEndpoints: ignored by herald (only source CIDRs and ports apply to service traffic: this rule allows less than written)',
        'spec.ingress[0].fromEntities[0]: entity "cluster" ignored by herald (only "world" and "all" name sources of service traffic): this rule allows less than written',
        'spec.ingress[1].toPorts[0].rules: ignored by herald (L7 rules and SNI are not enforced: the ports apply at L4)',
      ],
    );
    // The rule with only unsupported peers contributes nothing; the other one is kept.
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(set!.rules.length, 1);
    assert.equal(set!.rules[0]!.origin, 'CiliumNetworkPolicy shop/web-in spec.ingress[1]');
  });

  it('icmps entries that name no type: a warning that the rule matches no packet (as Cilium), and the rule contributes nothing', () => {
    const r = load(CNP('  ingress:\n  - fromCIDR: [192.0.2.0/24]\n    icmps: [{}]\n  ingressDeny:\n  - fromCIDR: [198.51.100.0/24]\n    icmps: [{fields: []}]\n  - fromCIDR: [203.0.113.0/24]\n    icmps: [{}, {fields: [{type: 8}]}]\n'));
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(
      r.warnings.map((w) => `${w.path}: ${w.message}`),
      [
        'spec.ingress[0].icmps: no ICMP entry names a type: this rule matches no packet (as Cilium), it allows nothing',
        'spec.ingressDeny[0].icmps: no ICMP entry names a type: this rule matches no packet (as Cilium), it denies nothing',
      ],
    );
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.deepEqual(set!.rules.map((x) => x.origin), ['CiliumNetworkPolicy shop/web-in spec.ingressDeny[1]']);
  });
});

describe('Service.loadBalancerSourceRanges and its annotation', () => {
  const SVC = (extra: string, annotations = '') =>
    `apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: shop\n${annotations}spec:\n  type: LoadBalancer\n${extra}`;

  it('the field becomes allow-from-ranges plus deny-from-the-rest', () => {
    const r = load(SVC('  loadBalancerSourceRanges: [192.0.2.0/24, "2001:db8::/48"]\n'));
    assert.equal(formatErrors(r.errors), '');
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(set!.key, 'Service/shop/web');
    const [deny, allow] = set!.rules;
    assert.deepEqual(deny!.peers.map((b) => [formatPrefix(b.cidr), b.except.map(formatPrefix)]), [
      ['0.0.0.0/0', ['192.0.2.0/24']],
      ['::/0', ['2001:db8::/48']],
    ]);
    assert.deepEqual(allow!.peers.map((b) => formatPrefix(b.cidr)), ['192.0.2.0/24', '2001:db8::/48']);
  });

  it('the annotation is read when the field is empty; host bits are masked with a warning (as Kubernetes)', () => {
    const r = load(SVC('', '  annotations:\n    service.beta.kubernetes.io/load-balancer-source-ranges: "198.51.100.7/24, 203.0.113.0/25"\n'));
    assert.equal(formatErrors(r.errors), '');
    assert.deepEqual(r.warnings.map((w) => w.message), ['"198.51.100.7/24" has host bits set; read as "198.51.100.0/24"']);
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.deepEqual(set!.rules[1]!.peers.map((b) => formatPrefix(b.cidr)), ['198.51.100.0/24', '203.0.113.0/25']);
  });

  it('an invalid range is a coded error naming the field', () => {
    const r = load(SVC('  loadBalancerSourceRanges: [192.0.2.0/24, bogus]\n'));
    assert.match(formatErrors(r.errors), /\(Service "shop\/web"\): HERALD_POLICY_INVALID_CIDR: spec.loadBalancerSourceRanges\[1\]: invalid CIDR "bogus": missing "\/prefix-length"/);
    assert.equal(r.snapshot, undefined);
  });

  it('a service without ranges contributes no rules (open)', () => {
    const r = load(SVC(''));
    assert.deepEqual(ruleSetsFromSnapshot(r.snapshot!), []);
  });
});

describe('Kubernetes NetworkPolicy: ipBlock where it maps cleanly', () => {

  it('ipBlock with except and ports become an allow rule; the policy itself selects (default deny)', () => {
    const r = load(NP('  ingress:\n  - from:\n    - ipBlock: {cidr: 192.0.2.0/24, except: [192.0.2.0/28]}\n    ports:\n    - {protocol: UDP, port: 53}\n    - {port: 8000, endPort: 8080}\n'));
    assert.equal(formatErrors(r.errors), '');
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(set!.key, 'NetworkPolicy/shop/web-in');
    const [selects, allow] = set!.rules;
    assert.deepEqual(selects!.peers, []);
    assert.deepEqual(allow!.peers.map((b) => [formatPrefix(b.cidr), b.except.map(formatPrefix)]), [['192.0.2.0/24', ['192.0.2.0/28']]]);
    assert.deepEqual(allow!.ports, [{ proto: 17, lo: 53, hi: 53 }, { proto: 6, lo: 8000, hi: 8080 }]);
  });

  it('policyTypes [Ingress] with no ingress rule: selected, nothing allowed', () => {
    const r = load(NP('  policyTypes: [Ingress]\n'));
    const [set] = ruleSetsFromSnapshot(r.snapshot!);
    assert.equal(set!.rules.length, 1);
    assert.deepEqual(set!.rules[0]!.peers, []);
  });

  it('an egress-only policy has no effect (warned); pod/namespace peers are warned', () => {
    const r = load(NP('  policyTypes: [Egress]\n  egress: [{}]\n'));
    assert.deepEqual(r.warnings.map((w) => `${w.path}: ${w.message}`), [
      'spec.policyTypes: no Ingress: this policy has no effect in herald',
      'spec.egress: ignored by herald (it polices traffic to service IPs: ingress only)',
    ]);
    assert.deepEqual(ruleSetsFromSnapshot(r.snapshot!)[0]!.rules, []);
    const q = load(NP('  ingress:\n  - from:\n    - podSelector: {matchLabels: {role: client}}\n'));
    assert.deepEqual(q.warnings.map((w) => w.path), ['spec.ingress[0].from[0].podSelector']);
    assert.equal(ruleSetsFromSnapshot(q.snapshot!)[0]!.rules.length, 1, 'only the selecting rule: default deny');
  });

  it('bad ipBlock and ports: coded errors', () => {
    const a = load(NP('  ingress:\n  - from:\n    - ipBlock: {cidr: 192.0.2.0/24, except: [198.51.100.0/24]}\n'));
    assert.equal(a.errors[0]!.code, 'HERALD_POLICY_EXCEPT_OUTSIDE_CIDR');
    assert.equal(a.errors[0]!.path, 'spec.ingress[0].from[0].ipBlock.except[0]');
    const b = load(NP('  ingress:\n  - ports: [{port: -http}]\n'));
    assert.equal(b.errors[0]!.code, 'HERALD_POLICY_NAMED_PORT');
    const c = load(NP('  ingress:\n  - ports: [{protocol: ICMP, port: 1}]\n'));
    assert.equal(c.errors[0]!.code, 'HERALD_POLICY_UNKNOWN_PROTOCOL');
    const d = load(NP('  ingress:\n  - ports: [{port: 9000, endPort: 8000}]\n'));
    assert.equal(d.errors[0]!.code, 'HERALD_POLICY_PORT_RANGE');
    for (const x of [a, b, c, d]) assert.equal(x.snapshot, undefined);
  });
});
