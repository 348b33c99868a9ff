/**
 * Per-IP ownership against a real etcd (loopback): sessions, the fence key,
 * rendezvous preference, hand-over, fencing a silent owner, release, and
 * stepping down on our own clock when etcd becomes unreachable.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import type { OwnerWatch, WatchTarget } from '../../src/controlplane/ownership/edges.js';
import { EtcdOwnership } from '../../src/store/etcd/ownership.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { TcpProxy, etcdTxnCount, hostPort, startEtcd, type EtcdServer } from '../helpers/etcd.js';
import { waitFor } from '../../lab/lab.js';

class ManualWatch implements OwnerWatch {
  targets: readonly WatchTarget[] = [];
  private cb: (node: string, ip: string) => void = () => {};
  setTargets(t: readonly WatchTarget[]): void {
    this.targets = t;
  }
  onSilent(cb: (node: string, ip: string) => void): void {
    this.cb = cb;
  }
  silence(node: string, ip = IP): void {
    this.cb(node, ip);
  }
}

const IP = '198.51.100.7';

/**
 * Every owned-set change of every member and the session states the test
 * marks, in the order they happened: properties such as "never two owners" or
 * "a stepped down before b took over" are checked on this order, not on
 * wall-clock samples (a sampler misses short overlaps and ties on a loaded
 * machine).
 */
type TimelineEvent = { node: string; owned: ReadonlySet<string> } | { node: string; session: string };

describe('etcd ownership', () => {
  let etcd: EtcdServer;
  const cleanups: Array<() => void | Promise<void>> = [];
  let prefixN = 0;

  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    for (const c of cleanups.reverse()) await c();
    await etcd?.stop();
  });

  let timeline: TimelineEvent[] = [];
  /** The most owners `ip` had at once, over the timeline. */
  const maxOwnersOfIp = (ip = IP): number => {
    const now = new Map<string, boolean>();
    let max = 0;
    for (const e of timeline) {
      if (!('owned' in e)) continue;
      now.set(e.node, e.owned.has(ip));
      max = Math.max(max, [...now.values()].filter(Boolean).length);
    }
    return max;
  };
  /** Index of the first timeline event matching `pred` (-1 if none). */
  const at = (pred: (e: TimelineEvent) => boolean): number => timeline.findIndex(pred);

  async function member(node: string, prefix: string, opts: { endpoint?: string; handoverHoldMs?: number; onStoreLoss?: 'withdraw' | 'keep'; releaseGraceMs?: number } = {}) {
    const session = new EtcdSession(
      { endpoints: [opts.endpoint ?? etcd.endpoint], prefix, ttlSeconds: 3, keepaliveMs: 500, marginMs: 500 },
      { clock: systemClock, log: silentLogger },
    );
    await session.start();
    const watch = new ManualWatch();
    const own = new EtcdOwnership(session, node, { clock: systemClock, log: silentLogger, watch }, {
      onStoreLoss: opts.onStoreLoss ?? 'withdraw',
      contendDelayMs: 300,
      handoverHoldMs: opts.handoverHoldMs ?? 60_000,
      skipPreferredMs: 60_000,
      ...(opts.releaseGraceMs !== undefined ? { releaseGraceMs: opts.releaseGraceMs } : {}),
    });
    const owned = { current: new Set<string>() };
    /** The datapath's apply takes this long (a starved agent), after the owned set is recorded. */
    const slow = { ms: 0 };
    // This test's timeline: members of earlier tests (same node names, other prefixes) may still
    // emit — a periodic pass of an old owner once counted as a second owner here.
    const mine = timeline;
    await own.start(async (v) => {
      owned.current = new Set(v.owned);
      mine.push({ node, owned: owned.current });
      if (slow.ms > 0) await new Promise((r) => setTimeout(r, slow.ms));
    });
    // Registered after the ownership's own listener: by the time it runs, the ownership has reacted.
    session.onState((state) => mine.push({ node, session: state }));
    cleanups.push(() => {
      own.dispose();
      session.dispose();
    });
    return { session, own, watch, owned, slow };
  }
  const freshPrefix = () => {
    timeline = [];
    return `/herald-test-${process.pid}-${prefixN++}/`;
  };
  const cand = new Map([[IP, ['eth0']]]);

  test('one owner per IP; the rendezvous-preferred candidate wins a free IP', async () => {
    const prefix = freshPrefix();
    const [a, b] = [await member('node-a', prefix, { handoverHoldMs: 500 }), await member('node-b', prefix, { handoverHoldMs: 500 })];
    a.own.setCandidates(cand);
    b.own.setCandidates(cand);
    // Whoever wins the race first, the preferred node ends up owning it.
    const [preferredNode, preferred, other] = rendezvousScore('node-a', IP) > rendezvousScore('node-b', IP) ? ['node-a', a, b] : ['node-b', b, a];
    await waitFor(() => preferred.owned.current.has(IP), { timeoutMs: 15_000, what: 'the preferred node to own it' });
    // Settled once the other node has seen the owner key: from then on it does not contend.
    await waitFor(() => other.own.view().owners.get(IP) === preferredNode, { timeoutMs: 15_000, what: 'the other node to see the owner' });
    assert.equal(a.owned.current.size + b.owned.current.size, 1);
    assert.equal(maxOwnersOfIp(), 1, `never two owners at once: ${JSON.stringify(timeline.map((e) => ('owned' in e ? [e.node, [...e.owned]] : [e.node, e.session])))}`);
  });

  test('release withdraws locally and the other candidate takes over once the lease is revoked', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    await a.own.release();
    assert.equal(a.owned.current.size, 0, 'withdrawn before the lease goes');
    assert.equal(b.owned.current.size, 0, 'nobody else yet: the key is still held');
    await a.session.revoke();
    await waitFor(() => b.owned.current.has(IP), { timeoutMs: 15_000, what: 'b takes over after the revoke' });
  });

  test('a stop with the datapath already silent hands the IP straight to its successor, on its lease, before any revoke', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    const candKey = `${prefix}candidates/${IP}/node-b`;
    await waitFor(async () => (await b.session.client.get(candKey).exec()).kvs.length === 1, { what: "b's candidacy in the store" });
    await new Promise((r) => setTimeout(r, 300)); // a's watch has delivered it
    // `silenced: true` says the caller's datapath stopped answering before this call (the agent clears
    // its liveness stamp first): from here a answers for nothing, whenever its view catches up.
    timeline.push({ node: 'node-a', owned: new Set() });
    await a.own.release({ silenced: true });
    assert.equal(a.owned.current.size, 0, 'a withdrew locally');
    await waitFor(() => b.owned.current.has(IP), { timeoutMs: 5000, what: 'b owns without a revoke' });
    assert.equal(a.session.state, 'live', "a's lease still stands: b did not wait for it");
    const kv = (await b.session.client.get(`${prefix}owners/${IP}`).exec()).kvs[0]!;
    assert.equal(kv.value.toString(), 'node-b');
    assert.equal(String(kv.lease), b.session.leaseId, "the owner key sits on the successor's lease");
    assert.equal(b.own.view().owners.get(IP), 'node-b');
    // a's lease going does not take the key with it.
    await a.session.revoke();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(b.owned.current.has(IP), true);
    assert.equal(maxOwnersOfIp(), 1, 'never two owners at once');
    // Gone now, so they add nothing to a later test's timeline.
    for (const m of [a, b]) {
      m.own.dispose();
      m.session.dispose();
    }
  });

  test('a stop hands 1,000 IPs over in a bounded number of transactions (the record, then 8 with one compare and one put per IP), and no successor hands one back while the stopping node\'s candidacies still stand', async () => {
    const prefix = freshPrefix();
    const txns = () => etcdTxnCount(etcd.endpoint);
    const ips = Array.from({ length: 1000 }, (_, i) => `2001:db8::${(0x3000 + i).toString(16)}`);
    const candidates = new Map(ips.map((ip) => [ip, ['eth0']] as const));
    // a keeps everything (a long hold); the successors would hand an IP back to a more preferred node at once.
    const a = await member('node-a', prefix);
    a.own.setCandidates(candidates);
    await waitFor(() => a.owned.current.size === ips.length, { timeoutMs: 60_000, what: 'a owns every IP' });
    const [b, c] = [await member('node-b', prefix, { handoverHoldMs: 1 }), await member('node-c', prefix, { handoverHoldMs: 1 })];
    b.own.setCandidates(candidates);
    c.own.setCandidates(candidates);
    const count = async (node: string) => (await a.session.client.getAll().prefix(`${prefix}candidates/`).keys()).filter((k) => k.endsWith(`/${node}`)).length;
    await waitFor(async () => (await count('node-b')) === ips.length && (await count('node-c')) === ips.length, { timeoutMs: 30_000, what: 'the candidacies in the store' });
    await new Promise((r) => setTimeout(r, 500)); // a's watch has delivered them
    const before = await txns();
    timeline.push({ node: 'node-a', owned: new Set() });
    await a.own.release({ silenced: true });
    const used = (await txns()) - before;
    await waitFor(() => b.owned.current.size + c.owned.current.size === ips.length, { timeoutMs: 10_000, what: 'the successors own every IP' });
    // 1,000 IPs in transactions of 125, plus the record written only if none stands; 17 with two compares and two operations per IP.
    assert.ok(used <= 9, `${used} transactions to hand 1,000 IPs over`);
    // a's candidacy keys stand (no revoke yet) and a is the preferred node for about a third of
    // the IPs, which b and c would hand back at once: a handed its keys over, so it counts as departed.
    assert.equal(await count('node-a'), ips.length, "a's candidacies still stand");
    await new Promise((r) => setTimeout(r, 1500));
    const sizes = (node: string) => timeline.flatMap((e) => ('owned' in e && e.node === node ? [e.owned.size] : []));
    for (const node of ['node-b', 'node-c']) {
      const s = sizes(node);
      assert.ok(s.every((n, i) => i === 0 || n >= s[i - 1]!), `${node} never gave an IP back: owned sizes ${s.join(' ')}`);
    }
    assert.equal(b.owned.current.size + c.owned.current.size, ips.length);
    for (const ip of ips) assert.ok(b.owned.current.has(ip) !== c.owned.current.has(ip), `${ip}: exactly one successor`);
    for (const m of [a, b, c]) {
      m.own.dispose();
      m.session.dispose();
    }
  });

  test('without a silenced datapath a release hands nothing over: the key stays the fence until the revoke', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    await waitFor(async () => (await b.session.client.get(`${prefix}candidates/${IP}/node-b`).exec()).kvs.length === 1, { what: "b's candidacy in the store" });
    await new Promise((r) => setTimeout(r, 300));
    await a.own.release();
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(b.owned.current.size, 0);
    const kv = (await b.session.client.get(`${prefix}owners/${IP}`).exec()).kvs[0]!;
    assert.equal(String(kv.lease), a.session.leaseId);
    await a.session.revoke();
    for (const m of [a, b]) {
      m.own.dispose();
      m.session.dispose();
    }
  });

  test('a silent owner is fenced out: its IPs handed over, its lease revoked, a candidate takes over long before expiry; an owner that was not dead after all falls silent at the fencer\'s record, before its lease goes', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    await waitFor(() => b.watch.targets.some((t) => t.node === 'node-a' && t.ip === IP), { what: 'b watches a on the wire' });
    const from = timeline.length;
    b.watch.silence('node-a');
    await waitFor(() => b.owned.current.has(IP), { timeoutMs: 15_000, what: 'b takes over' });
    // a keeps its lease alive: b can only have taken over by fencing (revoking a's lease), never by waiting it out.
    await waitFor(() => b.own.status().fencesIssued === 1, { what: "b revokes a's lease after the moves" });
    await waitFor(() => a.session.state === 'lost', { timeoutMs: 15_000, what: 'a learns it lost its lease' });
    assert.equal(a.owned.current.has(IP), false);
    assert.equal(a.session.lostReason ?? 'lease-gone', 'lease-gone', 'a lost its lease to the fence, not to an outage');
    const after = timeline.slice(from);
    const silentAt = after.findIndex((e) => e.node === 'node-a' && 'owned' in e && !e.owned.has(IP));
    const lostAt = after.findIndex((e) => e.node === 'node-a' && 'session' in e && e.session === 'lost');
    assert.ok(silentAt >= 0 && silentAt < lostAt, `a withdrew at the record, before its lease went: ${JSON.stringify(after.map((e) => [e.node, 'session' in e ? e.session : [...e.owned]]))}`);
  });

  test('silence about an IP its owner has released (key gone, the delete not yet seen) fences nothing', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    await waitFor(() => b.watch.targets.some((t) => t.node === 'node-a' && t.ip === IP), { what: 'b watches a on the wire' });
    // As a releasing owner does: silent first, key deleted next — and the candidate's silence
    // verdict comes before the delete reached it (here: the verdict for an IP whose key is gone).
    const other = '198.51.100.99';
    b.watch.silence('node-a', other);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(b.own.status().fencesIssued, 0, 'no key names node-a for that IP: no fence');
    assert.equal(a.session.state, 'live');
    // The key still names node-a: that silence is evidence.
    b.watch.silence('node-a', IP);
    await waitFor(() => b.own.status().fencesIssued === 1, { timeoutMs: 10_000, what: 'the fence' });
  });

  test('a releasing owner starved between going silent and deleting its key is not fenced: it marked the IP as releasing first', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    await waitFor(() => b.watch.targets.some((t) => t.node === 'node-a' && t.ip === IP), { what: 'b watches a on the wire' });
    // a gives the IP up; its datapath apply (the withdrawal it waits for before deleting the key)
    // takes 1.5 s — as on a starved agent. It is silent from the start of the apply.
    a.slow.ms = 1500;
    a.own.setCandidates(new Map());
    await waitFor(() => !a.owned.current.has(IP), { what: 'a silent on the IP' });
    // The candidate's silence verdict comes while a's key still names it.
    assert.equal((await b.session.client.get(`${prefix}owners/${IP}`).exec()).kvs[0]?.value.toString(), 'node-a', 'the key still names a');
    b.watch.silence('node-a', IP);
    await waitFor(() => b.owned.current.has(IP), { timeoutMs: 10_000, what: 'b takes the IP once a has deleted its key' });
    assert.equal(b.own.status().fencesIssued, 0, 'a releasing owner is not fenced');
    assert.equal(a.session.state, 'live', "a's lease stands (its other IPs would have moved with it)");
    assert.equal((await b.session.client.get(`${prefix}releasing/${IP}`).exec()).kvs.length, 0, 'the marker went with the key');
    assert.equal(maxOwnersOfIp(), 1, 'never two owners at once');
    for (const m of [a, b]) {
      m.own.dispose();
      m.session.dispose();
    }
  });

  test('a releasing marker makes nobody immune: past the grace the silent owner is fenced; a marker on another lease counts for nothing', async () => {
    const prefix = freshPrefix();
    const a = await member('node-a', prefix);
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix, { releaseGraceMs: 1000 });
    b.own.setCandidates(cand);
    await waitFor(() => b.watch.targets.some((t) => t.node === 'node-a' && t.ip === IP), { what: 'b watches a on the wire' });
    // A marker without a lease (a hand edit): no release in progress, the silence is evidence.
    const mark = `${prefix}releasing/${IP}`;
    await b.session.client.put(mark).value('node-a').exec();
    b.watch.silence('node-a', IP);
    await waitFor(() => b.own.status().fencesIssued === 1, { timeoutMs: 10_000, what: 'the fence despite a lease-less marker' });
    await waitFor(() => b.owned.current.has(IP), { timeoutMs: 10_000, what: 'b owns' });
    // Now b owns; a (re-joined on a new lease) watches b. b marks the IP, then never releases it
    // (as an owner wedged after marking) and stays silent: fenced once the grace has passed.
    const c = await member('node-c', prefix, { releaseGraceMs: 1000 });
    c.own.setCandidates(cand);
    await waitFor(() => c.watch.targets.some((t) => t.node === 'node-b' && t.ip === IP), { what: 'c watches b on the wire' });
    await c.session.client.put(mark).value('node-b').lease(b.session.leaseId!).exec();
    await new Promise((r) => setTimeout(r, 300));
    const silentAt = Date.now();
    c.watch.silence('node-b', IP);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(c.own.status().fencesIssued, 0, 'within the grace: a release in progress');
    await waitFor(() => c.own.status().fencesIssued === 1, { timeoutMs: 10_000, what: 'the fence past the grace' });
    assert.ok(Date.now() - silentAt >= 900, 'not before the grace');
    for (const m of [a, b, c]) {
      m.own.dispose();
      m.session.dispose();
    }
  });

  test('an owner hands an IP over to a more preferred candidate after the hold-down', async () => {
    const prefix = freshPrefix();
    // Find which of two names is preferred for IP, and let the other own it first.
    const [hi, lo] = rendezvousScore('node-a', IP) > rendezvousScore('node-b', IP) ? ['node-a', 'node-b'] : ['node-b', 'node-a'];
    const first = await member(lo, prefix, { handoverHoldMs: 500 });
    first.own.setCandidates(cand);
    await waitFor(() => first.owned.current.has(IP), { what: 'the less preferred node owns it first' });
    const second = await member(hi, prefix, { handoverHoldMs: 500 });
    second.own.setCandidates(cand);
    await waitFor(() => second.owned.current.has(IP), { timeoutMs: 5000, what: 'hand-over to the preferred node' });
    assert.equal(first.owned.current.has(IP), false);
  });

  test('a dual-stack service: its two addresses share an affinity key, so one node owns both and both move together', async () => {
    const prefix = freshPrefix();
    const prefers = (ip: string) => (rendezvousScore('node-a', ip) > rendezvousScore('node-b', ip) ? 'node-a' : 'node-b');
    // An IPv6 address that, scored on its own, would prefer the other node.
    let v6 = '';
    for (let i = 1; i < 1000 && !v6; i++) if (prefers(`2001:db8::${i.toString(16)}`) !== prefers(IP)) v6 = `2001:db8::${i.toString(16)}`;
    assert.ok(v6, 'found an address the other node prefers');
    const both = new Map([[IP, ['eth0']], [v6, ['eth0']]]);
    const affinity = new Map([[IP, IP], [v6, IP]]);
    const a = await member('node-a', prefix, { handoverHoldMs: 500 });
    const b = await member('node-b', prefix, { handoverHoldMs: 500 });
    a.own.setCandidates(both, affinity);
    b.own.setCandidates(both, affinity);
    const [owner, other] = prefers(IP) === 'node-a' ? [a, b] : [b, a];
    await waitFor(() => owner.owned.current.has(IP) && owner.owned.current.has(v6) && other.owned.current.size === 0, {
      timeoutMs: 5000,
      what: 'the node preferred for the service to own both families',
    });
    await new Promise((r) => setTimeout(r, 1500)); // past the hand-over hold: nothing moves to the node preferred per address
    assert.deepEqual([owner.owned.current.has(IP), owner.owned.current.has(v6), other.owned.current.size], [true, true, 0]);
    await owner.own.release();
    await owner.session.revoke();
    await waitFor(() => other.owned.current.has(IP) && other.owned.current.has(v6), { timeoutMs: 3000, what: 'both families to move to the other node' });
  });

  test('the wire watch probes an owner through an IPv4 address when it owns one, else through an IPv6 one', async () => {
    const prefix = freshPrefix();
    const v4 = '203.0.113.7'; // sorts after 2001:db8::7 as text
    const v6 = '2001:db8::7';
    const both = new Map([[v4, ['eth0']], [v6, ['eth0']]]);
    const a = await member('node-a', prefix);
    a.own.setCandidates(both);
    await waitFor(() => a.owned.current.has(v4) && a.owned.current.has(v6), { what: 'a owns both' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(both);
    await waitFor(() => b.watch.targets.some((t) => t.node === 'node-a'), { what: 'b watches a' });
    assert.deepEqual(b.watch.targets.map((t) => t.ip), [v4]);
    a.own.setCandidates(new Map([[v6, ['eth0']]]));
    b.own.setCandidates(new Map([[v6, ['eth0']]]));
    await waitFor(() => b.watch.targets.length === 1 && b.watch.targets[0]!.ip === v6, { what: 'b watches a through its IPv6 address' });
  });

  test('cut off from etcd, an owner steps down on its own clock before its lease can expire at the server', async () => {
    const prefix = freshPrefix();
    const proxy = new TcpProxy(hostPort(etcd.endpoint));
    await proxy.start();
    cleanups.push(() => proxy.close());
    const a = await member('node-a', prefix, { endpoint: proxy.endpoint });
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const b = await member('node-b', prefix);
    b.own.setCandidates(cand);
    const cutAt = timeline.length;
    await proxy.cut();
    await waitFor(() => b.owned.current.has(IP), { timeoutMs: 20_000, what: 'b takes over after a\'s lease expires' });
    const aDropped = at((e) => e.node === 'node-a' && 'owned' in e && !e.owned.has(IP));
    const bTook = at((e) => e.node === 'node-b' && 'owned' in e && e.owned.has(IP));
    assert.ok(aDropped >= cutAt && aDropped < bTook, `a stepped down (event ${aDropped}) before b took over (event ${bTook})`);
    assert.equal(maxOwnersOfIp(), 1, 'never two owners at once');
  });

  test('--on-store-loss keep: cut off from etcd, the owner keeps announcing (availability first, Cilium #40735)', async () => {
    const prefix = freshPrefix();
    const proxy = new TcpProxy(hostPort(etcd.endpoint));
    await proxy.start();
    cleanups.push(() => proxy.close());
    const a = await member('node-a', prefix, { endpoint: proxy.endpoint, onStoreLoss: 'keep' });
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { what: 'a owns' });
    const cutAt = timeline.length;
    await proxy.cut();
    await waitFor(() => a.session.state === 'lost', { timeoutMs: 20_000, what: 'the session to be lost' });
    assert.equal(a.owned.current.has(IP), true, 'still announcing');
    await proxy.restore();
    await waitFor(() => a.session.state === 'live', { timeoutMs: 20_000, what: 'the session back' });
    await waitFor(() => a.owned.current.has(IP), { timeoutMs: 15_000, what: 'ownership re-established under the new lease' });
    // Through the whole outage (from the cut until the session was live again), a never withdrew IP:
    // 'withdraw' drops it as the session is lost, so a drop would be in the timeline before 'live'.
    const lost = at((e, i = timeline.indexOf(e)) => i >= cutAt && 'session' in e && e.session === 'lost');
    const live = at((e, i = timeline.indexOf(e)) => i > lost && 'session' in e && e.session === 'live');
    assert.ok(lost >= 0 && live > lost, 'the timeline has the outage');
    const drops = timeline.slice(cutAt, live).filter((e) => e.node === 'node-a' && 'owned' in e && !e.owned.has(IP));
    assert.deepEqual(drops, [], 'a withdrew during the outage');
  });
  test('a re-read that started before our own claim does not erase it (the IP stayed owned in etcd and unanswered)', async () => {
    const a = await member('node-a', freshPrefix());
    // Hold back the answer of the next full read until we have claimed the IP.
    const client = a.session.client as unknown as { getAll: () => { prefix: (p: string) => { exec: () => Promise<unknown> } } };
    const realGetAll = client.getAll.bind(client);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let readIssued!: () => void;
    const issued = new Promise<void>((r) => (readIssued = r));
    client.getAll = () => {
      const builder = realGetAll();
      return {
        prefix: (p: string) => ({
          exec: async () => {
            const result = await builder.prefix(p).exec(); // read at the store now: before the claim
            readIssued();
            await gate;
            return result;
          },
        }),
      };
    };
    const own = a.own as unknown as { refresh(): Promise<void>; view(): { owners: Map<string, string> } };
    const reread = own.refresh();
    await issued;
    client.getAll = realGetAll;
    a.own.setCandidates(cand);
    await waitFor(() => a.owned.current.has(IP), { timeoutMs: 5000, what: 'the claim' });
    release();
    await reread;
    assert.equal(own.view().owners.get(IP), 'node-a', 'the older snapshot must not erase the newer claim');
  });
  test('contention is batched: 1,000 free IPs on two nodes cost tens of transactions, not thousands, and each IP gets exactly one owner (the first node to see them as free contends for all at once)', async () => {
    const prefix = freshPrefix();
    const txns = () => etcdTxnCount(etcd.endpoint);
    const ips = Array.from({ length: 1000 }, (_, i) => `2001:db8::${(0x1000 + i).toString(16)}`);
    const candidates = new Map(ips.map((ip) => [ip, ['eth0']] as const));
    const [a, b] = [await member('node-a', prefix), await member('node-b', prefix)];
    const before = await txns();
    a.own.setCandidates(candidates);
    b.own.setCandidates(candidates);
    await waitFor(() => a.owned.current.size + b.owned.current.size === ips.length, { timeoutMs: 60_000, what: 'every IP owned' });
    const used = (await txns()) - before;
    // Candidacy (10 per node) and contention (10 per node) in chunks of 100; one per IP was ≥ 1,000.
    assert.ok(used < 100, `${used} transactions for 1,000 IPs`);
    for (const ip of ips) assert.ok(a.owned.current.has(ip) !== b.owned.current.has(ip), `${ip}: exactly one owner`);
  });
  test("a claim's contention transactions are in flight together, not one store round trip after another (a failover of 1,000 IPs answered its last chunk five round trips after its first)", async () => {
    const a = await member('node-a', freshPrefix());
    type Builder = { commit: () => Promise<unknown> };
    const client = a.session.client as unknown as { if: (...args: unknown[]) => Builder };
    const realIf = client.if.bind(client);
    let inFlight = 0;
    let peak = 0;
    client.if = (...args: unknown[]) => {
      const builder = realIf(...args);
      // Contention: "owner key absent" compares.
      if (!String(args[0]).includes('/owners/') || args[1] !== 'Create') return builder;
      const commit = builder.commit.bind(builder);
      builder.commit = async () => {
        peak = Math.max(peak, ++inFlight);
        try {
          return await commit();
        } finally {
          inFlight--;
        }
      };
      return builder;
    };
    const ips = Array.from({ length: 1000 }, (_, i) => `2001:db8::${(0x2000 + i).toString(16)}`);
    a.own.setCandidates(new Map(ips.map((ip) => [ip, ['eth0']] as const)));
    await waitFor(() => a.owned.current.size === ips.length, { timeoutMs: 60_000, what: 'every IP owned' });
    assert.ok(peak > 1, `at most ${peak} contention transaction(s) in flight for 10 chunks`);
    assert.ok(peak <= 8, `${peak} in flight: bounded`);
  });
  /** a owns IP alone; then b (and c) join as candidates; a's datapath goes silent and its ownership stops working (a stop that stalls after writing its record). */
  async function stoppingOwner(prefix: string, ip: string, joiners: string[]) {
    const cands = new Map([[ip, ['eth0']]]);
    const a = await member('node-a', prefix);
    a.own.setCandidates(cands);
    await waitFor(() => a.owned.current.has(ip), { what: 'a owns' });
    const others = [];
    for (const node of joiners) {
      const m = await member(node, prefix);
      m.own.setCandidates(cands);
      others.push(m);
    }
    for (const node of joiners) {
      const key = `${prefix}candidates/${ip}/${node}`;
      await waitFor(async () => (await a.session.client.get(key).exec()).kvs.length === 1, { what: `${node}'s candidacy in the store` });
    }
    await new Promise((r) => setTimeout(r, 300)); // every watch has delivered them
    timeline.push({ node: 'node-a', owned: new Set() }); // silent from here
    a.own.dispose();
    const record = (moves: Array<[string, string, string]>) => JSON.stringify({ v: 1, node: 'node-a', moves });
    const putRecord = (value: string, lease = a.session.leaseId!) => a.session.client.put(`${prefix}handover/node-a`).value(value).lease(lease);
    return { a, others, record, putRecord };
  }

  test("a stop's hand-over record: the named successor answers while the owner key still names the stopping node on its lease; it goes with that lease", async () => {
    const prefix = freshPrefix();
    const { a, others: [b], record, putRecord } = await stoppingOwner(prefix, IP, ['node-b']);
    // Records that grant nothing: broken, naming b on a lease b does not hold, naming another IP.
    await putRecord('{"v":1,"node":"node-a","moves":[[');
    await putRecord(record([[IP, 'node-b', '12345']]));
    await putRecord(record([['198.51.100.8', 'node-b', b!.session.leaseId!]]));
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(b!.owned.current.has(IP), false, 'no record that names b for IP on its lease');
    await putRecord(record([[IP, 'node-b', b!.session.leaseId!]]));
    await waitFor(() => b!.owned.current.has(IP), { timeoutMs: 5000, what: 'b answers at the record' });
    const kv = (await b!.session.client.get(`${prefix}owners/${IP}`).exec()).kvs[0]!;
    assert.equal(kv.value.toString(), 'node-a', 'the owner key was not moved');
    assert.equal(String(kv.lease), a.session.leaseId);
    // The stopping node's lease ends before the key was moved: record and key go together, b stops
    // answering, and (the only candidate) claims the free IP on its own lease.
    await a.session.revoke();
    await waitFor(async () => {
      const k = (await b!.session.client.get(`${prefix}owners/${IP}`).exec()).kvs[0];
      return k?.value.toString() === 'node-b' && String(k.lease) === b!.session.leaseId;
    }, { timeoutMs: 5000, what: 'b claims the key on its own lease' });
    await waitFor(() => b!.owned.current.has(IP), { timeoutMs: 5000, what: 'b owns it' });
    const bSizes = timeline.flatMap((e) => ('owned' in e && e.node === 'node-b' ? [e.owned.has(IP)] : []));
    assert.deepEqual(bSizes.slice(-3), [true, false, true], `b withdrew between the record's end and its own claim: ${bSizes.join(' ')}`);
    assert.equal(maxOwnersOfIp(), 1, 'never two owners at once');
    for (const m of [a, b!]) m.session.dispose();
  });

  test('a hand-over record voided by its lease ending: a node it did not name waits the contention delay before claiming, though preferred (the named one may still answer)', async () => {
    // An IP for which c is preferred over b.
    const ip = Array.from({ length: 64 }, (_, i) => `198.51.100.${100 + i}`).find((x) => rendezvousScore('node-c', x) > rendezvousScore('node-b', x))!;
    const prefix = freshPrefix();
    const { a, others: [b, c], record, putRecord } = await stoppingOwner(prefix, ip, ['node-b', 'node-c']);
    await putRecord(record([[ip, 'node-b', b!.session.leaseId!]]));
    await waitFor(() => b!.owned.current.has(ip), { timeoutMs: 5000, what: 'b answers at the record' });
    const t0 = performance.now();
    await a.session.revoke();
    let cAt = Infinity;
    let holder: string | undefined;
    await waitFor(async () => {
      if (c!.owned.current.has(ip)) cAt = Math.min(cAt, performance.now() - t0);
      const k = (await c!.session.client.get(`${prefix}owners/${ip}`).exec()).kvs[0];
      holder = k && String(k.lease) !== a.session.leaseId ? k.value.toString() : undefined;
      return holder !== undefined && (holder === 'node-b' ? b! : c!).owned.current.has(ip);
    }, { timeoutMs: 5000, intervalMs: 2, what: 'a new owner on its own lease' });
    if (c!.owned.current.has(ip)) cAt = Math.min(cAt, performance.now() - t0);
    if (holder === 'node-c') assert.ok(cAt >= 250, `c claimed ${Math.round(cAt)} ms after the revoke, before the contention delay (300 ms)`);
    const owners = timeline.flatMap((e) => ('owned' in e && e.owned.has(ip) ? [e.node] : []));
    assert.ok(owners.length > 0);
    assert.equal(maxOwnersOfIp(ip), 1, 'never two owners at once');
    for (const m of [a, b!, c!]) m.session.dispose();
  });
});
