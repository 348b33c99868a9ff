/**
 * The policy pipeline, the edges the main pipeline tests leave open: the rule
 * text `herald policy` shows, the submit/dispose lifecycle and failed
 * changes, service moves (IPs freed, shared IPs given back), selective
 * regeneration (what must and what must not be rewritten), the shared-IP
 * row's content, compile errors, realization (revision, delay, failures,
 * idle) and the datapath service ids.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { systemClock, type Clock } from '../../../src/core/clock.js';
import { HeraldError } from '../../../src/core/errors.js';
import { silentLogger, type Logger } from '../../../src/core/logger.js';
import { defineTable, StateDB, type RWTable } from '../../../src/core/statedb/index.js';
import { servicePolicyTable, type ServicePolicyRow } from '../../../src/datapath/tables/service-policy.js';
import { toPrefix, type RuleInput, type RuleSetInput, type Selection } from '../../../src/controlplane/policy/intake.js';
import { PROTO, type PolicyRule, type PortRange } from '../../../src/controlplane/policy/model.js';
import { describeRule, PolicyPipeline, type PolicyPipelineDeps } from '../../../src/controlplane/policy/pipeline.js';
import type { ServiceInfo } from '../../../src/controlplane/policy/selection.js';
import type { ServicePort } from '../../../src/controlplane/policy/shared.js';
import { trace } from '../../../src/controlplane/policy/trace.js';
import { ManualClock } from '../../helpers/manual-clock.js';
import { recordingLogger } from '../../helpers/recording-logger.js';

const NS = 'shop';
const X = '198.51.100.10';
const Y = '198.51.100.20';

function svc(name: string, ips: string[], ports?: ServicePort[], labels: Record<string, string> = { app: name }): ServiceInfo {
  return { service: `${NS}/${name}`, namespace: NS, labels: { ...labels, 'io.kubernetes.service.namespace': NS, 'io.kubernetes.service.name': name }, ips, ...(ports ? { ports } : {}) };
}

const byApp = (app: string): Selection => ({ kind: 'labels', namespace: NS, selector: { matchLabels: { app }, matchExpressions: [] } });
/** Every service of the namespace (no matchLabels: the selection index scans it). */
const wholeNamespace: Selection = { kind: 'labels', namespace: NS, selector: { matchLabels: {}, matchExpressions: [] } };

function rule(selection: Selection, cidrs: string[], extra: Partial<RuleInput> = {}): RuleInput {
  return { verdict: 'allow', peers: cidrs.map((c) => ({ cidr: toPrefix(c), except: [] })), selection, origin: 'test', ...extra };
}

function set(name: string, ...rules: RuleInput[]): RuleSetInput {
  return { key: `CiliumNetworkPolicy/${NS}/${name}`, rules };
}

const tcpPorts = (...ports: number[]): ServicePort[] => ports.map((port) => ({ proto: PROTO.TCP, port }));

function setup(over: Partial<PolicyPipelineDeps> & { table?: RWTable<ServicePolicyRow> } = {}) {
  const table = over.table ?? (servicePolicyTable as RWTable<ServicePolicyRow>);
  const db = over.db ?? new StateDB([table]);
  const p = new PolicyPipeline({ db, table, clock: systemClock, log: silentLogger, ...over });
  const rows = () => db.readTxn().list(table);
  const row = (service: string) => rows().find((r) => r.service === service);
  const tableRev = () => db.readTxn().revision(table);
  return { db, p, rows, row, tableRev, table };
}

/** What a promise has done by the next macrotask: a change the pipeline forgot would otherwise hang the test. */
async function outcome<T>(pr: Promise<T>): Promise<{ ok: T } | { err: unknown } | 'pending'> {
  return Promise.race([pr.then((ok) => ({ ok }), (err: unknown) => ({ err })), new Promise<'pending'>((r) => setImmediate(() => r('pending')))]);
}

function deferred() {
  let resolve!: () => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<void>((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
}

const tcpFrom = (src: string, dport: number) => ({ family: 4 as const, src: toPrefix(`${src}/32`).addr, proto: PROTO.TCP, dport });

describe('describeRule: the text `herald policy` shows for a rule', () => {
  const base = { id: 1, origin: 't' } as const;

  it('a rule without peers says it only selects the service', () => {
    const r: PolicyRule = { ...base, verdict: 'allow', peers: [] };
    assert.equal(describeRule(r), 'selects the service (allows nothing itself)');
  });

  it('lists every peer block, space separated, each with its excepts comma separated', () => {
    const r: PolicyRule = {
      ...base,
      verdict: 'allow',
      peers: [
        { cidr: toPrefix('10.0.0.0/8'), except: [toPrefix('10.1.0.0/16'), toPrefix('10.2.0.0/16')] },
        { cidr: toPrefix('192.0.2.0/24'), except: [] },
      ],
    };
    assert.equal(describeRule(r), 'allow from 10.0.0.0/8 except 10.1.0.0/16,10.2.0.0/16 192.0.2.0/24 to any');
  });

  it('writes a single port as itself, the full range as *, any other range as lo-hi, each with its protocol', () => {
    const ports: PortRange[] = [
      { proto: PROTO.TCP, lo: 80, hi: 80 },
      { proto: PROTO.UDP, lo: 0, hi: 65535 },
      { proto: PROTO.TCP, lo: 1000, hi: 2000 },
      { proto: PROTO.SCTP, lo: 0, hi: 100 },
      { proto: PROTO.TCP, lo: 5, hi: 65535 },
      { proto: PROTO.ICMP, lo: 8, hi: 8 },
    ];
    const r: PolicyRule = { ...base, verdict: 'deny', peers: [{ cidr: toPrefix('192.0.2.0/24'), except: [] }], ports };
    assert.equal(describeRule(r), 'deny from 192.0.2.0/24 to 80/TCP,*/UDP,1000-2000/TCP,0-100/SCTP,5-65535/TCP,8/ICMP');
  });

  it('the row shows the same text, stable across reads', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X])] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24'], { ports: [{ proto: PROTO.TCP, lo: 443, hi: 443 }] }))] });
    const rules = row('shop/a')!.rules;
    assert.equal(rules[0]!.text, 'allow from 192.0.2.0/24 to 443/TCP');
    assert.equal(rules[0]!.text, 'allow from 192.0.2.0/24 to 443/TCP');
    p.dispose();
  });
});

describe('submit and dispose', () => {
  it('a change submitted after dispose is refused with HERALD_STOPPED, not left pending', async () => {
    const { p } = setup();
    p.dispose();
    const got = await outcome(p.submit({ kind: 'services', upsert: [svc('a', [X])] }));
    assert.ok(got !== 'pending' && 'err' in got, 'the submit must reject at once');
    assert.ok(got.err instanceof HeraldError);
    assert.equal(got.err.code, 'HERALD_STOPPED');
    assert.equal(got.err.message, 'policy pipeline is stopped');
  });

  it('dispose refuses the changes still queued behind the running pass; the change already applied resolves', async () => {
    const { p } = setup();
    // The first submit is applied at once; the second waits for the trigger's next pass.
    const first = p.submit({ kind: 'rules', sets: [set('a', rule(byApp('a'), ['192.0.2.0/24']))] });
    const second = p.submit({ kind: 'rules', sets: [set('b', rule(byApp('b'), ['192.0.2.0/24']))] });
    p.dispose();
    assert.equal((await first).revision, 1);
    const got = await outcome(second);
    assert.ok(got !== 'pending' && 'err' in got, 'the queued change must be refused');
    assert.ok(got.err instanceof HeraldError);
    assert.equal(got.err.code, 'HERALD_STOPPED');
    assert.equal(got.err.message, 'policy pipeline is stopped');
    assert.equal(p.repository.revision, 1, 'the refused change was never applied');
  });

  it('a change that cannot be applied rejects its own promise; the changes after it still run', async () => {
    const { p, db, table, row } = setup();
    const other = db.writeTxn([table]); // the one write txn is taken: the pipeline cannot write
    const failed = outcome(p.submit({ kind: 'services', upsert: [svc('a', [X])] }));
    other.abort();
    const got = await failed;
    assert.ok(got !== 'pending' && 'err' in got, 'the failed change must reject');
    assert.match(String(got.err), /another write transaction is open/);
    const r = await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    assert.deepEqual(r.regenerated, ['shop/a']);
    assert.deepEqual(row('shop/a')!.ips, [X]);
    p.dispose();
  });

  it('a write the table refuses aborts the whole transaction (no partial rows) and leaves the database writable', async () => {
    let refuse = true;
    const picky = defineTable<ServicePolicyRow>({
      name: 'service-policy',
      primaryKey: (r) => r.service,
      indexes: {
        service: (r) => {
          if (refuse && r.service === 'shop/a') throw new Error('refused by the table');
          return r.service;
        },
      },
    });
    const { p, rows, row } = setup({ table: picky });
    await p.submit({ kind: 'services', upsert: [svc('a', [X])] });
    const got = await outcome(p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] }));
    assert.ok(got !== 'pending' && 'err' in got, 'the change must reject');
    assert.match(String(got.err), /refused by the table/);
    assert.deepEqual(rows(), []);
    refuse = false;
    const r = await p.submit({ kind: 'services', upsert: [svc('a', [X])] });
    assert.deepEqual(r.regenerated, ['shop/a']);
    assert.deepEqual(row('shop/a')!.ips, [X]);
    p.dispose();
  });

  it('services() lists the services the pipeline knows, without removed ones', async () => {
    const { p } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X]), svc('b', [Y])] });
    assert.deepEqual(p.services().map((s) => s.service).sort(), ['shop/a', 'shop/b']);
    await p.submit({ kind: 'services', upsert: [], remove: ['shop/a'] });
    assert.deepEqual(p.services().map((s) => s.service), ['shop/b']);
    p.dispose();
  });
});

describe('service changes', () => {
  it('removing a service that was never added is a harmless no-op', async () => {
    const { p, rows } = setup();
    const r = await p.submit({ kind: 'services', upsert: [], remove: ['shop/ghost'] });
    assert.deepEqual(r.regenerated, []);
    assert.deepEqual(r.errors, []);
    assert.deepEqual(rows(), []);
    p.dispose();
  });

  it('removing a service drops its row and frees its IP: another service then owns it alone', async () => {
    const { p, rows, row } = setup();
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['192.0.2.0/24']))] });
    await p.submit({ kind: 'services', upsert: [svc('a', [X])] });
    const gone = await p.submit({ kind: 'services', upsert: [], remove: ['shop/a'] });
    assert.deepEqual(gone.regenerated, ['shop/a']);
    assert.deepEqual(rows(), []);
    await p.submit({ kind: 'services', upsert: [svc('b', [X])] });
    assert.deepEqual(rows().map((r) => [r.service, r.ips]), [['shop/b', [X]]], 'not a shared row: a is gone');
    assert.ok(row('shop/b'));
    p.dispose();
  });

  it('a service that moves off a shared IP gives it back to the service left on it', async () => {
    const { p, rows } = setup();
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['192.0.2.0/24']))] });
    await p.submit({ kind: 'services', upsert: [svc('a', [X, Y], tcpPorts(80)), svc('b', [X], tcpPorts(443))] });
    const shape = () => rows().map((r) => [r.service, r.ips]).sort();
    assert.deepEqual(shape(), [[`ip:${X}`, [X]], ['shop/a', [Y]], ['shop/b', []]]);
    const r = await p.submit({ kind: 'services', upsert: [svc('a', [Y], tcpPorts(80))] });
    assert.deepEqual(shape(), [['shop/a', [Y]], ['shop/b', [X]]]);
    assert.ok(r.regenerated.includes(`ip:${X}`) && r.regenerated.includes('shop/b'), r.regenerated.join());
    p.dispose();
  });
});

describe('selective regeneration', () => {
  it('re-upserting identical services (what every intent pass sends) writes nothing, shared IP rows included', async () => {
    const { p, tableRev } = setup();
    const services = () => [svc('a', [X, Y], tcpPorts(80)), svc('b', [X], tcpPorts(443)), svc('c', ['198.51.100.30'])];
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['192.0.2.0/24']))] });
    await p.submit({ kind: 'services', upsert: services() });
    const before = tableRev();
    const r = await p.submit({ kind: 'services', upsert: services() });
    assert.deepEqual(r.regenerated, []);
    assert.deepEqual(r.errors, []);
    assert.equal(tableRev(), before);
    p.dispose();
  });

  it('re-applying unchanged rules over a shared IP writes nothing', async () => {
    const { p, tableRev } = setup();
    const rules = () => [set('all', rule(wholeNamespace, ['192.0.2.0/24']))];
    await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(80)), svc('b', [X], tcpPorts(443))] });
    await p.submit({ kind: 'rules', sets: rules() });
    const before = tableRev();
    const r = await p.submit({ kind: 'rules', sets: rules() });
    assert.deepEqual(r.regenerated, []);
    assert.equal(tableRev(), before);
    p.dispose();
  });

  it('a port change on a service none of whose rules name a port writes nothing (its policy does not depend on ports)', async () => {
    const { p } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(80))] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    const r = await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(80, 443))] });
    assert.deepEqual(r.regenerated, []);
    p.dispose();
  });

  it('a service one of whose rules names a port is regenerated when that port moves, even if its other rules do not name ports', async () => {
    const { p, rows } = setup();
    const withPorts = (port: number) => svc('a', [X], [{ proto: PROTO.TCP, port, targetPort: 'http' }]);
    await p.submit({ kind: 'services', upsert: [withPorts(80)] });
    await p.submit({
      kind: 'rules',
      sets: [set('named', rule(byApp('a'), ['0.0.0.0/0'], { ports: [], namedPorts: [{ proto: PROTO.TCP, name: 'http' }] })), set('plain', rule(byApp('a'), ['203.0.113.0/24']))],
    });
    assert.equal(trace(rows(), X, tcpFrom('192.0.2.9', 80)).verdict, 'allow');
    const r = await p.submit({ kind: 'services', upsert: [withPorts(8080)] });
    assert.deepEqual(r.regenerated, ['shop/a']);
    assert.equal(trace(rows(), X, tcpFrom('192.0.2.9', 8080)).verdict, 'allow');
    assert.equal(trace(rows(), X, tcpFrom('192.0.2.9', 80)).verdict, 'deny');
    p.dispose();
  });

  it('rules 2 and 3 replaced by rule 23 in one change: the row follows (rule ids 1,2,3 and 1,23 are different policies)', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X])] });
    // Rule ids 1..22: 1, 2 and 3 select a; 4..22 select nothing.
    const sets: RuleSetInput[] = [];
    for (let i = 1; i <= 22; i++) sets.push(set(`p${i}`, rule(byApp(i <= 3 ? 'a' : 'nobody'), [`192.0.2.${i}/32`])));
    await p.submit({ kind: 'rules', sets });
    assert.deepEqual(row('shop/a')!.rules.map((r) => r.id), [1, 2, 3]);
    const r = await p.submit({ kind: 'rules', sets: [set('p2'), set('p3'), set('p23', rule(byApp('a'), ['203.0.113.0/24']))] });
    assert.deepEqual(r.regenerated, ['shop/a']);
    assert.deepEqual(row('shop/a')!.rules.map((x) => x.id), [1, 23]);
    assert.equal(trace([row('shop/a')!], X, tcpFrom('192.0.2.2', 80)).verdict, 'deny', 'rule 2 is gone');
    assert.equal(trace([row('shop/a')!], X, tcpFrom('203.0.113.7', 80)).verdict, 'allow', 'rule 23 is in force');
    p.dispose();
  });

  it('a service whose own and shared IPs swap in one change is rewritten, even when the two IP lists read the same run together', async () => {
    const { p, rows, row } = setup();
    // Own IPs before: 198.51.100.1, 192.0.2.10; after: 198.51.100.11, 92.0.2.10 ("198.51.100.1"+"192.0.2.10" = "198.51.100.11"+"92.0.2.10").
    const ips = ['198.51.100.1', '198.51.100.11', '192.0.2.10', '92.0.2.10'];
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['203.0.113.0/24']))] });
    await p.submit({ kind: 'services', upsert: [svc('a', ips, tcpPorts(80)), svc('b', ['198.51.100.11', '92.0.2.10'], tcpPorts(443))] });
    assert.deepEqual(row('shop/a')!.ips, ['198.51.100.1', '192.0.2.10']);
    const r = await p.submit({ kind: 'services', upsert: [svc('b', ['198.51.100.1', '192.0.2.10'], tcpPorts(443))] });
    assert.ok(r.regenerated.includes('shop/a'), r.regenerated.join());
    assert.deepEqual(row('shop/a')!.ips, ['198.51.100.11', '92.0.2.10']);
    // Every IP is in exactly one row: the datapath's svc map has one owner per IP.
    const owners = rows().flatMap((x) => x.ips);
    assert.deepEqual([...owners].sort(), [...ips].sort());
    p.dispose();
  });

  it('a row lists its rules in id order, whichever way the selection index found them (own row and shared row)', async () => {
    const { p, row } = setup();
    // Created before the services, in id order: 1 scans the namespace, 2 names the service, 3 is indexed by its label.
    await p.submit({
      kind: 'rules',
      sets: [
        set('scan', rule(wholeNamespace, ['192.0.2.1/32'])),
        set('by-name', rule({ kind: 'service', service: 'shop/a' }, ['192.0.2.2/32'])),
        set('by-label', rule(byApp('a'), ['192.0.2.3/32'])),
      ],
    });
    await p.submit({ kind: 'services', upsert: [svc('a', [X, Y], tcpPorts(80)), svc('b', [X], tcpPorts(443))] });
    assert.deepEqual(row('shop/a')!.rules.map((r) => r.id), [1, 2, 3]);
    assert.deepEqual(row(`ip:${X}`)!.rules.map((r) => r.id), [1, 2, 3], 'a first (1, 2, 3), then b (1, already listed)');
    p.dispose();
  });
});

describe('the shared IP row', () => {
  it('is left alone when a service leaves and rejoins it in one change (its services are compared as a set, not in join order)', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['192.0.2.0/24']))] });
    const a = () => svc('a', [X], tcpPorts(80));
    await p.submit({ kind: 'services', upsert: [a(), svc('b', [X], tcpPorts(443)), svc('c', [X], tcpPorts(53))] });
    const before = row(`ip:${X}`)!;
    const r = await p.submit({ kind: 'services', upsert: [a()], remove: ['shop/a'] });
    assert.ok(!r.regenerated.includes(`ip:${X}`), r.regenerated.join());
    assert.equal(row(`ip:${X}`), before, 'the same row object: not rewritten');
    p.dispose();
  });

  it('follows a rule change of one of its services', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(80)), svc('b', [X], tcpPorts(443))] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    const shared = () => trace([row(`ip:${X}`)!], X, tcpFrom('203.0.113.7', 80)).verdict;
    assert.equal(shared(), 'deny');
    const r = await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['203.0.113.0/24']))] });
    assert.ok(r.regenerated.includes(`ip:${X}`));
    assert.equal(shared(), 'allow');
    // b, which no policy selects, stays open on its own port.
    assert.deepEqual(row(`ip:${X}`)!.rules.map((x) => x.text), ['allow from 203.0.113.0/24 to 80/TCP', 'allow from 0.0.0.0/0 ::/0 to 443/TCP']);
    p.dispose();
  });

  it('lists a rule that selects several of its services once', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(80)), svc('b', [X], tcpPorts(443))] });
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['192.0.2.0/24']))] });
    assert.deepEqual(row(`ip:${X}`)!.rules.map((r) => r.id), [1]);
    assert.equal(trace([row(`ip:${X}`)!], X, tcpFrom('192.0.2.9', 443)).verdict, 'allow');
    p.dispose();
  });

  it('a sharing service that declares no ports contributes nothing to it (not even an open rule)', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(80)), svc('b', [X])] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    assert.deepEqual(row(`ip:${X}`)!.rules.map((r) => r.id), [1]);
    p.dispose();
  });

  it('resolves a named port against the sharing service’s own ports', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X], [{ proto: PROTO.TCP, port: 8080, targetPort: 'http' }]), svc('b', [X], tcpPorts(443))] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['0.0.0.0/0'], { ports: [], namedPorts: [{ proto: PROTO.TCP, name: 'http' }] }))] });
    assert.equal(trace([row(`ip:${X}`)!], X, tcpFrom('192.0.2.9', 8080)).verdict, 'allow');
    p.dispose();
  });
});

describe('compile errors', () => {
  const seventeenPorts: PortRange[] = Array.from({ length: 17 }, (_, i) => ({ proto: PROTO.TCP, lo: 1000 + 2 * i, hi: 1000 + 2 * i }));

  it('a service whose new policy does not compile is reported and keeps its previous row', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X]), svc('b', [Y])] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    const r = await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24'], { ports: seventeenPorts })), set('b-in', rule(byApp('b'), ['192.0.2.0/24']))] });
    assert.deepEqual(r.errors, [
      { service: 'shop/a', error: 'shop/a: source 192.0.2.0/24 is matched by 17 port entries, the datapath holds 16 per prefix (merge port ranges or rules)' },
    ]);
    assert.deepEqual(r.regenerated, ['shop/b']);
    assert.deepEqual(row('shop/a')!.rules.map((x) => x.text), ['allow from 192.0.2.0/24 to any'], 'the previous row stays in force');
    p.dispose();
  });

  it('a shared IP whose merged policy does not compile is reported under its row key', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X], tcpPorts(...seventeenPorts.map((x) => x.lo))), svc('b', [X], tcpPorts(443))] });
    const r = await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    // a's rule on a's 17 ports, and b's open rule on 443 (from everywhere, so from 192.0.2.0/24 too).
    assert.deepEqual(r.errors, [
      { service: `ip:${X}`, error: `ip:${X}: source 192.0.2.0/24 is matched by 18 port entries, the datapath holds 16 per prefix (merge port ranges or rules)` },
    ]);
    assert.equal(row(`ip:${X}`), undefined);
    assert.deepEqual(r.regenerated, ['shop/a']);
    p.dispose();
  });
});

describe('realization', () => {
  it('realizedRevision never moves backwards when revisions are realized out of order', async () => {
    const waits: ReturnType<typeof deferred>[] = [];
    const { p } = setup({ waitRealized: () => (waits.push(deferred()), waits.at(-1)!.promise) });
    const r1 = await p.submit({ kind: 'rules', sets: [set('a', rule(byApp('a'), ['192.0.2.0/24']))] });
    const r2 = await p.submit({ kind: 'rules', sets: [set('b', rule(byApp('b'), ['192.0.2.0/24']))] });
    assert.deepEqual([r1.revision, r2.revision], [1, 2]);
    waits[1]!.resolve();
    await r2.realized;
    assert.equal(p.realizedRevision, 2);
    waits[0]!.resolve();
    await r1.realized;
    assert.equal(p.realizedRevision, 2, 'the late realization of revision 1 does not undo 2');
    p.dispose();
  });

  it('the implementation delay is the time from enqueue to realization, in seconds, with the submit’s source (api by default)', async () => {
    const clock = new ManualClock();
    clock.advance(1000);
    const waits: ReturnType<typeof deferred>[] = [];
    const delays: [number, string][] = [];
    const { p } = setup({ clock: clock as Clock, waitRealized: () => (waits.push(deferred()), waits.at(-1)!.promise), observeDelay: (s, source) => delays.push([s, source]) });
    const a = await p.submit({ kind: 'rules', sets: [set('a', rule(byApp('a'), ['192.0.2.0/24']))] });
    const b = await p.submit({ kind: 'rules', sets: [set('b', rule(byApp('b'), ['192.0.2.0/24']))] }, 'intent');
    clock.advance(1500);
    for (const w of waits) w.resolve();
    await Promise.all([a.realized, b.realized]);
    assert.deepEqual(delays, [
      [1.5, 'api'],
      [1.5, 'intent'],
    ]);
    p.dispose();
  });

  it('without an observeDelay hook a change is still realized', async () => {
    const { p } = setup();
    const r = await p.submit({ kind: 'rules', sets: [set('a', rule(byApp('a'), ['192.0.2.0/24']))] });
    await r.realized;
    assert.equal(p.realizedRevision, r.revision);
    p.dispose();
  });

  it('a revision the datapath fails to realize: its promise rejects, a warning names it, realizedRevision stays', async () => {
    const log = recordingLogger();
    const { p } = setup({ log: log as Logger, waitRealized: () => Promise.reject(new Error('datapath gone')) });
    const r = await p.submit({ kind: 'rules', sets: [set('a', rule(byApp('a'), ['192.0.2.0/24']))] });
    await assert.rejects(r.realized, /datapath gone/);
    await p.idle();
    assert.equal(p.realizedRevision, 0);
    assert.deepEqual(
      log.lines.filter((l) => l.level === 'warn'),
      [{ level: 'warn', msg: 'policy revision not realized', obj: { err: 'datapath gone', revision: 1 } }],
    );
    p.dispose();
  });

  it('idle() waits until every realization handed out so far has settled', async () => {
    const waits: ReturnType<typeof deferred>[] = [];
    const { p } = setup({ waitRealized: () => (waits.push(deferred()), waits.at(-1)!.promise) });
    const r = await p.submit({ kind: 'rules', sets: [set('a', rule(byApp('a'), ['192.0.2.0/24']))] });
    let idle = false;
    const done = p.idle().then(() => (idle = true));
    await new Promise((res) => setImmediate(res));
    assert.equal(idle, false, 'revision 1 is not realized yet');
    waits[0]!.resolve();
    assert.notEqual(await outcome(done), 'pending', 'idle() resolves once revision 1 is realized');
    assert.equal(idle, true);
    assert.equal(p.realizedRevision, r.revision);
    p.dispose();
  });
});

describe('datapath service ids', () => {
  it('each row gets a positive id of its own (its LPM slots are id*2, id*2+1), kept while the row is rewritten', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X]), svc('b', [Y])] });
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['192.0.2.0/24']))] });
    const a = row('shop/a')!.svcId;
    const b = row('shop/b')!.svcId;
    assert.ok(Number.isInteger(a) && Number.isInteger(b));
    assert.ok(a >= 1 && b >= 1, `ids ${a}, ${b}`);
    assert.notEqual(a, b);
    await p.submit({ kind: 'rules', sets: [set('all', rule(wholeNamespace, ['203.0.113.0/24']))] });
    assert.equal(row('shop/a')!.rules[0]!.text, 'allow from 203.0.113.0/24 to any');
    assert.equal(row('shop/a')!.svcId, a);
    assert.equal(row('shop/b')!.svcId, b);
    p.dispose();
  });

  it('a service that loses its row and later gets one again is given a fresh id (ids are never reused)', async () => {
    const { p, row } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', [X])] });
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    const first = row('shop/a')!.svcId;
    await p.submit({ kind: 'rules', sets: [set('a-in')] });
    assert.equal(row('shop/a'), undefined);
    await p.submit({ kind: 'rules', sets: [set('a-in', rule(byApp('a'), ['192.0.2.0/24']))] });
    assert.ok(row('shop/a')!.svcId > first, `${row('shop/a')!.svcId} after ${first}`);
    p.dispose();
  });
});
