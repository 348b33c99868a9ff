/**
 * Issue 17: `herald agent --bgp-router-id` end to end. The agent reads the BGP
 * intent, an LB-IPAM pool and an EndpointSlice from a watched manifest
 * directory, installs the host route, runs its own BIRD and peers with an
 * upstream BIRD (the lab's client host). Asserted on the upstream's FIB.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, labSkipReason, startAgentReady, waitFor } from '../helpers/lab-tools.js';
import { anycastBgpManifests, upstreamBirdConfig } from '../helpers/bgp-manifests.js';

const HTTP_SERVER = fileURLToPath(new URL('../../lab/http-server.ts', import.meta.url));

const VIP = '203.0.113.200';

const manifests = (node: string, ready: boolean, opts: { gracefulRestart?: boolean; endpoint?: string; healthCheck?: boolean } = {}) =>
  anycastBgpManifests(
    {
      peer: { name: 'upstream', address: '192.0.2.1', asn: 65100 },
      gracefulRestart: opts.gracefulRestart,
      attributes: 'communities: { standard: ["65000:100"], large: ["65000:1:2"] }',
    },
    {
      annotations: opts.healthCheck
        ? 'herald.io/health-check: http, herald.io/health-check-port: "8080", herald.io/health-check-interval: 200ms, herald.io/health-check-rise: "2", herald.io/health-check-fall: "2"'
        : undefined,
      endpoints: [{ address: opts.endpoint ?? '203.0.113.130', node, ready }],
    },
    { name: 'anycast', ip: VIP },
  );

describe('herald agent with BGP anycast (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let upstream: LabProcess | undefined;
  let agent: LabProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'herald-bgp-agent-'));
  const fib = () => lab.client.exec('ip', ['route', 'show', `${VIP}/32`]).stdout.trim().replace(/\s+/g, ' ');
  const write = (ready: boolean, opts: { gracefulRestart?: boolean; endpoint?: string; healthCheck?: boolean } = {}) => {
    writeFileSync(join(dir, 'm.yaml.tmp'), manifests(node.netns, ready, opts));
    renameSync(join(dir, 'm.yaml.tmp'), join(dir, 'intent', 'm.yaml'));
  };
  const explain = () => `upstream FIB: ${fib()}\nagent:\n${agent?.text().slice(-3000) ?? ''}\nupstream bird:\n${upstream?.text() ?? ''}`;

  before(async () => {
    lab = Lab.create({ nodes: 2, tag: 'bgp' }); // n2: a backend for real traffic (graceful restart)
    node = lab.nodes[0]!;
    // The backend's link on the node: the host route's next hop is on it.
    node.must('ip', ['link', 'add', 'be0', 'type', 'veth', 'peer', 'name', 'be1']);
    node.must('ip', ['addr', 'add', '203.0.113.129/25', 'dev', 'be0']);
    node.must('ip', ['link', 'set', 'be0', 'up']);
    node.must('ip', ['link', 'set', 'be1', 'up']);
    writeFileSync(
      join(dir, 'upstream.conf'),
      upstreamBirdConfig({ neighbors: [node.ip], mergePaths: true }),
    );
    upstream = lab.client.spawn('upstream-bird', 'bird', ['-f', '-c', join(dir, 'upstream.conf'), '-s', join(dir, 'upstream.ctl')]);
    mkdirSync(join(dir, 'intent'));
    write(true);
  });

  after(async () => {
    await agent?.stop('SIGTERM', 10_000);
    await upstream?.stop('SIGKILL');
    // A BIRD outliving a failed test's agent (it runs in the agent's process group, signalled as a whole above).
    if (node) spawnSync('pkill', ['-KILL', '-f', join(node.stateDir, 'bird', 'bird.conf')]);
    await lab?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the allocated IP reaches the upstream FIB via the node, leaves it when the endpoint is not ready, and on agent stop', async () => {
    agent = await startAgentReady(node, ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip]);
    await waitFor(() => fib() === `${VIP} via ${node.ip} dev eth0 proto bird metric 32`, { timeoutMs: 40_000, what: 'VIP on the upstream router', onTimeout: explain });
    assert.match(node.must('ip', ['route', 'show', `${VIP}/32`]), /via 203\.0\.113\.130 dev be0 proto 250/);
    // The advertisement's attributes reach the router with the path.
    const learned = lab.client.must('birdc', ['-s', join(dir, 'upstream.ctl'), 'show', 'route', 'all', `${VIP}/32`]);
    assert.match(learned, /BGP\.community: \(65000,\s*100\)/, learned);
    assert.match(learned, /BGP\.large_community: \(65000,\s*1,\s*2\)/, learned);
    // herald status: the peer's session read from BIRD, and the advertised prefix with its next hop.
    const status = () => node.must(HERALD, ['status', '--status-socket', node.statusSocket]);
    await waitFor(() => /bgp\/i65000\/upstream +192\.0\.2\.1 +65100 +up +Established/.test(status()), { timeoutMs: 10_000, what: 'session in status', onTimeout: status });
    assert.match(status(), new RegExp(`${VIP.replace(/\./g, '\\.')}/32 +203\\.0\\.113\\.130 +default/web +bgp/i65000/upstream`));
    assert.match(status(), new RegExp(`service IPs by mode \\(1\\):\\n +IP +L2 +BGP +NEXT HOPS\\n +${VIP.replace(/\./g, '\\.')} +- +advertised +203\\.0\\.113\\.130`));

    write(false);
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'VIP withdrawn after readiness loss', onTimeout: explain });
    assert.match(status(), new RegExp(`not advertised: ${VIP.replace(/\./g, '\\.')} \\(default/web\\): no-ready-backend`));
    assert.equal(node.must('ip', ['route', 'show', `${VIP}/32`]).trim(), '', 'host route removed');

    write(true);
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 20_000, what: 'VIP back', onTimeout: explain });

    // Graceful stop: herald's BIRD stops with the agent, the sessions close, the upstream withdraws.
    await agent.stop('SIGTERM', 10_000);
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'VIP withdrawn on agent stop', onTimeout: explain });
    const left = spawnSync('pgrep', ['-f', join(node.stateDir, 'bird', 'bird.conf')], { encoding: 'utf8' });
    assert.equal(left.stdout.trim(), '', 'the agent\'s BIRD exited with it');
  });

  test('a crashed node (kill -9 of agent and BIRD) leaves the upstream FIB; the restarted agent adopts its host route and advertises again', async () => {
    agent = await startAgentReady(node, ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip], 'agent-2');
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 40_000, what: 'VIP on the upstream router', onTimeout: explain });
    await agent.stop('SIGKILL'); // the whole process group: the agent and its BIRD
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'VIP gone after the crash', onTimeout: explain });
    assert.match(node.must('ip', ['route', 'show', `${VIP}/32`]), /via 203\.0\.113\.130 dev be0 proto 250/, 'the host route outlives the agent');

    agent = await startAgentReady(node, ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip], 'agent-3');
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 40_000, what: 'VIP back after the restart', onTimeout: explain });
    assert.equal(node.must('ip', ['route', 'show', 'proto', '250']).trim().split('\n').length, 1, 'one host route: adopted, not duplicated');
  });
  test('graceful restart (RFC 4724): an agent restart keeps the path in the upstream FIB and loses no packet', async () => {
    await agent?.stop('SIGTERM', 10_000);
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'the previous agent withdrew', onTimeout: explain });
    // A real backend behind the path: n2 holds the VIP; n1 forwards to it (its host route's next hop).
    const backend = lab.nodes[1]!;
    backend.must('ip', ['addr', 'add', `${VIP}/32`, 'dev', 'lo']);
    node.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
    for (const c of ['all', 'eth0']) node.must('sysctl', ['-q', '-w', `net.ipv4.conf.${c}.send_redirects=0`]);
    write(true, { gracefulRestart: true, endpoint: backend.ip });
    const args = ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip];
    agent = await startAgentReady(node, args, 'agent-gr-1');
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 40_000, what: 'VIP on the upstream router', onTimeout: explain });
    assert.match(readFileSync(join(node.stateDir, 'bird', 'bird.conf'), 'utf8'), /graceful restart on;\n {2}graceful restart time 60;/);
    assert.match(lab.client.must('ping', ['-n', '-c', '2', '-i', '0.2', '-W', '2', VIP]), /2 received/, 'traffic reaches the backend through the path');

    // Every 20 ms a ping through the path, and the upstream FIB sampled, across stop and start.
    const ping = lab.client.spawn('ping', 'ping', ['-n', '-i', '0.02', '-W', '1', VIP]);
    let sampling = true;
    let fibMissing = 0;
    const missingSeen: string[] = [];
    const sampler = (async () => {
      while (sampling) {
        const r = await lab.client.execAsync('ip', ['route', 'show', `${VIP}/32`]);
        if (!r.stdout.includes(`via ${node.ip}`)) {
          fibMissing++;
          missingSeen.push(`exit ${r.code}: ${JSON.stringify(r.stdout)}`);
        }
        await new Promise((res) => setTimeout(res, 20));
      }
    })();
    await new Promise((res) => setTimeout(res, 500));
    // SIGTERM to the agent process alone (as systemd's KillMode=mixed does): it stops its BIRD for a restart.
    process.kill(agent.pid, 'SIGTERM');
    await agent.exited;
    assert.equal(spawnSync('pgrep', ['-f', join(node.stateDir, 'bird', 'bird.conf')], { encoding: 'utf8' }).stdout.trim(), '', `the agent's BIRD exited with it\n${agent.text().slice(-3000)}`);
    assert.match(node.must('ip', ['route', 'show', `${VIP}/32`]), new RegExp(`via ${backend.ip.replace(/\./g, '\\.')} dev eth0 proto 250`), 'the host route stays');
    await new Promise((res) => setTimeout(res, 1000)); // the router runs on its stale path meanwhile
    agent = await startAgentReady(node, args, 'agent-gr-2');
    const upstreamSession = () => lab.client.exec('birdc', ['-s', join(dir, 'upstream.ctl'), 'show', 'protocols', 'node1']).stdout;
    await waitFor(() => /Established/.test(upstreamSession()), { timeoutMs: 40_000, what: 'the session back', onTimeout: () => upstreamSession() + explain() });
    await new Promise((res) => setTimeout(res, 1500)); // End-of-RIB: the stale path refreshed, not dropped
    sampling = false;
    await sampler;
    await ping.stop('SIGINT');
    const seqs = [...ping.text().matchAll(/icmp_seq=(\d+)/g)].map((m) => Number(m[1]));
    const last = Math.max(...seqs);
    const missing = Array.from({ length: last }, (_, i) => i + 1).filter((s) => !seqs.includes(s));
    assert.ok(last > 50, `pings answered: ${seqs.length}`);
    assert.deepEqual(missing, [], `pings lost across the restart (of ${last})`);
    assert.equal(fibMissing, 0, `samples without the path in the upstream FIB: ${missingSeen.slice(0, 5).join('; ')}`);
    assert.ok(fib().includes(`via ${node.ip}`), explain());
  });
  test('health checks (herald.io/health-check): a backend whose HTTP server stops is withdrawn from the upstream, and returns when it answers again', async () => {
    await agent?.stop('SIGTERM', 10_000);
    await waitFor(() => fib() === '', { timeoutMs: 20_000, what: 'the previous agent withdrew', onTimeout: explain });
    const backend = lab.nodes[1]!; // holds the VIP on lo since the previous test
    const serve = async () => {
      const p = backend.spawn('http', process.execPath, ['--import', 'tsx', HTTP_SERVER, '--port', '8080', '--name', 'n2']);
      await p.waitForOutput('listening', 20_000);
      return p;
    };
    let server = await serve();
    write(true, { endpoint: backend.ip, healthCheck: true });
    agent = await startAgentReady(node, ['--manifests', join(dir, 'intent'), '--bgp-router-id', node.ip], 'agent-hc');
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 40_000, what: 'VIP on the upstream router', onTimeout: explain });
    const status = () => node.must(HERALD, ['status', '--status-socket', node.statusSocket]);
    const row = new RegExp(`default/web +${backend.ip.replace(/\./g, '\\.')}:8080 +http +up +\\S+ +HTTP 200`);
    await waitFor(() => row.test(status()), { timeoutMs: 10_000, what: 'health check up in status', onTimeout: status });

    await server.stop('SIGTERM');
    await waitFor(() => fib() === '', { timeoutMs: 15_000, what: 'VIP withdrawn once the backend fails its check', onTimeout: () => status() + explain() });
    assert.match(status(), new RegExp(`default/web +${backend.ip.replace(/\./g, '\\.')}:8080 +http +down +\\S+ +ECONNREFUSED`));
    assert.match(status(), /not advertised: 203\.0\.113\.200 \(default\/web\): no-ready-backend/);
    assert.equal(node.must('ip', ['route', 'show', `${VIP}/32`]).trim(), '', 'host route removed');

    server = await serve();
    await waitFor(() => fib().includes(`via ${node.ip}`), { timeoutMs: 15_000, what: 'VIP back once the backend passes again', onTimeout: () => status() + explain() });
    await server.stop('SIGTERM');
  });
});
