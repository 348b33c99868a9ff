/**
 * The policy pipeline after a table write that failed: the model (repository,
 * selection, IP users) had already taken the change, so the next pass — the
 * next change, or a resync pass RESYNC_RETRY_MS later — regenerates every
 * service and shared IP and compares with the table. Before, the services
 * written earlier in the aborted transaction kept fingerprints of rows that
 * were never committed, and the same rules submitted again wrote nothing for them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defineTable, StateDB, type RWTable } from '../../../src/core/statedb/index.js';
import type { ServicePolicyRow } from '../../../src/datapath/tables/service-policy.js';
import { toPrefix, type RuleSetInput } from '../../../src/controlplane/policy/intake.js';
import { PolicyPipeline, RESYNC_RETRY_MS, SHARED_ROW_PREFIX } from '../../../src/controlplane/policy/pipeline.js';
import type { ServiceInfo } from '../../../src/controlplane/policy/selection.js';
import { ManualClock } from '../../helpers/manual-clock.js';
import { recordingLogger } from '../../helpers/recording-logger.js';

const NS = 'shop';
const svc = (name: string, ips: string[]): ServiceInfo => ({
  service: `${NS}/${name}`,
  namespace: NS,
  labels: { app: 'x', 'io.kubernetes.service.namespace': NS, 'io.kubernetes.service.name': name },
  ips,
});
const allowFrom = (cidr: string): RuleSetInput => ({
  key: `CiliumNetworkPolicy/${NS}/in`,
  rules: [{ verdict: 'allow', peers: [{ cidr: toPrefix(cidr), except: [] }], selection: { kind: 'labels', namespace: NS, selector: { matchLabels: { app: 'x' }, matchExpressions: [] } }, origin: 'test' }],
});

/** A table that refuses rows while `refuse(row)` says so (its index function throws inside the write). */
function setup() {
  const control = { refuse: (_r: ServicePolicyRow) => false };
  const delays: string[] = [];
  const table = defineTable<ServicePolicyRow>({
    name: 'service-policy',
    primaryKey: (r) => r.service,
    indexes: {
      service: (r) => {
        if (control.refuse(r)) throw new Error(`refused ${r.service}`);
        return r.service;
      },
    },
  }) as RWTable<ServicePolicyRow>;
  const db = new StateDB([table]);
  const clock = new ManualClock();
  const log = recordingLogger();
  const p = new PolicyPipeline({ db, table, clock, log, observeDelay: (_s, source) => delays.push(source) });
  const services = () => db.readTxn().list(table).map((r) => r.service).sort();
  /** Lets the trigger's pass run (it starts on a resolved promise). */
  const settle = () => new Promise((r) => setImmediate(r));
  return { control, db, table, clock, log, p, services, settle, delays };
}

describe('policy pipeline: a failed table write is never left half-applied', () => {
  it('the same rules submitted again after the failure write every selected service, also those written before the failing one', async () => {
    const { control, p, services } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', ['198.51.100.1']), svc('b', ['198.51.100.2'])] });
    control.refuse = (r) => r.service === 'shop/b';
    await assert.rejects(p.submit({ kind: 'rules', sets: [allowFrom('192.0.2.0/24')] }), /refused shop\/b/);
    assert.deepEqual(services(), []);
    control.refuse = () => false;
    const r = await p.submit({ kind: 'rules', sets: [allowFrom('192.0.2.0/24')] });
    assert.deepEqual([...r.regenerated].sort(), ['shop/a', 'shop/b']);
    assert.deepEqual(services(), ['shop/a', 'shop/b']);
    p.dispose();
  });

  it('without any further change, a resync pass RESYNC_RETRY_MS later writes what the failed change meant; it retries while the table refuses', async () => {
    const { control, clock, log, p, services, settle, delays } = setup();
    await p.submit({ kind: 'services', upsert: [svc('a', ['198.51.100.1']), svc('b', ['198.51.100.2'])] });
    await p.idle();
    assert.deepEqual(delays, ['api']);
    control.refuse = () => true;
    await assert.rejects(p.submit({ kind: 'rules', sets: [allowFrom('192.0.2.0/24')] }), /refused/);
    const failed = log.lines.filter((l) => l.msg.startsWith('policy table write failed'));
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.obj.retryMs, RESYNC_RETRY_MS);
    assert.match(String(failed[0]!.obj.err), /refused/);
    clock.advance(RESYNC_RETRY_MS - 1);
    await settle();
    assert.equal(log.lines.filter((l) => l.msg.startsWith('policy table resync failed')).length, 0, 'not before RESYNC_RETRY_MS');
    clock.advance(1);
    await settle();
    const retried = log.lines.filter((l) => l.msg.startsWith('policy table resync failed'));
    assert.equal(retried.length, 1, 'the resync ran and failed');
    assert.equal(retried[0]!.obj.retryMs, RESYNC_RETRY_MS);
    assert.equal(log.lines.filter((l) => l.msg.startsWith('policy table write failed')).length, 1, 'the failure is warned once, not per retry');
    assert.deepEqual(services(), []);
    control.refuse = () => false;
    clock.advance(RESYNC_RETRY_MS);
    await settle();
    assert.deepEqual(services(), ['shop/a', 'shop/b']);
    assert.ok(log.lines.some((l) => l.msg === 'policy table resynchronized after a failed write' && l.obj.regenerated === 2));
    await p.idle();
    assert.deepEqual(delays, ['api', 'resync'], 'the resync pass is realized under its own source');
    // Healed: no further pass is scheduled, and a change is an ordinary pass again (no resync behind it).
    const passes = log.lines.length;
    clock.advance(10 * RESYNC_RETRY_MS);
    await settle();
    assert.equal(log.lines.length, passes);
    await p.submit({ kind: 'services', upsert: [svc('c', ['198.51.100.3'])] });
    await settle();
    assert.equal(log.lines.filter((l) => l.msg === 'policy table resynchronized after a failed write').length, 1);
    p.dispose();
  });

  it('a service removed by the failed change loses its row at the resync, and a shared IP that is no longer shared loses its own row', async () => {
    const { control, clock, db, table, p, services, settle } = setup();
    const shared = '198.51.100.9';
    await p.submit({ kind: 'rules', sets: [allowFrom('192.0.2.0/24')] });
    await p.submit({ kind: 'services', upsert: [svc('a', ['198.51.100.1', shared]), svc('b', [shared]), svc('c', ['198.51.100.3'])] });
    // b's only IP is the shared one: its own row holds no IP.
    assert.deepEqual(services(), [`${SHARED_ROW_PREFIX}${shared}`, 'shop/a', 'shop/b', 'shop/c']);
    control.refuse = () => true;
    await assert.rejects(p.submit({ kind: 'services', upsert: [], remove: ['shop/b', 'shop/c'] }), /refused/);
    assert.deepEqual(services(), [`${SHARED_ROW_PREFIX}${shared}`, 'shop/a', 'shop/b', 'shop/c'], 'nothing of the failed change is in the table');
    control.refuse = () => false;
    clock.advance(RESYNC_RETRY_MS);
    await settle();
    assert.deepEqual(services(), ['shop/a']);
    assert.deepEqual(db.readTxn().list(table)[0]!.ips, ['198.51.100.1', shared], 'the IP is a\'s own again');
    const a = (await p.submit({ kind: 'services', upsert: [] })).regenerated;
    assert.deepEqual(a, [], 'after the resync the pipeline is back to selective regeneration');
    p.dispose();
  });
});
