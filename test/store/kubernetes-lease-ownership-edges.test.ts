/**
 * Lease ownership (src/store/kubernetes/lease-ownership.ts) at its edges, on
 * the in-memory Lease API and a manual clock: renewal timing from the send,
 * a node Lease left by an earlier incarnation, IP Leases written before
 * bindings, what a relist may not do (revive a dead node), the watch's
 * query, fences refused or raced, elections on a doubtful holder, rankings
 * hashed once, and what release and dispose leave to others.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { RELEASING_ANNOTATION, ipLeaseName } from '../../src/store/kubernetes/lease-ownership.js';
import { INCARNATION_ANNOTATION } from '../../src/supervisor/protocol.js';
import type { KubeObject } from '../../src/intent/sources/kube-client.js';
import { leasesPath } from '../helpers/fake-kube-leases.js';
import { IP, IP2, NS, START, byPref, harness, ipPreferring } from '../helpers/lease-ownership-harness.js';

let h: ReturnType<typeof harness>;
afterEach(() => h?.stopAll());

const reqs = (who: string, method: string, name: string) => h.api.requests.filter((r) => r.who === who && r.method === method && r.path === leasesPath(NS, name));

describe('lease ownership edges on a fake API and a manual clock', () => {
  test('a slow renewal: the next one is renewMs after the send (not after the answer), and validity counts from the send', async () => {
    h = harness();
    const a = await h.node('node-a');
    const held = h.api.hold({ who: 'node-a', method: 'PUT', name: 'node-node-a' });
    await h.advance(2000);
    await held.reached;
    await h.advance(300);
    held.release();
    await h.settle();
    assert.equal(a.own.livenessGate().answerUntilMs(), START + 2000 + 5500, 'from the send');
    await h.advance(1699);
    assert.equal(reqs('node-a', 'PUT', 'node-node-a').length, 1);
    await h.advance(1);
    assert.equal(reqs('node-a', 'PUT', 'node-node-a').length, 2, 'renewMs after the send');
  });

  test('a node Lease left by an earlier incarnation: read and renewed (our incarnation stamped), not created again; its uid kept', async () => {
    h = harness();
    const old = await h.admin.request<KubeObject>('POST', leasesPath(NS), {
      metadata: { name: 'node-node-a', namespace: NS, annotations: { [INCARNATION_ANNOTATION]: 'earlier', other: 'kept' } },
      spec: { holderIdentity: 'node-a', leaseDurationSeconds: 6 },
    });
    const a = await h.node('node-a');
    const now = h.lease('node-node-a')!;
    assert.equal(now.metadata.uid, old.metadata.uid);
    assert.deepEqual(now.metadata.annotations, { [INCARNATION_ANNOTATION]: a.own.incarnation, other: 'kept' });
    assert.equal(reqs('node-a', 'POST', '').length + h.api.requests.filter((r) => r.who === 'node-a' && r.method === 'POST').length, 0);
    assert.equal(typeof (now.spec as any).renewTime, 'string');
    assert.equal(a.own.status().renewals, 1);
    // A failure other than 404 on that read is a failed renewal (retried), not a create. (The 409's own read —
    // is our node Lease gone? — fails too: not known to be gone, so no fence-out.)
    h.api.failNext({ who: 'node-a', method: 'PUT', name: 'node-node-a' }, 409, 'Conflict');
    h.api.failNext({ who: 'node-a', method: 'GET', name: 'node-node-a' }, 500, 'InternalError', 2);
    await h.advance(2500);
    assert.equal(a.own.status().renewFailures, 2);
    assert.equal(h.api.requests.filter((r) => r.who === 'node-a' && r.method === 'POST').length, 0);
    await h.advance(500);
    assert.equal(a.own.status().renewals, 2);
  });

  test('an IP Lease written before bindings (no node-lease uid) is valid with any node Lease of its holder', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    await h.ipLease(IP, 'node-x');
    const b = await h.node('node-b');
    b.cands([IP]);
    await h.advance(1000);
    assert.equal(b.own.view().owners.get(IP), 'node-x');
    assert.equal(b.owned().size, 0);
    assert.ok(x.uid);
    // Bound to a uid that is not its node Lease's: nobody's.
    await h.ipLease(IP2, 'node-x', 'another-uid');
    assert.equal(b.own.view().owners.get(IP2), undefined);
  });

  test("a relist does not make a dead node live again: a node Lease whose version did not change keeps its age", async () => {
    h = harness();
    await h.simNode('node-x');
    const ip = ipPreferring('node-b', 'node-x');
    const b = await h.node('node-b');
    await h.ipLease(IP, 'node-x', h.lease('node-node-x')!.metadata.uid as string);
    b.cands([IP]);
    void ip;
    await h.advance(5000);
    await b.own.livenessGate().recheck('test');
    assert.deepEqual(b.own.status().liveNodes, ['node-b', 'node-x']);
    await h.advanceUntil(() => b.owned().has(IP), 'taken at its expiry, not 6 s after the relist', 1200);
    assert.ok(h.clock.now() < START + 6000 + 1200);
  });

  test("the watch: every Lease of the namespace, from the list's resourceVersion, with bookmarks and a timeout of 240–300 s", async () => {
    h = harness();
    await h.node('node-a');
    const q = h.api.watchQueries.filter((w) => w.who === 'node-a');
    assert.equal(q.length, 1);
    assert.equal(q[0]!.query.allowWatchBookmarks, true);
    const t = q[0]!.query.timeoutSeconds as number;
    assert.ok(Number.isInteger(t) && t >= 240 && t < 300, String(t));
    assert.match(String(q[0]!.query.resourceVersion), /^\d+$/);
  });

  test('a restarted watch keeps the first watch start for the benefit of the doubt (a holder never seen is not doubted again)', async () => {
    h = harness();
    await h.ipLease(IP, 'node-ghost');
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.advance(4000);
    h.api.breakWatches(new Error('reset'), 'node-a');
    await h.advance(1000);
    assert.equal(a.owned().size, 0);
    await h.advanceUntil(() => a.owned().has(IP), 'taken a Lease duration after the first watch', 1500);
    assert.ok(h.clock.now() < START + 7500);
  });

  test('fencing refused: silence about an IP whose Lease is gone, or while our own Lease is not valid, fences nobody', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { durationS: 60 });
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), 'p owns it');
    const o = await h.node(lo, { durationS: 60 });
    o.cands([IP]);
    await h.until(() => o.watch.targets.length === 1, 'o watches p');
    o.watch.silent(hi, IP2); // no Lease for IP2
    await h.settle();
    assert.equal(o.own.status().fencesIssued, 0);
    assert.equal(reqs(lo, 'DELETE', `node-${hi}`).length, 0);
    // Our own Lease lapsed (renewals failing past validUntil): we fence nobody.
    h.api.failNext({ who: lo, method: 'PUT', name: `node-${lo}` }, 500, 'InternalError', 1000);
    await h.advance(60_000);
    assert.equal(o.own.status().leaseValid, false);
    o.watch.silent(hi, IP);
    await h.settle();
    assert.equal(o.own.status().fencesIssued, 0);
    assert.equal(h.api.requests.filter((r) => r.who === lo && r.method === 'GET' && r.path === leasesPath(NS, ipLeaseName(IP))).length, 0, 'not even read');
  });

  test('a fence raced by a renewal of the silent node: read again and deleted while it stays silent; not when it was heard since', async () => {
    for (const heard of [false, true]) {
      h?.stopAll();
      h = harness();
      const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
      const p = await h.node(hi, { durationS: 60 });
      p.cands([IP]);
      await h.until(() => p.owned().has(IP), 'p owns it');
      const o = await h.node(lo, { durationS: 60 });
      o.cands([IP]);
      await h.until(() => o.watch.targets.length === 1, 'o watches p');
      // o's cached copy of p's node Lease is stale (p renewed, o's watch missed it): the first delete is a 409.
      h.api.pauseWatch(lo);
      await h.advance(2000);
      o.watch.heard = heard;
      o.watch.silent(hi, IP);
      await h.settle();
      const dels = reqs(lo, 'DELETE', `node-${hi}`);
      if (!heard) {
        assert.deepEqual(dels.map((d) => d.status), [409, 200]);
        assert.equal(o.own.status().fencesIssued, 1);
      } else {
        assert.deepEqual(dels.map((d) => d.status), [409]);
        assert.equal(o.own.status().fencesIssued, 0);
        assert.deepEqual(h.lines(o, 'info', 'silent owner not fenced')[0]!.obj, { node: hi, ip: IP, outcome: 'conflict' });
      }
      h.api.resumeWatch(lo);
    }
  });

  test('a fence only deletes the node Lease the IP Lease is bound to: a holder re-created since (another uid) is not fenced', async () => {
    h = harness();
    const x = await h.simNode('node-x', 60);
    await h.ipLease(IP, 'node-x', 'an-earlier-uid');
    const b = await h.node('node-b');
    b.cands([IP]);
    await h.settle();
    b.watch.silent('node-x', IP);
    await h.settle();
    assert.equal(b.own.status().fencesIssued, 0);
    assert.ok(h.lease('node-node-x'), 'not deleted');
    assert.ok(x.uid);
  });

  test('elections: a holder never seen is doubted for a Lease duration; a lost race is counted; a disposed leader leads no more', async () => {
    h = harness();
    await h.admin.request('POST', leasesPath(NS), { metadata: { name: 'herald-ipam', namespace: NS }, spec: { holderIdentity: 'node-ghost', leaseTransitions: 3 } });
    const a = await h.node('node-a', { elect: ['herald-ipam'] });
    const e = a.own.elect('herald-ipam');
    await h.advance(5900);
    assert.equal(e.isLeader(), false, 'doubtful');
    await h.advanceUntil(() => e.isLeader(), 'taken', 1500);
    assert.equal((h.lease('herald-ipam')!.spec as any).leaseTransitions, 4);
    a.own.dispose();
    assert.equal(e.isLeader(), false);
    assert.equal(e.leader(), undefined);
    // Two nodes, neither preferred (a live simulated node is): both claim the free Lease after the delay, one loses.
    h.stopAll();
    h = harness();
    const pref = ipPreferring('node-p', 'node-a', 'node-b');
    void pref;
    const sim = byPref('herald-x', ['node-p', 'node-a', 'node-b'])[0]!;
    const members = ['node-p', 'node-a', 'node-b'].filter((n) => n !== sim);
    await h.simNode(sim);
    const m1 = await h.node(members[0]!, { elect: ['herald-x'] });
    const m2 = await h.node(members[1]!, { elect: ['herald-x'] });
    await h.advance(300);
    await h.settle();
    assert.equal(Number(m1.own.elect('herald-x').isLeader()) + Number(m2.own.elect('herald-x').isLeader()), 1);
    assert.equal(m1.own.counters.lostRaces + m2.own.counters.lostRaces, 1);
  });

  test('rankings are hashed once per IP while the node set stays; a node joining makes them stale', async () => {
    h = harness();
    const a = await h.node('node-a');
    const ips = Array.from({ length: 5 }, (_, i) => `203.0.113.${i + 1}`);
    a.cands(ips);
    await h.until(() => a.owned().size === 5, 'owned');
    await h.advance(5000);
    assert.equal(a.own.counters.rankings, 5);
    await h.node('node-b');
    await h.advance(1000);
    assert.equal(a.own.counters.rankings, 10);
  });

  test('release leaves what others hold alone: their IP Leases and their election Lease stay', async () => {
    h = harness();
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const p = await h.node(hi, { elect: ['herald-ipam'] });
    p.cands([IP]);
    await h.until(() => p.owned().has(IP), 'p owns');
    const o = await h.node(lo, { elect: ['herald-ipam'] });
    o.cands([IP2]);
    await h.advanceUntil(() => o.owned().has(IP2) && o.own.elect('herald-ipam').leader() !== undefined, 'o owns IP2', 1000);
    const leader = o.own.elect('herald-ipam').leader();
    const n = h.api.requests.length;
    const mine = leader === lo ? p : o; // release the one that does not lead
    const other = mine === p ? o : p;
    await mine.own.release();
    const dels = h.api.requests.slice(n).filter((r) => r.who === mine.name && r.method === 'DELETE').map((r) => r.path.split('/').pop());
    assert.deepEqual(dels, [`node-${mine.name}`, ipLeaseName(mine === p ? IP : IP2)]);
    assert.ok(h.lease('herald-ipam'));
    assert.ok(h.lease(ipLeaseName(mine === p ? IP2 : IP)));
    assert.equal(other.own.elect('herald-ipam').isLeader(), true);
  });

  test('a hand-over refused (409: someone wrote the IP Lease since) or a delete refused (404) is no failure', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP, IP2]);
    await h.until(() => a.owned().size === 2, 'owned');
    h.api.failNext({ who: 'node-a', method: 'DELETE', name: ipLeaseName(IP) }, 404, 'NotFound');
    h.api.failNext({ who: 'node-a', method: 'DELETE', name: ipLeaseName(IP2) }, 500, 'InternalError');
    a.cands([]);
    await h.until(() => a.owned().size === 0, 'withdrawn');
    await h.settle();
    await h.advance(1000);
    assert.equal(h.lease(ipLeaseName(IP)), undefined, 'deleted by a later pass');
    assert.equal(h.lease(ipLeaseName(IP2)), undefined, 'the failed delete is retried');
    assert.deepEqual(reqs('node-a', 'DELETE', ipLeaseName(IP)).map((r) => r.status), [404, 200]);
    assert.deepEqual(reqs('node-a', 'DELETE', ipLeaseName(IP2)).map((r) => r.status), [500, 200]);
    assert.equal(h.lines(a, 'warn', 'releasing an IP lease failed').length, 1, 'only the 500 is a failure');
    assert.equal(a.own.status().releases, 2, 'counted when deleted');
    void RELEASING_ANNOTATION;
  });

  test('no change, no call: the owned set is told only when it changes', async () => {
    h = harness();
    const a = await h.node('node-a');
    a.cands([IP]);
    await h.until(() => a.owned().has(IP), 'owned');
    const n = a.sets.length;
    await h.advance(10_000);
    assert.equal(a.sets.length, n);
  });
});
