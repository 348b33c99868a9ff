/**
 * Issue 17: `--bird-socket` — BGP anycast through a BIRD the operator runs.
 * The test starts that BIRD in the node's namespace with its own bird.conf
 * (router ID, device and kernel protocols) that includes herald's file; the
 * agent starts no BIRD, writes only the include file and reconfigures the
 * operator's BIRD through its control socket. Asserted on the upstream
 * router's FIB and on the operator's BIRD staying the same process.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, labSkipReason, startAgentReady, waitFor } from '../helpers/lab-tools.js';
import { anycastBgpManifests, upstreamBirdConfig } from '../helpers/bgp-manifests.js';

const VIP = '203.0.113.201';

const manifests = (node: string, ready: boolean) =>
  anycastBgpManifests(
    { peer: { name: 'upstream', address: '192.0.2.1', asn: 65100 } },
    { endpoints: [{ address: '203.0.113.130', node, ready }] },
    { name: 'anycast', ip: VIP },
  );

describe('herald agent with --bird-socket: an operator-run BIRD (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let upstream: LabProcess | undefined;
  let operatorBird: LabProcess | undefined;
  let agent: LabProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'herald-bgp-op-'));
  const include = join(dir, 'herald.conf');
  const socket = join(dir, 'operator.ctl');
  const fib = () => lab.client.exec('ip', ['route', 'show', `${VIP}/32`]).stdout.trim().replace(/\s+/g, ' ');
  const write = (ready: boolean) => {
    writeFileSync(join(dir, 'm.yaml.tmp'), manifests(node.netns, ready));
    renameSync(join(dir, 'm.yaml.tmp'), join(dir, 'intent', 'm.yaml'));
  };
  const operatorBirdc = (...args: string[]) => node.exec('birdc', ['-s', socket, ...args]).stdout;
  const explain = () =>
    `upstream FIB: ${fib()}\nfragment:\n${readFileSync(include, 'utf8')}\noperator protocols:\n${operatorBirdc('show', 'protocols')}\nagent:\n${agent?.text().slice(-3000) ?? ''}\noperator bird:\n${operatorBird?.text() ?? ''}`;

  before(() => {
    lab = Lab.create({ nodes: 1, tag: 'bgpop' });
    node = lab.nodes[0]!;
    node.must('ip', ['link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'be1']);
    node.must('ip', ['addr', 'add', '203.0.113.129/25', 'dev', 'be0']);
    node.must('ip', ['link', 'set', 'be0', 'up']);
    node.must('ip', ['link', 'set', 'be1', 'up']);
    writeFileSync(
      join(dir, 'upstream.conf'),
      upstreamBirdConfig({ neighbors: [node.ip], mergePaths: true }),
    );
    upstream = lab.client.spawn('upstream-bird', 'bird', ['-f', '-c', join(dir, 'upstream.conf'), '-s', join(dir, 'upstream.ctl')]);
    // The operator's BIRD: its own router ID, device and kernel protocols, herald's file included (empty until herald writes it).
    writeFileSync(include, '');
    writeFileSync(
      join(dir, 'operator.conf'),
      `router id 192.0.2.250;
protocol device {}
protocol kernel { ipv4 { import none; export none; }; }
include "${include}";
`,
    );
    operatorBird = node.spawn('operator-bird', 'bird', ['-f', '-c', join(dir, 'operator.conf'), '-s', socket]);
    mkdirSync(join(dir, 'intent'));
    write(true);
  });

  after(async () => {
    await agent?.stop('SIGTERM', 10_000);
    await operatorBird?.stop('SIGKILL');
    await upstream?.stop('SIGKILL');
    await lab?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  test('herald advertises through the operator\'s BIRD, withdraws on readiness loss and on stop, and never starts or stops that BIRD', async () => {
    await waitFor(() => /Configuration OK/.test(node.exec('birdc', ['-s', socket, 'configure', 'check']).stdout), { timeoutMs: 10_000, what: 'the operator BIRD up' });
    const operatorPid = node.must('pgrep', ['-f', `operator.conf`]).trim();
    agent = await startAgentReady(node, ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip, '--bird-socket', socket, '--bird-include', include]);
    await waitFor(() => fib() === `${VIP} via ${node.ip} dev eth0 proto bird metric 32`, { timeoutMs: 40_000, what: 'VIP on the upstream router', onTimeout: explain });
    // herald's protocols run in the operator's BIRD, beside the operator's own; herald started no BIRD of its own.
    assert.match(operatorBirdc('show', 'protocols'), /herald_peer1 +BGP +--- +up .*Established/);
    assert.match(operatorBirdc('show', 'protocols'), /kernel1 +Kernel +master4 +up/);
    assert.equal(spawnSync('pgrep', ['-f', join(node.stateDir, 'bird')], { encoding: 'utf8' }).stdout.trim(), '', 'no BIRD of herald\'s own');
    assert.match(readFileSync(include, 'utf8'), new RegExp(`route ${VIP.replace(/\./g, '\\.')}/32 blackhole;`));
    const status = () => node.must(HERALD, ['status', '--status-socket', node.statusSocket]);
    await waitFor(() => /bgp\/i65000\/upstream +192\.0\.2\.1 +65100 +up +Established/.test(status()), { timeoutMs: 10_000, what: 'session in status', onTimeout: status });

    write(false);
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'VIP withdrawn after readiness loss', onTimeout: explain });
    assert.doesNotMatch(readFileSync(include, 'utf8'), /blackhole/);
    write(true);
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 20_000, what: 'VIP back', onTimeout: explain });

    // A stop empties herald's file: its sessions close, the upstream withdraws; the operator's BIRD runs on.
    await agent.stop('SIGTERM', 10_000);
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'VIP withdrawn on agent stop', onTimeout: explain });
    assert.doesNotMatch(operatorBirdc('show', 'protocols'), /herald_/);
    assert.equal(node.must('pgrep', ['-f', 'operator.conf']).trim(), operatorPid, 'the operator\'s BIRD is the same process');
  });
});
