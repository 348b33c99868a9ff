/**
 * Issue 17: three herald nodes and FRR as the upstream router — a second,
 * independent BGP implementation on the router side (zebra + bgpd in a
 * namespace, `maximum-paths`), and a client behind it. The herald nodes
 * give peerASN 0 (Cilium: take the AS from the peer's OPEN; BIRD's
 * `neighbor … external`). Asserted on FRR's own FIB (`vtysh -c 'show ip
 * route json'`: the next hops installed in the kernel) and on the client's
 * traffic reaching a backend through the path.
 *
 *   client ── router (FRR, AS 65100) ── br0 ──┬─ node-1 (herald + BIRD) ── backend-1
 *                                            ├─ node-2 (herald + BIRD) ── backend-2
 *                                            └─ node-3 (herald + BIRD) ── backend-3
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../../lab/lab.js';
import { HeraldBgpNode } from '../../lab/bgp-node.js';
import { labSkipReason } from '../helpers/lab-tools.js';
import { anycastBgpManifests } from '../helpers/bgp-manifests.js';

const ROUTER = `hlfrrr${process.pid}`;
const CLIENT = `hlfrrc${process.pid}`;
const nsOf = (n: number) => `hlfrrn${n}${process.pid}`;
const backendOf = (n: number) => `hlfrrb${n}${process.pid}`;
const NODES = [1, 2, 3];
const VIP = '203.0.113.10';
const ipIn = (ns: string, ...args: string[]): string => execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });

const intent = (ready: Record<number, boolean>) =>
  anycastBgpManifests(
    { peer: { name: 'frr', address: '192.0.2.1', asn: 0 } },
    { endpoints: NODES.map((n) => ({ address: '198.51.100.10', node: `node-${n}`, ready: ready[n] ?? false })) },
  );

interface FrrRoute {
  protocol: string;
  installed?: boolean;
  nexthops: { ip?: string; fib?: boolean; active?: boolean }[];
}

describe('three herald nodes, FRR as the upstream router: ECMP in its FIB (lab)', { skip: labSkipReason() }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'herald-bgp-frr-'));
  const daemons: ChildProcess[] = [];
  let frrLog = '';
  const nodes: HeraldBgpNode[] = [];
  const vtysh = (cmd: string): string => execFileSync('ip', ['netns', 'exec', ROUTER, 'vtysh', '--vty_socket', dir, '-c', cmd], { encoding: 'utf8' });
  /** Next hops of the VIP that FRR installed in the kernel (its FIB), sorted. */
  const fibHops = (): string[] => {
    const routes = (JSON.parse(vtysh(`show ip route ${VIP}/32 json`)) as Record<string, FrrRoute[]>)[`${VIP}/32`] ?? [];
    return routes
      .filter((r) => r.protocol === 'bgp' && r.installed)
      .flatMap((r) => r.nexthops.filter((h) => h.fib).map((h) => h.ip ?? '?'))
      .sort();
  };
  const explain = () => `FRR FIB: ${JSON.stringify(fibHops())}\n${vtysh('show bgp summary')}\n${vtysh(`show bgp ipv4 unicast ${VIP}/32`)}\nfrr log:\n${frrLog.slice(-2000)}\nnode-1 bird.conf:\n${nodes[0]?.birdConf() ?? ''}`;
  const setAll = async (ready: Record<number, boolean>) => {
    for (const node of nodes) await node.set(intent(ready));
  };

  before(async () => {
    for (const ns of [ROUTER, CLIENT, ...NODES.map(nsOf), ...NODES.map(backendOf)]) {
      execFileSync('ip', ['netns', 'add', ns]);
      ipIn(ns, 'link', 'set', 'lo', 'up');
    }
    ipIn(ROUTER, 'link', 'add', 'br0', 'type', 'bridge');
    ipIn(ROUTER, 'link', 'set', 'br0', 'up');
    ipIn(ROUTER, 'addr', 'add', '192.0.2.1/24', 'dev', 'br0');
    execFileSync('ip', ['netns', 'exec', ROUTER, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
    // The client behind the router.
    ipIn(CLIENT, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'cl0', 'netns', ROUTER);
    ipIn(CLIENT, 'addr', 'add', '203.0.113.130/25', 'dev', 'eth0');
    ipIn(CLIENT, 'link', 'set', 'eth0', 'up');
    ipIn(CLIENT, 'route', 'add', 'default', 'via', '203.0.113.129');
    ipIn(ROUTER, 'addr', 'add', '203.0.113.129/25', 'dev', 'cl0');
    ipIn(ROUTER, 'link', 'set', 'cl0', 'up');
    for (const n of NODES) {
      const ns = nsOf(n);
      ipIn(ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', `up${n}`, 'netns', ROUTER);
      ipIn(ns, 'addr', 'add', `192.0.2.${1 + n}/24`, 'dev', 'eth0');
      ipIn(ns, 'link', 'set', 'eth0', 'up');
      ipIn(ns, 'route', 'add', 'default', 'via', '192.0.2.1');
      ipIn(ROUTER, 'link', 'set', `up${n}`, 'master', 'br0');
      ipIn(ROUTER, 'link', 'set', `up${n}`, 'up');
      execFileSync('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
      // A backend behind each node, holding the VIP: the host route's next hop 198.51.100.10.
      const be = backendOf(n);
      ipIn(ns, 'link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', be);
      ipIn(ns, 'addr', 'add', '198.51.100.1/24', 'dev', 'be0');
      ipIn(ns, 'link', 'set', 'be0', 'up');
      ipIn(be, 'addr', 'add', '198.51.100.10/24', 'dev', 'eth0');
      ipIn(be, 'addr', 'add', `${VIP}/32`, 'dev', 'lo');
      ipIn(be, 'link', 'set', 'eth0', 'up');
      ipIn(be, 'route', 'add', 'default', 'via', '198.51.100.1');
    }
    // FRR runs as its own user (root is not in its vty group): the directory is theirs.
    writeFileSync(join(dir, 'zebra.conf'), '');
    writeFileSync(
      join(dir, 'bgpd.conf'),
      `frr defaults datacenter
router bgp 65100
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
${NODES.map((n) => ` neighbor 192.0.2.${1 + n} remote-as 65000\n neighbor 192.0.2.${1 + n} timers connect 1`).join('\n')}
 address-family ipv4 unicast
  maximum-paths 8
 exit-address-family
`,
    );
    const uid = Number(execFileSync('id', ['-u', 'frr'], { encoding: 'utf8' }));
    const gid = Number(execFileSync('id', ['-g', 'frr'], { encoding: 'utf8' }));
    chmodSync(dir, 0o755);
    for (const f of ['', 'zebra.conf', 'bgpd.conf']) chownSync(join(dir, f), uid, gid);
    const common = ['-u', 'frr', '-g', 'frr', '-z', join(dir, 'zserv.api'), '--vty_socket', dir];
    const start = (daemon: string) => {
      const child = spawn('ip', ['netns', 'exec', ROUTER, `/usr/lib/frr/${daemon}`, ...common, '-i', join(dir, `${daemon}.pid`), '-f', join(dir, `${daemon}.conf`)], { stdio: ['ignore', 'pipe', 'pipe'] });
      child.stdout?.on('data', (d: Buffer) => (frrLog += d.toString()));
      child.stderr?.on('data', (d: Buffer) => (frrLog += d.toString()));
      daemons.push(child);
    };
    start('zebra');
    await waitFor(() => execFileSync('ls', [dir], { encoding: 'utf8' }).includes('zserv.api'), { timeoutMs: 10_000, what: 'zebra up', onTimeout: () => frrLog });
    start('bgpd');
    for (const n of NODES) {
      nodes.push(new HeraldBgpNode({ netns: nsOf(n), nodeName: `node-${n}`, routerId: `192.0.2.${1 + n}`, stateDir: join(dir, `node${n}`), ingress: new Map([['default/web', [VIP]]]) }));
    }
  });

  after(async () => {
    for (const node of nodes) await node.stop().catch(() => {});
    for (const d of daemons) d.kill('SIGKILL');
    for (const ns of [ROUTER, CLIENT, ...NODES.map(nsOf), ...NODES.map(backendOf)]) {
      try {
        execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
      } catch {
        /* not created */
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  test('every node with a ready backend is a next hop of one ECMP route in FRR\'s FIB; the client reaches a backend', async () => {
    await setAll({ 1: true, 2: true, 3: true });
    await waitFor(() => fibHops().join(',') === '192.0.2.2,192.0.2.3,192.0.2.4', { timeoutMs: 40_000, what: 'three next hops in FRR\'s FIB', onTimeout: explain });
    // The kernel of the router holds the same multipath route.
    const kernel = [...ipIn(ROUTER, 'route', 'show', `${VIP}/32`).matchAll(/nexthop via (\S+)/g)].map((m) => m[1]).sort();
    assert.deepEqual(kernel, ['192.0.2.2', '192.0.2.3', '192.0.2.4']);
    // peerASN 0: FRR's AS was taken from its OPEN.
    assert.match(vtysh('show bgp summary'), /192\.0\.2\.2 +4 +65000 /);
    assert.match(execFileSync('ip', ['netns', 'exec', CLIENT, 'ping', '-n', '-c', '2', '-i', '0.2', '-W', '2', VIP], { encoding: 'utf8' }), /2 received/);
  });

  test('node-2\'s backend not ready: node-2 leaves the ECMP set, the others stay and traffic still flows', async () => {
    await setAll({ 1: true, 2: false, 3: true });
    assert.equal(ipIn(nsOf(2), 'route', 'show', `${VIP}/32`).trim(), '', 'host route removed on node-2');
    await waitFor(() => fibHops().join(',') === '192.0.2.2,192.0.2.4', { timeoutMs: 30_000, what: 'node-2 out of the ECMP set', onTimeout: explain });
    assert.match(execFileSync('ip', ['netns', 'exec', CLIENT, 'ping', '-n', '-c', '2', '-i', '0.2', '-W', '2', VIP], { encoding: 'utf8' }), /2 received/);
    await setAll({ 1: true, 2: true, 3: true });
    await waitFor(() => fibHops().length === 3, { timeoutMs: 30_000, what: 'node-2 back', onTimeout: explain });
  });

  test('no ready backend anywhere: the VIP leaves FRR\'s FIB', async () => {
    await setAll({});
    await waitFor(() => fibHops().length === 0, { timeoutMs: 30_000, what: 'withdrawn everywhere', onTimeout: explain });
    assert.equal(ipIn(ROUTER, 'route', 'show', `${VIP}/32`).trim(), '');
  });
});
