/**
 * Allocations survive the store (issue 9), with real agents on three lab
 * nodes and a real etcd: wiping etcd (stopped, data dir emptied, started) and
 * re-applying the same manifests gives every Service exactly its old IP on
 * every node; garbage in ipam/state is an error and a restarted agent changes
 * no Service's IP.
 *
 * The Services are applied in two steps (svc-c first), so their IPs differ
 * from what a fresh allocation of the re-applied file would give (in name
 * order): a forgotten state shows as changed IPs.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { LabEtcd } from '../../lab/etcd.js';
import { EtcdLab } from '../helpers/etcd-lab.js';
import type { Host, Lab, LabProcess } from '../../lab/lab.js';
import { HERALD, labSkipReason, waitFor } from '../helpers/lab-tools.js';

const POOL = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: keep-pool }
spec:
  blocks: [{ start: 198.51.100.10, stop: 198.51.100.29 }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: keep-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
`;
const service = (name: string) => `---
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]
`;

interface Status {
  services: Array<{ service: string; ingress: string[] }>;
}

describe('LB-IPAM allocations survive the store (lab, real etcd)', { skip: labSkipReason() }, () => {
  let e: EtcdLab;
  let lab: Lab;
  let etcd: LabEtcd;
  let agents: Map<Host, LabProcess>;
  let oldIps: Map<string, string>;

  const startAgent = (n: Host) => e.start(n);
  const apply = (file: string) => e.apply(file);
  /** Service → its IPs, as node `n` reports them. */
  const view = (n: Host) => {
    const s = JSON.parse(n.must(HERALD, ['status', '--json', '--status-socket', n.statusSocket])) as Status;
    return new Map(s.services.filter((x) => x.ingress.length > 0).map((x) => [x.service, x.ingress.join(',')]));
  };
  const show = (m: Map<string, string>) => [...m].sort().map(([k, v]) => `${k}=${v}`).join(' ');
  const everyNodeShows = (want: Map<string, string>) => lab.nodes.every((n) => show(view(n)) === show(want));
  const views = () => lab.nodes.map((n) => `${n.name}: ${show(view(n))}`).join('\n');
  /** etcd's JSON gateway, from the store host (no etcdctl on the machine). */
  const etcdApi = (path: string, body: object) =>
    JSON.parse(lab.store!.must('curl', ['-s', '-m', '2', '-X', 'POST', `${etcd.endpoint}/v3/${path}`, '-d', JSON.stringify(body)])) as {
      kvs?: Array<{ value: string }>;
    };
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const getKey = (key: string) => {
    const kv = etcdApi('kv/range', { key: b64(key) }).kvs?.[0];
    return kv ? Buffer.from(kv.value, 'base64').toString() : undefined;
  };

  const ipamLogs = () =>
    [...agents.values()].flatMap((p) => p.text().split('\n').filter((l) => l.includes('"module":"ipam"') && !l.includes('"level":20'))).join('\n');

  before(async () => {
    e = await EtcdLab.create({ nodes: 3, tag: 'ipk', agentArgs: () => ['--log-format', 'json'] });
    ({ lab, etcd, agents } = e);
    e.write('first.yaml', POOL + service('svc-c'));
    e.write('later.yaml', service('svc-a') + service('svc-b'));
    e.write('all.yaml', POOL + service('svc-a') + service('svc-b') + service('svc-c'));
    apply('first.yaml');
    for (const n of lab.nodes) await startAgent(n);
    await waitFor(() => lab.nodes.every((n) => view(n).get('default/svc-c') === '198.51.100.10'), { timeoutMs: 20_000, what: 'svc-c allocated on every node', onTimeout: views });
    apply('later.yaml');
    await waitFor(() => lab.nodes.every((n) => view(n).size === 3), { timeoutMs: 20_000, what: 'three Services allocated on every node', onTimeout: views });
    oldIps = view(lab.nodes[0]!);
    assert.ok(everyNodeShows(oldIps), views());
    assert.notEqual(oldIps.get('default/svc-a'), '198.51.100.10', 'a fresh allocation of all.yaml would differ');
  });

  after(async () => {
    await e?.destroy();
  });

  test('etcd wiped (empty data dir) and the same manifests applied again: every Service gets exactly its old IP on every node', async () => {
    await etcd.wipe();
    // The agents notice: the intent went with the store.
    await waitFor(() => lab.nodes.every((n) => view(n).size === 0), { timeoutMs: 20_000, what: 'the agents to see the wiped intent', onTimeout: views });
    apply('all.yaml');
    await waitFor(() => everyNodeShows(oldIps), { timeoutMs: 30_000, what: 'the old IPs on every node', onTimeout: () => `want ${show(oldIps)}\n${views()}` });
    // Every node keeps its copy in force at once; the allocator writes the restored state back after its restore wait.
    await waitFor(() => getKey('/herald/ipam/state') !== undefined, { timeoutMs: 15_000, what: 'the restored state written back', onTimeout: ipamLogs });
    const restored = JSON.parse(getKey('/herald/ipam/state')!) as { allocations: Record<string, string[]> };
    assert.deepEqual(new Map(Object.entries(restored.allocations).map(([k, v]) => [k, v.join(',')])), oldIps);
    // Agents' output reaches us through pipes: wait for the line rather than expect it already read.
    await waitFor(() => [...agents.values()].some((p) => /store wiped or rolled back: restored allocation generation \d+ from node /.test(p.text())), {
      what: 'the allocator to log the restore',
      onTimeout: ipamLogs,
    });
  });

  test('garbage in ipam/state is an error, and restarting the allocator changes no IP', async () => {
    etcdApi('kv/put', { key: b64('/herald/ipam/state'), value: b64('this is not JSON {') });
    const allocatorName = getKey('/herald/ipam/allocator');
    const allocator = lab.nodes.find((n) => n.netns === allocatorName);
    assert.ok(allocator, `the allocator ${allocatorName} is a lab node`);
    await waitFor(() => [...agents.values()].some((p) => p.text().split('\n').some((l) => l.includes('"level":50') && l.includes('cannot be parsed'))), {
      what: 'an error-level log of the unreadable state',
    });
    await agents.get(allocator)!.stop('SIGTERM');
    await startAgent(allocator);
    // Every view, while the store is repaired and after: the old IPs or none, never another.
    const changed: string[] = [];
    await waitFor(
      () => {
        for (const n of lab.nodes) {
          for (const [svc, ips] of view(n)) if (oldIps.get(svc) !== ips) changed.push(`${n.name} ${svc}=${ips}`);
        }
        const text = getKey('/herald/ipam/state') ?? '';
        return text.startsWith('{') && everyNodeShows(oldIps);
      },
      { timeoutMs: 30_000, what: 'the store repaired and the old IPs everywhere', onTimeout: () => `${getKey('/herald/ipam/state')}\n${views()}` },
    );
    assert.deepEqual(changed, [], 'no Service changed IP');
    assert.deepEqual(new Map(Object.entries((JSON.parse(getKey('/herald/ipam/state')!) as { allocations: Record<string, string[]> }).allocations).map(([k, v]) => [k, v.join(',')])), oldIps);
  });
});
