/**
 * A service IP advertised over BGP only (no L2 announcement on this node) is
 * still policed where its traffic comes in: on the interface facing the BGP
 * peer. The lab: the client runs the upstream BIRD; n1 runs the agent
 * (advertises the VIP, forwards to the backend n2, which holds the VIP on lo
 * and answers the client directly).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../../lab/lab.js';
import { HERALD, labSkipReason, startAgentReady, waitFor } from '../../helpers/lab-tools.js';
import { anycastBgpManifests, upstreamBirdConfig } from '../../helpers/bgp-manifests.js';

const VIP = '203.0.113.210';

const manifests = (backend: string, node: string, policy: boolean) =>
  anycastBgpManifests(
    { peer: { name: 'upstream', address: '192.0.2.1', asn: 65100 } },
    { endpoints: [{ address: backend, node, ready: true }] },
    { name: 'anycast', ip: VIP },
  ) +
  (policy
    ? `---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: { name: web-in, namespace: default }
spec:
  endpointSelector: { matchLabels: { anycast: "yes" } }
  ingress:
  - fromCIDR: [192.0.2.1/32]
`
    : '');

describe('service traffic policy on a BGP-only service IP (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let backend: Host;
  let upstream: LabProcess | undefined;
  let agent: LabProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'herald-policy-bgp-'));
  const fib = () => lab.client.exec('ip', ['route', 'show', `${VIP}/32`]).stdout.trim();
  const write = (policy: boolean) => {
    writeFileSync(join(dir, 'm.yaml.tmp'), manifests(backend.ip, node.netns, policy));
    renameSync(join(dir, 'm.yaml.tmp'), join(dir, 'intent', 'm.yaml'));
  };
  const ping = (src: string) => /, (\d+) received/.exec(lab.client.exec('ping', ['-n', '-I', src, '-c', '3', '-i', '0.2', '-W', '1', VIP]).stdout)?.[1];
  const herald = (args: string[]) => node.exec(HERALD, [...args, '--status-socket', node.statusSocket]);

  before(async () => {
    lab = Lab.create({ nodes: 2, tag: 'polb' });
    node = lab.nodes[0]!;
    backend = lab.nodes[1]!;
    lab.client.must('ip', ['addr', 'add', '192.0.2.5/24', 'dev', 'eth0']);
    backend.must('ip', ['addr', 'add', `${VIP}/32`, 'dev', 'lo']);
    node.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
    for (const c of ['all', 'eth0']) node.must('sysctl', ['-q', '-w', `net.ipv4.conf.${c}.send_redirects=0`]);
    writeFileSync(
      join(dir, 'upstream.conf'),
      upstreamBirdConfig({ neighbors: [node.ip] }),
    );
    upstream = lab.client.spawn('upstream-bird', 'bird', ['-f', '-c', join(dir, 'upstream.conf'), '-s', join(dir, 'upstream.ctl')]);
    mkdirSync(join(dir, 'intent'));
    write(false);
    agent = await startAgentReady(node, ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip]);
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 40_000, what: 'the VIP in the upstream FIB', onTimeout: () => agent!.text().slice(-3000) });
  });

  after(async () => {
    await agent?.stop('SIGTERM', 10_000);
    await upstream?.stop('SIGKILL');
    if (node) spawnSync('pkill', ['-KILL', '-f', join(node.stateDir, 'bird', 'bird.conf')]);
    await lab?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  test('without a policy both sources reach the VIP through the BGP path; with one, only the allowed source does', async () => {
    await waitFor(() => ping('192.0.2.5') === '3', { timeoutMs: 15_000, what: 'the unpoliced VIP to answer' });
    assert.equal(ping('192.0.2.1'), '3');
    assert.equal(node.exec('ip', ['route', 'show', 'table', 'local', VIP]).stdout.trim(), '', 'the VIP is not local on the node (BGP only, no L2)');
    write(true);
    const policy = () => herald(['policy', '--json']);
    await waitFor(
      () => {
        const r = policy();
        if (r.code !== 0) return false;
        const j = JSON.parse(r.stdout) as { interfaces: string[]; services: Array<{ ips: string[] }>; revision: number; realizedRevision: number };
        return j.interfaces.includes('eth0') && j.services.some((s) => s.ips.includes(VIP)) && j.realizedRevision === j.revision;
      },
      { timeoutMs: 20_000, what: 'the policy on the BGP-only VIP, attached on the peer-facing eth0', onTimeout: () => policy().stdout },
    );
    assert.equal(ping('192.0.2.5'), '0', 'the denied source is dropped at the node');
    assert.equal(ping('192.0.2.1'), '3', 'the allowed source still passes');
    assert.match(herald(['policy', 'trace', '192.0.2.5', `${VIP}:80/tcp`]).stdout, /^DENY default\/web: rule 0: default deny/);
  });
});
