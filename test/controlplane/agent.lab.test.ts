/**
 * The single-node product in a lab: Cilium manifests in a watched directory,
 * `herald agent` on the node, arping on the client. Intent in, ARP answers out.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Lab, sleep, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, arping, entry, labSkipReason, mapDump, startAgentReady, waitFor } from '../helpers/lab-tools.js';

const POOL = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: lab-pool }
spec:
  blocks:
  - start: 198.51.100.10
    stop: 198.51.100.19
`;
const POLICY = `apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: lab-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
`;
const service = (name: string) => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]
`;

interface Status {
  owned: Array<{ ip: string; interfaces: string[] }>;
  services: Array<{ service: string; ingress: string[]; condition: { type: string; status: string; reason: string; message: string } }>;
  pools: Array<{ pool: string; total: string; used: string; available: string }>;
  reconciler: { initialized: boolean } | null;
}

function status(node: Host): Status {
  return JSON.parse(node.must(HERALD, ['status', '--json', '--status-socket', node.statusSocket])) as Status;
}

/** Writes a file the way editors and kubectl do: a temporary file renamed over the target. */
function writeAtomically(path: string, text: string): void {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

describe('herald agent with manifests (single node, lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let agent: LabProcess;
  let dir: string;
  const METRICS = '127.0.0.1:19464';

  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'cp' });
    node = lab.nodes[0]!;
    dir = mkdtempSync(join(tmpdir(), 'herald-manifests-'));
    writeFileSync(join(dir, 'pool.yaml'), POOL);
    writeFileSync(join(dir, 'policy.yaml'), POLICY);
    writeFileSync(join(dir, 'web.yaml'), service('web'));
    agent = await startAgentReady(node, ['--manifests', dir, '--metrics-listen', METRICS, '--garp-interval', '200ms']);
  });

  after(async () => {
    await lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('the service gets the first free IP of the pool and the client gets ARP replies for it', async () => {
    await waitFor(() => status(node).owned.some((o) => o.ip === '198.51.100.10'), { what: 'the IP to be owned' });
    const st = status(node);
    assert.deepEqual(st.services, [
      {
        service: 'default/web',
        ingress: ['198.51.100.10'],
        condition: { type: 'cilium.io/IPAMRequestSatisfied', status: 'True', reason: 'satisfied', message: st.services[0]!.condition.message },
      },
    ]);
    assert.deepEqual(st.owned[0]!.interfaces, ['eth0']);
    assert.equal(st.pools[0]?.total, '10');
    await waitFor(() => arping(lab.client, '198.51.100.10', { count: 1 }).received === 1, { what: 'ARP replies' });
    const r = arping(lab.client, '198.51.100.10', { count: 3 });
    assert.equal(r.received, 3);
    assert.deepEqual(new Set(r.macs), new Set([node.mac('eth0')]));
  });

  test('the agent runs at its CPU priority (--nice, default -10) so a loaded machine does not starve it', () => {
    // The agent is the node's herald process (bin/herald runs the CLI in-process: no wrapper with local store).
    // Every thread: Linux keeps a nice value per thread, and V8's threads exist before bin/herald runs.
    const nices = readdirSync(`/proc/${agent.pid}/task`).map((tid) => {
      const stat = readFileSync(`/proc/${agent.pid}/task/${tid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
    });
    assert.ok(nices.length > 1);
    assert.deepEqual(new Set(nices), new Set([-10]));
  });

  test('herald status renders owned IPs, services, pools, the map and reconciler health', () => {
    const text = node.must(HERALD, ['status', '--status-socket', node.statusSocket]);
    assert.match(text, /owned IPs \(1\):/);
    assert.match(text, /198\.51\.100\.10\s+eth0\s+service:default\/web/);
    assert.match(text, /default\/web\s+198\.51\.100\.10\s+True\s+satisfied/);
    assert.match(text, /lab-pool\s+10\s+1\s+9/);
    assert.match(text, /reconciler: initialized true/);
  });

  test('Prometheus metrics expose replies per IP, gratuitous ARP, ownership and pools', () => {
    const text = node.must('curl', ['-s', `http://${METRICS}/metrics`]);
    assert.match(text, /herald_arp_replies_total\{ip="198\.51\.100\.10",interface="eth0"\} [1-9]/);
    assert.match(text, /herald_garp_sent_total [1-9]/);
    assert.match(text, /herald_owned_ips 1/);
    assert.match(text, /herald_ipam_pool_ips\{pool="lab-pool",state="used"\} 1/);
    assert.match(text, /herald_reconcile_rounds_total\{kind="full"\} [1-9]/);
  });

  test('a second service gets the next IP; a bad edit is rejected and changes nothing', async () => {
    writeAtomically(join(dir, 'db.yaml'), service('db'));
    await waitFor(() => status(node).owned.length === 2, { what: 'the second IP' });
    assert.deepEqual(status(node).services.find((s) => s.service === 'default/db')?.ingress, ['198.51.100.11']);
    writeAtomically(join(dir, 'db.yaml'), service('db').replace('port: 80', 'port: 80000'));
    await agent.waitForOutput(/intent rejected[\s\S]*db\.yaml[\s\S]*spec\.ports\[0\]\.port/);
    await sleep(500);
    assert.equal(status(node).owned.length, 2, 'the previous good state stays in force');
    assert.equal(arping(lab.client, '198.51.100.11', { count: 1 }).received, 1);
    writeAtomically(join(dir, 'db.yaml'), service('db'));
  });

  test('losing carrier on the announcing interface withdraws its IPs; carrier back re-announces (Cilium #35507)', async () => {
    lab.setPort(node, 'eth0', false);
    try {
      await waitFor(() => mapDump(node).entries.length === 0, { what: 'withdrawal on carrier loss' });
      assert.equal(status(node).owned.length, 0);
    } finally {
      lab.setPort(node, 'eth0', true);
    }
    await waitFor(() => entry(mapDump(node), '198.51.100.10') !== undefined, { what: 're-announcement' });
    await waitFor(() => arping(lab.client, '198.51.100.10', { count: 1 }).received === 1, { what: 'ARP replies again' });
  });

  test('allocations persist: a restarted agent keeps every IP, with no reshuffle (Cilium #40358, #41147); the view timeline is kept too', async () => {
    // `herald events` follows forever: what it prints in a short window.
    const events = () => node.exec('timeout', ['2', HERALD, 'events', '--all', '--json', '--status-socket', node.statusSocket]).stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { id: number; kind: string });
    const timeline = events();
    assert.ok(timeline.some((e) => e.kind === 'allocated'), 'allocations on the timeline');
    const before = status(node).services.map((s) => `${s.service}=${s.ingress.join(',')}`).sort();
    const state = JSON.parse(readFileSync(join(node.stateDir, 'ipam.json'), 'utf8')) as { allocations: Record<string, string[]> };
    assert.deepEqual(state.allocations['default/web'], ['198.51.100.10']);
    await agent.stop('SIGTERM');
    // A new service appears while the agent is down; it must not take web's or db's IP.
    writeFileSync(join(dir, 'api.yaml'), service('api'));
    agent = await startAgentReady(node, ['--manifests', dir, '--garp-interval', '200ms'], 'agent-2');
    await waitFor(() => status(node).services.length === 3, { what: 'three services' });
    const after = status(node).services.map((s) => `${s.service}=${s.ingress.join(',')}`).sort();
    assert.deepEqual(after.filter((s) => !s.startsWith('default/api')), before);
    assert.equal(status(node).services.find((s) => s.service === 'default/api')?.ingress[0], '198.51.100.12');
    // Local store: the timeline was kept in the state directory, same ids, and the clean stop is on it.
    const again = events();
    for (const e of timeline) assert.ok(again.some((x) => x.id === e.id && x.kind === e.kind), `event ${e.id} (${e.kind}) kept across the restart`);
    assert.ok(again.some((e) => e.kind === 'node-stopping' && e.id > timeline[timeline.length - 1]!.id), 'the clean stop kept');
  });

  test('deleting the service from the manifests stops the replies', async () => {
    rmSync(join(dir, 'web.yaml'));
    await waitFor(() => !status(node).owned.some((o) => o.ip === '198.51.100.10'), { what: 'withdrawal' });
    await waitFor(() => arping(lab.client, '198.51.100.10', { count: 1 }).received === 0, { what: 'silence' });
    assert.equal(entry(mapDump(node), '198.51.100.10'), undefined);
    assert.equal(arping(lab.client, '198.51.100.11', { count: 1 }).received, 1, 'the other services are untouched');
  });
});
