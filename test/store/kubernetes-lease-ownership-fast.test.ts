/**
 * Per-IP ownership on Leases (src/store/kubernetes/lease-ownership.ts) on an
 * in-memory Lease API (test/helpers/fake-kube-leases.ts, contract-tested
 * against kube-apiserver) and one manual clock for every node of a test:
 * claims, contention, take-over after expiry, hand-over and skip, release,
 * dispose. Fencing, renewal failures, elections and relists are in
 * kubernetes-lease-ownership-faults.test.ts; the real-server cases stay in
 * kubernetes-store.test.ts.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import {
  HANDED_BACK_WITHIN_MS,
  NODE_LEASE_UID_ANNOTATION,
  RELEASING_ANNOTATION,
  describeFence,
  describeMove,
  ipLeaseName,
  leaseOwnershipDefaults,
  nodeLeaseName,
} from '../../src/store/kubernetes/lease-ownership.js';
import { INCARNATION_ANNOTATION } from '../../src/supervisor/protocol.js';
import { leasesPath } from '../helpers/fake-kube-leases.js';
import { IP, IP2, NS, OPTS, START, byPref, harness, ipPreferring } from '../helpers/lease-ownership-harness.js';

let h: ReturnType<typeof harness>;
afterEach(() => h?.stopAll());

const puts = (who: string, name: string) => h.api.requests.filter((r) => r.who === who && r.method === 'PUT' && r.path === leasesPath(NS, name));
const posts = (who: string, name: string) => h.api.requests.filter((r) => r.who === who && r.method === 'POST' && r.body?.metadata?.name === name);

describe('lease ownership on a fake API and a manual clock', () => {
  test('names and texts: Lease names (a `::` address gets a 0), defaults, the move and fence lines', () => {
    assert.equal(ipLeaseName('198.51.100.7'), 'ip-198-51-100-7');
    assert.equal(ipLeaseName('2001:DB8::7'), 'ip-2001-db8--7');
    assert.equal(ipLeaseName('2001:db8:3::'), 'ip-2001-db8-3--0');
    assert.equal(nodeLeaseName('node-a'), 'node-node-a');
    assert.deepEqual(leaseOwnershipDefaults, { namespace: 'herald-system', durationS: 6, renewMs: 2000, safetyMs: 500, contendDelayMs: 300, handoverHoldMs: 5000, skipPreferredMs: 60_000 });
    assert.equal(HANDED_BACK_WITHIN_MS, 10_000);
    const m = (cause: Parameters<typeof describeMove>[0]['cause'], from?: string) => describeMove({ ip: IP, to: 'node-b', ...(from ? { from } : {}), cause });
    assert.equal(m('expired', 'node-a'), `node-b now announces ${IP}: took it over from node-a, whose node Lease expired`);
    assert.equal(m('fenced', 'node-a'), `node-b now announces ${IP}: took it over from node-a, fenced out: silent on the wire while its node Lease still ran`);
    assert.equal(m('gone', 'node-a'), `node-b now announces ${IP}: took it over from node-a, whose node Lease was deleted (its agent crashed, or it was fenced out)`);
    assert.equal(m('handover', 'node-a'), `node-b now announces ${IP}: handed over by node-a (node-b is its preferred node)`);
    assert.equal(m('released', 'node-a'), `node-b now announces ${IP}: claimed it after node-a released it`);
    assert.equal(m('free'), `node-b now announces ${IP}: claimed it while free (no node held it)`);
    assert.equal(
      describeFence({ node: 'node-a', by: 'node-b', silentIp: IP, ips: [IP] }),
      `node-b fenced out node-a: it stopped answering for ${IP} on the wire while its node Lease still ran (a lost link, a frozen agent); its node Lease was deleted, so its IPs move now instead of at Lease expiry`,
    );
  });

  test('a lone node: its node Lease (incarnation, duration), a free IP claimed at once by a create bound to that Lease, renewals every renewMs move the gate', async () => {
    h = harness();
    const a = await h.node('node-a');
    assert.equal(a.own.kind, 'kubernetes');
    const nl = h.lease('node-node-a')!;
    assert.equal((nl.spec as any).holderIdentity, 'node-a');
    assert.equal((nl.spec as any).leaseDurationSeconds, 6);
    assert.equal(typeof (nl.spec as any).renewTime, 'string');
    assert.equal(typeof (nl.spec as any).acquireTime, 'string');
    assert.deepEqual(nl.metadata.labels, { 'herald.dev/lease': 'node' });
    assert.equal((nl.metadata.annotations as any)[INCARNATION_ANNOTATION], a.own.incarnation);
    assert.deepEqual(a.own.nodeLease(), { namespace: NS, name: 'node-node-a', incarnation: a.own.incarnation });
    // Valid from when the renewal was sent, minus safetyMs.
    assert.equal(a.own.livenessGate().answerUntilMs(), START + 6000 - 500);
    assert.equal(a.own.status().leaseValid, true);
    assert.deepEqual(a.sets, [], 'nothing to emit before candidates');

    a.cands([IP, '2001:db8:3::']);
    await h.until(() => a.owned().has(IP) && a.owned().has('2001:db8:3::'), 'node-a owns both');
    assert.equal(h.clock.now(), START, 'at once');
    const l = h.lease(ipLeaseName(IP))!;
    assert.equal((l.spec as any).holderIdentity, 'node-a');
    assert.equal((l.spec as any).leaseTransitions, 0);
    assert.equal(typeof (l.spec as any).acquireTime, 'string');
    assert.deepEqual(l.metadata.labels, { 'herald.dev/lease': 'ip' });
    assert.deepEqual(l.metadata.annotations, { 'herald.dev/ip': IP, [NODE_LEASE_UID_ANNOTATION]: nl.metadata.uid });
    assert.equal((h.lease('ip-2001-db8-3--0')!.metadata.annotations as any)['herald.dev/ip'], '2001:db8:3::');
    assert.deepEqual(
      a.moves.sort((x, y) => x.ip.localeCompare(y.ip)),
      [
        { ip: '198.51.100.7', to: 'node-a', cause: 'free' },
        { ip: '2001:db8:3::', to: 'node-a', cause: 'free' },
      ],
    );
    assert.deepEqual(h.lines(a, 'info', describeMove({ ip: IP, to: 'node-a', cause: 'free' }))[0]!.obj, { ip: IP, to: 'node-a', cause: 'free' });
    assert.deepEqual([...a.own.view().owners].sort(), [[IP, 'node-a'], ['2001:db8:3::', 'node-a']]);
    assert.equal(a.own.view().owned, a.owned() === a.own.view().owned ? a.owned() : a.own.view().owned);
    assert.deepEqual([...a.own.view().owned].sort(), [IP, '2001:db8:3::']);
    const s = a.own.status();
    assert.equal(s.claims, 2);
    assert.equal(s.renewals, 1);
    assert.equal(s.takeovers + s.lostRaces + s.releases + s.handovers + s.renewFailures, 0);
    assert.deepEqual(s.liveNodes, ['node-a']);
    assert.deepEqual(s.leaders, {});
    assert.deepEqual(s.fencedNodes, []);
    assert.deepEqual(a.watch.targets, [], 'nobody else holds anything');
    assert.deepEqual([...h.lines(a, 'warn', /./), ...h.lines(a, 'error', /./)], []);

    // Renewed every renewMs (from the send), an update of the node Lease carrying its resourceVersion.
    await h.advance(1999);
    assert.equal(puts('node-a', 'node-node-a').length, 0);
    await h.advance(1);
    assert.equal(puts('node-a', 'node-node-a').length, 1);
    assert.equal(puts('node-a', 'node-node-a')[0]!.body.metadata.resourceVersion, nl.metadata.resourceVersion);
    assert.equal(a.own.status().renewals, 2);
    assert.equal(a.own.livenessGate().answerUntilMs(), START + 2000 + 5500);
    await h.advance(2000);
    assert.equal(a.own.status().renewals, 3);
    assert.equal(a.own.livenessGate().answerUntilMs(), START + 4000 + 5500);
    assert.equal(h.lease(ipLeaseName(IP))!.metadata.resourceVersion, l.metadata.resourceVersion, 'IP Leases are not written in steady state');
    // No longer a candidate: withdrawn, then the Lease deleted as we saw it.
    a.cands([IP]);
    await h.until(() => !a.owned().has('2001:db8:3::'), 'given up');
    await h.until(() => h.lease('ip-2001-db8-3--0') === undefined, 'deleted');
    assert.equal(a.own.status().releases, 1);
    assert.deepEqual([...a.owned()], [IP]);
  });

  test('contention: the preferred node claims at once; another waits contendDelayMs, then claims', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    await h.simNode(hi); // live, preferred, not a candidate (a simulated node never claims)
    const m = await h.node(lo);
    assert.deepEqual(m.own.status().liveNodes, [hi, lo].sort());
    m.cands([IP]);
    await h.settle();
    await h.advance(299);
    assert.equal(h.lease(ipLeaseName(IP)), undefined, 'not before the delay');
    assert.equal(posts(lo, ipLeaseName(IP)).length, 0);
    const passes = m.own.counters.passes;
    await h.advance(1);
    await h.until(() => m.owned().has(IP), `${lo} claims late`);
    assert.ok(m.own.counters.passes - passes <= 3, 'the end of the delay is one timed pass');
    assert.deepEqual(m.moves, [{ ip: IP, to: lo, cause: 'free' }]);
  });

  test('two nodes, several IPs at once: each IP has one holder, its preferred node, and nobody had to race', async () => {
    h = harness();
    const ips = Array.from({ length: 8 }, (_, i) => `198.51.100.${20 + i}`);
    const a = await h.node('node-a');
    const b = await h.node('node-b');
    await h.until(() => a.own.status().liveNodes.length === 2 && b.own.status().liveNodes.length === 2, 'each sees the other');
    a.cands(ips);
    b.cands(ips);
    await h.until(() => ips.every((ip) => a.owned().has(ip) || b.owned().has(ip)), 'every IP owned');
    for (const ip of ips) {
      const pref = byPref(ip, ['node-a', 'node-b'])[0];
      assert.equal(a.owned().has(ip), pref === 'node-a', ip);
      assert.equal(b.owned().has(ip), pref === 'node-b', ip);
      assert.equal((h.lease(ipLeaseName(ip))!.spec as any).holderIdentity, pref);
    }
    assert.ok(a.owned().size > 0 && b.owned().size > 0);
    // The other's late timers fire: every IP is held, so nobody contends.
    await h.advance(1000);
    assert.equal(a.own.counters.lostRaces + b.own.counters.lostRaces, 0);
    assert.equal(a.own.counters.claims + b.own.counters.claims, ips.length);
    // Each watches one IP of the other on the wire (the lowest it could take over).
    const lowest = (n: string) => ips.filter((ip) => byPref(ip, ['node-a', 'node-b'])[0] === n).sort()[0];
    assert.deepEqual(a.watch.targets, [{ node: 'node-b', ip: lowest('node-b'), iface: 'eth0' }]);
    assert.deepEqual(b.watch.targets, [{ node: 'node-a', ip: lowest('node-a'), iface: 'eth0' }]);
  });

  test('a lost race: two non-preferred nodes claim together after the delay; the create that comes second gets 409 and is counted', async () => {
    h = harness();
    const ip = ipPreferring('node-p', 'node-a', 'node-b');
    await h.simNode('node-p');
    const a = await h.node('node-a');
    const b = await h.node('node-b');
    a.cands([ip]);
    b.cands([ip]);
    await h.advance(300);
    await h.until(() => a.owned().has(ip) || b.owned().has(ip), 'one owns it');
    await h.settle();
    assert.equal(Number(a.owned().has(ip)) + Number(b.owned().has(ip)), 1, 'one holder');
    assert.equal(a.own.counters.lostRaces + b.own.counters.lostRaces, 1);
    assert.equal(a.own.counters.claims + b.own.counters.claims, 1);
    const loser = a.owned().has(ip) ? b : a;
    assert.deepEqual(loser.moves, []);
    assert.deepEqual(h.lines(loser, 'warn', /./), [], 'a lost race is no failure');
  });

  test('take-over after the holder stops renewing: not before its Lease expired on our clock; its node Lease deleted as seen (confirmed), then a conditional update', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi);
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), `${hi} owns it`);
    const o = await h.node(lo);
    o.cands([IP]);
    await h.until(() => o.own.view().owners.get(IP) === hi, `${lo} sees the holder`);
    await h.advance(2000); // hi renews now: seen at START + 2000 by lo
    const before = h.lease(ipLeaseName(IP))!;
    p.own.dispose(); // a crash: no release
    await h.advance(5900);
    assert.equal(o.owned().size, 0, 'its Lease has not expired on our clock yet');
    assert.deepEqual(o.own.status().liveNodes, [hi, lo].sort());
    await h.advanceUntil(() => o.owned().has(IP), `${lo} takes it over`, 1200);
    assert.deepEqual(o.moves, [{ ip: IP, to: lo, from: hi, cause: 'expired' }]);
    assert.equal(o.own.status().takeovers, 1);
    assert.equal(o.own.status().claims, 0);
    assert.equal(o.own.status().expiriesConfirmed, 1);
    assert.deepEqual(o.own.status().liveNodes, [lo]);
    assert.equal(h.lease(`node-${hi}`), undefined, "the expired holder's node Lease was deleted");
    const del = h.api.requests.find((r) => r.who === lo && r.method === 'DELETE' && r.path === leasesPath(NS, `node-${hi}`))!;
    assert.ok(del.body.preconditions.uid && del.body.preconditions.resourceVersion, 'uid and resourceVersion preconditions');
    const after = h.lease(ipLeaseName(IP))!;
    assert.equal((after.spec as any).holderIdentity, lo);
    assert.equal((after.spec as any).leaseTransitions, 1);
    assert.notEqual((after.spec as any).acquireTime, (before.spec as any).acquireTime);
    assert.equal((after.metadata.annotations as any)[NODE_LEASE_UID_ANNOTATION], h.lease(`node-${lo}`)!.metadata.uid, 'bound to the new holder');
    const put = puts(lo, ipLeaseName(IP)).at(-1)!;
    assert.equal(put.body.metadata.resourceVersion, before.metadata.resourceVersion, 'conditional on the version seen');
  });

  test('an expiry seen through a stale watch is refuted by the API server (a 409 on the delete): nothing taken; once the holder really dies it is', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi);
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), `${hi} owns it`);
    const o = await h.node(lo);
    await h.until(() => o.own.status().liveNodes.includes(hi), `${lo} sees ${hi}`);
    const heal = h.api.dropEvents((e) => e.object.metadata.name === `node-${hi}`, lo);
    o.cands([IP]);
    await h.advanceUntil(() => o.own.status().expiriesRefuted >= 1, 'refuted', 8000);
    await h.settle();
    assert.equal(o.owned().size, 0, "a live holder's IP is not taken");
    assert.ok(p.owned().has(IP));
    assert.equal((h.lease(ipLeaseName(IP))!.spec as any).holderIdentity, hi);
    assert.ok(h.lease(`node-${hi}`), 'its node Lease stands');
    assert.equal(o.own.status().expiriesConfirmed, 0);
    assert.equal(o.own.status().takeovers, 0);
    assert.deepEqual(o.own.status().liveNodes, [hi, lo].sort(), 'read live again');
    assert.equal(h.lines(o, 'info', /was renewed \(our watch was behind\)/).length, 1);
    // Live for a whole duration from that read: not judged again at once.
    await h.advance(5000);
    assert.equal(o.own.status().expiriesRefuted, 1);
    heal();
    p.own.dispose();
    await h.advanceUntil(() => o.owned().has(IP), 'taken over', 9000);
    assert.equal(o.own.status().expiriesConfirmed, 1);
    assert.deepEqual(o.moves, [{ ip: IP, to: lo, from: hi, cause: 'expired' }]);
  });

  test('an IP Lease naming a node never seen: the benefit of the doubt for a Lease duration of watching, then taken over (cause gone)', async () => {
    h = harness();
    await h.ipLease(IP, 'node-ghost');
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.advance(5900);
    assert.equal(a.owned().size, 0, 'doubtful: not taken within a Lease duration');
    assert.equal(h.api.requests.filter((r) => r.who === 'node-a' && r.path.includes('ghost')).length, 0);
    await h.advanceUntil(() => a.owned().has(IP), 'taken', 1500);
    assert.deepEqual(a.moves, [{ ip: IP, to: 'node-a', from: 'node-ghost', cause: 'gone' }]);
    assert.equal(a.own.status().takeovers, 1);
    assert.equal((h.lease(ipLeaseName(IP))!.spec as any).leaseTransitions, 1);
  });

  test('a holder whose node Lease we saw deleted is gone at once (no doubt, no expiry): taken over with cause gone; a deletion near expiry says expired', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    const y = await h.simNode('node-y', 6);
    await h.ipLease(IP, 'node-x', x.uid);
    await h.ipLease(IP2, 'node-y', y.uid);
    const a = await h.node('node-a');
    a.cands([IP, IP2]);
    await h.settle();
    assert.deepEqual([...a.own.view().owners].sort(), [[IP, 'node-x'], [IP2, 'node-y']]);
    await h.advance(1000);
    await x.remove(); // early in its 60 s: a crash released, or a fence
    await h.advanceUntil(() => a.owned().has(IP), 'IP taken', 1000);
    await h.advance(2500); // y's 6 s Lease is past half its duration on our clock
    await y.remove();
    await h.advanceUntil(() => a.owned().has(IP2), 'IP2 taken', 1000);
    assert.deepEqual(
      a.moves.map((m) => [m.ip, m.from, m.cause]),
      [
        [IP, 'node-x', 'gone'],
        [IP2, 'node-y', 'expired'],
      ],
    );
  });

  test('hand-over: to a more preferred node once it has been live handoverHoldMs, marked releasing first, withdrawn, then the Lease rewritten to it', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo);
    o.cands([IP]);
    await h.until(() => o.owned().has(IP), `${lo} owns it`);
    const t0 = h.clock.now();
    const p = await h.node(hi);
    p.cands([IP]);
    await h.advance(4900);
    assert.ok(o.owned().has(IP), 'not before the hold');
    assert.equal(o.own.status().handovers, 0);
    await h.advanceUntil(() => p.owned().has(IP), 'handed over', 1500);
    assert.ok(h.clock.now() - t0 >= 5000);
    assert.equal(o.owned().has(IP), false);
    assert.deepEqual(o.moves.at(-1), { ip: IP, to: hi, from: lo, cause: 'handover' });
    assert.equal(o.own.status().handovers, 1);
    assert.equal(o.own.status().releaseMarks, 1);
    assert.equal(p.own.counters.claims + p.own.counters.takeovers, 0, 'the preferred node never had to claim');
    const [mark, hand] = puts(lo, ipLeaseName(IP)) as [any, any];
    assert.equal(mark.body.metadata.annotations[RELEASING_ANNOTATION], lo, 'marked releasing first');
    assert.equal(mark.body.spec.holderIdentity, lo);
    assert.equal(hand.body.spec.holderIdentity, hi);
    assert.equal(hand.body.metadata.annotations[RELEASING_ANNOTATION], undefined);
    assert.equal(hand.body.metadata.annotations[NODE_LEASE_UID_ANNOTATION], h.lease(`node-${hi}`)!.metadata.uid, "bound to the preferred node's Lease");
    assert.equal(hand.body.spec.leaseTransitions, 1);
    // Withdrawn before the Lease names the other node.
    const handAt = h.api.requests.indexOf(hand);
    const withdrawn = o.sets.findIndex((s) => !s.has(IP) && o.sets.indexOf(s) > 0);
    assert.ok(withdrawn >= 0 && o.emittedAt[withdrawn]! <= handAt, 'withdrawn first');
    assert.equal(h.lines(o, 'info', 'handing an IP over to its preferred node').length, 1);
    // The preferred node holds it now; the other keeps it no more and does not contend.
    await h.advance(3000);
    assert.equal(o.own.status().handovers, 1);
    assert.equal(o.own.counters.lostRaces, 0);
    assert.deepEqual([...p.owned()], [IP]);
  });

  test('hand-over only to a node seen renewing lately: a Lease merely listed, or one not renewed for 2×renewMs+safetyMs, gets nothing', async () => {
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    for (const phase of ['listed', 'stale'] as const) {
      h?.stopAll();
      h = harness();
      const sim = await h.simNode(hi, 60); // found on the list first
      const o = await h.node(lo, { handoverHoldMs: phase === 'listed' ? 5000 : 8000 });
      o.cands([IP]);
      await h.advanceUntil(() => o.owned().has(IP), `${lo} owns it after the delay`, 400);
      if (phase === 'stale') {
        await h.advance(700);
        await sim.renew(); // seen renewing at START + 1000, then silent
      }
      await h.advance(phase === 'listed' ? 5000 : 7500);
      assert.equal(o.own.status().handovers, 0, phase === 'listed' ? 'never seen renewing' : 'not seen renewing for 7.5 s');
      await sim.renew();
      await h.advanceUntil(() => o.own.status().handovers === 1, `${phase}: handed over once renewing`, 1100);
      assert.equal((h.lease(ipLeaseName(IP))!.spec as any).holderIdentity, hi);
    }
  });

  test('skip: a preferred node that leaves a handed-over IP at once is skipped for that IP skipPreferredMs; then tried again', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo);
    o.cands([IP]);
    await h.until(() => o.owned().has(IP), `${lo} owns it`);
    await h.node(hi); // not a candidate for IP: it lets go of whatever it is handed
    await h.advanceUntil(() => o.own.status().handovers === 1, 'handed over', 6500);
    await h.advanceUntil(() => o.owned().has(IP), 'back', 1000);
    assert.deepEqual(
      o.moves.map((m) => [m.cause, m.from]),
      [
        ['free', undefined],
        ['handover', lo],
        ['released', hi],
      ],
    );
    const back = h.clock.now();
    await h.advance(20_000);
    assert.equal(o.own.status().handovers, 1, 'skipped');
    assert.ok(o.owned().has(IP));
    await h.advanceUntil(() => o.own.status().handovers === 2, 'tried again after skipPreferredMs', 60_000, 1000);
    assert.ok(h.clock.now() - back >= OPTS.skipPreferredMs - 1000);
  });

  test('no skip when the preferred node held the IP beyond handedBackWithinMs: released later, it is handed to it again', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const o = await h.node(lo);
    o.cands([IP]);
    await h.until(() => o.owned().has(IP), `${lo} owns it`);
    const p = await h.node(hi);
    p.cands([IP]);
    await h.advanceUntil(() => p.owned().has(IP), 'handed over', 6500);
    await h.advance(10_500);
    await p.own.release();
    await h.advanceUntil(() => o.owned().has(IP), 'back to lo', 1500);
    assert.deepEqual(o.moves.at(-1), { ip: IP, to: lo, from: hi, cause: 'released' });
    const p2 = await h.node(hi);
    p2.cands([IP]);
    await h.advanceUntil(() => p2.owned().has(IP), 'handed over again', 6500);
    assert.equal(o.own.status().handovers, 2);
  });

  test('release: withdrawn first, the node Lease, every IP Lease and the election deleted (as seen); the others claim at once, cause released', async () => {
    h = harness();
    const a = await h.node('node-a', { elect: ['herald-ipam'] });
    a.cands([IP, IP2]);
    await h.until(() => a.owned().size === 2, 'a owns both');
    const b = await h.node('node-b', { elect: ['herald-ipam'] });
    b.cands([IP, IP2]);
    await h.advance(100);
    const ipLeases = [IP, IP2].map((ip) => h.lease(ipLeaseName(ip))!);
    const election = h.lease('herald-ipam')!;
    const n = h.api.requests.length;
    await a.own.release();
    assert.equal(a.owned().size, 0);
    assert.ok(a.emittedAt.at(-1)! <= n, 'withdrawn before any delete');
    const mine = h.api.requests.slice(n).filter((r) => r.who === 'node-a');
    assert.deepEqual(
      mine.map((r) => [r.method, r.path.split('/').pop(), r.body?.preconditions?.resourceVersion]),
      [
        ['DELETE', 'node-node-a', undefined],
        ['DELETE', ipLeaseName(IP), ipLeases[0]!.metadata.resourceVersion],
        ['DELETE', ipLeaseName(IP2), ipLeases[1]!.metadata.resourceVersion],
        ['DELETE', 'herald-ipam', election.metadata.resourceVersion],
      ],
    );
    assert.equal(a.own.status().releases, 2);
    assert.equal(a.own.livenessGate().answerUntilMs(), 0);
    assert.equal(a.own.elect('herald-ipam').isLeader(), false);
    await h.until(() => b.owned().size === 2 && b.own.elect('herald-ipam').isLeader(), 'b owns all and leads');
    assert.deepEqual(
      b.moves.map((m) => [m.ip, m.from, m.cause]).sort(),
      [
        [IP, 'node-a', 'released'],
        [IP2, 'node-a', 'released'],
      ],
    );
    // Idempotent, and nothing more from a (no renewals, no passes).
    const m = h.api.requests.length;
    await a.own.release();
    await h.advance(5000);
    assert.equal(h.api.requests.slice(m).filter((r) => r.who === 'node-a').length, 0);
  });

  test('dispose: no request, renewal or pass after it; the watch is closed; idempotent', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    assert.equal(h.api.openWatches, 1);
    const n = h.api.requests.length;
    const passes = a.own.counters.passes;
    a.own.dispose();
    a.own.dispose();
    await h.advance(10_000);
    assert.equal(h.api.requests.length, n);
    assert.equal(a.own.counters.passes, passes);
    assert.equal(h.api.openWatches, 0);
    assert.equal(h.clock.pending, 0, 'no timer left');
  });
});
