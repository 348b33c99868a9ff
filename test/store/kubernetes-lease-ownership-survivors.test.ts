/**
 * Lease ownership (src/store/kubernetes/lease-ownership.ts): behaviour the
 * first mutation run of the fast files left unchecked — what operators are
 * told (log fields), status ordering, elections seen from a non-leader, the
 * exact end of our own validity, renewals racing a release, a dispose or a
 * fence-out, lifecycle calls before start. Same harness as the other
 * kubernetes-lease-ownership-*.test.ts files.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { LeaseOwnership, ipLeaseName } from '../../src/store/kubernetes/lease-ownership.js';
import { leasesPath } from '../helpers/fake-kube-leases.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { IP, IP2, NS, OPTS, START, byPref, harness, ipPreferring } from '../helpers/lease-ownership-harness.js';

let h: ReturnType<typeof harness>;
afterEach(() => h?.stopAll());

const reqs = (who: string, method: string, name: string) => h.api.requests.filter((r) => r.who === who && r.method === method && r.path === leasesPath(NS, name));

describe('lease ownership: what the first mutation run found unchecked', () => {
  test('without a wire watch: starts, owns, and fences nobody', async () => {
    h = harness();
    const a = await h.node('node-a', { wire: false });
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
  });

  test('a fence that fails (the IP Lease cannot be read) is logged with the node and IP', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { durationS: 60 });
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), 'p owns');
    const o = await h.node(lo, { durationS: 60 });
    h.api.failNext({ who: lo, method: 'GET', name: ipLeaseName(IP) }, 500, 'InternalError');
    o.watch.silent(hi, IP);
    await h.settle();
    const l = h.lines(o, 'warn', 'fencing a silent owner failed');
    assert.equal(l.length, 1);
    assert.equal(l[0]!.obj.node, hi);
    assert.equal(l[0]!.obj.ip, IP);
    assert.match(String(l[0]!.obj.err), /500/);
    assert.equal(o.own.status().fencesIssued, 0);
  });

  test('leadership ends exactly at validUntil on our own clock (not a millisecond later); a non-leader counts no election; the leader is logged once', async () => {
    h = harness();
    const a = await h.node('node-a', { elect: ['herald-ipam'] });
    const e = a.own.elect('herald-ipam');
    await h.until(() => e.isLeader(), 'a leads');
    assert.deepEqual(h.lines(a, 'info', 'elected leader').map((l) => l.obj), [{ election: 'herald-ipam' }]);
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 500, 'InternalError', 1000);
    h.clock.advance(START + 5499 - h.clock.now());
    assert.equal(e.isLeader(), true);
    assert.equal(a.own.status().leaseValid, true);
    h.clock.advance(1);
    assert.equal(e.isLeader(), false, 'at validUntil: no longer');
    assert.equal(a.own.status().leaseValid, false);
    await h.settle();
    const b = await h.node('node-b', { elect: ['herald-ipam'] });
    await h.advance(100);
    assert.equal(b.own.status().elected, 0, 'b does not lead: nothing counted');
    assert.equal(h.lines(b, 'info', 'elected leader').length, 0);
  });

  test('a leader change listener that throws is logged with the election', async () => {
    h = harness();
    const a = await h.node('node-a', { start: false, elect: ['herald-ipam'] });
    a.own.elect('herald-ipam').onChange(() => {
      throw new Error('listener');
    });
    await a.own.start(() => {});
    await h.until(() => a.own.elect('herald-ipam').isLeader(), 'leads');
    const l = h.lines(a, 'warn', 'leader change listener failed')[0]!;
    assert.equal(l.obj.election, 'herald-ipam');
    assert.match(String(l.obj.err), /listener/);
  });

  test('a released node still names the leader that others hold', async () => {
    h = harness();
    const [hi, lo] = byPref('herald-ipam', ['node-a', 'node-b']) as [string, string];
    await h.node(hi, { elect: ['herald-ipam'] });
    const o = await h.node(lo, { elect: ['herald-ipam'] });
    await h.until(() => o.own.elect('herald-ipam').leader() === hi, 'o sees the leader');
    await o.own.release();
    assert.equal(o.own.elect('herald-ipam').leader(), hi);
    assert.deepEqual(o.own.status().leaders, { 'herald-ipam': hi });
  });

  test('the view names only valid holders; status lists live nodes sorted (an expired one left out) and fenced nodes sorted', async () => {
    h = harness();
    const b = await h.node('node-m');
    const z = await h.simNode('node-z', 60);
    const y = await h.simNode('node-y', 60);
    await h.simNode('node-old', 2);
    await h.ipLease(IP, 'node-z', z.uid);
    await h.ipLease(IP2, 'node-y', y.uid);
    await h.ipLease('198.51.100.9', 'node-x', 'no-such-node');
    b.cands([IP, IP2]);
    await h.settle();
    assert.deepEqual(b.own.status().liveNodes, ['node-m', 'node-old', 'node-y', 'node-z']);
    assert.equal(b.own.view().owners.has('198.51.100.9'), false, 'no entry for an invalid holder');
    await h.advance(2100);
    assert.deepEqual(b.own.status().liveNodes, ['node-m', 'node-y', 'node-z'], 'node-old expired');
    b.watch.silent('node-z', IP);
    await h.until(() => b.own.status().fencesIssued === 1, 'z fenced');
    b.watch.silent('node-y', IP2);
    await h.until(() => b.own.status().fencesIssued === 2, 'y fenced');
    assert.deepEqual(b.own.status().fencedNodes, ['node-y', 'node-z']);
  });

  test('release, dispose and a re-check before start are harmless; after a release or dispose a re-check writes nothing', async () => {
    h = harness();
    const clock = new ManualClock();
    const fresh = () => new LeaseOwnership(h.api.client('early'), 'node-e', { log: recordingLogger(), clock }, OPTS);
    const a = fresh();
    a.dispose();
    const b = fresh();
    await b.release();
    assert.equal(h.lease('node-node-e'), undefined);
    const c = await h.node('node-c');
    await c.own.release();
    const n = h.api.requests.length;
    await c.own.livenessGate().recheck('after release');
    assert.deepEqual(reqs('node-c', 'PUT', 'node-node-c').slice(0), [], 'no renewal after a release');
    assert.equal(h.lease('node-node-c'), undefined, 'not written again');
    const d = await h.node('node-d');
    d.own.dispose();
    await d.own.livenessGate().recheck('after dispose');
    assert.equal(reqs('node-d', 'PUT', 'node-node-d').length, 0);
    assert.ok(h.api.requests.length >= n);
  });

  test('a renewal in flight when disposed leaves no timer behind', async () => {
    h = harness();
    const a = await h.node('node-a');
    const held = h.api.hold({ who: 'node-a', method: 'PUT', name: 'node-node-a' });
    await h.advance(2000);
    await held.reached;
    a.own.dispose();
    held.release();
    await h.settle();
    assert.equal(h.clock.pending, 0);
  });

  test('release: every delete is a DeleteOptions with the resourceVersion seen as its precondition', async () => {
    h = harness();
    const a = await h.node('node-a', { elect: ['herald-ipam'] });
    a.cands([IP]);
    await h.until(() => a.owned().has(IP) && a.own.elect('herald-ipam').isLeader(), 'owns and leads');
    const ip = h.lease(ipLeaseName(IP))!;
    const el = h.lease('herald-ipam')!;
    await a.own.release();
    assert.deepEqual(reqs('node-a', 'DELETE', ipLeaseName(IP))[0]!.body, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { resourceVersion: ip.metadata.resourceVersion } });
    assert.deepEqual(reqs('node-a', 'DELETE', 'herald-ipam')[0]!.body, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { resourceVersion: el.metadata.resourceVersion } });
    // The node Lease is created as a Lease of coordination.k8s.io/v1.
    const create = h.api.requests.find((r) => r.who === 'node-a' && r.method === 'POST' && r.body.metadata.name === 'node-node-a')!;
    assert.equal(create.body.apiVersion, 'coordination.k8s.io/v1');
    assert.equal(create.body.kind, 'Lease');
  });

  test('a renewal written just before a fence, answered after the watch showed the delete: not taken as ours (no validity from it)', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    const held = h.api.hold({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, { answer: true });
    h.api.pauseWatch('node-a');
    await h.advance(2000);
    await held.reached;
    await h.admin.request('DELETE', leasesPath(NS, 'node-node-a'));
    h.api.resumeWatch('node-a');
    await h.until(() => a.own.status().fencedOut === 1, 'fenced out');
    held.release();
    await h.settle();
    assert.equal(a.own.status().renewals, 2, 'the re-join renewed; the late answer is not counted');
    assert.equal(a.own.status().fencedOut, 1);
    assert.deepEqual(h.lines(a, 'warn', 'node lease renewal failed; retrying'), []);
    const uid = h.lease('node-node-a')!.metadata.uid;
    await h.until(() => a.owned().has(IP), 'claimed again under the new Lease');
    assert.equal((h.lease(ipLeaseName(IP))!.metadata.annotations as any)['herald.dev/node-lease-uid'], uid);
  });

  test('a failed renewal says how long we stay valid (0 once lapsed); a 404 fence-out says why', async () => {
    h = harness();
    await h.node('node-a');
    const a = h.nodes[0]!;
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 500, 'InternalError', 20);
    await h.advance(2000);
    const first = h.lines(a, 'warn', 'node lease renewal failed; retrying')[0]!;
    assert.equal(first.obj.validForMs, 3500);
    assert.match(String(first.obj.err), /500/);
    await h.advance(4000);
    assert.equal(h.lines(a, 'warn', 'node lease renewal failed; retrying').at(-1)!.obj.validForMs, 0);
    h.api.clearFaults();
    await h.advance(500);
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 404, 'NotFound');
    await h.advance(2000);
    assert.deepEqual(
      h.lines(a, 'warn', /^fenced out: stepping down/).map((l) => l.obj),
      [{ why: 'our node Lease is gone: another node found us silent on the wire and fenced us out' }],
    );
  });

  test('steady state: a renewal of a valid Lease starts no pass of its own (one periodic pass a second)', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    await h.advance(1000);
    const passes = a.own.counters.passes;
    await h.advance(10_000);
    assert.equal(a.own.counters.passes - passes, 10);
  });

  test('a leader moving straight from one other node to another is told (the leader is part of what listeners hear)', async () => {
    h = harness();
    await h.simNode('node-x', 60);
    await h.simNode('node-y', 60);
    const made = await h.admin.request<any>('POST', leasesPath(NS), { metadata: { name: 'herald-ipam', namespace: NS }, spec: { holderIdentity: 'node-x' } });
    const b = await h.node('node-b', { start: false, elect: ['herald-ipam'] });
    let told = 0;
    b.own.elect('herald-ipam').onChange(() => void told++);
    await b.own.start(() => {});
    await h.until(() => b.own.elect('herald-ipam').leader() === 'node-x', 'b sees x lead');
    await h.settle();
    const before = told;
    await h.admin.request('PUT', leasesPath(NS, 'herald-ipam'), { ...made, spec: { holderIdentity: 'node-y' } });
    await h.settle();
    assert.equal(b.own.elect('herald-ipam').leader(), 'node-y');
    assert.equal(told, before + 1);
  });

  test('a re-check whose relist fails says why', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.failNext({ who: 'node-a', method: 'GET', path: /leases\?/ }, 500, 'InternalError');
    await a.own.livenessGate().recheck('test');
    assert.match(String(h.lines(a, 'warn', 'leases could not be re-read; the watch decides')[0]!.obj.err), /500/);
  });

  test('claims and releasing marks go 16 at a time', async () => {
    h = harness();
    const a = await h.node('node-a');
    const ips = Array.from({ length: 20 }, (_, i) => `203.0.113.${i + 1}`);
    const holds = ips.map((ip) => h.api.hold({ who: 'node-a', method: 'POST', path: new RegExp(`leases$`) }));
    void ips;
    a.cands(ips);
    await h.settle();
    let reached = 0;
    for (const x of holds) void x.reached.then(() => reached++);
    await h.settle();
    assert.equal(reached, 16, 'sixteen creates in flight');
    for (const x of holds) x.release();
    await h.until(() => a.owned().size === 20, 'all owned');
    const marks = ips.map((ip) => h.api.hold({ who: 'node-a', method: 'PUT', name: ipLeaseName(ip) }));
    a.cands([]);
    await h.settle();
    let marked = 0;
    for (const x of marks) void x.reached.then(() => marked++);
    await h.settle();
    assert.equal(marked, 16, 'sixteen marks in flight');
    for (const x of marks) x.release();
    await h.until(() => a.owned().size === 0, 'all given up');
  });

  test('an election write that fails otherwise than 409 fails the pass (logged, retried)', async () => {
    h = harness();
    const a = await h.node('node-a', { start: false, elect: ['herald-ipam'] });
    await a.own.start(() => {});
    h.api.failNext({ who: 'node-a', method: 'POST', path: /leases$/ }, 500, 'InternalError');
    await h.settle();
    assert.equal(h.lines(a, 'warn', 'lease ownership pass failed; retrying').length, 1);
    assert.equal(a.own.elect('herald-ipam').isLeader(), false);
    await h.advanceUntil(() => a.own.elect('herald-ipam').isLeader(), 'retried', 1100);
  });

  test('an IP we released ourselves and claim again is a free claim, not one "after we released it"; a Lease naming no holder is taken over as free', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    a.cands([]);
    await h.until(() => h.lease(ipLeaseName(IP)) === undefined, 'released');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned again');
    assert.deepEqual(a.moves.map((m) => m.cause), ['free', 'free']);
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: ipLeaseName(IP2), namespace: NS, annotations: { 'herald.dev/ip': IP2 } }, spec: { holderIdentity: '' } });
    a.cands([IP, IP2]);
    await h.until(() => a.owned().has(IP2), 'IP2 owned');
    assert.deepEqual(a.moves.at(-1), { ip: IP2, to: 'node-a', cause: 'free' });
    assert.equal(a.own.status().takeovers, 1);
  });

  test('an expiry confirmed by a delete that finds the node Lease gone (404); one whose check fails is tried again next pass', async () => {
    h = harness();
    const x = await h.simNode('node-x');
    await h.ipLease(IP, 'node-x', x.uid);
    const a = await h.node('node-a');
    a.cands([IP]);
    h.api.failNext({ who: 'node-a', method: 'DELETE', name: 'node-node-x' }, 500, 'InternalError');
    await h.advance(6100);
    assert.equal(a.owned().has(IP), false, 'the failed check takes nothing');
    assert.equal(a.own.status().expiriesConfirmed, 0);
    h.api.failNext({ who: 'node-a', method: 'DELETE', name: 'node-node-x' }, 404, 'NotFound');
    await h.advanceUntil(() => a.owned().has(IP), 'taken', 1100);
    assert.equal(a.own.status().expiriesConfirmed, 1);
    assert.deepEqual(a.moves, [{ ip: IP, to: 'node-a', from: 'node-x', cause: 'expired' }]);
  });

  test('an expiry refuted by a 409, then the re-read finds the node Lease gone or naming another node: taken', async () => {
    for (const then of ['gone', 'other'] as const) {
      h?.stopAll();
      h = harness();
      const x = await h.simNode('node-x');
      await h.ipLease(IP, 'node-x', x.uid);
      const a = await h.node('node-a');
      a.cands([IP]);
      h.api.failNext({ who: 'node-a', method: 'DELETE', name: 'node-node-x' }, 409, 'Conflict');
      if (then === 'gone') h.api.failNext({ who: 'node-a', method: 'GET', name: 'node-node-x' }, 404, 'NotFound');
      else {
        const cur = h.lease('node-node-x')!;
        h.api.pauseWatch('node-a');
        await h.admin.request('PUT', leasesPath(NS, 'node-node-x'), { ...cur, spec: { ...(cur.spec as object), holderIdentity: 'node-other' } });
      }
      await h.advance(6000);
      h.api.resumeWatch('node-a');
      await h.advanceUntil(() => a.owned().has(IP), `${then}: taken`, 1200);
      assert.equal(a.own.status().expiriesRefuted, 0, then);
    }
  });

  test('a hand-over that fails otherwise than 409/404 is logged; the IP is ours to try again', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo);
    o.cands([IP]);
    await h.until(() => o.owned().has(IP), 'owned');
    await h.node(hi);
    // The first PUT is the releasing mark (let through); the second, the hand-over, fails.
    const mark = h.api.hold({ who: lo, method: 'PUT', name: ipLeaseName(IP) }, { answer: true });
    await h.advanceUntil(() => h.api.requests.some((r) => r.who === lo && r.method === 'PUT' && r.path.endsWith(ipLeaseName(IP))), 'mark sent', 6500);
    await mark.reached;
    h.api.failNext({ who: lo, method: 'PUT', name: ipLeaseName(IP) }, 500, 'InternalError');
    mark.release();
    await h.settle();
    await h.advance(100);
    assert.deepEqual(
      h.api.requests.filter((r) => r.who === lo && r.method === 'PUT' && r.path.endsWith(ipLeaseName(IP))).map((r) => [r.status, r.body.spec.holderIdentity]),
      [
        [200, lo],
        [500, hi],
        [200, lo],
        [200, hi],
      ],
      'marked, the hand-over failed; marked again and handed over by the next pass',
    );
    assert.equal(h.lines(o, 'warn', 'releasing an IP lease failed').length, 1);
    assert.equal(o.own.status().handovers, 1);
  });

  test('a re-check relists what the paused watch missed: a node that joined meanwhile is live', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.pauseWatch('node-a');
    await h.simNode('node-j');
    assert.deepEqual(a.own.status().liveNodes, ['node-a']);
    await a.own.livenessGate().recheck('test');
    assert.deepEqual(a.own.status().liveNodes, ['node-a', 'node-j']);
  });

  test('a relist answered late keeps what the watch delivered since: an IP Lease newer in the cache is not replaced by the listed one', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    const y = await h.simNode('node-y', 60);
    const made = await h.ipLease(IP, 'node-x', x.uid);
    const b = await h.node('node-b');
    b.cands([IP]);
    await h.settle();
    assert.equal(b.own.view().owners.get(IP), 'node-x');
    const held = h.api.hold({ who: 'node-b', method: 'GET', path: /leases\?/ }, { answer: true });
    const recheck = b.own.livenessGate().recheck('test');
    await held.reached;
    const cur = h.lease(ipLeaseName(IP))!;
    await h.admin.request('PUT', leasesPath(NS, ipLeaseName(IP)), { ...cur, metadata: { ...cur.metadata, annotations: { ...(cur.metadata.annotations as object), 'herald.dev/node-lease-uid': y.uid } }, spec: { ...(cur.spec as object), holderIdentity: 'node-y' } });
    await h.settle();
    assert.equal(b.own.view().owners.get(IP), 'node-y', 'the watch delivered the newer holder');
    held.release();
    await recheck;
    assert.equal(b.own.view().owners.get(IP), 'node-y', 'the older listed copy did not replace it');
    void made;
  });

  test('an IP Lease in the cache that the list no longer holds is gone (a delete the watch missed)', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    await h.ipLease(IP, 'node-x', x.uid);
    const b = await h.node('node-b');
    await h.settle();
    assert.equal(b.own.view().owners.get(IP), 'node-x');
    h.api.pauseWatch('node-b');
    await h.admin.request('DELETE', leasesPath(NS, ipLeaseName(IP)));
    await b.own.livenessGate().recheck('test');
    assert.equal(b.own.view().owners.has(IP), false);
  });

  test('a fence is recorded with at most 100 of the IPs it frees', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    const ips = Array.from({ length: 101 }, (_, i) => `2001:db8::${(i + 1).toString(16)}`);
    for (const ip of ips) await h.ipLease(ip, 'node-x', x.uid);
    const b = await h.node('node-b');
    const f: unknown[] = [];
    b.own.onFence(() => {
      throw new Error('boom');
    });
    b.own.onFence((r) => void f.push(r));
    b.watch.silent('node-x', ips[0]!);
    await h.until(() => b.own.status().fencesIssued === 1, 'fenced');
    assert.equal((b.fences[0]!.ips as string[]).length, 100);
    assert.match(String(h.lines(b, 'warn', 'a fence listener failed')[0]!.obj.err), /boom/);
  });

  test('an expiry check whose re-read fails (500 after the 409) takes nothing this pass; a refuted expiry is logged with the node and version', async () => {
    h = harness();
    const x = await h.simNode('node-x');
    await h.ipLease(IP, 'node-x', x.uid);
    const a = await h.node('node-a');
    a.cands([IP]);
    h.api.failNext({ who: 'node-a', method: 'DELETE', name: 'node-node-x' }, 409, 'Conflict');
    h.api.failNext({ who: 'node-a', method: 'GET', name: 'node-node-x' }, 500, 'InternalError');
    await h.advance(6100);
    assert.equal(a.owned().has(IP), false);
    assert.equal(a.own.status().expiriesConfirmed + a.own.status().expiriesRefuted, 0);
    h.api.failNext({ who: 'node-a', method: 'DELETE', name: 'node-node-x' }, 409, 'Conflict');
    await h.advanceUntil(() => a.own.status().expiriesRefuted === 1, 'refuted', 1100);
    const l = h.lines(a, 'info', /was renewed \(our watch was behind\)/)[0]!;
    assert.deepEqual(l.obj, { node: 'node-x', rv: h.lease('node-node-x')!.metadata.resourceVersion });
  });

  test('a failed releasing mark is logged (debug) with the IP', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: ipLeaseName(IP) }, 500, 'InternalError');
    a.cands([]);
    await h.until(() => h.lease(ipLeaseName(IP)) === undefined, 'deleted');
    const l = h.lines(a, 'debug', 'could not mark an IP as releasing: a candidate may take our silence for death')[0]!;
    assert.equal(l.obj.ip, IP);
    assert.match(String(l.obj.err), /500/);
  });

  test('wire bodies: an IP Lease and an election Lease are created as coordination.k8s.io/v1 Leases; a free election is claimed without touching any node Lease', async () => {
    h = harness();
    const a = await h.node('node-a', { elect: ['herald-ipam'] });
    a.cands([IP]);
    await h.until(() => a.owned().has(IP) && a.own.elect('herald-ipam').isLeader(), 'owns and leads');
    const posts = h.api.requests.filter((r) => r.who === 'node-a' && r.method === 'POST');
    for (const name of [ipLeaseName(IP), 'herald-ipam']) {
      const p = posts.find((r) => r.body.metadata.name === name)!;
      assert.equal(p.body.apiVersion, 'coordination.k8s.io/v1');
      assert.equal(p.body.kind, 'Lease');
    }
    assert.deepEqual(
      h.api.requests.filter((r) => r.who === 'node-a' && r.method !== 'POST' && !r.path.includes('limit=') && !r.path.endsWith('node-node-a')),
      [],
      'no GET or DELETE of any other Lease',
    );
  });

  test('taking over an election Lease from an expired holder is logged with its name and the holder', async () => {
    h = harness();
    const x = await h.simNode('node-x');
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: 'herald-ipam', namespace: NS }, spec: { holderIdentity: 'node-x', leaseTransitions: 2 } });
    const a = await h.node('node-a', { elect: ['herald-ipam'] });
    await h.advanceUntil(() => a.own.elect('herald-ipam').isLeader(), 'taken', 7500);
    assert.deepEqual(h.lines(a, 'info', 'took leadership over from an expired holder')[0]!.obj, { election: 'herald-ipam', from: 'node-x' });
    assert.ok(x.uid);
  });

  test('waiting out the contend delay is one timed pass, not a busy loop', async () => {
    h = harness();
    const ip = ipPreferring('node-p', 'node-a');
    await h.simNode('node-p');
    const a = await h.node('node-a');
    await h.advance(100);
    const passes = a.own.counters.passes;
    a.cands([ip]);
    await h.advance(299);
    assert.ok(a.own.counters.passes - passes <= 2, `${a.own.counters.passes - passes} passes while waiting`);
    await h.advanceUntil(() => a.owned().has(ip), 'claimed', 10);
  });

  test('hand-over to a node seen renewing 4 s ago (within 2×renewMs+safetyMs)', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const sim = await h.simNode(hi, 60);
    const o = await h.node(lo);
    o.cands([IP]);
    await h.advanceUntil(() => o.owned().has(IP), 'owned', 400);
    await h.advance(700);
    await sim.renew(); // seen renewing at START + 1000
    await h.advanceUntil(() => o.own.status().handovers === 1, 'handed over', 4400);
  });

  test('a claim while our node Lease is being re-created waits (no failure)', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 409, 'Conflict');
    await h.advance(2000);
    a.cands([IP, IP2]);
    await h.settle();
    assert.deepEqual(h.lines(a, 'warn', 'claiming an IP lease failed; retrying'), []);
    await h.advanceUntil(() => a.owned().has(IP2), 'claimed once re-read', 1100);
  });

  test('leaseTransitions count on from what the Lease said: a take-over and a hand-over each add one', async () => {
    h = harness();
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: ipLeaseName(IP), namespace: NS, annotations: { 'herald.dev/ip': IP } }, spec: { holderIdentity: 'node-ghost', leaseTransitions: 5 } });
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo);
    o.cands([IP]);
    await h.advanceUntil(() => o.owned().has(IP), 'taken over', 7000);
    assert.equal((h.lease(ipLeaseName(IP))!.spec as any).leaseTransitions, 6);
    (await h.node(hi)).cands([IP]);
    await h.advanceUntil(() => o.own.status().handovers === 1, 'handed over', 7000);
    assert.equal((h.lease(ipLeaseName(IP))!.spec as any).leaseTransitions, 7);
  });

  test('giving one IP up never withdraws another we keep; release after dispose is harmless', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP, IP2]);
    await h.until(() => a.owned().size === 2, 'owned');
    const from = a.sets.length;
    a.cands([IP]);
    await h.until(() => !a.owned().has(IP2), 'gave IP2 up');
    assert.ok(a.sets.slice(from).every((s) => s.has(IP)), 'IP never withdrawn');
    a.own.dispose();
    await a.own.release();
  });

  test('claimed again under a new node Lease: logged with the IP', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    await h.admin.request('DELETE', leasesPath(NS, 'node-node-a'));
    await h.until(() => a.own.status().takeovers === 1, 'claimed again');
    assert.deepEqual(h.lines(a, 'info', 'claimed an IP again under our new node Lease')[0]!.obj, { ip: IP });
  });

  test('an owned set of the same size with other members is told (one IP lost and another won in one pass)', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    const ip2 = ipPreferring('node-a', 'node-x');
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.advanceUntil(() => a.owned().has(IP), 'owned', 400);
    const cur = h.lease(ipLeaseName(IP))!;
    await h.admin.request('PUT', leasesPath(NS, ipLeaseName(IP)), { ...cur, metadata: { ...cur.metadata, annotations: { ...(cur.metadata.annotations as object), 'herald.dev/node-lease-uid': x.uid } }, spec: { ...(cur.spec as object), holderIdentity: 'node-x' } });
    await new Promise((r) => setImmediate(r)); // the watch delivers it (a pass is due)
    a.cands([IP, ip2]);
    await h.settle();
    assert.deepEqual([...a.owned()], [ip2]);
  });

  test('an election waiting out the contend delay is one timed pass, not a busy loop', async () => {
    h = harness();
    const sim = byPref('herald-ipam', ['node-p', 'node-a', 'node-q'])[0]!;
    const me = sim === 'node-a' ? 'node-q' : 'node-a';
    await h.simNode(sim);
    const a = await h.node(me, { elect: ['herald-ipam'] });
    const passes = a.own.counters.passes;
    await h.advance(250);
    assert.ok(a.own.counters.passes - passes <= 2, `${a.own.counters.passes - passes} passes while waiting`);
    await h.advanceUntil(() => a.own.elect('herald-ipam').isLeader(), 'leads', 100, 10);
  });

  test('a node Lease is live exactly for its duration from when we saw it change', async () => {
    h = harness();
    const a = await h.node('node-a', { durationS: 60 });
    await h.simNode('node-x', 6); // seen at START
    await h.settle();
    h.clock.advance(5999);
    assert.deepEqual(a.own.status().liveNodes, ['node-a', 'node-x']);
    h.clock.advance(1);
    assert.deepEqual(a.own.status().liveNodes, ['node-a']);
  });

  test('a preferred node that lapsed and came back starts its hand-over hold again', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const sim = await h.simNode(hi); // listed at START, never renewing: no hand-over
    const o = await h.node(lo, { durationS: 60 });
    o.cands([IP]);
    await h.advanceUntil(() => o.owned().has(IP), 'owned', 400);
    await h.advance(7200); // lapsed at START + 6000 on o's clock
    assert.deepEqual(o.own.status().liveNodes, [lo]);
    await sim.renew(); // back at START + 7500
    await h.advance(1000);
    await sim.renew(); // seen renewing
    await h.advance(2000);
    await sim.renew();
    await h.advance(1800);
    await sim.renew();
    assert.equal(o.own.status().handovers, 0, 'not within 5 s of coming back');
    await h.advanceUntil(() => o.own.status().handovers === 1, 'handed over after the hold', 1200);
  });

  test('a move is logged with where it came from', async () => {
    h = harness();
    await h.ipLease(IP, 'node-ghost');
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.advanceUntil(() => a.owned().has(IP), 'taken', 7500);
    const m = { ip: IP, to: 'node-a', from: 'node-ghost', cause: 'gone' } as const;
    assert.deepEqual(h.lines(a, 'info', /now announces/).map((l) => [l.msg, l.obj]), [[`node-a now announces ${IP}: took it over from node-ghost, whose node Lease was deleted (its agent crashed, or it was fenced out)`, m]]);
  });

  test('the wire watch prefers an IP its holder has not marked as releasing; an ip- Lease without its IP annotation is no IP', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    await h.ipLease('198.51.100.1', 'node-x', x.uid, { 'herald.dev/releasing': 'node-x' });
    await h.ipLease('198.51.100.2', 'node-x', x.uid);
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: 'ip-198-51-100-3', namespace: NS }, spec: { holderIdentity: 'node-x' } });
    const b = await h.node('node-b');
    b.cands(['198.51.100.1', '198.51.100.2', '198.51.100.3']);
    await h.settle();
    assert.deepEqual(b.watch.targets, [{ node: 'node-x', ip: '198.51.100.2', iface: 'eth0' }]);
    assert.deepEqual([...b.own.view().owners.keys()].sort(), ['198.51.100.1', '198.51.100.2']);
  });

  test('a released IP ends the wait on a releasing holder: no re-check after the grace', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { durationS: 60 });
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), 'p owns');
    const o = await h.node(lo, { durationS: 60 });
    const cur = h.lease(ipLeaseName(IP))!;
    await h.admin.request('PUT', leasesPath(NS, ipLeaseName(IP)), { ...cur, metadata: { ...cur.metadata, annotations: { ...(cur.metadata.annotations as object), 'herald.dev/releasing': hi } } });
    await h.settle();
    o.watch.silent(hi, IP);
    await h.settle();
    p.cands([]);
    await h.until(() => h.lease(ipLeaseName(IP)) === undefined, 'released');
    const gets = () => h.api.requests.filter((r) => r.who === lo && r.method === 'GET' && r.path.endsWith(ipLeaseName(IP))).length;
    const n = gets();
    await h.advance(3000);
    assert.equal(gets(), n, 'no re-check');
  });

  test('a released node claims nothing more, though its candidates and its own clock would allow it', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    await a.own.release();
    await h.advance(3000);
    assert.equal(h.lease(ipLeaseName(IP)), undefined);
    assert.equal(h.api.requests.filter((r) => r.who === 'node-a' && r.method === 'POST' && r.body.metadata.name === ipLeaseName(IP)).length, 1);
  });

  test('nothing is claimed while our own Lease has lapsed', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 500, 'InternalError', 1000);
    await h.advance(5600);
    assert.equal(a.own.status().leaseValid, false);
    a.cands([IP]);
    await h.advance(1000);
    assert.equal(h.lease(ipLeaseName(IP)), undefined);
  });

  test('a dead preferred node makes nobody wait: the live node claims at once', async () => {
    h = harness();
    const ip = ipPreferring('node-p', 'node-a');
    await h.simNode('node-p');
    const a = await h.node('node-a');
    await h.advance(6100);
    assert.deepEqual(a.own.status().liveNodes, ['node-a']);
    a.cands([ip]);
    await h.until(() => a.owned().has(ip), 'claimed at once');
  });

  test('a node leaving (its Lease deleted) is acted on at once, not at the next periodic pass', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    await h.ipLease(IP, 'node-x', x.uid);
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.advance(1500);
    await x.remove();
    await h.until(() => a.owned().has(IP), 'taken at once');
  });

  test('a hand-over is logged with the IP and the node; a failed one with the IP and the error', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo);
    o.cands([IP]);
    await h.until(() => o.owned().has(IP), 'owned');
    (await h.node(hi)).cands([IP]);
    const mark = h.api.hold({ who: lo, method: 'PUT', name: ipLeaseName(IP) }, { answer: true });
    await h.advanceUntil(() => h.api.requests.some((r) => r.who === lo && r.method === 'PUT' && r.path.endsWith(ipLeaseName(IP))), 'mark sent', 6500);
    await mark.reached;
    h.api.failNext({ who: lo, method: 'PUT', name: ipLeaseName(IP) }, 500, 'InternalError');
    mark.release();
    await h.settle();
    assert.deepEqual(h.lines(o, 'info', 'handing an IP over to its preferred node')[0]!.obj, { ip: IP, to: hi });
    const failed = h.lines(o, 'warn', 'releasing an IP lease failed')[0]!;
    assert.equal(failed.obj.ip, IP);
    assert.match(String(failed.obj.err), /500/);
  });

  test('a preferred node merely listed gets no hand-over even once the hold is met within the renewal window', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    await h.simNode(hi, 60);
    const o = await h.node(lo, { handoverHoldMs: 1000 });
    o.cands([IP]);
    await h.advanceUntil(() => o.owned().has(IP), 'owned', 400);
    await h.advance(2000);
    assert.equal(o.own.status().handovers, 0);
  });

  test('a node Lease without a holder names its node by the Lease name; a Lease that is no ip- Lease is no IP even with the annotation', async () => {
    h = harness();
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: 'node-bare', namespace: NS }, spec: { leaseDurationSeconds: 6 } });
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: 'other', namespace: NS, annotations: { 'herald.dev/ip': IP } }, spec: { holderIdentity: 'node-bare' } });
    const a = await h.node('node-a');
    assert.deepEqual(a.own.status().liveNodes, ['bare', 'node-a']);
    assert.equal(a.own.view().owners.has(IP), false);
  });

  test('a broken watch and a failing move listener are logged with the error', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.breakWatches(new Error('reset'), 'node-a');
    await h.settle();
    assert.match(String(h.lines(a, 'warn', 'lease watch failed; retrying')[0]!.obj.err), /reset/);
    a.own.onMove(() => {
      throw new Error('boom');
    });
    a.cands([IP]);
    await h.advanceUntil(() => a.owned().has(IP), 'owned', 600);
    assert.match(String(h.lines(a, 'warn', 'an ownership move listener failed')[0]!.obj.err), /boom/);
  });

  test("a stale delete of our old node Lease, seen after we re-joined under a new one, does not fence us out again", async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.pauseWatch('node-a');
    await h.admin.request('DELETE', leasesPath(NS, 'node-node-a'));
    await h.advance(2000); // the renewal: 409 (its uid precondition), the Lease read again: gone → fenced out once
    await h.advance(500); // the re-join creates a new node Lease (new uid)
    assert.ok(h.lease('node-node-a'));
    assert.equal(a.own.status().fencedOut, 1);
    h.api.resumeWatch('node-a');
    await h.settle();
    assert.equal(a.own.status().fencedOut, 1, 'the old Lease\'s delete, seen late, fences nothing again');
  });

  test('fencing, read first: the IP Lease as read now is learnt; the record lists only the fenced node\'s IPs; the log says how many and how long', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    const y = await h.simNode('node-y', 60);
    await h.ipLease(IP, 'node-x', x.uid);
    await h.ipLease('198.51.100.60', 'node-x', x.uid);
    await h.ipLease(IP2, 'node-y', y.uid);
    const b = await h.node('node-b');
    await h.settle();
    b.watch.silent('node-x', IP);
    await h.until(() => b.own.status().fencesIssued === 1, 'fenced');
    assert.deepEqual([...b.fences[0]!.ips].sort(), ['198.51.100.60', IP]);
    assert.deepEqual(h.lines(b, 'warn', 'fenced out a silent owner: deleted its node Lease')[0]!.obj, { node: 'node-x', ip: IP, ips: 2, readMs: 0, deleteMs: 0 });
    // Silence about an IP whose Lease moved (the watch had not said): read, learnt, not fenced.
    h.api.pauseWatch('node-b');
    const cur = h.lease(ipLeaseName(IP2))!;
    await h.admin.request('PUT', leasesPath(NS, ipLeaseName(IP2)), { ...cur, metadata: { ...cur.metadata, annotations: { ...(cur.metadata.annotations as object), 'herald.dev/node-lease-uid': x.uid } }, spec: { ...(cur.spec as object), holderIdentity: 'node-z' } });
    b.watch.silent('node-y', IP2);
    await h.settle();
    assert.equal(b.own.status().fencesIssued, 1);
    assert.equal(b.own.view().owners.has(IP2), false, 'learnt: now held by a node that is not live');
    h.api.resumeWatch('node-b');
  });

  test('a fence refused when the IP Lease is bound to another node Lease of the holder; none after release or dispose, nor when the IP Lease is gone', async () => {
    h = harness();
    await h.simNode('node-x', 60);
    await h.ipLease(IP, 'node-x', 'an-earlier-uid');
    const b = await h.node('node-b');
    await h.settle();
    b.watch.silent('node-x', IP);
    await h.settle();
    assert.equal(b.own.status().fencesIssued, 0);
    assert.ok(h.lease('node-node-x'));
    assert.deepEqual(h.lines(b, 'info', 'silent owner not fenced')[0]!.obj, { node: 'node-x', ip: IP, outcome: 'refused' });
    b.watch.silent('node-x', '198.51.100.99'); // no Lease
    await h.settle();
    assert.deepEqual(h.lines(b, 'warn', 'fencing a silent owner failed'), []);
    // Disposed while the read is in flight: nothing deleted.
    const x2 = await h.simNode('node-w', 60);
    await h.ipLease(IP2, 'node-w', x2.uid);
    const held = h.api.hold({ who: 'node-b', method: 'GET', name: ipLeaseName(IP2) });
    b.watch.silent('node-w', IP2);
    await held.reached;
    b.own.dispose();
    held.release();
    await h.settle();
    assert.ok(h.lease('node-node-w'));
    const c = await h.node('node-c');
    await c.own.release();
    c.watch.silent('node-w', IP2);
    await h.settle();
    assert.equal(h.api.requests.filter((r) => r.who === 'node-c' && r.method === 'GET' && r.path.endsWith(ipLeaseName(IP2))).length, 0);
  });

  test('while our own Lease has lapsed no election is contended; a claim that fails is logged with the IP; without a wire watch no pass fails', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 500, 'InternalError', 1000);
    await h.advance(5600);
    a.own.elect('herald-x');
    await h.advance(1000);
    assert.equal(h.lease('herald-x'), undefined);
    h.api.clearFaults();
    const n = await h.node('node-n', { wire: false });
    h.api.failNext({ who: 'node-n', method: 'POST', path: /leases$/ }, 403, 'Forbidden');
    n.cands([IP]);
    await h.advanceUntil(() => n.owned().has(IP), 'owned', 1500);
    const l = h.lines(n, 'warn', 'claiming an IP lease failed; retrying')[0]!;
    assert.equal(l.obj.ip, IP);
    assert.match(String(l.obj.err), /403/);
    assert.deepEqual(h.lines(n, 'warn', 'lease ownership pass failed; retrying'), []);
  });

  test('handedBackWithinMs is the window: back after it, the preferred node is not skipped', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo, { handedBackWithinMs: 3000 });
    o.cands([IP]);
    await h.until(() => o.owned().has(IP), 'owned');
    const p = await h.node(hi);
    p.cands([IP]);
    await h.advanceUntil(() => p.owned().has(IP), 'handed over', 6500);
    await h.advance(4000);
    await p.own.release();
    await h.advanceUntil(() => o.owned().has(IP), 'back', 1500);
    const p2 = await h.node(hi);
    p2.cands([IP]);
    await h.advanceUntil(() => p2.owned().has(IP), 'handed over again', 6500);
  });
});
