/**
 * Lease ownership (src/store/kubernetes/lease-ownership.ts) when things go
 * wrong, on the in-memory Lease API and a manual clock: wire-verified
 * fencing (and the release grace), being fenced out and re-joining,
 * renewal failures and the step-down on our own clock, elections, the
 * relist of a re-check, a broken watch, failing listeners.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { NODE_LEASE_UID_ANNOTATION, RELEASING_ANNOTATION, ipLeaseName } from '../../src/store/kubernetes/lease-ownership.js';
import type { KubeObject } from '../../src/intent/sources/kube-client.js';
import { leasesPath } from '../helpers/fake-kube-leases.js';
import { IP, IP2, NS, OPTS, START, byPref, harness, ipPreferring } from '../helpers/lease-ownership-harness.js';

let h: ReturnType<typeof harness>;
afterEach(() => h?.stopAll());

const reqs = (who: string, method: string, name: string) => h.api.requests.filter((r) => r.who === who && r.method === method && r.path === leasesPath(NS, name));

describe('lease ownership faults on a fake API and a manual clock', () => {
  test('fencing: a holder silent on the wire while its node Lease runs — its node Lease deleted as read, a FenceRecord, its IPs taken (cause fenced); silence about a node that holds nothing fences nobody', async () => {
    h = harness();
    const ip = ipPreferring('node-fb', 'node-fa');
    const a = await h.node('node-fa', { durationS: 60 });
    a.cands([ip]);
    await h.until(() => a.owned().has(ip), 'a owns it');
    const b = await h.node('node-fb', { durationS: 60 });
    b.cands([ip]);
    await h.until(() => b.watch.targets.length === 1, 'b watches a');
    assert.deepEqual(b.watch.targets, [{ node: 'node-fa', ip, iface: 'eth0' }]);
    b.watch.silent('node-fx', ip);
    await h.settle();
    assert.equal(b.own.status().fencesIssued, 0, 'a node that holds nothing is not fenced');
    assert.equal(reqs('node-fb', 'DELETE', 'node-node-fx').length, 0);
    a.watch.silent('node-fb', ip); // b holds nothing, and a is told by its own wire: no fence either
    await h.settle();
    assert.equal(a.own.status().fencesIssued, 0);
    const oldUid = h.lease('node-node-fa')!.metadata.uid;
    b.watch.silent('node-fa', ip);
    await h.until(() => b.owned().has(ip), 'b owns it');
    assert.equal(h.clock.now(), START, 'at once, no expiry');
    const st = b.own.status();
    assert.equal(st.fencesIssued, 1);
    assert.deepEqual(st.fencedNodes, ['node-fa']);
    assert.deepEqual(b.fences, [{ node: 'node-fa', by: 'node-fb', silentIp: ip, ips: [ip] }]);
    assert.deepEqual(b.moves, [{ ip, to: 'node-fb', from: 'node-fa', cause: 'fenced' }]);
    const del = reqs('node-fb', 'DELETE', 'node-node-fa')[0]!;
    assert.equal(del.body.preconditions.uid, oldUid);
    assert.equal(h.lines(b, 'warn', 'fenced out a silent owner: deleted its node Lease').length, 1);
    // a saw its node Lease deleted while it ran: stepped down, re-joined with a new node Lease.
    await h.until(() => a.own.status().fencedOut === 1 && a.owned().size === 0, 'a stepped down');
    await h.until(() => h.lease('node-node-fa')?.metadata.uid !== undefined, 'a re-joined');
    assert.notEqual(h.lease('node-node-fa')!.metadata.uid, oldUid);
    assert.equal((h.lease(ipLeaseName(ip))!.metadata.annotations as any)[NODE_LEASE_UID_ANNOTATION], h.lease('node-node-fb')!.metadata.uid);
    await h.advance(1000);
    assert.equal(a.owned().size, 0);
    assert.equal(a.own.status().leaseValid, true, 're-joined');
    // Our own node, and a fence while our own Lease is not valid, are never fenced.
    b.watch.silent('node-fb', ip);
    await h.settle();
    assert.equal(b.own.status().fencesIssued, 1);
  });

  test('fenced out: our node Lease deleted under us — every IP withdrawn at once, a new node Lease; IP Leases bound to the old uid are not ours until claimed again', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP, IP2]);
    await h.until(() => a.owned().size === 2, 'a owns both');
    const oldUid = h.lease('node-node-a')!.metadata.uid;
    const n = a.sets.length;
    await h.admin.request('DELETE', leasesPath(NS, 'node-node-a'));
    await h.until(() => a.own.status().fencedOut === 1, 'fenced out');
    assert.equal(a.sets[n]!.size, 0, 'every IP withdrawn at once');
    assert.equal(h.lines(a, 'warn', /^fenced out: stepping down at once/).length, 1);
    await h.until(() => a.owned().size === 2, 'claimed again under the new Lease');
    const newUid = h.lease('node-node-a')!.metadata.uid;
    assert.notEqual(newUid, oldUid);
    for (const ip of [IP, IP2]) assert.equal((h.lease(ipLeaseName(ip))!.metadata.annotations as any)[NODE_LEASE_UID_ANNOTATION], newUid);
    assert.equal(a.own.status().takeovers, 2, 'by conditional updates');
    assert.deepEqual(a.moves.filter((m) => m.cause !== 'free'), [], 'our own IPs: no move');
    assert.equal(h.lines(a, 'info', 'claimed an IP again under our new node Lease').length, 2);
    assert.equal(a.own.status().fencedOut, 1);
  });

  test('an IP Lease of ours bound to another uid (a previous node Lease) is nobody’s: another node takes it without waiting', async () => {
    h = harness();
    const b = await h.node('node-b');
    const a = await h.simNode('node-a', 60);
    await h.ipLease(IP, 'node-a', 'an-old-uid');
    assert.equal(b.own.view().owners.get(IP), undefined, 'not valid: bound to another node Lease');
    b.cands([IP]);
    await h.advanceUntil(() => b.owned().has(IP), 'taken', 400);
    assert.ok(a.uid);
    // Taken by a conditional update (no expiry to confirm: its holder is live).
    assert.equal(b.own.status().takeovers, 1);
    assert.equal(reqs('node-b', 'DELETE', 'node-node-a').length, 0);
  });

  test('a renewal in flight when our node Lease is deleted: its late refusal (409: the uid it carries is gone) does not fence us out twice; the re-join renews', async () => {
    h = harness();
    const a = await h.node('node-a');
    const held = h.api.hold({ who: 'node-a', method: 'PUT', name: 'node-node-a' });
    await h.advance(2000);
    await held.reached;
    await h.admin.request('DELETE', leasesPath(NS, 'node-node-a'));
    await h.until(() => a.own.status().fencedOut === 1 && h.lease('node-node-a') !== undefined, 're-joined');
    held.release();
    await h.settle();
    assert.equal(a.own.status().fencedOut, 1);
    assert.equal(a.own.status().renewFailures, 1);
    // The late refusal is no failure to report, and the fence-out was logged once.
    assert.deepEqual(h.lines(a, 'warn', 'node lease renewal failed; retrying'), []);
    assert.deepEqual(
      h.lines(a, 'warn', /^fenced out: stepping down/).map((l) => l.obj),
      [{ why: 'our node Lease was deleted: another node found us silent on the wire and fenced us out' }],
    );
    await h.advance(2000);
    assert.equal(a.own.status().leaseValid, true);
    assert.equal(a.own.status().fencedOut, 1);
  });

  test('release grace: silence about an IP its holder marked releasing is no death within releaseGraceMs; after it the holder is fenced unless heard since', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { durationS: 60 });
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), 'p owns it');
    const o = await h.node(lo, { durationS: 60 });
    o.cands([IP]);
    await h.until(() => o.watch.targets.length === 1, 'o watches p');
    const cur = h.lease(ipLeaseName(IP))!;
    await h.admin.request('PUT', leasesPath(NS, ipLeaseName(IP)), { ...cur, metadata: { ...cur.metadata, annotations: { ...(cur.metadata.annotations as object), [RELEASING_ANNOTATION]: hi } } });
    await h.settle();
    o.watch.silent(hi, IP);
    await h.settle();
    await h.advance(1900);
    assert.equal(o.own.status().fencesIssued, 0, 'within the grace');
    o.watch.heard = true;
    await h.advance(200);
    assert.equal(o.own.status().fencesIssued, 0, 'heard since: not fenced');
    o.watch.heard = false;
    o.watch.silent(hi, IP);
    await h.settle();
    await h.advance(1900);
    assert.equal(o.own.status().fencesIssued, 0);
    await h.advanceUntil(() => o.own.status().fencesIssued === 1, 'fenced after the grace', 300, 50);
    await h.until(() => o.owned().has(IP), 'o owns it');
    assert.deepEqual(o.moves, [{ ip: IP, to: lo, from: hi, cause: 'fenced' }]);
  });

  test('markReleasing: a holder giving IPs up marks each (its resourceVersion the precondition) before going silent; a failed mark still lets go', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP, IP2]);
    await h.until(() => a.owned().size === 2, 'owned');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: ipLeaseName(IP2) }, 500, 'InternalError');
    const seen = [IP, IP2].map((ip) => h.lease(ipLeaseName(ip))!.metadata.resourceVersion);
    a.cands([]);
    await h.until(() => h.lease(ipLeaseName(IP)) === undefined && h.lease(ipLeaseName(IP2)) === undefined, 'both deleted');
    const marks = [IP, IP2].map((ip) => reqs('node-a', 'PUT', ipLeaseName(ip))[0]!);
    assert.deepEqual(
      marks.map((m) => [m.body.metadata.annotations[RELEASING_ANNOTATION], m.body.metadata.resourceVersion, m.status]),
      [
        ['node-a', seen[0], 200],
        ['node-a', seen[1], 500],
      ],
    );
    assert.equal(a.own.status().releaseMarks, 1);
    assert.equal(a.own.status().releases, 2);
    assert.equal(a.owned().size, 0);
    // The deletes carried the version the mark left (or the one seen before, for the failed mark).
    const dels = [IP, IP2].map((ip) => reqs('node-a', 'DELETE', ipLeaseName(ip))[0]!.body.preconditions.resourceVersion);
    assert.equal(dels[1], seen[1]);
    assert.notEqual(dels[0], seen[0]);
  });

  test('renewal failures: retried every 500 ms; we step down on our own clock at validUntil; renewals back → owned again', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 500, 'InternalError', 1000);
    await h.advance(2000);
    assert.equal(a.own.status().renewFailures, 1);
    assert.equal(h.lines(a, 'warn', 'node lease renewal failed; retrying').length, 1);
    await h.advance(500);
    assert.equal(a.own.status().renewFailures, 2, 'retried after 500 ms');
    // validUntil = START + 5500: still answering just before, not at it.
    await h.advance(2900);
    assert.ok(a.owned().has(IP));
    assert.equal(a.own.livenessGate().answerUntilMs(), START + 5500);
    await h.advanceUntil(() => !a.owned().has(IP), 'stepped down', 300, 50);
    assert.ok(h.clock.now() >= START + 5500);
    assert.equal(a.own.status().leaseValid, false);
    assert.equal(a.own.view().owners.get(IP), undefined);
    h.api.clearFaults();
    await h.advanceUntil(() => a.owned().has(IP), 'owned again', 600, 50);
    assert.equal(a.own.status().leaseValid, true);
    assert.equal(a.own.status().fencedOut, 0);
  });

  test('a renewal refused with 409 (someone wrote our node Lease) re-reads it and renews on what it read; a 404 (kube-apiserver answers 409 instead, see the contract test) is a fence-out', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 409, 'Conflict');
    await h.advance(2000);
    assert.equal(a.own.status().renewFailures, 1);
    const n = h.api.requests.length;
    await h.advance(500);
    assert.deepEqual(
      h.api.requests.slice(n).filter((r) => r.who === 'node-a').map((r) => [r.method, r.path.split('/').pop(), r.status]),
      [
        ['GET', 'node-node-a', 200],
        ['PUT', 'node-node-a', 200],
      ],
    );
    assert.equal(a.own.status().renewals, 2);
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 404, 'NotFound');
    await h.advance(2000);
    assert.equal(a.own.status().fencedOut, 1);
    await h.settle();
    assert.equal(a.own.status().leaseValid, true, 'found its Lease again (GET) and renewed it');
    assert.equal(a.own.status().renewals, 3);
  });

  test('elections: the lone node leads (a Lease of its own), onChange told; isLeader fenced by our own clock; the prefixes node- and ip- are refused', async () => {
    h = harness();
    const a = await h.node('node-a', { start: false });
    assert.throws(() => a.own.elect('node-x'), /the node- and ip- prefixes are taken/);
    assert.throws(() => a.own.elect('ip-x'), /election lease ip-x: the node- and ip- prefixes are taken/);
    const e = a.own.elect('herald-ipam');
    assert.equal(e.name, 'herald-ipam');
    const again = a.own.elect('herald-ipam');
    let told = 0;
    let throwing = 0;
    e.onChange(() => {
      throwing++;
      throw new Error('listener');
    });
    again.onChange(() => void told++);
    assert.equal(e.isLeader(), false);
    assert.equal(e.leader(), undefined);
    await a.own.start((v) => void a.sets.push(new Set(v.owned)));
    await h.until(() => e.isLeader(), 'a leads');
    assert.equal(again.isLeader(), true, 'one election per name');
    assert.equal(e.leader(), 'node-a');
    assert.ok(told >= 1 && throwing === told, 'every listener told, a throwing one too');
    assert.equal(h.lines(a, 'warn', 'leader change listener failed').length, throwing);
    assert.equal(a.own.status().elected, 1);
    assert.deepEqual(a.own.status().leaders, { 'herald-ipam': 'node-a' });
    const l = h.lease('herald-ipam')!;
    assert.deepEqual(l.metadata.labels, { 'herald.dev/lease': 'election' });
    assert.equal((l.spec as any).holderIdentity, 'node-a');
    assert.equal((l.spec as any).leaseTransitions, 0);
    // Renewals fail: at validUntil (own clock) we are no longer leader, though the Lease still names us.
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 500, 'InternalError', 1000);
    const t = told;
    await h.advance(5400);
    assert.equal(e.isLeader(), true);
    await h.advanceUntil(() => !e.isLeader(), 'no longer leader', 300, 50);
    assert.ok(h.clock.now() >= START + 5500);
    await h.settle();
    assert.equal(e.leader(), undefined);
    assert.ok(told > t, 'told');
    assert.deepEqual(a.own.status().leaders, { 'herald-ipam': null });
    assert.equal((h.lease('herald-ipam')!.spec as any).holderIdentity, 'node-a');
  });

  test('elections between nodes: the preferred leads at once, the other sees it; an expired leader is taken over (confirmed, leaseTransitions + 1)', async () => {
    h = harness();
    const [hi, lo] = byPref('herald-ipam', ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { start: false, elect: ['herald-ipam'] });
    const o = await h.node(lo, { start: false, elect: ['herald-ipam'] });
    await p.own.start(() => {});
    await o.own.start(() => {});
    await h.settle();
    const pe = p.own.elect('herald-ipam');
    const oe = o.own.elect('herald-ipam');
    await h.until(() => pe.isLeader() && oe.leader() === hi, 'the preferred leads');
    assert.equal(h.clock.now(), START);
    assert.equal(oe.isLeader(), false);
    await h.advance(1000);
    assert.equal(o.own.counters.lostRaces, 0, 'the other never tried');
    assert.equal(reqs(lo, 'PUT', 'herald-ipam').length + h.api.requests.filter((r) => r.who === lo && r.method === 'POST' && r.body.metadata.name === 'herald-ipam').length, 0);
    p.own.dispose();
    await h.advance(4900);
    assert.equal(oe.isLeader(), false, 'not before the leader expired');
    await h.advanceUntil(() => oe.isLeader(), 'taken over', 2000);
    assert.equal((h.lease('herald-ipam')!.spec as any).leaseTransitions, 1);
    assert.equal((h.lease('herald-ipam')!.spec as any).holderIdentity, lo);
    assert.equal(h.lines(o, 'info', 'took leadership over from an expired holder').length, 1);
    assert.equal(o.own.status().expiriesConfirmed, 1);
    assert.deepEqual(o.own.status().leaders, { 'herald-ipam': lo });
  });

  test('elections: a non-preferred node waits contendDelayMs for a free election Lease; a stale view of an expired leader is refuted', async () => {
    h = harness();
    const pref = byPref('herald-ipam', ['node-p', 'node-a'])[0];
    const other = pref === 'node-p' ? 'node-a' : 'node-p';
    if (pref !== 'node-p') {
      // rendezvous picked node-a: then node-p is the member and node-a the simulated one.
    }
    await h.simNode(pref!);
    const m = await h.node(other, { elect: ['herald-ipam'] });
    const e = m.own.elect('herald-ipam');
    await h.advance(200);
    assert.equal(e.isLeader(), false);
    await h.advanceUntil(() => e.isLeader(), 'leads after the delay', 200, 50);
    // A leader we judge expired through a stale watch: the API server refutes it, nothing taken.
    h = harness();
    const [hi, lo] = byPref('herald-ipam', ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { elect: ['herald-ipam'] });
    await h.until(() => p.own.elect('herald-ipam').isLeader(), 'p leads');
    const o = await h.node(lo, { elect: ['herald-ipam'] });
    await h.until(() => o.own.elect('herald-ipam').leader() === hi, 'o sees p');
    h.api.dropEvents((ev) => ev.object.metadata.name === `node-${hi}`, lo);
    await h.advanceUntil(() => o.own.status().expiriesRefuted >= 1, 'refuted', 8000);
    await h.settle();
    assert.equal(o.own.elect('herald-ipam').isLeader(), false);
    assert.equal((h.lease('herald-ipam')!.spec as any).holderIdentity, hi);
    assert.equal(p.own.elect('herald-ipam').isLeader(), true);
  });

  test('a re-check (late wake-up): renews first, then relists what the watch has not delivered — a new IP Lease, a deletion — before answering', async () => {
    h = harness();
    const a = await h.node('node-a');
    const b = await h.node('node-b');
    a.cands([IP]);
    await h.advanceUntil(() => b.own.view().owners.get(IP) === 'node-a', 'b sees a own IP', 400);
    h.api.pauseWatch('node-b');
    a.cands([IP2]);
    await h.advanceUntil(() => h.lease(ipLeaseName(IP)) === undefined && h.lease(ipLeaseName(IP2)) !== undefined, 'a moved to IP2', 400);
    assert.equal(b.own.view().owners.get(IP), 'node-a', "b's watch is behind");
    const n = h.api.requests.length;
    await b.own.livenessGate().recheck('test');
    assert.deepEqual(
      h.api.requests.slice(n).filter((r) => r.who === 'node-b').slice(0, 2).map((r) => [r.method, r.path.split('/').pop()]),
      [
        ['PUT', 'node-node-b'],
        ['GET', 'leases?limit=500'],
      ],
    );
    assert.deepEqual([...b.own.view().owners], [[IP2, 'node-a']]);
    assert.equal(h.lines(b, 'warn', 'node lease re-checked with the API server')[0]!.obj.why, 'test');
    // A relist that fails: the watch decides.
    h.api.failNext({ who: 'node-b', method: 'GET', path: /leases\?/ }, 500, 'InternalError');
    await b.own.livenessGate().recheck('again');
    assert.equal(h.lines(b, 'warn', 'leases could not be re-read; the watch decides').length, 1);
    h.api.resumeWatch('node-b');
    await h.settle();
    assert.deepEqual([...b.own.view().owners], [[IP2, 'node-a']]);
  });

  test('a broken watch is reported and restarted after 500 ms (a list, then a watch from it); what changed meanwhile is seen', async () => {
    h = harness();
    const a = await h.node('node-a');
    const b = await h.node('node-b');
    h.api.breakWatches(new Error('reset'), 'node-b');
    await h.settle();
    assert.equal(h.lines(b, 'warn', 'lease watch failed; retrying').length, 1);
    a.cands([IP]);
    await h.advance(400);
    assert.ok(a.owned().has(IP));
    assert.equal(b.own.view().owners.get(IP), undefined);
    await h.advance(100);
    await h.until(() => b.own.view().owners.get(IP) === 'node-a', 'b sees it after the restart');
    // A disposed node's broken watch is not restarted.
    b.own.dispose();
    h.api.breakWatches(new Error('reset'), 'node-b');
    await h.advance(1000);
    assert.equal(h.lines(b, 'warn', 'lease watch failed; retrying').length, 1);
  });

  test('our node Lease deleted while our watch missed it: the re-check renewal is refused (409, the uid precondition), which is read as a fence-out (the gate closes at once); a new node Lease follows', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    const oldUid = h.lease('node-node-a')!.metadata.uid;
    h.api.dropEvents((e) => e.type === 'DELETED' && e.object.metadata.name === 'node-node-a', 'node-a');
    await h.admin.request('DELETE', leasesPath(NS, 'node-node-a'));
    await h.settle();
    assert.ok(a.owned().has(IP), 'the watch did not say');
    await a.own.livenessGate().recheck('test');
    assert.equal(a.owned().has(IP), false, 'withdrawn before the re-check resolves');
    assert.equal(reqs('node-a', 'PUT', 'node-node-a').at(-1)!.status, 409);
    // A 409 is what kube-apiserver answers a renewal of a deleted Lease (the body carries its uid): read again, it is a fence-out.
    assert.equal(a.own.status().fencedOut, 1, 'fenced out, not a lost race');
    assert.equal(a.own.livenessGate().answerUntilMs(), 0, 'the gate closed at once');
    await h.advanceUntil(() => a.owned().has(IP), 'claimed again under a new node Lease', 1100);
    assert.notEqual(h.lease('node-node-a')!.metadata.uid, oldUid);
    assert.equal((h.lease(ipLeaseName(IP))!.metadata.annotations as any)[NODE_LEASE_UID_ANNOTATION], h.lease('node-node-a')!.metadata.uid);
  });

  test('an IP Lease without a spec (written by something else) is free and claimed, not a failed claim on every pass', async () => {
    h = harness();
    await h.admin.request('POST', leasesPath(NS), { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: ipLeaseName(IP), namespace: NS, annotations: { 'herald.dev/ip': IP } } });
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.advanceUntil(() => a.owned().has(IP), 'claimed', 1000);
    assert.equal((h.lease(ipLeaseName(IP))!.spec as { holderIdentity?: string; leaseTransitions?: number }).holderIdentity, 'node-a');
    assert.equal((h.lease(ipLeaseName(IP))!.spec as { leaseTransitions?: number }).leaseTransitions, 1);
    assert.equal(h.lines(a, 'warn', 'claiming an IP lease failed; retrying').length, 0);
  });

  test('a move or fence listener that throws is logged; the others are still told', async () => {
    h = harness();
    const a = await h.node('node-a');
    const seen: string[] = [];
    a.own.onMove(() => {
      throw new Error('boom');
    });
    a.own.onMove((m) => void seen.push(m.ip));
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    assert.deepEqual(seen, [IP]);
    assert.equal(h.lines(a, 'warn', 'an ownership move listener failed').length, 1);
    const ip = ipPreferring('node-b', 'node-a');
    const b = await h.node('node-b', { durationS: 60 });
    a.cands([IP, ip]);
    await h.advanceUntil(() => a.owned().has(ip), 'a owns ip', 400);
    b.own.onFence(() => {
      throw new Error('boom');
    });
    b.cands([ip]);
    await h.until(() => b.watch.targets.length === 1, 'b watches a');
    b.watch.silent('node-a', b.watch.targets[0]!.ip);
    await h.until(() => b.own.status().fencesIssued === 1, 'fenced');
    assert.equal(b.fences.length, 1);
    assert.equal(h.lines(b, 'warn', 'a fence listener failed').length, 1);
  });

  test('an IP claim refused (a 403) holds back no other claim and is retried by the next pass', async () => {
    h = harness();
    const a = await h.node('node-a');
    h.api.failNext({ who: 'node-a', method: 'POST', path: /leases$/ }, 403, 'Forbidden');
    a.cands([IP, IP2]);
    await h.until(() => a.owned().size === 1, 'one owned');
    assert.equal(h.lines(a, 'warn', 'claiming an IP lease failed; retrying').length, 1);
    await h.advanceUntil(() => a.owned().size === 2, 'both', 1100);
    void (undefined as unknown as KubeObject);
    void OPTS;
  });
});
