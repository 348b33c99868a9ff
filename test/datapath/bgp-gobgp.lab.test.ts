/**
 * Issue 17: a second, independent BGP implementation as the upstream peer.
 * GoBGP (Debian's gobgpd) peers with herald's BIRD; the assertions read
 * GoBGP's own RIB (`gobgp global rib`: GoBGP installs nothing into the
 * kernel without zebra), so herald's advertisements are not just
 * BIRD-to-BIRD.
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
import { anycastBgpManifests } from '../helpers/bgp-manifests.js';

const PEER = `hlgobgpr${process.pid}`;
const NODE = `hlgobgpn${process.pid}`;
const VIP = '203.0.113.20';
const ipIn = (ns: string, ...args: string[]): string => execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });

const intent = (ready: boolean) =>
  anycastBgpManifests(
    { peer: { name: 'gobgp', address: '192.0.2.1', asn: 65200 } },
    { endpoints: [{ address: '198.51.100.10', node: 'node-1', ready }] },
  );

describe('herald BGP with GoBGP as the upstream peer (lab)', { skip: labSkipReason() }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'herald-gobgp-'));
  let gobgpd: ChildProcess | undefined;
  let gobgpLog = '';
  let node: HeraldBgpNode | undefined;
  /** GoBGP's IPv4 RIB, or undefined while gobgpd is still starting (its API not up yet: the CLI fails). */
  const rib = (): string | undefined => {
    try {
      return execFileSync('ip', ['netns', 'exec', PEER, 'gobgp', 'global', 'rib', '-a', 'ipv4'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch {
      return undefined;
    }
  };
  const explain = () => `gobgp rib:\n${rib() ?? '(gobgp not answering)'}\ngobgpd:\n${gobgpLog.slice(-3000)}\nbird.conf:\n${node?.birdConf() ?? ''}`;

  before(() => {
    for (const ns of [PEER, NODE]) {
      execFileSync('ip', ['netns', 'add', ns]);
      ipIn(ns, 'link', 'set', 'lo', 'up');
    }
    ipIn(NODE, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', PEER);
    ipIn(NODE, 'addr', 'add', '192.0.2.2/24', 'dev', 'eth0');
    ipIn(NODE, 'link', 'set', 'eth0', 'up');
    ipIn(PEER, 'addr', 'add', '192.0.2.1/24', 'dev', 'eth0');
    ipIn(PEER, 'link', 'set', 'eth0', 'up');
    ipIn(NODE, 'link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'be1');
    ipIn(NODE, 'addr', 'add', '198.51.100.1/24', 'dev', 'be0');
    ipIn(NODE, 'link', 'set', 'be0', 'up');
    ipIn(NODE, 'link', 'set', 'be1', 'up');
    const conf = join(dir, 'gobgpd.toml');
    writeFileSync(
      conf,
      `[global.config]
  as = 65200
  router-id = "192.0.2.1"
[[neighbors]]
  [neighbors.config]
    neighbor-address = "192.0.2.2"
    peer-as = 65000
  [neighbors.timers.config]
    connect-retry = 1
    hold-time = 9
    keepalive-interval = 3
`,
    );
    gobgpd = spawn('ip', ['netns', 'exec', PEER, 'gobgpd', '-f', conf, '-t', 'toml'], { stdio: ['ignore', 'pipe', 'pipe'] });
    gobgpd.stdout?.on('data', (d: Buffer) => (gobgpLog += d.toString()));
    gobgpd.stderr?.on('data', (d: Buffer) => (gobgpLog += d.toString()));
    node = new HeraldBgpNode({ netns: NODE, nodeName: 'node-1', routerId: '192.0.2.2', stateDir: join(dir, 'node'), ingress: new Map([['default/web', [VIP]]]) });
  });

  after(async () => {
    await node?.stop().catch(() => {});
    if (gobgpd && gobgpd.exitCode === null) {
      const exited = new Promise((r) => gobgpd!.once('exit', r));
      gobgpd.kill('SIGKILL');
      await exited;
    }
    for (const ns of [PEER, NODE]) execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  });

  test('GoBGP learns the service IP with the node as next hop, and loses it when the endpoint is not ready', async () => {
    await node!.set(intent(true));
    await waitFor(() => /203\.0\.113\.20\/32\s+192\.0\.2\.2\s+65000/.test(rib() ?? ''), { timeoutMs: 40_000, what: 'route in GoBGP', onTimeout: explain });
    await node!.set(intent(false));
    await waitFor(() => rib()?.includes('203.0.113.20/32') === false, { timeoutMs: 20_000, what: 'route withdrawn from GoBGP', onTimeout: explain });
    assert.equal(ipIn(NODE, 'route', 'show', `${VIP}/32`).trim(), '');
  });
});
