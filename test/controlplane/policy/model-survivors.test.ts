/**
 * The small pure pieces of the policy model, pinned down case by case:
 * address and prefix helpers (model.ts), the enableDefaultDeny switch in the
 * reference evaluator, what `herald policy trace` reports besides the
 * verdict, the merged table of a shared IP (ids, order, origins) and
 * named-port resolution (mixed rules, protocols, de-duplication).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { evaluate } from '../../../src/controlplane/policy/evaluate.js';
import {
  formatAddress,
  formatPrefix,
  NO_DEFAULT_DENY_RULE,
  PROTO,
  PROTO_NAME,
  prefixCovers,
  withDefaultDenySwitch,
  type Packet,
  type PeerBlock,
  type PolicyRule,
  type Prefix,
} from '../../../src/controlplane/policy/model.js';
import { resolveNamedPorts } from '../../../src/controlplane/policy/named-ports.js';
import { formatServicePorts, mergeSharedRules, OPEN_RULE_BASE, restrictToPorts, type ServicePort, type Sharer } from '../../../src/controlplane/policy/shared.js';
import { trace } from '../../../src/controlplane/policy/trace.js';
import type { PolicyPrefixEntry } from '../../../src/datapath/tables/service-policy.js';

/** An IPv6 address from its eight 16-bit groups. */
const v6 = (...groups: number[]): bigint => groups.reduce((a, g) => (a << 16n) | BigInt(g), 0n);
const v4 = (a: number, b: number, c: number, d: number): bigint => BigInt(((a << 24) >>> 0) + (b << 16) + (c << 8) + d);
const EVERYONE4: PeerBlock[] = [{ cidr: { family: 4, addr: 0n, len: 0 }, except: [] }];
const EVERYONE: PeerBlock[] = [...EVERYONE4, { cidr: { family: 6, addr: 0n, len: 0 }, except: [] }];

function rule(id: number, verdict: 'allow' | 'deny', extra: Partial<PolicyRule> = {}): PolicyRule {
  return { id, verdict, peers: EVERYONE4, origin: `rule ${id}`, ...extra };
}

const tcp = (dport: number, src = v4(192, 0, 2, 1)): Packet => ({ family: 4, src, proto: PROTO.TCP, dport });

describe('model: protocol names', () => {
  it('names every protocol a rule can carry, as the rule listing prints them', () => {
    assert.deepEqual({ ...PROTO_NAME }, { 6: 'TCP', 17: 'UDP', 132: 'SCTP', 1: 'ICMP', 58: 'ICMPv6' });
  });
});

describe('model: prefixCovers (an except must lie inside its cidr)', () => {
  const p24: Prefix = { family: 4, addr: v4(192, 0, 2, 0), len: 24 };
  const p25: Prefix = { family: 4, addr: v4(192, 0, 2, 0), len: 25 };
  const p25hi: Prefix = { family: 4, addr: v4(192, 0, 2, 128), len: 25 };

  it('a prefix covers itself and the longer prefixes inside it', () => {
    assert.equal(prefixCovers(p24, p24), true);
    assert.equal(prefixCovers(p24, p25), true);
    assert.equal(prefixCovers(p24, p25hi), true);
  });

  it('a longer prefix does not cover the shorter one, even when they start at the same address', () => {
    assert.equal(prefixCovers(p25, p24), false);
    assert.equal(prefixCovers(p25hi, p24), false);
  });

  it('a prefix does not cover a disjoint one of the same length, nor one of the other family', () => {
    assert.equal(prefixCovers(p24, { family: 4, addr: v4(192, 0, 3, 0), len: 24 }), false);
    assert.equal(prefixCovers({ family: 4, addr: 0n, len: 0 }, { family: 6, addr: 0n, len: 0 }), false);
    assert.equal(prefixCovers({ family: 6, addr: 0n, len: 0 }, { family: 4, addr: 0n, len: 32 }), false);
  });
});

describe('model: formatAddress / formatPrefix (RFC 5952 text for IPv6)', () => {
  it('IPv4: dotted quad, every octet', () => {
    assert.equal(formatAddress(4, v4(192, 0, 2, 255)), '192.0.2.255');
    assert.equal(formatPrefix({ family: 4, addr: v4(10, 0, 0, 0), len: 8 }), '10.0.0.0/8');
  });

  it('IPv6 without a zero group: all eight groups, lower case, no compression', () => {
    assert.equal(formatAddress(6, v6(0x2001, 0xdb8, 1, 2, 3, 4, 5, 0xabcd)), '2001:db8:1:2:3:4:5:abcd');
  });

  it('IPv6: the run of zero groups is compressed to "::", the last group kept', () => {
    assert.equal(formatAddress(6, v6(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)), '2001:db8::1');
    assert.equal(formatAddress(6, v6(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)), '2001:db8::');
    assert.equal(formatAddress(6, v6(0, 0, 0, 0, 0, 0, 0, 1)), '::1');
    assert.equal(formatAddress(6, 0n), '::');
    assert.equal(formatPrefix({ family: 6, addr: v6(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), len: 32 }), '2001:db8::/32');
  });

  it('IPv6: a single zero group is not compressed', () => {
    assert.equal(formatAddress(6, v6(0x2001, 0xdb8, 0, 1, 1, 1, 1, 1)), '2001:db8:0:1:1:1:1:1');
  });

  it('IPv6: the longest zero run is compressed, the first of equally long runs', () => {
    assert.equal(formatAddress(6, v6(0x2001, 0, 0, 0, 1, 0, 1, 1)), '2001::1:0:1:1', 'a later, shorter run stays');
    assert.equal(formatAddress(6, v6(0x2001, 0, 1, 0, 0, 0, 1, 1)), '2001:0:1::1:1', 'a later, longer run wins');
    assert.equal(formatAddress(6, v6(0x2001, 0, 0, 1, 0, 0, 1, 1)), '2001::1:0:0:1:1', 'a tie: the first run');
  });
});

describe('model: withDefaultDenySwitch', () => {
  it('every rule from a policy with enableDefaultDeny.ingress false: a last allow-everything rule follows them', () => {
    const rules = [rule(1, 'deny', { defaultDeny: false }), rule(2, 'allow', { defaultDeny: false })];
    const out = withDefaultDenySwitch(rules);
    assert.deepEqual(out.slice(0, 2), rules);
    assert.equal(out.length, 3);
    const last = out[2]!;
    assert.equal(last.id, NO_DEFAULT_DENY_RULE);
    assert.equal(last.verdict, 'allow');
    assert.equal(last.ports, undefined, 'every packet');
    assert.deepEqual(last.peers, EVERYONE);
    assert.match(last.origin, /^not default deny: every policy selecting it sets enableDefaultDeny\.ingress false/);
  });

  it('one rule without the switch, or no rule: unchanged', () => {
    const mixed = [rule(1, 'allow', { defaultDeny: false }), rule(2, 'allow')];
    assert.equal(withDefaultDenySwitch(mixed), mixed);
    assert.deepEqual(withDefaultDenySwitch([]), []);
  });
});

describe('evaluate: enableDefaultDeny.ingress false', () => {
  it('selected only by such policies: what no rule matches is allowed, by the NO_DEFAULT_DENY rule', () => {
    const rules = [rule(1, 'allow', { defaultDeny: false, ports: [{ proto: PROTO.TCP, lo: 80, hi: 80 }] })];
    assert.deepEqual(evaluate(rules, tcp(22)), { verdict: 'allow', rule: NO_DEFAULT_DENY_RULE });
    assert.deepEqual(evaluate(rules, tcp(80)), { verdict: 'allow', rule: 1 });
  });

  it('their deny rules still deny', () => {
    const rules = [rule(3, 'deny', { defaultDeny: false, ports: [{ proto: PROTO.TCP, lo: 22, hi: 22 }] })];
    assert.deepEqual(evaluate(rules, tcp(22)), { verdict: 'deny', rule: 3 });
    assert.deepEqual(evaluate(rules, tcp(23)), { verdict: 'allow', rule: NO_DEFAULT_DENY_RULE });
  });

  it('one rule of another policy makes the service default deny again', () => {
    const rules = [rule(1, 'allow', { defaultDeny: false, ports: [{ proto: PROTO.TCP, lo: 80, hi: 80 }] }), rule(2, 'allow', { ports: [{ proto: PROTO.TCP, lo: 443, hi: 443 }] })];
    assert.deepEqual(evaluate(rules, tcp(22)), { verdict: 'deny', rule: 0 });
  });

  it('the evaluator and the rule-list switch agree', () => {
    const rules = [rule(1, 'deny', { defaultDeny: false, ports: [{ proto: PROTO.UDP, lo: 53, hi: 53 }] })];
    for (const pkt of [tcp(22), { family: 4 as const, src: 1n, proto: PROTO.UDP, dport: 53 }, { family: 4 as const, src: 1n, proto: PROTO.ICMP }]) {
      assert.deepEqual(evaluate(withDefaultDenySwitch(rules), pkt), evaluate(rules, pkt));
    }
  });
});

describe('trace: what it reports besides the verdict', () => {
  const prefix = (addr: bigint, len: number, entries: PolicyPrefixEntry['entries']): PolicyPrefixEntry => ({ family: 4, addr, len, entries });
  const p16 = prefix(v4(192, 0, 0, 0), 16, [{ proto: 0, deny: false, any: true, lo: 0, hi: 0, rule: 1 }]);
  const p24 = prefix(v4(192, 0, 2, 0), 24, [
    { proto: PROTO.TCP, deny: true, any: false, lo: 22, hi: 22, rule: 2 },
    { proto: PROTO.TCP, deny: false, any: false, lo: 80, hi: 80, rule: 3 },
  ]);
  const row = {
    service: 'shop/web',
    ips: ['198.51.100.10'],
    prefixes: [p16, p24],
    rules: [
      { id: 1, verdict: 'allow' as const, origin: 'origin of 1', text: 'text of 1' },
      { id: 2, verdict: 'deny' as const, origin: 'origin of 2', text: 'text of 2' },
      { id: 3, verdict: 'allow' as const, origin: 'origin of 3', text: 'text of 3' },
    ],
  };

  it('a destination no row guards: open, saying so', () => {
    assert.deepEqual(trace([row], '198.51.100.99', tcp(80)), { verdict: 'open', rule: 0, text: 'no policy selects 198.51.100.99: open' });
  });

  it('names the deciding rule (its origin and text) and the longest matching source prefix', () => {
    assert.deepEqual(trace([row], '198.51.100.10', tcp(80)), { service: 'shop/web', verdict: 'allow', rule: 3, origin: 'origin of 3', text: 'text of 3', prefix: p24 });
    assert.deepEqual(trace([row], '198.51.100.10', tcp(22)), { service: 'shop/web', verdict: 'deny', rule: 2, origin: 'origin of 2', text: 'text of 2', prefix: p24 });
    assert.deepEqual(trace([row], '198.51.100.10', tcp(80, v4(192, 0, 9, 1))), { service: 'shop/web', verdict: 'allow', rule: 1, origin: 'origin of 1', text: 'text of 1', prefix: p16 });
  });

  it('nothing matches in the longest prefix: default deny (rule 0), with the prefix that was looked at', () => {
    assert.deepEqual(trace([row], '198.51.100.10', tcp(443)), { service: 'shop/web', verdict: 'deny', rule: 0, text: 'default deny: selected, and no rule allows it', prefix: p24 });
  });

  it('no source prefix matches: default deny, no prefix', () => {
    assert.deepEqual(trace([row], '198.51.100.10', tcp(80, v4(203, 0, 113, 1))), { service: 'shop/web', verdict: 'deny', rule: 0, text: 'default deny: selected, and no rule allows it' });
  });
});

describe('shared IP: formatting and restriction', () => {
  it('formats service ports as PORT/PROTO, comma separated', () => {
    assert.equal(formatServicePorts([{ proto: PROTO.TCP, port: 80 }, { proto: PROTO.UDP, port: 53 }, { proto: PROTO.SCTP, port: 9 }]), '80/TCP,53/UDP,9/SCTP');
    assert.equal(formatServicePorts([]), '');
  });

  it('a range keeps a service port on either of its ends (inclusive)', () => {
    const ports: ServicePort[] = [{ proto: PROTO.TCP, port: 80 }, { proto: PROTO.TCP, port: 90 }, { proto: PROTO.TCP, port: 91 }];
    assert.deepEqual(restrictToPorts([{ proto: PROTO.TCP, lo: 80, hi: 90 }], ports), [{ proto: 6, lo: 80, hi: 80 }, { proto: 6, lo: 90, hi: 90 }]);
  });
});

describe('shared IP: the merged rules', () => {
  const web: ServicePort[] = [{ proto: PROTO.TCP, port: 80 }];
  const dns: ServicePort[] = [{ proto: PROTO.UDP, port: 53 }, { proto: PROTO.TCP, port: 53 }];

  it('synthesized open rules are numbered in service-name order, whatever the input order (stable counter ids)', () => {
    const sharers: Sharer[] = [
      { service: 'shop/c', ports: web, rules: [] },
      { service: 'shop/a', ports: dns, rules: [] },
      { service: 'shop/b', ports: [{ proto: PROTO.TCP, port: 443 }], rules: [] },
    ];
    for (const order of [sharers, [...sharers].reverse(), [sharers[1]!, sharers[0]!, sharers[2]!], [sharers[2]!, sharers[1]!, sharers[0]!]]) {
      const out = mergeSharedRules(order);
      assert.deepEqual(out.map((r) => [r.id, r.origin]), [
        [OPEN_RULE_BASE + 1, "Service shop/a: no policy selects it, open (on shop/a's ports 53/UDP,53/TCP)"],
        [OPEN_RULE_BASE + 2, "Service shop/b: no policy selects it, open (on shop/b's ports 443/TCP)"],
        [OPEN_RULE_BASE + 3, "Service shop/c: no policy selects it, open (on shop/c's ports 80/TCP)"],
      ]);
      assert.ok(out.every((r) => r.verdict === 'allow' && r.peers.length === 2));
      assert.deepEqual(out[0]!.ports, [{ proto: 17, lo: 53, hi: 53 }, { proto: 6, lo: 53, hi: 53 }]);
    }
  });

  it('an unselected sharer without ports adds no rule (it has nothing to open)', () => {
    const out = mergeSharedRules([{ service: 'shop/empty', ports: [], rules: [] }, { service: 'shop/web', ports: web, rules: [] }]);
    assert.equal(out.length, 1);
    assert.deepEqual(out[0]!.ports, [{ proto: 6, lo: 80, hi: 80 }]);
    assert.match(out[0]!.origin, /^Service shop\/web: /);
  });

  it("a policed sharer's rules keep their ids, cut to its ports, the origin saying which ports; a rule on none of them is dropped", () => {
    const rules: PolicyRule[] = [
      rule(7, 'allow', { origin: 'CiliumNetworkPolicy shop/web-in spec.ingress[0]' }),
      rule(8, 'deny', { ports: [{ proto: PROTO.UDP, lo: 1, hi: 65535 }], origin: 'CiliumNetworkPolicy shop/web-in spec.ingressDeny[0]' }),
      rule(9, 'allow', { ports: [{ proto: PROTO.TCP, lo: 1, hi: 100 }], origin: 'CiliumNetworkPolicy shop/web-in spec.ingress[1]' }),
    ];
    const out = mergeSharedRules([{ service: 'shop/web', ports: web, rules }]);
    assert.deepEqual(out, [
      { id: 7, verdict: 'allow', peers: EVERYONE4, ports: [{ proto: 6, lo: 80, hi: 80 }], origin: "CiliumNetworkPolicy shop/web-in spec.ingress[0] (on shop/web's ports 80/TCP)" },
      { id: 9, verdict: 'allow', peers: EVERYONE4, ports: [{ proto: 6, lo: 80, hi: 80 }], origin: "CiliumNetworkPolicy shop/web-in spec.ingress[1] (on shop/web's ports 80/TCP)" },
    ]);
  });
});

describe('named ports: resolution details', () => {
  const PORTS: ServicePort[] = [
    { proto: PROTO.TCP, port: 80, targetPort: 'http' },
    { proto: PROTO.TCP, port: 8080, targetPort: 'http' },
    { proto: PROTO.UDP, port: 53, targetPort: 'dns' },
  ];

  it('rules without names pass through untouched next to rules with names', () => {
    const plain = rule(1, 'allow', { ports: [{ proto: PROTO.TCP, lo: 22, hi: 22 }] });
    const portless = rule(2, 'deny');
    const named = rule(3, 'allow', { namedPorts: [{ proto: PROTO.TCP, name: 'http' }] });
    const out = resolveNamedPorts([plain, named, portless], PORTS);
    assert.equal(out[0], plain);
    assert.equal(out[2], portless);
    assert.deepEqual(out[1], { id: 3, verdict: 'allow', peers: EVERYONE4, origin: 'rule 3', ports: [{ proto: 6, lo: 80, hi: 80 }, { proto: 6, lo: 8080, hi: 8080 }] });
  });

  it('no rule with names: the same rules, in a new array', () => {
    const rules = [rule(1, 'allow'), rule(2, 'deny')];
    const out = resolveNamedPorts(rules, PORTS);
    assert.notEqual(out, rules);
    assert.deepEqual(out, rules);
  });

  it('a name matches only service ports of its own protocol', () => {
    const [r] = resolveNamedPorts([rule(1, 'allow', { namedPorts: [{ proto: PROTO.UDP, name: 'http' }] })], PORTS);
    assert.deepEqual(r!.ports, []);
    assert.equal(evaluate([r!], tcp(80)).verdict, 'deny');
  });

  it('a resolved port already in the rule (range ends included, same protocol) is not listed twice', () => {
    const cases: [PolicyRule['ports'], PolicyRule['ports']][] = [
      [[{ proto: 6, lo: 80, hi: 90 }], [{ proto: 6, lo: 80, hi: 90 }, { proto: 6, lo: 8080, hi: 8080 }]],
      [[{ proto: 6, lo: 70, hi: 80 }], [{ proto: 6, lo: 70, hi: 80 }, { proto: 6, lo: 8080, hi: 8080 }]],
      [[{ proto: 6, lo: 79, hi: 8081 }], [{ proto: 6, lo: 79, hi: 8081 }]],
      [[{ proto: 6, lo: 81, hi: 8079 }], [{ proto: 6, lo: 81, hi: 8079 }, { proto: 6, lo: 80, hi: 80 }, { proto: 6, lo: 8080, hi: 8080 }]],
      [[{ proto: 17, lo: 80, hi: 80 }], [{ proto: 17, lo: 80, hi: 80 }, { proto: 6, lo: 80, hi: 80 }, { proto: 6, lo: 8080, hi: 8080 }]],
    ];
    for (const [ports, want] of cases) {
      const [r] = resolveNamedPorts([rule(1, 'allow', { ports, namedPorts: [{ proto: PROTO.TCP, name: 'http' }] })], PORTS);
      assert.deepEqual(r!.ports, want, JSON.stringify(ports));
    }
  });

  it('the same name twice resolves once', () => {
    const [r] = resolveNamedPorts([rule(1, 'allow', { namedPorts: [{ proto: PROTO.UDP, name: 'dns' }, { proto: PROTO.UDP, name: 'dns' }] })], PORTS);
    assert.deepEqual(r!.ports, [{ proto: 17, lo: 53, hi: 53 }]);
  });
});
