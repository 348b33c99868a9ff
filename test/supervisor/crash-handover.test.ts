/**
 * The supervisor's hand-over of a crashed agent's IPs (handOverAfterCrash)
 * from the plan the live agent kept current (EtcdOwnership.crashHandoverPlan),
 * against a real etcd: the owner is an ownership that simply stops (no
 * release, its lease standing, as after kill -9), the successor a live one.
 * The plan's report line round-trips through the fd 3 protocol.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { handOverAfterCrash } from '../../src/supervisor/supervisor.js';
import { handoverPlanReport, parseReport } from '../../src/supervisor/protocol.js';
import { HANDOVER_CHUNK, HANDOVER_RECORD_MAX_BYTES, encodeHandoverRecord, parseHandoverRecord, type CrashHandoverPlan } from '../../src/store/etcd/handover-record.js';
import { IP, IP2, harness } from '../helpers/etcd-ownership-harness.js';
import { useRealEtcd } from '../helpers/real-etcd-suite.js';

describe('crash hand-over by the supervisor', () => {
  const real = useRealEtcd('crash-handover');
  const { member, owning, ownerAndSuccessor, until, lines, ownerKey, clockAt, lease, ownerPut } = harness(real);

  const endpoints = () => [real.etcd.endpoint];

  test('the plan names each owned IP\'s successor with its lease; the record goes first (the successor answers at it), then the key moves onto the successor\'s lease', async () => {
    const prefix = real.freshPrefix();
    const { p, s, clock } = await ownerAndSuccessor(prefix);
    const plan = p.own.crashHandoverPlan()!;
    assert.equal(plan.lease, p.session.leaseId);
    assert.equal(plan.recordKey, `${prefix}handover/${p.node}`);
    assert.equal(plan.ownersPrefix, `${prefix}owners/`);
    assert.deepEqual(parseHandoverRecord(plan.record), { node: p.node, cause: 'crash', moves: new Map([[IP, { node: s.node, lease: s.session.leaseId! }]]) });
    // kill -9: the ownership does nothing more; its lease and keys stand.
    p.own.dispose();
    const moving = handOverAfterCrash(endpoints(), plan);
    // Answered at the record, while the key still names the dead node on its lease.
    await until(clock, () => s.owned().has(IP), 's answers at the record', s);
    assert.deepEqual(await ownerKey(prefix), { value: p.node, lease: p.session.leaseId }, 'not yet moved: the record alone grants');
    assert.equal(lines(s, 'debug', 'trace: hand-over record names us').length, 1);
    assert.equal(await moving, 1);
    assert.deepEqual(await ownerKey(prefix), { value: s.node, lease: s.session.leaseId }, 'moved onto the successor\'s lease');
    // The revoke that follows frees nothing of the successor's.
    await p.session.revoke();
    await until(clock, () => s.own.view().owners.get(IP) === s.node && s.owned().has(IP), 's keeps it', s);
    assert.deepEqual(await ownerKey(prefix), { value: s.node, lease: s.session.leaseId });
  });

  test('silence about an IP a standing hand-over record gives away is no evidence of death for the release grace (no fence under the successor that answers it); a record still standing after the grace is fenced', async () => {
    const prefix = real.freshPrefix();
    const { p, s, clock } = await ownerAndSuccessor(prefix, [IP, IP2]);
    const plan = p.own.crashHandoverPlan()!;
    p.own.dispose();
    // The supervisor's first step alone (its moves not yet made).
    await real.raw.put(plan.recordKey).value(plan.record).lease(plan.lease).exec();
    await until(clock, () => s.owned().has(IP) && s.owned().has(IP2), 's answers at the record', s);
    assert.deepEqual(s.watch.targets.map((t) => t.node), [p.node], 'the silent node is still watched');
    s.watch.silence(p.node, IP);
    await until(clock, () => lines(s, 'info', /it is releasing: not fenced/).length === 1, 'graced', s);
    assert.equal(s.own.status().fencesIssued, 0);
    assert.deepEqual(await ownerKey(prefix), { value: p.node, lease: p.session.leaseId }, 'the key stands');
    assert.ok(s.owned().has(IP), 'answered throughout');
    // Past the grace (3 s) with the record still standing (a supervisor that died half-way): fenced, and s contends.
    clock.advance(3000);
    await until(clock, () => s.own.status().fencesIssued === 1, 'fenced after the grace', s);
    await until(clock, async () => (await ownerKey(prefix))?.value === s.node, 's claims it', s);
  });

  test("a record already standing (a node fencing the agent, frozen before it died, is handing over by its own): the supervisor writes none and moves nothing", async () => {
    const prefix = real.freshPrefix();
    const { p } = await ownerAndSuccessor(prefix);
    const plan = p.own.crashHandoverPlan()!;
    p.own.dispose();
    const fencers = encodeHandoverRecord(p.node, [{ ip: IP, node: 'node-c', lease: p.session.leaseId! }], 'wire-silence')!;
    await real.raw.put(plan.recordKey).value(fencers).lease(plan.lease).exec();
    assert.equal(await handOverAfterCrash(endpoints(), plan), 0);
    assert.equal((await real.raw.get(plan.recordKey).exec()).kvs[0]?.value.toString(), fencers, "the fencer's record kept");
    assert.deepEqual(await ownerKey(prefix), { value: p.node, lease: p.session.leaseId });
  });

  test('a successor whose lease is gone gets nothing: the key stays on the dead node\'s lease for the revoke to free', async () => {
    const prefix = real.freshPrefix();
    const { p, s } = await ownerAndSuccessor(prefix);
    const plan = p.own.crashHandoverPlan()!;
    p.own.dispose();
    await s.stop();
    assert.equal(await handOverAfterCrash(endpoints(), plan), 0);
    assert.deepEqual(await ownerKey(prefix), { value: p.node, lease: p.session.leaseId });
  });

  test('a key that is no longer on the dead node\'s lease is never moved (a stale plan)', async () => {
    const prefix = real.freshPrefix();
    const { p, s } = await ownerAndSuccessor(prefix, [IP, IP2]);
    const plan = p.own.crashHandoverPlan()!;
    p.own.dispose();
    const x = await lease();
    await ownerPut(prefix, IP2, 'node-x', x.id); // moved meanwhile, to a node the plan does not know
    assert.equal(await handOverAfterCrash(endpoints(), plan), 0, 'one compare failed: its transaction moves nothing');
    assert.deepEqual(await ownerKey(prefix, IP2), { value: 'node-x', lease: x.id });
    assert.deepEqual(await ownerKey(prefix, IP), { value: p.node, lease: p.session.leaseId });
    assert.equal(s.owned().has(IP2), false);
  });

  test(`more IPs than one transaction holds: moved in transactions of ${HANDOVER_CHUNK}`, async () => {
    const prefix = real.freshPrefix();
    const ips = Array.from({ length: HANDOVER_CHUNK + 5 }, (_, i) => `192.0.2.${i + 1}`);
    const { p, s, clock } = await ownerAndSuccessor(prefix, ips);
    const plan = p.own.crashHandoverPlan()!;
    assert.equal(parseHandoverRecord(plan.record)!.moves.size, ips.length);
    p.own.dispose();
    assert.equal(await handOverAfterCrash(endpoints(), plan), ips.length);
    await until(clock, () => ips.every((ip) => s.owned().has(ip)), 's owns all', s);
    for (const ip of [ips[0]!, ips.at(-1)!]) assert.deepEqual(await ownerKey(prefix, ip), { value: s.node, lease: s.session.leaseId });
  });

  test('no plan without a successor, and none once released', async () => {
    const prefix = real.freshPrefix();
    const clock = clockAt();
    const a = await owning('node-a', prefix, clock);
    assert.equal(a.own.crashHandoverPlan(), undefined, 'nobody to hand over to');
    const b = await member('node-b', prefix, clock);
    b.cands([IP]);
    await until(clock, () => a.own.crashHandoverPlan() !== undefined, 'a successor', a);
    await a.own.release();
    assert.equal(a.own.crashHandoverPlan(), undefined, 'released');
  });

  test('the report line: round trip, "-" for none, malformed or oversized lines refused', () => {
    const plan: CrashHandoverPlan = { lease: '7587874431234', recordKey: '/herald/handover/n1', ownersPrefix: '/herald/owners/', record: JSON.stringify({ v: 1, node: 'n1', moves: [['192.0.2.1', 'n2', '42']] }) };
    const line = handoverPlanReport(plan);
    assert.ok(line.endsWith('\n'));
    assert.deepEqual(parseReport(line), { handoverPlan: plan });
    assert.equal(handoverPlanReport(undefined), 'handover-plan -\n');
    assert.deepEqual(parseReport('handover-plan -\n'), { handoverPlan: null });
    assert.equal(parseReport('handover-plan abc /k/ /o/ {}'), undefined, 'a lease is a number');
    assert.equal(parseReport('handover-plan 1 /k/ /o/'), undefined, 'no record');
    assert.equal(parseReport(`handover-plan 1 /${'k'.repeat(600)}/ /o/ {}`), undefined, 'a bounded key');
    assert.equal(parseReport(`handover-plan 1 /k/ /o/ ${'x'.repeat(HANDOVER_RECORD_MAX_BYTES + 1)}`), undefined, 'a bounded record');
  });
});
