/**
 * The policy semantics, written down as cases against the reference
 * evaluator (the datapath is held to the same evaluator by the property
 * test in test/datapath/policy/policy-prog.lab.test.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compilePolicy, MAX_L4_ENTRIES } from '../../../src/controlplane/policy/compile.js';
import { evaluate } from '../../../src/controlplane/policy/evaluate.js';
import { toPrefix } from '../../../src/controlplane/policy/intake.js';
import { PROTO, type Packet, type PolicyRule, type PortRange } from '../../../src/controlplane/policy/model.js';
import { isHeraldError } from '../../../src/core/errors.js';

let nextId = 1;
function rule(verdict: 'allow' | 'deny', cidrs: (string | [string, string[]])[], ports?: PortRange[]): PolicyRule {
  return {
    id: nextId++,
    verdict,
    peers: cidrs.map((c) => (typeof c === 'string' ? { cidr: toPrefix(c), except: [] } : { cidr: toPrefix(c[0]), except: c[1].map(toPrefix) })),
    ...(ports ? { ports } : {}),
    origin: 'test',
  };
}

function pkt(src: string, proto: number = PROTO.TCP, dport?: number): Packet {
  const p = toPrefix(src.includes(':') ? `${src}/128` : `${src}/32`);
  return { family: p.family, src: p.addr, proto, ...(dport !== undefined ? { dport } : proto === PROTO.TCP || proto === PROTO.UDP ? { dport: 80 } : {}) };
}

describe('policy semantics', () => {
  it('selected with no rule allowing: default deny (rule 0)', () => {
    assert.deepEqual(evaluate([], pkt('192.0.2.1')), { verdict: 'deny', rule: 0 });
  });

  it('an allow rule lets its sources in, nobody else', () => {
    const a = rule('allow', ['192.0.2.0/24']);
    assert.deepEqual(evaluate([a], pkt('192.0.2.9')), { verdict: 'allow', rule: a.id });
    assert.deepEqual(evaluate([a], pkt('198.51.100.9')), { verdict: 'deny', rule: 0 });
  });

  it('deny beats allow, whatever the prefix lengths or rule order', () => {
    const d = rule('deny', ['192.0.2.0/24']);
    const a = rule('allow', ['192.0.2.7/32']);
    assert.deepEqual(evaluate([a, d], pkt('192.0.2.7')), { verdict: 'deny', rule: d.id });
  });

  it('except carves holes; a longer allow inside the hole still allows', () => {
    const a = rule('allow', [['192.0.2.0/24', ['192.0.2.0/28']]]);
    assert.equal(evaluate([a], pkt('192.0.2.5')).verdict, 'deny');
    assert.equal(evaluate([a], pkt('192.0.2.16')).verdict, 'allow');
    const b = rule('allow', ['192.0.2.4/30']);
    assert.deepEqual(evaluate([a, b], pkt('192.0.2.5')), { verdict: 'allow', rule: b.id });
    // An except in a deny rule re-opens to what the allows say.
    const d = rule('deny', [['0.0.0.0/0', ['192.0.2.0/24']]]);
    assert.equal(evaluate([d, a], pkt('192.0.2.200')).verdict, 'allow');
    assert.equal(evaluate([d, a], pkt('203.0.113.1')).verdict, 'deny');
  });

  it('IPv6, and families never mix (0.0.0.0/0 does not cover IPv6)', () => {
    const a = rule('allow', [['2001:db8::/32', ['2001:db8:bad::/48']]]);
    assert.equal(evaluate([a], pkt('2001:db8::1')).verdict, 'allow');
    assert.equal(evaluate([a], pkt('2001:db8:bad::1')).verdict, 'deny');
    assert.equal(evaluate([rule('allow', ['0.0.0.0/0'])], pkt('2001:db8::1')).verdict, 'deny');
  });

  it('ports and protocols: range inclusive, protocol exact; ICMP only by port-less rules', () => {
    const a = rule('allow', ['0.0.0.0/0'], [{ proto: PROTO.TCP, lo: 8000, hi: 8080 }]);
    assert.equal(evaluate([a], pkt('192.0.2.1', PROTO.TCP, 8000)).verdict, 'allow');
    assert.equal(evaluate([a], pkt('192.0.2.1', PROTO.TCP, 8080)).verdict, 'allow');
    assert.equal(evaluate([a], pkt('192.0.2.1', PROTO.TCP, 8081)).verdict, 'deny');
    assert.equal(evaluate([a], pkt('192.0.2.1', PROTO.UDP, 8000)).verdict, 'deny');
    assert.equal(evaluate([a], pkt('192.0.2.1', 1)).verdict, 'deny');
    assert.equal(evaluate([rule('allow', ['0.0.0.0/0'])], pkt('192.0.2.1', 1)).verdict, 'allow');
    // A port-scoped deny leaves other ports to the allows.
    const d = rule('deny', ['192.0.2.0/24'], [{ proto: PROTO.TCP, lo: 22, hi: 22 }]);
    const all = rule('allow', ['192.0.2.0/24']);
    assert.equal(evaluate([d, all], pkt('192.0.2.1', PROTO.TCP, 22)).verdict, 'deny');
    assert.equal(evaluate([d, all], pkt('192.0.2.1', PROTO.TCP, 443)).verdict, 'allow');
  });

  it('the deciding rule is the lowest-id matching deny, else the lowest-id matching allow', () => {
    const a1 = rule('allow', ['192.0.2.0/24']);
    const a2 = rule('allow', ['192.0.2.0/25']);
    assert.equal(evaluate([a2, a1], pkt('192.0.2.1')).rule, a1.id);
  });

  it('more port entries for one source than the datapath holds: a precise error', () => {
    const ports = Array.from({ length: MAX_L4_ENTRIES + 1 }, (_, i) => ({ proto: PROTO.TCP, lo: 1000 + i, hi: 1000 + i }));
    assert.throws(() => compilePolicy([rule('allow', ['192.0.2.0/24'], ports)], 'shop/web'), (e) =>
      isHeraldError(e, 'HERALD_POLICY_TOO_COMPLEX') && /shop\/web: source 192.0.2.0\/24 is matched by 17 port entries/.test(e.message),
    );
  });
});
