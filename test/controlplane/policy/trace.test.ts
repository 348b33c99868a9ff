/**
 * `herald policy trace` decides from the realized tables as the datapath
 * does; it must agree with the reference evaluator (verdict and deciding
 * rule) on random rule sets and packets, and parse its target strictly.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compilePolicy, toPrefixEntries } from '../../../src/controlplane/policy/compile.js';
import { evaluate } from '../../../src/controlplane/policy/evaluate.js';
import type { Prefix } from '../../../src/controlplane/policy/model.js';
import { trace } from '../../../src/controlplane/policy/trace.js';
import { parseTarget } from '../../../src/cli/commands/policy.js';
import { randomPacket, randomRules, rng } from '../../helpers/policy-gen.js';

describe('policy trace', () => {
  it('agrees with the reference evaluator on 20,000 random cases', () => {
    const r = rng(1313);
    for (let set = 0; set < 200; set++) {
      const pool: Prefix[] = [];
      const rules = randomRules(r, pool);
      const row = { service: 'shop/web', ips: ['198.51.100.10', '2001:db8::10'], prefixes: toPrefixEntries(compilePolicy(rules)), rules: rules.map((x) => ({ id: x.id, verdict: x.verdict, origin: x.origin, text: '' })) };
      for (let i = 0; i < 100; i++) {
        const p = randomPacket(r, pool, rules);
        const pkt = p.fragment ? { family: p.family, src: p.src, proto: p.proto } : p;
        const want = evaluate(rules, pkt);
        const got = trace([row], p.family === 4 ? '198.51.100.10' : '2001:db8::10', pkt);
        assert.deepEqual([got.verdict, got.rule], [want.verdict, want.rule], `set ${set} packet ${i}`);
      }
    }
  });

  it('agrees with the evaluator for one rule without excepts (the compiler\'s fast path), allow and deny', () => {
    const r = rng(2727);
    for (let set = 0; set < 200; set++) {
      const pool: Prefix[] = [];
      const [first] = randomRules(r, pool);
      const rule = { ...first!, peers: first!.peers.map((b) => ({ cidr: b.cidr, except: [] })) };
      const rules = [rule];
      const row = { service: 'shop/web', ips: ['198.51.100.10', '2001:db8::10'], prefixes: toPrefixEntries(compilePolicy(rules)), rules: [] };
      for (let i = 0; i < 50; i++) {
        const p = randomPacket(r, pool, rules);
        const pkt = p.fragment ? { family: p.family, src: p.src, proto: p.proto } : p;
        const want = evaluate(rules, pkt);
        const got = trace([row], p.family === 4 ? '198.51.100.10' : '2001:db8::10', pkt);
        assert.deepEqual([got.verdict, got.rule], [want.verdict, want.rule], `set ${set} packet ${i}`);
      }
    }
  });

  it('a destination no policy selects is open', () => {
    assert.equal(trace([], '198.51.100.99', { family: 4, src: 1n, proto: 6, dport: 80 }).verdict, 'open');
  });

  it('parses DST:PORT/PROTO strictly', () => {
    assert.deepEqual(parseTarget('198.51.100.10:443/tcp'), { dst: '198.51.100.10', proto: 6, dport: 443 });
    assert.deepEqual(parseTarget('[2001:db8::10]:53/UDP'), { dst: '2001:db8::10', proto: 17, dport: 53 });
    assert.deepEqual(parseTarget('198.51.100.10:8/icmp'), { dst: '198.51.100.10', proto: 1, dport: 8 }, 'ICMP: the type, as icmps rules see it');
    assert.deepEqual(parseTarget('[2001:db8::10]:128/icmpv6'), { dst: '2001:db8::10', proto: 58, dport: 128 });
    assert.throws(() => parseTarget('198.51.100.10:256/icmp'), /ICMP type 256 is out of range/);
    assert.deepEqual(parseTarget('198.51.100.10/icmp'), { dst: '198.51.100.10', proto: 1 });
    for (const bad of ['198.51.100.10:443', '198.51.100.10/tcp', '198.51.100.10:70000/tcp', 'web:80/tcp', '198.51.100.10:80/gre2']) {
      assert.throws(() => parseTarget(bad), /expected DST:PORT\/PROTO|needs a port|out of range/, bad);
    }
  });
});
