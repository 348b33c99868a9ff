/**
 * Policy intake, case by case: what each manifest field becomes in the rule
 * sets the repository holds (peers, ports, selection, origin texts, the
 * default-deny marker), read through the manifest parser as the agent reads
 * them; the cidr-group warnings; and the repository's bookkeeping (ids,
 * keys, revision, rule count).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatErrors } from '../../../src/intent/diagnostics.js';
import { parseManifests } from '../../../src/intent/parse.js';
import type { IntentSnapshot } from '../../../src/intent/snapshot.js';
import type { ServiceManifest } from '../../../src/intent/service.js';
import { missingCidrGroups, ruleSetsFromSnapshot, servicePortsOf, sourceRangeRuleSet, toPrefix, type RuleInput } from '../../../src/controlplane/policy/intake.js';
import { formatPrefix, PROTO } from '../../../src/controlplane/policy/model.js';
import { PolicyRepository } from '../../../src/controlplane/policy/repository.js';

const SELECTOR = { matchLabels: { app: 'web' }, matchExpressions: [] };

/** A CiliumNetworkPolicy shop/web-in selecting app=web, with `spec` lines appended (2-space indented). */
const CNP = (spec: string) => `apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: web-in\n  namespace: shop\nspec:\n  endpointSelector:\n    matchLabels:\n      app: web\n${spec}`;

/** A CiliumClusterwideNetworkPolicy named dns with the given top-level body (spec: / specs:). */
const CCNP = (body: string) => `apiVersion: cilium.io/v2\nkind: CiliumClusterwideNetworkPolicy\nmetadata:\n  name: dns\n${body}`;

const NP = (spec: string) => `apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web-in\n  namespace: shop\nspec:\n  podSelector:\n    matchLabels: {app: web}\n${spec}`;

const GROUP = (name: string, site: string, cidrs: string) =>
  `apiVersion: cilium.io/v2alpha1\nkind: CiliumCIDRGroup\nmetadata: {name: ${name}, labels: {site: ${site}}}\nspec:\n  externalCIDRs: [${cidrs}]\n---\n`;

function snapshot(text: string): IntentSnapshot {
  const r = parseManifests(text, 'p.yaml');
  assert.equal(formatErrors(r.errors), '');
  assert.ok(r.snapshot);
  return r.snapshot;
}

/** The rules of the single rule set the manifests produce. */
function rulesOf(text: string): readonly RuleInput[] {
  const sets = ruleSetsFromSnapshot(snapshot(text));
  assert.equal(sets.length, 1);
  return sets[0]!.rules;
}

const peersText = (r: RuleInput) => r.peers.map((b) => [formatPrefix(b.cidr), b.except.map(formatPrefix)]);

const EVERYWHERE = [
  { cidr: { family: 4, addr: 0n, len: 0 }, except: [] },
  { cidr: { family: 6, addr: 0n, len: 0 }, except: [] },
];

describe('policy intake: sources (peers)', () => {
  it('a rule with no peer field allows from every address of both families, with no excepts', () => {
    const [r] = rulesOf(CNP('  ingress:\n  - toPorts: [{ports: [{port: "80", protocol: TCP}]}]\n'));
    assert.deepEqual(r!.peers, EVERYWHERE);
  });

  it('fromEntities world and all mean every address; added beside the rule\'s CIDRs', () => {
    for (const entity of ['world', 'all']) {
      const [r] = rulesOf(CNP(`  ingress:\n  - fromEntities: [${entity}]\n`));
      assert.deepEqual(r!.peers, EVERYWHERE, entity);
    }
    const [both] = rulesOf(CNP('  ingress:\n  - fromCIDR: [192.0.2.0/24]\n    fromEntities: [cluster, world]\n'));
    assert.deepEqual(peersText(both!), [['192.0.2.0/24', []], ['0.0.0.0/0', []], ['::/0', []]]);
  });

  it('a rule whose only peers herald cannot see (fromEntities cluster, fromRequires, fromNodeSelector) is dropped, not read as "from everywhere"', () => {
    for (const peer of ['fromEntities: [cluster]', 'fromRequires: [{matchLabels: {env: prod}}]', 'fromNodeSelector: [{matchLabels: {role: edge}}]']) {
      const rules = rulesOf(CNP(`  ingress:\n  - ${peer}\n  - fromCIDR: [192.0.2.0/24]\n    toPorts: [{ports: [{port: "80", protocol: TCP}]}]\n`));
      assert.deepEqual(rules.map((r) => [r.origin, peersText(r)]), [['CiliumNetworkPolicy shop/web-in spec.ingress[1]', [['192.0.2.0/24', []]]]], peer);
    }
  });

  it('cidrGroupSelector takes the CIDRs of the matching groups only', () => {
    const [r] = rulesOf(GROUP('office', 'hq', '192.0.2.0/29') + GROUP('branch', 'branch', '198.51.100.0/24') + CNP('  ingress:\n  - fromCIDRSet: [{cidrGroupSelector: {matchLabels: {site: hq}}}]\n'));
    assert.deepEqual(peersText(r!), [['192.0.2.0/29', []]]);
  });

  it('a fromCIDRSet entry naming neither a cidr nor a group (the parser refuses it) contributes no source rather than failing', () => {
    const snap = snapshot(GROUP('office', 'hq', '192.0.2.0/29') + CNP('  ingress:\n  - fromCIDRSet: [{cidrGroupRef: office}]\n'));
    const [cnp] = [...snap.networkPolicies.values()];
    const bare = { ...cnp!, spec: { ...cnp!.spec!, ingress: [{ fromCIDRSet: [{ except: [] }] }] } } as typeof cnp;
    const sets = ruleSetsFromSnapshot({ ...snap, networkPolicies: new Map([['shop/web-in', bare!]]) });
    assert.deepEqual(sets[0]!.rules.map((r) => r.peers), [[]], 'only the default-deny marker of its ingress section');
  });
});

describe('policy intake: ports and ICMP', () => {
  it('numeric ports only: ports, and no namedPorts field', () => {
    const [r] = rulesOf(CNP('  ingress:\n  - toPorts: [{ports: [{port: "443", protocol: TCP}]}]\n'));
    assert.deepEqual(r!.ports, [{ proto: PROTO.TCP, lo: 443, hi: 443 }]);
    assert.ok(!('namedPorts' in r!));
  });

  it('port 0 (or no port) is every port of its protocol', () => {
    const [r] = rulesOf(CNP('  ingress:\n  - toPorts: [{ports: [{port: "0", protocol: UDP}, {protocol: SCTP}]}]\n'));
    assert.deepEqual(r!.ports, [{ proto: PROTO.UDP, lo: 0, hi: 65535 }, { proto: PROTO.SCTP, lo: 0, hi: 65535 }]);
  });

  it('toPorts with no port entry (only L7 parts, or empty) is every port: no ports field, not an empty list that matches nothing', () => {
    for (const tp of ['toPorts: [{}]', 'toPorts: [{rules: {http: [{method: GET}]}}]', 'toPorts: []']) {
      const [r] = rulesOf(CNP(`  ingress:\n  - fromCIDR: [192.0.2.0/24]\n    ${tp}\n`));
      assert.ok(!('ports' in r!), tp);
      assert.ok(!('namedPorts' in r!), tp);
    }
  });

  it('an empty icmps list leaves the rule to its toPorts', () => {
    const [r] = rulesOf(CNP('  ingress:\n  - icmps: []\n    toPorts: [{ports: [{port: "80", protocol: TCP}]}]\n'));
    assert.deepEqual(r!.ports, [{ proto: PROTO.TCP, lo: 80, hi: 80 }]);
  });

  // Not the reading of `toPorts: [{}]`: in Cilium a non-empty icmps list makes the rule an L4 rule
  // (pkg/policy/rule.go: L3-only only when toPorts and icmps are both empty) and each ICMP entry adds one
  // filter per field, so entries without fields match nothing. Read as "every port", an allow rule opened
  // every port to its sources and a deny rule denied them everything.
  it('icmps entries with no fields match no packet: the rule is dropped (allow and deny), the section still selects default deny', () => {
    for (const icmps of ['icmps: [{}]', 'icmps: [{fields: []}, {}]']) {
      for (const section of ['ingress', 'ingressDeny']) {
        const rules = rulesOf(CNP(`  ${section}:\n  - fromCIDR: [192.0.2.0/24]\n    ${icmps}\n`));
        assert.equal(rules.length, 1, `${section} ${icmps}`);
        assert.deepEqual(rules[0]!.peers, [], `${section} ${icmps}: only the default-deny marker is left`);
        assert.equal(rules[0]!.verdict, 'allow');
        assert.match(rules[0]!.origin, /selects: default deny/);
      }
    }
    // One entry with a field is enough for the rule to stand (its types only).
    const [r] = rulesOf(CNP('  ingress:\n  - fromCIDR: [192.0.2.0/24]\n    icmps: [{}, {fields: [{type: 8}]}]\n'));
    assert.deepEqual(r!.ports, [{ proto: PROTO.ICMP, lo: 8, hi: 8 }]);
  });
});

describe('policy intake: specs, selection and the default-deny marker', () => {
  it('a plain rule carries no defaultDeny field (only enableDefaultDeny.ingress false sets it)', () => {
    const [r] = rulesOf(CNP('  ingress:\n  - fromCIDR: [192.0.2.0/24]\n'));
    assert.ok(!('defaultDeny' in r!));
    const [on] = rulesOf(CNP('  enableDefaultDeny: {ingress: true}\n  ingress:\n  - fromCIDR: [192.0.2.0/24]\n'));
    assert.ok(!('defaultDeny' in on!));
  });

  it('specs[] entries are named by index in the origin; a nodeSelector spec selects no service and adds no rule', () => {
    const rules = rulesOf(
      CCNP(`specs:
- nodeSelector: {matchLabels: {role: edge}}
  ingress:
  - fromCIDR: [192.0.2.0/24]
- endpointSelector: {matchLabels: {role: dns}}
  ingress:
  - fromCIDR: [198.51.100.0/24]
`),
    );
    assert.deepEqual(rules.map((r) => [r.origin, peersText(r), r.selection]), [
      ['CiliumClusterwideNetworkPolicy dns specs[1].ingress[0]', [['198.51.100.0/24', []]], { kind: 'labels', selector: { matchLabels: { role: 'dns' }, matchExpressions: [] } }],
    ]);
  });

  it('a spec with no ingress section at all selects nothing (no default-deny marker)', () => {
    assert.deepEqual(rulesOf(CNP('  egress:\n  - toCIDR: [192.0.2.0/24]\n')), []);
    assert.deepEqual(rulesOf(CNP('  description: nothing to police\n')), []);
  });

  it('an ingressDeny section whose rules all drop out still selects its services (default deny), with a marker naming why', () => {
    const rules = rulesOf(CNP('  ingressDeny:\n  - fromEndpoints: [{matchLabels: {app: client}}]\n'));
    assert.deepEqual(rules, [
      {
        verdict: 'allow',
        peers: [],
        selection: { kind: 'labels', namespace: 'shop', selector: SELECTOR },
        origin: 'CiliumNetworkPolicy shop/web-in spec (selects: default deny; no rule names a source herald sees)',
      },
    ]);
  });
});

describe('policy intake: loadBalancerSourceRanges', () => {
  it('no ranges: the service key with no rules (the service stays open)', () => {
    assert.deepEqual(sourceRangeRuleSet('shop/web', []), { key: 'Service/shop/web', rules: [] });
  });

  it('ranges: a deny of everything outside them per family, then the allow, both named after the service field', () => {
    const set = sourceRangeRuleSet('shop/web', ['192.0.2.0/24']);
    assert.deepEqual(set.rules.map((r) => [r.verdict, r.origin, r.selection]), [
      ['deny', 'Service shop/web loadBalancerSourceRanges (sources outside the ranges)', { kind: 'service', service: 'shop/web' }],
      ['allow', 'Service shop/web loadBalancerSourceRanges', { kind: 'service', service: 'shop/web' }],
    ]);
    assert.deepEqual(peersText(set.rules[0]!), [['0.0.0.0/0', ['192.0.2.0/24']], ['::/0', []]]);
  });
});

describe('policy intake: Kubernetes NetworkPolicy', () => {
  it('the selecting rule and each ingress rule: labels selection in the namespace, origins naming the policy and rule', () => {
    const rules = rulesOf(NP('  ingress:\n  - from:\n    - ipBlock: {cidr: 192.0.2.0/24}\n'));
    const selection = { kind: 'labels', namespace: 'shop', selector: SELECTOR };
    assert.deepEqual(rules, [
      { verdict: 'allow', peers: [], selection, origin: 'NetworkPolicy shop/web-in (selects: default deny)' },
      { verdict: 'allow', peers: [{ cidr: toPrefix('192.0.2.0/24'), except: [] }], selection, origin: 'NetworkPolicy shop/web-in spec.ingress[0]' },
    ]);
  });

  it('a rule with no ports: every port (no ports field); a port entry with only a protocol: every port of it', () => {
    const rules = rulesOf(NP('  ingress:\n  - {}\n  - ports: [{protocol: UDP}]\n'));
    assert.deepEqual(rules[1]!.peers, EVERYWHERE);
    assert.ok(!('ports' in rules[1]!));
    assert.ok(!('namedPorts' in rules[1]!));
    assert.deepEqual(rules[2]!.ports, [{ proto: PROTO.UDP, lo: 0, hi: 65535 }]);
    assert.ok(!('namedPorts' in rules[2]!));
  });

  it('only a named port: namedPorts, and ports empty (the name matches nothing until resolved)', () => {
    const rules = rulesOf(NP('  ingress:\n  - ports: [{port: http}]\n'));
    assert.deepEqual(rules[1]!.ports, []);
    assert.deepEqual(rules[1]!.namedPorts, [{ proto: PROTO.TCP, name: 'http' }]);
  });
});

describe('policy intake: service ports', () => {
  it('servicePortsOf: protocol and port of each service port, targetPort only when it is a name', () => {
    const snap = snapshot(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: dns, port: 53, protocol: UDP, targetPort: 5353}
  - {name: sctp, port: 9000, protocol: SCTP}
`);
    const svc = snap.services.get('shop/web') as ServiceManifest;
    assert.deepEqual(servicePortsOf(svc), [
      { proto: PROTO.TCP, port: 80, targetPort: 'http' },
      { proto: PROTO.UDP, port: 53 },
      { proto: PROTO.SCTP, port: 9000 },
    ]);
  });
});

describe('policy intake: toPrefix', () => {
  it('refuses text that is not a CIDR, naming it', () => {
    assert.throws(() => toPrefix('bogus'), { message: 'intake: bogus is not a validated CIDR' });
  });
});

describe('missingCidrGroups', () => {
  it('a selector some group matches is not reported, even when other groups do not match it', () => {
    const snap = snapshot(GROUP('office', 'hq', '192.0.2.0/29') + GROUP('branch', 'branch', '198.51.100.0/24') + CNP('  ingress:\n  - fromCIDRSet: [{cidrGroupSelector: {matchLabels: {site: hq}}}]\n'));
    assert.deepEqual(missingCidrGroups(snap), []);
  });

  it('a clusterwide policy with only specs[] is read: the warning names the policy by its name and the entry by specs index', () => {
    const snap = snapshot(CCNP('specs:\n- endpointSelector: {matchLabels: {role: dns}}\n  ingress:\n  - fromCIDR: [192.0.2.0/24]\n  - fromCIDRSet: [{cidrGroupRef: vpn}]\n'));
    const warnings = missingCidrGroups(snap);
    assert.deepEqual(warnings.map((w) => [w.policy, w.path, w.field, w.group, w.message]), [
      [
        'CiliumClusterwideNetworkPolicy dns',
        'specs[0].ingress[1].fromCIDRSet[0]',
        'cidrGroupRef',
        'vpn',
        'specs[0].ingress[1].fromCIDRSet[0].cidrGroupRef: CiliumCIDRGroup "vpn" does not exist: this rule allows from none of its CIDRs until it is created (as Cilium)',
      ],
    ]);
  });
});

describe('policy repository bookkeeping', () => {
  const rule = (cidr: string): RuleInput => ({
    verdict: 'allow',
    peers: [{ cidr: toPrefix(cidr), except: [] }],
    selection: { kind: 'service', service: 'shop/web' },
    origin: `test ${cidr}`,
  });

  it('revision starts at 0 and every change bumps it, a delete included', () => {
    const repo = new PolicyRepository();
    assert.equal(repo.revision, 0);
    assert.equal(repo.replace('a', [rule('192.0.2.0/24')]).revision, 1);
    assert.equal(repo.revision, 1);
    assert.equal(repo.delete('a').revision, 2);
    assert.equal(repo.revision, 2);
  });

  it('keys, ruleCount and rules() list what is stored; a key replaced by no rules (or deleted) is gone', () => {
    const repo = new PolicyRepository();
    assert.deepEqual(repo.keys(), []);
    assert.equal(repo.ruleCount, 0);
    repo.replace('a', [rule('192.0.2.0/24'), rule('198.51.100.0/24')]);
    repo.replace('b', [rule('203.0.113.0/24')]);
    assert.deepEqual(repo.keys(), ['a', 'b']);
    assert.equal(repo.ruleCount, 3);
    assert.deepEqual([...repo.rules()].map((r) => [r.key, r.origin]), [
      ['a', 'test 192.0.2.0/24'],
      ['a', 'test 198.51.100.0/24'],
      ['b', 'test 203.0.113.0/24'],
    ]);
    repo.replace('a', []);
    assert.deepEqual(repo.keys(), ['b']);
    assert.equal(repo.ruleCount, 1);
    const change = repo.delete('b');
    assert.deepEqual(change.added, []);
    assert.deepEqual(change.removed.map((r) => r.origin), ['test 203.0.113.0/24']);
    assert.deepEqual(repo.keys(), []);
    assert.equal(repo.ruleCount, 0);
    assert.deepEqual([...repo.rules()], []);
    assert.equal(repo.prefixCount, 0);
  });

  it('rule ids are never reused: a changed rule gets a fresh id, distinct from every id handed out before', () => {
    const repo = new PolicyRepository();
    const [a] = repo.replace('a', [rule('192.0.2.0/24')]).added;
    const [a2] = repo.replace('a', [rule('198.51.100.0/24')]).added;
    const [b] = repo.replace('b', [rule('203.0.113.0/24')]).added;
    const [a3] = repo.replace('a', [rule('198.51.100.0/24'), rule('192.0.2.0/25')]).added.slice(1);
    const ids = [a!.id, a2!.id, b!.id, a3!.id];
    assert.deepEqual(ids, [1, 2, 3, 4]);
  });
});
