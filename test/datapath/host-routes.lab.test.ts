/**
 * Issue 17: BGP host routes reconciled by the generic reconciler into a real
 * kernel (a lab namespace), checked with `ip route`: plain and multipath
 * routes with herald's protocol number, replace on next-hop change, delete,
 * and at start: a desired route already there is adopted, a stale one pruned.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../../src/core/reconciler/reconciler.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { HostRoutesOps } from '../../src/datapath/routes/host-routes-ops.js';
import { bgpRoutesTable, type BgpRouteRow } from '../../src/datapath/tables/bgp-routes.js';
import { NetlinkHostRoutes } from '../../src/os/host-routes.js';
import { labSkipReason } from '../helpers/lab-tools.js';

const NS = `hlbgprt${process.pid}`;
const ip = (...args: string[]): string => execFileSync('ip', ['-n', NS, ...args], { encoding: 'utf8' });
/** `ip route` lines for proto 250 (herald's), whitespace-normalised. */
const routes = (fam: '-4' | '-6'): string[] =>
  ip(fam, 'route', 'show', 'proto', '250').split('\n').map((l) => l.trim().replace(/\s+/g, ' ')).filter((l) => l !== '');
const row = (prefix: string, nextHops: string[]): BgpRouteRow => ({ ip: prefix.split('/')[0]!, prefix, nextHops, services: ['default/web'], peers: [] });

describe('BGP host routes in a real kernel (lab)', { skip: labSkipReason() }, () => {
  const disposers: (() => void)[] = [];
  before(() => {
    execFileSync('ip', ['netns', 'add', NS]);
    ip('link', 'add', 'v0', 'type', 'veth', 'peer', 'name', 'v1');
    ip('link', 'set', 'v0', 'up');
    ip('link', 'set', 'v1', 'up');
    ip('addr', 'add', '192.0.2.1/24', 'dev', 'v0');
    ip('-6', 'addr', 'add', '2001:db8:1::1/64', 'dev', 'v0', 'nodad');
  });
  after(() => {
    for (const d of disposers.reverse()) d();
    execFileSync('ip', ['netns', 'del', NS]);
  });

  function start(initialized: boolean) {
    const db = new StateDB([bgpRoutesTable]);
    const init = db.registerInitializer(bgpRoutesTable, 'test');
    if (initialized) init.done();
    const edge = new NetlinkHostRoutes({ netns: NS });
    const reconciler = new Reconciler<BgpRouteRow>(
      { name: 'host-routes', db, table: bgpRoutesTable, ops: new HostRoutesOps(edge), clock: systemClock, log: silentLogger },
      reconcilerDefaults,
    );
    reconciler.start();
    disposers.push(() => {
      void reconciler.dispose().then(() => edge.dispose());
    });
    const put = (r: BgpRouteRow) => db.update([bgpRoutesTable], (t) => t.insert(bgpRoutesTable, r));
    const drop = (prefix: string) => db.update([bgpRoutesTable], (t) => t.delete(bgpRoutesTable, prefix));
    return { reconciler, put, drop, init };
  }

  test('one next hop → a plain route; several → one multipath route; changes replace; delete removes', async () => {
    const { reconciler, put, drop } = start(true);
    put(row('203.0.113.10/32', ['192.0.2.10']));
    put(row('2001:db8::11/128', ['2001:db8:1::10', '2001:db8:1::11']));
    let s = await reconciler.settled();
    assert.deepEqual(s.failed, []);
    assert.deepEqual(routes('-4'), ['203.0.113.10 via 192.0.2.10 dev v0']);
    assert.deepEqual(routes('-6'), ['2001:db8::11 metric 1024 pref medium', 'nexthop via 2001:db8:1::10 dev v0 weight 1', 'nexthop via 2001:db8:1::11 dev v0 weight 1']);

    put(row('203.0.113.10/32', ['192.0.2.10', '192.0.2.11'])); // a second local backend became ready
    s = await reconciler.settled();
    assert.deepEqual(routes('-4'), ['203.0.113.10', 'nexthop via 192.0.2.10 dev v0 weight 1', 'nexthop via 192.0.2.11 dev v0 weight 1']);

    drop('203.0.113.10/32');
    drop('2001:db8::11/128');
    s = await reconciler.settled();
    assert.deepEqual(s.failed, []);
    assert.deepEqual(routes('-4'), []);
    assert.deepEqual(routes('-6'), []);
    reconciler.dispose();
  });

  test('at start, a desired route already in the kernel is adopted; a stale one is pruned once initialized; others are untouched', async () => {
    ip('route', 'replace', '203.0.113.20/32', 'proto', '250', 'via', '192.0.2.20'); // left by a previous run, still wanted
    ip('route', 'replace', '203.0.113.21/32', 'proto', '250', 'via', '192.0.2.21'); // left by a previous run, no longer wanted
    ip('route', 'replace', '203.0.113.22/32', 'proto', 'static', 'via', '192.0.2.22'); // not herald's
    const { reconciler, put, init } = start(false);
    put(row('203.0.113.20/32', ['192.0.2.20']));
    await reconciler.settled();
    assert.deepEqual(routes('-4'), ['203.0.113.20 via 192.0.2.20 dev v0', '203.0.113.21 via 192.0.2.21 dev v0'], 'nothing pruned before the table is initialized');
    init.done();
    const { waitFor } = await import('../../lab/lab.js');
    await waitFor(() => routes('-4').length === 1, { timeoutMs: 10_000, what: 'stale route pruned', onTimeout: () => routes('-4').join('\n') });
    assert.deepEqual(routes('-4'), ['203.0.113.20 via 192.0.2.20 dev v0']);
    assert.match(ip('route', 'show', '203.0.113.22/32'), /via 192\.0\.2\.22/, 'a route of another protocol is never touched');
    reconciler.dispose();
  });

  test('within-node ECMP: the kernel splits flows across the multipath route\'s next hops (L4 flow hash)', async () => {
    const { reconciler, put, drop } = start(true);
    execFileSync('ip', ['netns', 'exec', NS, 'sysctl', '-qw', 'net.ipv4.fib_multipath_hash_policy=1']);
    put(row('203.0.113.40/32', ['192.0.2.40', '192.0.2.41']));
    await reconciler.settled();
    const chosen = new Map<string, number>();
    for (let sport = 20000; sport < 20064; sport++) {
      const via = /via (\S+)/.exec(ip('route', 'get', '203.0.113.40', 'ipproto', 'tcp', 'sport', String(sport), 'dport', '80'))?.[1] ?? '?';
      chosen.set(via, (chosen.get(via) ?? 0) + 1);
    }
    assert.deepEqual([...chosen.keys()].sort(), ['192.0.2.40', '192.0.2.41'], `64 flows went to: ${JSON.stringify([...chosen])}`);
    drop('203.0.113.40/32');
    await reconciler.settled();
    reconciler.dispose();
  });

  test('deleting a route that is already gone, or whose interface vanished, is success', async () => {
    const edge = new NetlinkHostRoutes({ netns: NS });
    disposers.push(() => edge.dispose());
    await edge.del('203.0.113.99/32');
    await edge.replace({ prefix: '203.0.113.30/32', nextHops: ['192.0.2.30'] });
    ip('link', 'del', 'v0'); // takes the route with it
    await edge.del('203.0.113.30/32');
    assert.deepEqual(await edge.list(), []);
  });

  test('many routes in one batch (thousands of messages, a few sendmsg calls): each route installed, a failing one reported alone, gone ones deleted', async () => {
    ip('link', 'add', 'w0', 'type', 'veth', 'peer', 'name', 'w1');
    ip('link', 'set', 'w0', 'up');
    ip('-6', 'addr', 'add', '2001:db8:2::1/64', 'dev', 'w0', 'nodad');
    const edge = new NetlinkHostRoutes({ netns: NS });
    disposers.push(() => edge.dispose());
    const many = Array.from({ length: 2000 }, (_, i) => ({ prefix: `2001:db8:100::${(i + 1).toString(16)}/128`, nextHops: i % 2 ? ['2001:db8:2::10'] : ['2001:db8:2::10', '2001:db8:2::11'] }));
    // One unreachable next hop in the middle: only that route fails.
    const bad = { prefix: '2001:db8:100::ffff/128', nextHops: ['2001:db8:99::1'] };
    // And a message that cannot be encoded (not an address): refused alone, before the kernel.
    const garbled = { prefix: '2001:db8:100::zz/128', nextHops: ['2001:db8:2::10'] };
    const outcomes = await edge.replaceMany([...many.slice(0, 1000), bad, ...many.slice(1000, 1500), garbled, ...many.slice(1500)]);
    assert.equal(outcomes.filter((o) => o !== undefined).length, 2);
    assert.match(String(outcomes[1501]), /2001:db8:100::zz/);
    assert.match(String(outcomes[1000]), /host route replace 2001:db8:100::ffff\/128: (EHOSTUNREACH|ENETUNREACH) /);
    const listed = await edge.list();
    assert.equal(listed.filter((r) => r.prefix.startsWith('2001:db8:100::')).length, 2000);
    assert.deepEqual(listed.find((r) => r.prefix === '2001:db8:100::1/128')?.nextHops, ['2001:db8:2::10', '2001:db8:2::11'], 'multipath in a batch');
    // Deleting, with some already gone: all success.
    assert.deepEqual(
      (await edge.delMany([...many.map((r) => r.prefix), '2001:db8:100::fffe/128'])).filter((o) => o !== undefined),
      [],
    );
    assert.equal((await edge.list()).filter((r) => r.prefix.startsWith('2001:db8:100::')).length, 0);
    ip('link', 'del', 'w0');
  });
});
