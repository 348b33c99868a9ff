/**
 * An IP two services share (LB-IPAM sharing key): each service keeps its own
 * rules on its own ports. The pure merge against the reference evaluator
 * (random rules), and the pipeline moving the IP between the services' rows
 * and a row of its own as sharing starts and ends.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { systemClock } from '../../../src/core/clock.js';
import { silentLogger } from '../../../src/core/logger.js';
import { StateDB, type RWTable } from '../../../src/core/statedb/index.js';
import { compilePolicy, toPrefixEntries } from '../../../src/controlplane/policy/compile.js';
import { evaluate } from '../../../src/controlplane/policy/evaluate.js';
import { toPrefix, type RuleSetInput } from '../../../src/controlplane/policy/intake.js';
import { PROTO, type Packet, type Prefix } from '../../../src/controlplane/policy/model.js';
import { PolicyPipeline } from '../../../src/controlplane/policy/pipeline.js';
import type { ServiceInfo } from '../../../src/controlplane/policy/selection.js';
import { mergeSharedRules, OPEN_RULE_BASE, restrictToPorts, type ServicePort } from '../../../src/controlplane/policy/shared.js';
import { trace } from '../../../src/controlplane/policy/trace.js';
import { servicePolicyTable, type ServicePolicyRow } from '../../../src/datapath/tables/service-policy.js';
import { int, pick, randomPacket, randomRules, rng } from '../../helpers/policy-gen.js';

const A_PORTS: ServicePort[] = [{ proto: PROTO.TCP, port: 80 }, { proto: PROTO.UDP, port: 53 }];
const B_PORTS: ServicePort[] = [{ proto: PROTO.TCP, port: 443 }];

describe('shared IP: the merged rules', () => {
  it('restricts a rule to the service ports it overlaps', () => {
    assert.deepEqual(restrictToPorts(undefined, A_PORTS), [{ proto: 6, lo: 80, hi: 80 }, { proto: 17, lo: 53, hi: 53 }]);
    assert.deepEqual(restrictToPorts([{ proto: 6, lo: 1, hi: 100 }], A_PORTS), [{ proto: 6, lo: 80, hi: 80 }]);
    assert.deepEqual(restrictToPorts([{ proto: 17, lo: 80, hi: 80 }], A_PORTS), []);
  });

  it('each service decides its own ports exactly as alone; other ports and ICMP: default deny (random rules)', () => {
    const seed = Number(process.env.POLICY_SEED ?? Date.now() % 1_000_000);
    const r = rng(seed);
    let checked = 0;
    for (let set = 0; set < 200; set++) {
      const pool: Prefix[] = [];
      const aRules = randomRules(r, pool, 1);
      const bRules = r() < 0.3 ? [] : randomRules(r, pool, 100);
      const merged = mergeSharedRules([
        { service: 'shop/b', ports: B_PORTS, rules: bRules },
        { service: 'shop/a', ports: A_PORTS, rules: aRules },
      ]);
      compilePolicy(merged); // compiles (what the datapath gets)
      for (let i = 0; i < 60; i++) {
        const base = randomPacket(r, pool, [...aRules, ...bRules]);
        const target = pick(r, [...A_PORTS, ...B_PORTS, { proto: PROTO.TCP, port: int(r, 1000, 2000) }]);
        const pkt: Packet = r() < 0.1 ? { family: base.family, src: base.src, proto: base.family === 4 ? 1 : 58, dport: 8 } : { family: base.family, src: base.src, proto: target.proto, dport: target.port };
        const got = evaluate(merged, pkt);
        const ctx = `seed ${seed} set ${set} ${JSON.stringify(pkt, (_k, v) => (typeof v === 'bigint' ? v.toString(16) : v))}`;
        const owner = A_PORTS.some((p) => p.proto === pkt.proto && p.port === pkt.dport) ? aRules : B_PORTS.some((p) => p.proto === pkt.proto && p.port === pkt.dport) ? bRules : undefined;
        if (owner === undefined) assert.deepEqual(got, { verdict: 'deny', rule: 0 }, ctx);
        else if (owner.length === 0) assert.deepEqual(got, { verdict: 'allow', rule: OPEN_RULE_BASE + 1 }, ctx);
        else assert.deepEqual(got, evaluate(owner, pkt), ctx);
        checked++;
      }
    }
    assert.ok(checked >= 12000);
  });
});

function svc(name: string, ips: string[], ports: ServicePort[], labels: Record<string, string>): ServiceInfo {
  return { service: `shop/${name}`, namespace: 'shop', labels: { ...labels, 'io.kubernetes.service.namespace': 'shop', 'io.kubernetes.service.name': name }, ips, ports };
}

function allowFrom(name: string, app: string, cidr: string): RuleSetInput {
  return {
    key: `CiliumNetworkPolicy/shop/${name}`,
    rules: [{ verdict: 'allow', peers: [{ cidr: toPrefix(cidr), except: [] }], selection: { kind: 'labels', namespace: 'shop', selector: { matchLabels: { app }, matchExpressions: [] } }, origin: `CiliumNetworkPolicy shop/${name} spec.ingress[0]` }],
  };
}

function setup() {
  const db = new StateDB([servicePolicyTable]);
  const p = new PolicyPipeline({ db, table: servicePolicyTable as RWTable<ServicePolicyRow>, clock: systemClock, log: silentLogger });
  const rows = () => db.readTxn().list(servicePolicyTable);
  return { p, rows };
}

const src = (ip: string) => toPrefix(`${ip}/32`).addr;
const tcp = (ip: string, dport: number): Packet => ({ family: 4, src: src(ip), proto: PROTO.TCP, dport });

describe('shared IP: the pipeline', () => {
  it('two services on one IP each keep their own rules (no "last written wins")', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('web', ['198.51.100.10', '198.51.100.20'], [{ proto: 6, port: 80 }], { app: 'web' }), svc('api', ['198.51.100.10'], [{ proto: 6, port: 443 }], { app: 'api' })] });
    await p.submit({ kind: 'rules', sets: [allowFrom('web-in', 'web', '192.0.2.1/32'), allowFrom('api-in', 'api', '192.0.2.5/32')] });
    const all = rows();
    assert.deepEqual(all.map((r) => [r.service, r.ips]).sort(), [['ip:198.51.100.10', ['198.51.100.10']], ['shop/api', []], ['shop/web', ['198.51.100.20']]]);
    // Every IP is in exactly one row: the datapath's svc map has one owner per IP.
    const owners = all.flatMap((r) => r.ips);
    assert.equal(new Set(owners).size, owners.length);
    assert.equal(trace(all, '198.51.100.10', tcp('192.0.2.1', 80)).verdict, 'allow');
    assert.equal(trace(all, '198.51.100.10', tcp('192.0.2.5', 80)).verdict, 'deny');
    assert.equal(trace(all, '198.51.100.10', tcp('192.0.2.5', 443)).verdict, 'allow');
    assert.equal(trace(all, '198.51.100.10', tcp('192.0.2.1', 443)).verdict, 'deny');
    assert.equal(trace(all, '198.51.100.10', tcp('192.0.2.1', 22)).verdict, 'deny', 'a port no sharing service declares');
    // web's own IP keeps web's written semantics (every port).
    assert.equal(trace(all, '198.51.100.20', tcp('192.0.2.1', 22)).verdict, 'allow');
  });

  it('a sharing service no policy selects stays open on its ports; the IP returns to its service when sharing ends', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'rules', sets: [allowFrom('web-in', 'web', '192.0.2.1/32')] });
    await p.submit({ kind: 'services', upsert: [svc('web', ['198.51.100.10'], [{ proto: 6, port: 80 }], { app: 'web' })] });
    assert.deepEqual(rows().map((r) => [r.service, r.ips]), [['shop/web', ['198.51.100.10']]]);
    const r = await p.submit({ kind: 'services', upsert: [svc('dns', ['198.51.100.10'], [{ proto: 17, port: 53 }], { app: 'dns' })] });
    assert.deepEqual([...r.regenerated].sort(), ['ip:198.51.100.10', 'shop/web']);
    const all = rows();
    assert.equal(trace(all, '198.51.100.10', { family: 4, src: src('203.0.113.9'), proto: PROTO.UDP, dport: 53 }).verdict, 'allow');
    assert.equal(trace(all, '198.51.100.10', tcp('203.0.113.9', 80)).verdict, 'deny');
    // dns leaves the IP: web owns it alone again, the shared row goes.
    await p.submit({ kind: 'services', upsert: [], remove: ['shop/dns'] });
    assert.deepEqual(rows().map((x) => [x.service, x.ips]), [['shop/web', ['198.51.100.10']]]);
    assert.equal(trace(rows(), '198.51.100.10', tcp('192.0.2.1', 22)).verdict, 'allow');
  });

  it('no sharing service selected: the IP is open (no row)', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', ['198.51.100.10'], [{ proto: 6, port: 80 }], { app: 'a' }), svc('b', ['198.51.100.10'], [{ proto: 6, port: 81 }], { app: 'b' })] });
    assert.deepEqual(rows(), []);
    await p.submit({ kind: 'rules', sets: [allowFrom('a-in', 'a', '192.0.2.1/32')] });
    assert.deepEqual(rows().map((x) => x.service).sort(), ['ip:198.51.100.10', 'shop/a']);
    await p.submit({ kind: 'rules', sets: [{ key: 'CiliumNetworkPolicy/shop/a-in', rules: [] }] });
    assert.deepEqual(rows(), []);
    assert.ok(toPrefixEntries(compilePolicy([])).length === 0);
  });
});
