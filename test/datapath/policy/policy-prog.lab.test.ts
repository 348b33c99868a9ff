/**
 * Property test: the real policy program (BPF_PROG_TEST_RUN, in the kernel)
 * decides exactly as the reference evaluator for random rule sets (nested
 * excepts, overlapping prefixes of both families, port ranges, allow and
 * deny) and random packets, across revision flips of the same service.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { compilePolicy, toPrefixEntries } from '../../../src/controlplane/policy/compile.js';
import { evaluate } from '../../../src/controlplane/policy/evaluate.js';
import { formatAddress, withDefaultDenySwitch, type PolicyRule, type Prefix } from '../../../src/controlplane/policy/model.js';
import { PolicyMapOps } from '../../../src/datapath/policy/ops.js';
import { PolicyProgram, TC_ACT_SHOT, TC_ACT_UNSPEC } from '../../../src/datapath/policy/program.js';
import type { ServicePolicyRow } from '../../../src/datapath/tables/service-policy.js';
import { buildFrame } from '../../../lab/ip-frame.js';
import { randomPacket, randomRules, rng } from '../../helpers/policy-gen.js';

const SVC4 = 0xc633640an; // 198.51.100.10
const SVC6 = (0x20010db8n << 96n) | 0x10n; // 2001:db8::10
const OTHER4 = 0xc6336414n; // 198.51.100.20, not a service

let prog: PolicyProgram;
before(() => {
  prog = PolicyProgram.load();
});
after(() => prog.dispose());

function row(rules: PolicyRule[], revision: number): ServicePolicyRow {
  return {
    service: 'default/web',
    svcId: 7,
    ips: ['198.51.100.10', '2001:db8::10'],
    revision,
    // As the pipeline compiles a service's rules (enableDefaultDeny applied).
    prefixes: toPrefixEntries(compilePolicy([...withDefaultDenySwitch(rules)])),
    rules: rules.map((r) => ({ id: r.id, verdict: r.verdict, origin: r.origin, text: '' })),
  };
}

function describe(rules: PolicyRule[]): string {
  const p = (x: Prefix) => `${formatAddress(x.family, x.addr)}/${x.len}`;
  return rules
    .map((r) => `#${r.id} ${r.verdict} ${r.peers.map((b) => p(b.cidr) + (b.except.length ? ` except ${b.except.map(p).join(',')}` : '')).join(' ; ')} ports=${JSON.stringify(r.ports)}`)
    .join('\n');
}

test('the BPF program agrees with the reference evaluator (random rules × random packets)', () => {
  const seed = Number(process.env.POLICY_SEED ?? Date.now() % 1_000_000);
  const r = rng(seed);
  const ops = new PolicyMapOps(prog.maps);
  let cases = 0;
  const verdicts = { allow: 0, deny: 0, defaultDeny: 0 };
  type Pkt = ReturnType<typeof randomPacket>;
  // The previous revision's packets: replayed under the next one, whose verdicts the program's cache must not answer from.
  let previous: Array<{ pkt: Pkt; ext: number[] | undefined; verdict: string }> = [];
  let replayedChanged = 0;
  for (let set = 0; set < 60; set++) {
    const pool: Prefix[] = [];
    // One set in five comes only from policies with enableDefaultDeny {ingress: false}: not default deny.
    const noDefaultDeny = r() < 0.2;
    const rules = randomRules(r, pool).map((x) => (noDefaultDeny ? { ...x, defaultDeny: false as const } : x));
    ops.update(row(rules, set + 1));
    const check = (pkt: Pkt, ext: number[] | undefined, how: string): string => {
      const expected = evaluate(rules, pkt.fragment ? { family: pkt.family, src: pkt.src, proto: pkt.proto } : pkt);
      const before = prog.drops().find((d) => d.svcId === 7 && d.rule === expected.rule)?.packets ?? 0n;
      const frame = buildFrame({ family: pkt.family, src: pkt.src, dst: pkt.family === 4 ? SVC4 : SVC6, proto: pkt.proto, ...(pkt.dport !== undefined ? { dport: pkt.dport } : {}), ...(pkt.fragment ? { fragment: true } : {}), ...(ext ? { ext } : {}) });
      const { retval } = prog.testRun(frame);
      const got = retval === TC_ACT_SHOT ? 'deny' : retval === TC_ACT_UNSPEC ? 'allow' : `retval ${retval}`;
      const context = () => `${how}: seed ${seed}, set ${set}, ext ${JSON.stringify(ext)}, packet ${JSON.stringify(pkt, (_k, v) => (typeof v === 'bigint' ? formatAddress(pkt.family, v) : v))}\n${describe(rules)}`;
      assert.equal(got, expected.verdict, context());
      if (expected.verdict === 'deny') {
        // The drop is counted against the deciding rule (0 = default deny).
        const afterCount = prog.drops().find((d) => d.svcId === 7 && d.rule === expected.rule)?.packets ?? 0n;
        assert.equal(afterCount, before + 1n, `drop counted for rule ${expected.rule}: ${context()}`);
        if (expected.rule === 0) verdicts.defaultDeny++;
        else verdicts.deny++;
      } else verdicts.allow++;
      cases++;
      return `${expected.verdict}/${expected.rule}`;
    };
    // First the packets the previous revision decided (and cached): this revision decides them.
    for (const old of previous) if (check(old.pkt, old.ext, 'replayed after a revision flip') !== old.verdict) replayedChanged++;
    const now: typeof previous = [];
    for (let i = 0; i < 150; i++) {
      const pkt = randomPacket(r, pool, rules);
      // IPv6: often behind a chain of extension headers the program must walk to find the L4 header.
      const ext = pkt.family === 6 && r() < 0.4 ? Array.from({ length: 1 + Math.floor(r() * 3) }, () => [0, 43, 60, 51][Math.floor(r() * 4)]!) : undefined;
      const verdict = check(pkt, ext, 'first packet');
      // The same packet again: now answered from the verdict cache, the same way.
      check(pkt, ext, 'repeated (verdict cache)');
      now.push({ pkt, ext, verdict });
    }
    previous = now;
    // Traffic to an address that is not a policed service is never touched.
    assert.equal(prog.testRun(buildFrame({ family: 4, src: 1n, dst: OTHER4, proto: 6, dport: 80 })).retval, TC_ACT_UNSPEC);
  }
  assert.ok(cases >= 18000, `${cases} cases`);
  // The generator exercises every outcome (a broken generator would pass vacuously).
  assert.ok(verdicts.allow > 500 && verdicts.deny > 200 && verdicts.defaultDeny > 500, JSON.stringify(verdicts));
  // Replays whose verdict the flip changed: a cache answering from the old revision would have failed on these.
  assert.ok(replayedChanged > 500, `${replayedChanged} replayed packets changed verdict`);
});

test('Neighbor Discovery to a policed IPv6 service is never filtered; ICMPv6 echo is policed', () => {
  const ops = new PolicyMapOps(prog.maps);
  ops.adopt(); // the test above left its last revision in the maps
  ops.update(row([], 1)); // selected, nothing allowed
  for (const type of [133, 134, 135, 136, 137]) {
    assert.equal(prog.testRun(buildFrame({ family: 6, src: 1n, dst: SVC6, proto: 58, icmpType: type })).retval, TC_ACT_UNSPEC, `type ${type}`);
  }
  assert.equal(prog.testRun(buildFrame({ family: 6, src: 1n, dst: SVC6, proto: 58, icmpType: 128 })).retval, TC_ACT_SHOT);
  // ARP is not IP: passes whatever the policy.
  const arp = Buffer.alloc(42);
  arp.writeUInt16BE(0x0806, 12);
  assert.equal(prog.testRun(arp).retval, TC_ACT_UNSPEC);
  ops.delete(row([], 1));
  // No policy selects the service any more: open.
  assert.equal(prog.testRun(buildFrame({ family: 6, src: 1n, dst: SVC6, proto: 58, icmpType: 128 })).retval, TC_ACT_UNSPEC);
});

test('fragments are decided by their first fragment; IPv6 extension headers are walked, a chain too long or cut short is dropped', () => {
  const ops = new PolicyMapOps(prog.maps);
  ops.adopt();
  const everyone = [{ cidr: { family: 4 as const, addr: 0n, len: 0 }, except: [] }, { cidr: { family: 6 as const, addr: 0n, len: 0 }, except: [] }];
  // Port 80/TCP denied, everything else allowed: a later fragment of a port-80 datagram must not slip through as "no port known".
  const rules: PolicyRule[] = [
    { id: 1, verdict: 'deny', peers: everyone, ports: [{ proto: 6, lo: 80, hi: 80 }], origin: 'test' },
    { id: 2, verdict: 'allow', peers: everyone, origin: 'test' },
  ];
  ops.update(row(rules, 1));
  const run = (spec: Parameters<typeof buildFrame>[0]) => (prog.testRun(buildFrame(spec)).retval === TC_ACT_SHOT ? 'deny' : 'allow');
  for (const family of [4, 6] as const) {
    const dst = family === 4 ? SVC4 : SVC6;
    const ext = family === 6 ? [44] : undefined;
    const frag = (dport: number, id: number, later: boolean) => run({ family, src: 9n, dst, proto: 6, dport, id, more: true, ...(later ? { fragment: true } : {}), ...(ext ? { ext } : {}) });
    assert.equal(frag(80, 7001, false), 'deny', `${family}: first fragment to port 80`);
    assert.equal(frag(443, 7001, true), 'deny', `${family}: a later fragment of that datagram (its bytes read 443: not an L4 header, not read)`);
    assert.equal(frag(443, 7002, false), 'allow', `${family}: first fragment to 443`);
    assert.equal(frag(80, 7002, true), 'allow', `${family}: its later fragment`);
    assert.equal(frag(80, 7003, true), 'allow', `${family}: a later fragment whose first was never seen: no L4 key, only the port-less allow matches`);
  }
  // IPv6: 8 extension headers are walked; a 9th, or a header cut short by the packet's end, is dropped (default deny).
  assert.equal(run({ family: 6, src: 9n, dst: SVC6, proto: 6, dport: 80, ext: [0, 60, 43, 60, 51, 60, 60, 60] }), 'deny', 'port 80 behind 8 headers');
  assert.equal(run({ family: 6, src: 9n, dst: SVC6, proto: 6, dport: 443, ext: [0, 60, 43, 60, 51, 60, 60, 60] }), 'allow', 'port 443 behind 8 headers');
  const d0 = prog.drops().find((d) => d.svcId === 7 && d.rule === 0)?.packets ?? 0n;
  assert.equal(run({ family: 6, src: 9n, dst: SVC6, proto: 6, dport: 443, ext: [0, 60, 43, 60, 51, 60, 60, 60, 60] }), 'deny', '9 headers');
  const cut = buildFrame({ family: 6, src: 9n, dst: SVC6, proto: 6, dport: 443, ext: [60] }).subarray(0, 14 + 40 + 1);
  assert.equal(prog.testRun(cut).retval, TC_ACT_SHOT, 'a header cut short');
  assert.equal(prog.drops().find((d) => d.svcId === 7 && d.rule === 0)?.packets, d0 + 2n, 'both counted as default deny');
  // Neighbor Discovery behind a hop-by-hop header still passes, even when everything is denied.
  ops.update(row([], 2));
  assert.equal(run({ family: 6, src: 9n, dst: SVC6, proto: 58, icmpType: 135, ext: [0] }), 'allow');
  assert.equal(run({ family: 6, src: 9n, dst: SVC6, proto: 58, icmpType: 128, ext: [0] }), 'deny');
  ops.delete(row([], 2));
});

const ALL: PolicyRule = { id: 1, verdict: 'allow', peers: [{ cidr: { family: 6, addr: 0n, len: 0 }, except: [] }, { cidr: { family: 4, addr: 0n, len: 0 }, except: [] }], origin: 'test' };
const echo6 = () => prog.testRun(buildFrame({ family: 6, src: 1n, dst: SVC6, proto: 58, icmpType: 128 })).retval;
const tcp4 = (dst: bigint) => prog.testRun(buildFrame({ family: 4, src: 1n, dst, proto: 6, dport: 80 })).retval;

test('a restarted writer adopts the pinned maps: never writes into the slot in force, clears what it left', () => {
  const before = new PolicyMapOps(prog.maps);
  before.adopt();
  before.update(row([ALL], 1)); // the previous run: everything allowed, in force in one slot
  assert.equal(echo6(), TC_ACT_UNSPEC);
  const oldGen = prog.maps.svc6.lookup('2001:db8::10')!.gen;
  const lpmBefore = prog.maps.lpm6.keys().length + prog.maps.lpm4.keys().length;
  // A new run over the same maps (pins) knows nothing in memory. Its first
  // revision (nothing allowed) must land in the other slot and be complete:
  // writing into the slot in force would leave the old allow entries there.
  const after = new PolicyMapOps(prog.maps);
  assert.deepEqual(after.adopt(), { ips: 2, prefixes: lpmBefore });
  after.update(row([], 2));
  assert.equal(echo6(), TC_ACT_SHOT, 'the new revision is enforced, not a mix with the old one (nor the old verdict the cache holds)');
  // The new run's generation is above every one the old run handed out (gen_hw): a cached verdict of the old run can never match it.
  assert.ok(prog.maps.svc6.lookup('2001:db8::10')!.gen > oldGen, 'a generation above the old run\'s');
  assert.ok(prog.maps.svc6.lookup('2001:db8::10')!.gen < prog.maps.genHw.lookup(0)!, 'below the high-water mark');
  // Another service took the old run's ids: its slots are the pair of id 7 on the old run's side.
  after.update({ ...row([ALL], 1), service: 'default/other', svcId: 8, ips: ['198.51.100.20'] });
  assert.equal(tcp4(OTHER4), TC_ACT_UNSPEC);
  // prune: what the old run left and no row wants goes (its slot's prefixes).
  after.prune([row([], 2), { ...row([ALL], 1), service: 'default/other', svcId: 8, ips: ['198.51.100.20'] }]);
  const slots = new Set([...prog.maps.lpm4.keys(), ...prog.maps.lpm6.keys()].map((k) => k.slot));
  assert.deepEqual([...slots].sort(), [16].sort(), 'only the live slot of default/other holds prefixes (default/web allows nothing)');
  after.prune([]);
  assert.equal(prog.maps.svc4.keys().length + prog.maps.svc6.keys().length + prog.maps.lpm4.keys().length + prog.maps.lpm6.keys().length, 0);
  assert.equal(echo6(), TC_ACT_UNSPEC, 'no row: open');
});

test('pinned maps of an older layout are replaced as a set; generations keep rising across loads', () => {
  const dir = `/sys/fs/bpf/herald-test-policy-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  try {
    // An older herald's svc_v4 (8-byte values, no generation).
    execFileSync('bpftool', ['map', 'create', join(dir, 'policy_svc_v4'), 'type', 'hash', 'key', '4', 'value', '8', 'entries', '64', 'name', 'svc_v4']);
    const valueSize = () => (JSON.parse(execFileSync('bpftool', ['-j', 'map', 'show', 'pinned', join(dir, 'policy_svc_v4')], { encoding: 'utf8' })) as { bytes_value: number }).bytes_value;
    assert.equal(valueSize(), 8);
    const gens: bigint[] = [];
    for (let run = 0; run < 3; run++) {
      const p = PolicyProgram.load({ pinDir: dir });
      try {
        const ops = new PolicyMapOps(p.maps);
        ops.adopt();
        ops.update(row([ALL], run + 1));
        ops.update(row([], run + 2));
        gens.push(p.maps.svc4.lookup('198.51.100.10')!.gen);
      } finally {
        p.dispose();
      }
    }
    assert.equal(valueSize(), 16, 'recreated with this layout');
    assert.ok(gens[0]! > 0n && gens[1]! > gens[0]! && gens[2]! > gens[1]!, `generations across loads: ${gens.join(', ')}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a batch of rows decides exactly as the same rows written one by one; a row that cannot be written keeps its previous revision', () => {
  const ops = new PolicyMapOps(prog.maps);
  ops.adopt();
  const r = rng(7);
  const rows: ServicePolicyRow[] = [];
  const rulesOf: PolicyRule[][] = [];
  for (let i = 0; i < 40; i++) {
    const pool: Prefix[] = [];
    const rules = randomRules(r, pool);
    rulesOf.push(rules);
    rows.push({ ...row(rules, 1), service: `default/s${i}`, svcId: 100 + i, ips: [`198.51.100.${100 + i}`, `2001:db8::${(0x100 + i).toString(16)}`] });
  }
  assert.deepEqual(ops.updateBatch(rows), rows.map(() => undefined));
  for (let i = 0; i < rows.length; i++) {
    for (let k = 0; k < 20; k++) {
      const pkt = randomPacket(r, [], rulesOf[i]!);
      if (pkt.fragment) continue;
      const dst = pkt.family === 4 ? 0xc6336400n + BigInt(100 + i) : (0x20010db8n << 96n) | BigInt(0x100 + i);
      const expected = evaluate(rulesOf[i]!, pkt).verdict;
      const got = prog.testRun(buildFrame({ family: pkt.family, src: pkt.src, dst, proto: pkt.proto, ...(pkt.dport !== undefined ? { dport: pkt.dport } : {}) })).retval;
      assert.equal(got === TC_ACT_SHOT ? 'deny' : 'allow', expected, `row ${i}`);
    }
  }
  // Second revision for all; one row carries a prefix with too many entries for the datapath: that row alone fails.
  const tooMany = Array.from({ length: 17 }, (_, j) => ({ proto: 6, deny: false, any: false, lo: j, hi: j, rule: 1 }));
  const next: ServicePolicyRow[] = rows.map((x) => ({ ...x, revision: 2, prefixes: [{ family: 4 as const, addr: 0n, len: 0, entries: [] }] })); // selected, nothing allowed
  next[3] = { ...next[3]!, prefixes: [{ family: 4, addr: 0n, len: 0, entries: tooMany }] };
  const out = ops.updateBatch(next);
  assert.equal(out.filter((x) => x !== undefined).length, 1);
  assert.ok(out[3] instanceof Error);
  assert.equal(ops.realized().get('default/s3'), 1, 'the failed row keeps revision 1');
  assert.equal(ops.realized().get('default/s4'), 2);
  assert.equal(tcp4(0xc6336400n + 104n), TC_ACT_SHOT, 'revision 2 enforced');
  assert.deepEqual(ops.deleteBatch(next), next.map(() => undefined));
  assert.equal(prog.maps.svc4.keys().length + prog.maps.lpm4.keys().length + prog.maps.lpm6.keys().length, 0);
});
