/**
 * Issue 17, end to end on real components: herald's BGP control plane, host
 * routes and its own supervised BIRD in a node namespace, peering with an
 * upstream router namespace running BIRD with `merge paths` (ECMP). The
 * assertions read the router's own FIB (`ip route` in its namespace).
 *
 *   node-a (herald + bird, AS 65000) ─┐
 *                                     ├─ br0 ── router (bird, AS 65100)
 *   node-b (herald + bird, AS 65000) ─┘
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { HeraldBgpNode } from '../../lab/bgp-node.js';
import { labSkipReason } from '../helpers/lab-tools.js';
import { anycastBgpManifests, upstreamBirdConfig } from '../helpers/bgp-manifests.js';

const ROUTER = `hlbgpr${process.pid}`;
const nsOf = (n: number) => `hlbgp${n}${process.pid}`;
const ipIn = (ns: string, ...args: string[]): string => execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });
const routerFib = (prefix: string): string => ipIn(ROUTER, 'route', 'show', prefix).trim().replace(/\s+/g, ' ');
const SERVICE_IP = '203.0.113.10';

const intent = (readyOnA: boolean[], readyOnB: boolean[] = []) =>
  anycastBgpManifests(
    { peer: { name: 'router', address: '192.0.2.1', asn: 65100 } },
    {
      endpoints: [
        ...readyOnA.map((ready, i) => ({ address: `198.51.100.${10 + i}`, node: 'node-1', ready })),
        ...readyOnB.map((ready, i) => ({ address: `198.51.100.${10 + i}`, node: 'node-2', ready })),
      ],
    },
  );

class HeraldNode extends HeraldBgpNode {
  constructor(
    readonly n: number,
    stateDir: string,
  ) {
    super({ netns: nsOf(n), nodeName: `node-${n}`, routerId: `192.0.2.${1 + n}`, stateDir, ingress: new Map([['default/web', [SERVICE_IP]]]), bfd: { intervalMs: 100, multiplier: 3 } });
  }
}

describe('BGP anycast through BIRD to an upstream router (lab)', { skip: labSkipReason() }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'herald-bgp-'));
  let router: ChildProcess | undefined;
  let routerLog = '';
  let routerCtl = '';
  const routerBirdc = (...args: string[]): string => execFileSync('ip', ['netns', 'exec', ROUTER, 'birdc', '-s', routerCtl, ...args], { encoding: 'utf8' });
  const nodes: HeraldNode[] = [];

  before(async () => {
    execFileSync('ip', ['netns', 'add', ROUTER]);
    ipIn(ROUTER, 'link', 'add', 'br0', 'type', 'bridge');
    ipIn(ROUTER, 'link', 'set', 'br0', 'up');
    ipIn(ROUTER, 'addr', 'add', '192.0.2.1/24', 'dev', 'br0');
    ipIn(ROUTER, 'link', 'set', 'lo', 'up');
    for (const n of [1, 2]) {
      const ns = nsOf(n);
      execFileSync('ip', ['netns', 'add', ns]);
      ipIn(ns, 'link', 'set', 'lo', 'up');
      ipIn(ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', `up${n}`, 'netns', ROUTER);
      ipIn(ns, 'addr', 'add', `192.0.2.${1 + n}/24`, 'dev', 'eth0');
      ipIn(ns, 'link', 'set', 'eth0', 'up');
      ipIn(ROUTER, 'link', 'set', `up${n}`, 'master', 'br0');
      ipIn(ROUTER, 'link', 'set', `up${n}`, 'up');
      // The backends' link: next hops 198.51.100.10 and .11 are on it.
      ipIn(ns, 'link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'be1');
      ipIn(ns, 'addr', 'add', '198.51.100.1/24', 'dev', 'be0');
      ipIn(ns, 'link', 'set', 'be0', 'up');
      ipIn(ns, 'link', 'set', 'be1', 'up');
    }
    const conf = join(dir, 'router.conf');
    writeFileSync(
      conf,
      upstreamBirdConfig({ neighbors: ['192.0.2.2', '192.0.2.3'], mergePaths: true, bfd: true }),
    );
    router = spawn('ip', ['netns', 'exec', ROUTER, 'bird', '-f', '-c', conf, '-s', join(dir, 'router.ctl')], { stdio: ['ignore', 'ignore', 'pipe'] });
    router.stderr?.on('data', (d: Buffer) => (routerLog += d.toString()));
    routerCtl = join(dir, 'router.ctl');
    nodes.push(new HeraldNode(1, join(dir, 'node1')), new HeraldNode(2, join(dir, 'node2')));
  });

  after(async () => {
    for (const node of nodes) await node.stop().catch(() => {});
    router?.kill('SIGKILL');
    for (const ns of [ROUTER, nsOf(1), nsOf(2)]) execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  });

  const onRouter = () => `router FIB: ${routerFib(`${SERVICE_IP}/32`)}\nrouter bird: ${routerLog}\nnode-1 bird.conf:\n${nodes[0]?.birdConf() ?? ''}`;

  test('a ready local backend: the service IP appears in the router FIB with the node as next hop', async () => {
    const [a] = nodes;
    await a!.set(intent([true, true]));
    // Within-node ECMP: one host route, two next hops.
    assert.match(ipIn(nsOf(1), 'route', 'show', `${SERVICE_IP}/32`), /nexthop via 198\.51\.100\.10 dev be0[\s\S]*nexthop via 198\.51\.100\.11 dev be0/);
    await waitFor(() => routerFib(`${SERVICE_IP}/32`).includes('via 192.0.2.2'), { timeoutMs: 30_000, what: 'route on the router', onTimeout: onRouter });
    assert.equal(routerFib(`${SERVICE_IP}/32`).match(/via/g)?.length, 1);
    assert.deepEqual((await a!.bird.sessions()).map((s) => s.info), ['Established']);
  });

  test('two nodes with ready backends: one ECMP route with both nodes as next hops', async () => {
    const [a, b] = nodes;
    await a!.set(intent([true], [true]));
    await b!.set(intent([true], [true]));
    await waitFor(() => /nexthop via 192\.0\.2\.2 .*nexthop via 192\.0\.2\.3/.test(routerFib(`${SERVICE_IP}/32`)), { timeoutMs: 30_000, what: 'ECMP on the router', onTimeout: onRouter });
  });

  test('the endpoint on node-1 stops being ready: node-1 withdraws, node-2 stays', async () => {
    const [a, b] = nodes;
    await a!.set(intent([false], [true]));
    await b!.set(intent([false], [true]));
    assert.equal(ipIn(nsOf(1), 'route', 'show', `${SERVICE_IP}/32`).trim(), '', 'host route removed on node-1');
    await waitFor(() => routerFib(`${SERVICE_IP}/32`) === `${SERVICE_IP} via 192.0.2.3 dev br0 proto bird metric 32`, { timeoutMs: 30_000, what: 'node-1 withdrawn', onTimeout: onRouter });
  });

  test('no ready backend anywhere: the IP leaves the router FIB', async () => {
    const [a, b] = nodes;
    await a!.set(intent([false], [false]));
    await b!.set(intent([false], [false]));
    await waitFor(() => routerFib(`${SERVICE_IP}/32`) === '', { timeoutMs: 30_000, what: 'withdrawn everywhere', onTimeout: onRouter });
  });

  test('a configuration BIRD refuses is reported and the last good one stays in force', async () => {
    const [a] = nodes;
    await a!.set(intent([true], []));
    await waitFor(() => routerFib(`${SERVICE_IP}/32`).includes('via 192.0.2.2'), { timeoutMs: 30_000, what: 'route back', onTimeout: onRouter });
    const before = a!.bird.status();
    await assert.rejects(a!.bird.apply('router id 192.0.2.2;\nprotocol bgp broken { neighbor }\n'), /BIRD refused the new configuration .*syntax error/);
    assert.equal(a!.bird.status().running, true);
    assert.equal(a!.bird.status().pid, before.pid, 'BIRD was not restarted');
    assert.match(await a!.bird.birdc(['show', 'protocols']), /herald_peer1 +BGP .* Established/);
    assert.ok(routerFib(`${SERVICE_IP}/32`).includes('via 192.0.2.2'), 'the route is still advertised');
  });

  test('BIRD killed: the supervisor restarts it and the route comes back on the router', async () => {
    const [a] = nodes;
    const pid = a!.bird.status().pid!;
    process.kill(pid, 'SIGKILL');
    await waitFor(() => a!.bird.status().restarts === 1 && a!.bird.status().running, { timeoutMs: 10_000, what: 'BIRD restarted' });
    assert.ok(ipIn(nsOf(1), 'route', 'show', `${SERVICE_IP}/32`).includes('via 198.51.100.10'), 'host route stayed in the kernel');
    await waitFor(async () => (await a!.bird.sessions().catch(() => [])).some((s) => s.info === 'Established'), { timeoutMs: 30_000, what: 'session re-established' });
    await waitFor(() => routerFib(`${SERVICE_IP}/32`).includes('via 192.0.2.2'), { timeoutMs: 30_000, what: 'route re-advertised', onTimeout: onRouter });
  });

  test('BFD: a node whose link dies leaves the router through BFD, not the 9 s hold timer', async () => {
    const [a, b] = nodes;
    await a!.set(intent([true], [true]));
    await b!.set(intent([true], [true]));
    await waitFor(() => /nexthop via 192\.0\.2\.2 .*nexthop via 192\.0\.2\.3/.test(routerFib(`${SERVICE_IP}/32`)), { timeoutMs: 30_000, what: 'ECMP on the router', onTimeout: onRouter });
    await waitFor(() => (routerBirdc('show', 'bfd', 'sessions').match(/ Up /g) ?? []).length === 2, { timeoutMs: 20_000, what: 'BFD sessions up', onTimeout: () => routerBirdc('show', 'bfd', 'sessions') });
    ipIn(nsOf(2), 'link', 'set', 'eth0', 'down'); // no FIN, no NOTIFICATION: only BFD (or the hold timer) can tell
    await waitFor(() => routerFib(`${SERVICE_IP}/32`) === `${SERVICE_IP} via 192.0.2.2 dev br0 proto bird metric 32`, { timeoutMs: 30_000, what: 'node-2 gone from the router', onTimeout: onRouter });
    assert.match(routerBirdc('show', 'protocols', 'all', 'node2'), /BFD session down/);
    ipIn(nsOf(2), 'link', 'set', 'eth0', 'up');
  });
});
