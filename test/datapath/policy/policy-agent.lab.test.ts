/**
 * Service traffic policy through the real agent: manifests (pool, L2
 * announcement policy, a Service, a CiliumNetworkPolicy) → LB-IPAM and L2
 * announcement → the policy pipeline → the program on the announcing
 * interface. curl from the client; `herald policy` shows revisions, rules and
 * drop counters; `herald policy trace` names the deciding rule; editing the
 * policy file is enforced without restarting anything.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host } from '../../../lab/lab.js';
import { HERALD, labSkipReason, startAgentReady, waitFor } from '../../helpers/lab-tools.js';

const VIP = '198.51.100.40';
const BASE = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: pool}
spec:
  blocks: [{start: ${VIP}, stop: 198.51.100.41}]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: {name: l2}
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, labels: {app: web}, annotations: {lbipam.cilium.io/ips: "${VIP}"}}
spec:
  type: LoadBalancer
  ports: [{port: 8080}]
`;
const CNP = (sources: string[]) => `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: default}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [${sources.join(', ')}]
    toPorts: [{ports: [{port: "8080", protocol: TCP}]}]
`;

describe('service traffic policy in the agent (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let client: Host;
  let node: Host;
  let dir: string;
  const herald = (args: string[]) => node.exec(HERALD, [...args, '--status-socket', node.statusSocket]);
  const curl = (src: string) => client.exec('curl', ['-s', '--interface', src, '--connect-timeout', '1', '--max-time', '2', `http://${VIP}:8080/`]);
  const realized = () => {
    const r = herald(['policy', '--json']);
    return r.code === 0 ? (JSON.parse(r.stdout) as { realizedRevision: number; interfaces: string[] }) : undefined;
  };

  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'pola' });
    client = lab.client;
    node = lab.nodes[0]!;
    client.must('ip', ['addr', 'add', '192.0.2.5/24', 'dev', 'eth0']);
    dir = mkdtempSync(join(tmpdir(), 'herald-policy-agent-'));
    writeFileSync(join(dir, 'base.yaml'), BASE);
    writeFileSync(join(dir, 'policy.yaml'), CNP(['192.0.2.1/32']));
    await node.spawn('http', 'node', ['--import', 'tsx', 'lab/http-server.ts', '--port', '8080', '--name', 'n1']).waitForOutput('listening');
    await startAgentReady(node, ['--manifests', dir, '--local-routes']);
    await waitFor(() => (realized()?.interfaces ?? []).includes('eth0'), { timeoutMs: 20_000, what: 'the policy program on eth0', onTimeout: () => herald(['policy']).stdout });
  });

  after(async () => {
    await lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('the allowed source connects; another source is dropped and counted against default deny', async () => {
    await waitFor(() => curl('192.0.2.1').stdout === 'n1\n', { timeoutMs: 10_000, what: 'the allowed client to connect' });
    assert.equal(curl('192.0.2.5').code, 28, 'dropped: the connection times out');
    const out = herald(['policy']).stdout;
    assert.match(out, /repository revision \d+, realized in the datapath \d+; 1 rules, 1 distinct prefixes; attached on eth0/);
    assert.match(out, /default\/web \(198\.51\.100\.40\): revision \d+, realized \d+/);
    assert.match(out, /allow\s+-\s+allow from 192\.0\.2\.1\/32 to 8080\/TCP\s+CiliumNetworkPolicy default\/web-in spec\.ingress\[0\]/);
    const dropped = /\n0\s+deny\s+(\d+)\s+default deny/.exec(out);
    assert.ok(dropped && Number(dropped[1]) >= 1, out);
  });

  test('trace names the deciding rule', () => {
    assert.match(herald(['policy', 'trace', '192.0.2.1', `${VIP}:8080/tcp`]).stdout, /^ALLOW default\/web: rule \d+: allow from 192\.0\.2\.1\/32 to 8080\/TCP — CiliumNetworkPolicy default\/web-in spec\.ingress\[0\] \(longest matching source prefix 192\.0\.2\.1\/32\)/);
    assert.match(herald(['policy', 'trace', '192.0.2.5', `${VIP}:8080/tcp`]).stdout, /^DENY default\/web: rule 0: default deny/);
    assert.match(herald(['policy', 'trace', '192.0.2.1', `${VIP}:22/tcp`]).stdout, /^DENY default\/web: rule 0/);
    assert.match(herald(['policy', 'trace', '192.0.2.5', '198.51.100.41:80/tcp']).stdout, /^ALLOW \(open\)/);
  });

  test('editing the policy file is enforced live; removing it opens the service', async () => {
    const before = realized()!.realizedRevision;
    writeFileSync(join(dir, 'policy.yaml'), CNP(['192.0.2.1/32', '192.0.2.5/32']));
    await waitFor(() => (realized()?.realizedRevision ?? 0) > before, { timeoutMs: 15_000, what: 'the new revision to be realized' });
    assert.equal(curl('192.0.2.5').stdout, 'n1\n');
    rmSync(join(dir, 'policy.yaml'));
    await waitFor(() => herald(['policy']).stdout.includes('every service is open'), { timeoutMs: 15_000, what: 'the policy to be removed' });
    assert.equal(curl('192.0.2.5').stdout, 'n1\n');
  });
});
