/**
 * The policy pipeline above the datapath: revision per change, changes
 * serialized, selective regeneration (only services whose effective policy
 * changed get a new row), replace-by-labels with reference-counted prefixes,
 * unselected services open, the implementation delay observed once realized.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { systemClock } from '../../../src/core/clock.js';
import { silentLogger } from '../../../src/core/logger.js';
import { StateDB, type RWTable } from '../../../src/core/statedb/index.js';
import { servicePolicyTable, type ServicePolicyRow } from '../../../src/datapath/tables/service-policy.js';
import { sourceRangeRuleSet, toPrefix, type RuleInput, type RuleSetInput } from '../../../src/controlplane/policy/intake.js';
import { NO_DEFAULT_DENY_RULE, prefixKey } from '../../../src/controlplane/policy/model.js';
import { PolicyPipeline } from '../../../src/controlplane/policy/pipeline.js';
import type { ServiceInfo } from '../../../src/controlplane/policy/selection.js';

function svc(ns: string, name: string, ip: string, labels: Record<string, string> = {}): ServiceInfo {
  return {
    service: `${ns}/${name}`,
    namespace: ns,
    labels: { ...labels, 'io.kubernetes.service.namespace': ns, 'io.kubernetes.service.name': name },
    ips: [ip],
  };
}

function cnp(ns: string, name: string, app: string, cidrs: string[], verdict: 'allow' | 'deny' = 'allow'): RuleSetInput {
  const rule: RuleInput = {
    verdict,
    peers: cidrs.map((c) => ({ cidr: toPrefix(c), except: [] })),
    selection: { kind: 'labels', namespace: ns, selector: { matchLabels: { app }, matchExpressions: [] } },
    origin: `CiliumNetworkPolicy ${ns}/${name} spec.ingress[0]`,
  };
  return { key: `CiliumNetworkPolicy/${ns}/${name}`, rules: [rule] };
}

function setup() {
  const db = new StateDB([servicePolicyTable]);
  const delays: number[] = [];
  const p = new PolicyPipeline({
    db,
    table: servicePolicyTable as RWTable<ServicePolicyRow>,
    clock: systemClock,
    log: silentLogger,
    observeDelay: (s) => delays.push(s),
  });
  const rows = () => db.readTxn().list(servicePolicyTable);
  return { db, p, rows, delays };
}

describe('policy pipeline', () => {
  it('a service no policy selects is open (no row); a selected one gets its compiled rules', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('shop', 'web', '198.51.100.10', { app: 'web' }), svc('shop', 'db', '198.51.100.11', { app: 'db' })] });
    assert.deepEqual(rows(), []);
    const r = await p.submit({ kind: 'rules', sets: [cnp('shop', 'web-in', 'web', ['192.0.2.0/24'])] });
    assert.equal(r.revision, 1);
    assert.deepEqual(r.regenerated, ['shop/web']);
    const [row] = rows();
    assert.equal(row!.service, 'shop/web');
    assert.deepEqual(row!.ips, ['198.51.100.10']);
    assert.equal(row!.revision, 1);
    assert.deepEqual(row!.rules.map((x) => x.text), ['allow from 192.0.2.0/24 to any']);
    p.dispose();
  });

  it('a CNP selects only in its namespace', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('shop', 'web', '198.51.100.10', { app: 'web' }), svc('blog', 'web', '198.51.100.12', { app: 'web' })] });
    await p.submit({ kind: 'rules', sets: [cnp('shop', 'web-in', 'web', ['192.0.2.0/24'])] });
    assert.deepEqual(rows().map((r) => r.service), ['shop/web']);
    p.dispose();
  });

  it('selective regeneration: a rule selecting 1 of 1,000 services writes 1 row; an unchanged re-apply writes none', async () => {
    const { p, db } = setup();
    const services = Array.from({ length: 1000 }, (_, i) => svc('shop', `s${i}`, `198.51.${100 + (i >> 8)}.${i & 255}`, { app: `s${i}` }));
    await p.submit({ kind: 'services', upsert: services });
    await p.submit({ kind: 'rules', sets: services.map((s, i) => cnp('shop', `p${i}`, `s${i}`, ['192.0.2.0/24'])) });
    const before = db.readTxn().revision(servicePolicyTable);
    const r = await p.submit({ kind: 'rules', sets: [cnp('shop', 'p500', 's500', ['203.0.113.0/24'])] });
    assert.deepEqual(r.regenerated, ['shop/s500']);
    assert.equal(db.readTxn().revision(servicePolicyTable), before + 1);
    const same = await p.submit({ kind: 'rules', sets: [cnp('shop', 'p500', 's500', ['203.0.113.0/24'])] });
    assert.deepEqual(same.regenerated, [], 're-applying the same rules regenerates nothing');
    assert.equal(same.revision, r.revision + 1, 'but the revision still moves');
    p.dispose();
  });

  it('replace-by-labels swaps an object’s rules atomically; a prefix kept by the new version never drops to zero references', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('shop', 'web', '198.51.100.10', { app: 'web' })] });
    await p.submit({ kind: 'rules', sets: [cnp('shop', 'a', 'web', ['192.0.2.0/24', '203.0.113.0/24'])] });
    const k = prefixKey(toPrefix('192.0.2.0/24'));
    assert.equal(p.repository.prefixRefCount(k), 1);
    await p.submit({ kind: 'rules', sets: [cnp('shop', 'a', 'web', ['192.0.2.0/24'])] });
    assert.equal(p.repository.prefixRefCount(k), 1);
    assert.equal(p.repository.prefixRefCount(prefixKey(toPrefix('203.0.113.0/24'))), 0);
    assert.deepEqual(rows()[0]!.rules.map((x) => x.text), ['allow from 192.0.2.0/24 to any']);
    // Deleting the object: the service is open again.
    await p.submit({ kind: 'rules', sets: [{ key: 'CiliumNetworkPolicy/shop/a', rules: [] }] });
    assert.deepEqual(rows(), []);
    assert.equal(p.repository.prefixCount, 0);
    p.dispose();
  });

  it('loadBalancerSourceRanges select their own service only', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('shop', 'web', '198.51.100.10'), svc('shop', 'api', '198.51.100.11')] });
    await p.submit({ kind: 'rules', sets: [sourceRangeRuleSet('shop/web', ['192.0.2.0/24'])] });
    assert.deepEqual(rows().map((r) => [r.service, r.rules.map((x) => x.verdict)]), [['shop/web', ['deny', 'allow']]]);
    p.dispose();
  });

  it('changes are serialized in submission order, each with its own revision; the delay is observed when realized', async () => {
    const { p, delays } = setup();
    await p.submit({ kind: 'services', upsert: [svc('shop', 'web', '198.51.100.10', { app: 'web' })] });
    const results = await Promise.all([1, 2, 3, 4].map((i) => p.submit({ kind: 'rules', sets: [cnp('shop', 'a', 'web', [`192.0.2.${i * 16}/28`])] })));
    assert.deepEqual(results.map((r) => r.revision), [1, 2, 3, 4]);
    await Promise.all(results.map((r) => r.realized));
    assert.equal(p.realizedRevision, 4);
    assert.equal(delays.length, 5);
    p.dispose();
  });
  it('enableDefaultDeny {ingress: false}: a service only such policies select is not default deny (allow-all after its rules); one policy without it makes it default deny again', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'services', upsert: [svc('shop', 'web', '198.51.100.10', { app: 'web' })] });
    const soft = cnp('shop', 'soft', 'web', ['192.0.2.5/32'], 'deny');
    const softSet: RuleSetInput = { key: soft.key, rules: soft.rules.map((r) => ({ ...r, defaultDeny: false as const })) };
    await p.submit({ kind: 'rules', sets: [softSet] });
    const decide = (src: string) => {
      const row = rows()[0]!;
      const rules = row.rules;
      // The compiled table's longest prefix for the source decides: find it as trace does.
      const addr = toPrefix(`${src}/32`).addr;
      const hits = row.prefixes.filter((x) => x.family === 4 && (x.len === 0 || addr >> BigInt(32 - x.len) === x.addr >> BigInt(32 - x.len))).sort((a, b) => b.len - a.len);
      const e = hits[0]?.entries.find((x) => x.any);
      return { verdict: e ? (e.deny ? 'deny' : 'allow') : 'deny', rule: e?.rule ?? 0, ruleIds: rules.map((r) => r.id) };
    };
    assert.equal(decide('192.0.2.9').verdict, 'allow', 'no rule denies it: not default deny');
    assert.equal(decide('192.0.2.9').rule, NO_DEFAULT_DENY_RULE);
    assert.equal(decide('192.0.2.5').verdict, 'deny', 'the deny rule still applies');
    await p.submit({ kind: 'rules', sets: [cnp('shop', 'strict', 'web', ['192.0.2.1/32'])] });
    assert.equal(decide('192.0.2.9').verdict, 'deny', 'another policy asks for default deny');
    assert.ok(!decide('192.0.2.9').ruleIds.includes(NO_DEFAULT_DENY_RULE));
    assert.equal(decide('192.0.2.1').verdict, 'allow');
    // The switch flipped on the same object (same rules otherwise): a new rule content, the service regenerated.
    await p.submit({ kind: 'rules', sets: [{ key: 'CiliumNetworkPolicy/shop/strict', rules: [] }] });
    const r = await p.submit({ kind: 'rules', sets: [soft] });
    assert.deepEqual(r.regenerated, ['shop/web']);
    assert.equal(decide('192.0.2.9').verdict, 'deny', 'without the switch: default deny');
    p.dispose();
  });
});
