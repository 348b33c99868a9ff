/**
 * HA safety under faults (issue 9), in a 3-node lab with a real etcd and the
 * failover probe on the client counting requests answered by two MACs:
 *
 *   - a paused non-owner never fences a healthy owner (it used to measure the
 *     owners' "silence" on its own late clock and revoke their leases);
 *   - a resumed owner never answers beside the node that took over (its
 *     heartbeat used to restart before it learnt its lease was gone);
 *   - keys without a lease carry no authority (a lease-less candidate made
 *     ownership flap forever, a lease-less owner key kept an IP dark forever);
 *   - a store outage costs no more than the outage: our keys are moved onto
 *     the new lease, so the owner does not change.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { churnRounds, writeChurnFiles } from '../../lab/churn.js';
import type { LabEtcd } from '../../lab/etcd.js';
import { EtcdLab } from '../helpers/etcd-lab.js';
import { arpProbe, darkGaps, starved } from '../helpers/faults.js';
import { sleep, type Host, type Lab, type LabProcess } from '../../lab/lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { HERALD, labSkipReason, waitFor } from '../helpers/lab-tools.js';

const IPS = ['198.51.100.40', '198.51.100.41'];
const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: faults-pool }
spec:
  blocks: [{ start: ${IPS[0]}, stop: ${IPS[1]} }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: faults-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
${['a', 'b']
  .map(
    (n) => `---
apiVersion: v1
kind: Service
metadata: { name: faults-${n}, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]`,
  )
  .join('\n')}
`;
const ETCD_KV = fileURLToPath(new URL('../tools/etcd-kv.ts', import.meta.url));

interface HaStatus {
  owned: Array<{ ip: string }>;
  ha: {
    session: { state: string; leasesGranted: number };
    ownership: { fencesIssued: number; staleKeysIgnored: number; staleKeysRemoved: number; keysMovedToNewLease: number };
    heartbeat?: { lateWakeups: number; thread?: boolean };
  } | null;
}

describe('HA safety under faults (lab, real etcd)', { skip: labSkipReason() }, () => {
  let e: EtcdLab;
  let lab: Lab;
  let etcd: LabEtcd;
  let dir: string;
  let agents: Map<Host, LabProcess>;
  const status = (n: Host) => JSON.parse(n.must(HERALD, ['status', '--json', '--status-socket', n.statusSocket])) as HaStatus;
  const start = (n: Host, extra: string[] = []) => e.start(n, extra);
  const ownersByNodes = () => {
    const owners = new Map<string, string[]>();
    for (const n of lab.nodes) {
      if (!agents.get(n)?.running) continue;
      for (const o of status(n).owned) owners.set(o.ip, [...(owners.get(o.ip) ?? []), n.name]);
    }
    return owners;
  };
  const preferred = (ip: string) => lab.nodes.reduce((best, n) => (rendezvousScore(n.netns, ip) > rendezvousScore(best.netns, ip) ? n : best));
  const settled = () => {
    const o = ownersByNodes();
    return IPS.every((ip) => o.get(ip)?.length === 1 && o.get(ip)![0] === preferred(ip).name);
  };
  const settle = () => waitFor(settled, { timeoutMs: 30_000, what: 'every IP owned once by its preferred node', onTimeout: () => JSON.stringify([...ownersByNodes()]) });
  const fences = () => lab.nodes.filter((n) => agents.get(n)?.running).reduce((sum, n) => sum + (status(n).ha?.ownership.fencesIssued ?? 0), 0);

  /** The failover probe on the client: a fresh ARP request for `ip` every `intervalMs`. */
  const probe = (ip: string, durationMs: number, intervalMs = 10) => arpProbe(lab, dir, ip, durationMs, intervalMs);

  before(async () => {
    e = await EtcdLab.create({ nodes: 3, tag: 'hf', agentArgs: () => ['--garp-interval', '200ms'] });
    ({ lab, etcd, dir, agents } = e);
    e.write('faults.yaml', MANIFESTS);
    e.apply('faults.yaml');
    for (const n of lab.nodes) await start(n);
    await settle();
  });

  after(async () => {
    for (const p of agents?.values() ?? []) p.signal('SIGCONT');
    await e?.destroy();
  });

  test('a paused non-owner (SIGSTOP 1, 2, 5 s) never fences a healthy owner: 0 revocations, the owned IPs never go dark', async () => {
    // A node preferred for neither IP owns nothing once settled (2 IPs, 3 nodes).
    const idle = lab.nodes.find((n) => IPS.every((ip) => preferred(ip) !== n));
    assert.ok(idle, 'some node is preferred for neither IP');
    const ownersBefore = JSON.stringify([...ownersByNodes()].sort());
    const fencesBefore = fences();
    const pauses = [1000, 2000, 5000];
    const total = pauses.reduce((a, b) => a + b + 2500, 1000);
    const probes = IPS.map((ip) => probe(ip, total));
    await sleep(1000);
    for (const ms of pauses) {
      agents.get(idle)!.signal('SIGSTOP');
      await sleep(ms);
      agents.get(idle)!.signal('SIGCONT');
      await sleep(2500); // it resumes, probes on its late clock and re-joins
    }
    const results = await Promise.all(probes);
    for (const [i, arp] of results.entries()) {
      assert.equal(arp.dualAnswer, 0, `${IPS[i]}: no request answered by two MACs`);
      assert.deepEqual(darkGaps(arp), [], `${IPS[i]} stayed answered throughout`);
    }
    assert.equal(fences() - fencesBefore, 0, 'no lease was revoked');
    assert.equal(JSON.stringify([...ownersByNodes()].sort()), ownersBefore, 'no owner changed');
    assert.ok((status(idle).ha?.heartbeat?.lateWakeups ?? 0) >= 3, 'the paused node noticed each late wake-up');
    assert.equal(status(idle).ha?.heartbeat?.thread, true, 'its heartbeat thread noticed them (the agent stamps from a thread of its own)');
  });

  test('a CPU-starved candidate (3 % of a CPU for 8 s) never fences a healthy owner', async () => {
    await settle();
    const idle = lab.nodes.find((n) => IPS.every((ip) => preferred(ip) !== n))!;
    const ownersBefore = JSON.stringify([...ownersByNodes()].sort());
    const fencesBefore = fences();
    const probes = IPS.map((ip) => probe(ip, 12_000));
    await sleep(1000);
    await starved(agents.get(idle)!, 3, () => sleep(8000));
    const results = await Promise.all(probes);
    for (const [i, arp] of results.entries()) {
      assert.equal(arp.dualAnswer, 0, `${IPS[i]}: no request answered by two MACs`);
      assert.deepEqual(darkGaps(arp), [], `${IPS[i]} stayed answered throughout`);
    }
    assert.equal(fences() - fencesBefore, 0, 'no lease was revoked');
    assert.equal(JSON.stringify([...ownersByNodes()].sort()), ownersBefore, 'no owner changed');
  });

  test('churning 1,000 services for 60 s (issue 9): no live owner fenced, the stable IPs never go dark', async (t) => {
    await settle();
    // etcd bounds one transaction to 128 operations (--max-txn-ops), and
    // `herald apply` writes a file in one: 10 files of 100 services.
    const { pool, files } = writeChurnFiles(dir);
    const kubectl = async (verb: 'apply' | 'delete', file: string) => {
      const r = await lab.nodes[0]!.execAsync(HERALD, [verb, '-f', file, '--etcd', etcd.endpoint]);
      assert.equal(r.code, 0, `${verb} ${file}: ${r.stdout}${r.stderr}`);
    };
    await kubectl('apply', pool);
    const ownersBefore = JSON.stringify([...ownersByNodes()].sort());
    const fencesBefore = fences();
    const probes = IPS.map((ip) => probe(ip, 64_000));
    await sleep(1000);
    const rounds = await churnRounds(files, 60_000, kubectl);
    const results = await Promise.all(probes);
    for (const [i, arp] of results.entries()) {
      assert.equal(arp.dualAnswer, 0, `${IPS[i]}: no request answered by two MACs`);
      assert.deepEqual(darkGaps(arp), [], `${IPS[i]} stayed answered throughout ${rounds} rounds`);
    }
    const why = () =>
      lab.nodes
        .map((n) => `${n.name}:\n${(agents.get(n)?.text() ?? '').split('\n').filter((l) => /fenced|silent|woke up late|stepping down|lease is gone|liveness/i.test(l)).slice(-12).join('\n')}`)
        .join('\n');
    // How often a candidate's silence verdict named an IP its owner was releasing (a fence before the marker).
    const count = (re: RegExp) => lab.nodes.reduce((sum, n) => sum + (agents.get(n)?.text() ?? '').split('\n').filter((l) => re.test(l)).length, 0);
    t.diagnostic(`${rounds} rounds; silence about a releasing IP, not fenced: ${count(/silent about an IP it is releasing/)}; about an IP already released: ${count(/silent about an IP it no longer holds/)}; late wake-ups: ${count(/woke up late/)}`);
    assert.equal(fences() - fencesBefore, 0, `no lease was revoked (${rounds} rounds)\n${why()}`);
    assert.equal(JSON.stringify([...ownersByNodes()].sort()), ownersBefore, 'no owner changed');
  });

  test('a paused owner (SIGSTOP 1, 2, 5, 10 s) never answers beside the node that took over: 0 dual answers at a 2 ms probe', async () => {
    const ip = IPS[0]!;
    for (const ms of [1000, 2000, 5000, 10_000]) {
      await settle();
      const owner = preferred(ip);
      const arpP = probe(ip, ms + 3000, 2);
      await sleep(500);
      agents.get(owner)!.signal('SIGSTOP');
      await sleep(ms);
      agents.get(owner)!.signal('SIGCONT');
      const arp = await arpP;
      assert.equal(arp.dualAnswer, 0, `pause ${ms} ms: no request answered by two MACs (runs ${JSON.stringify(arp.dualAnswerRuns)})`);
      assert.ok(arp.answered > 0);
    }
    await settle();
  });

  test('a lease-less candidate key for a more preferred node carries no authority: no flapping, a warning, the key removed', async () => {
    const ip = IPS[1]!;
    // A node name that out-scores every real node for this IP.
    let ghost = 'ghost-0';
    for (let i = 0; lab.nodes.some((n) => rendezvousScore(n.netns, ip) > rendezvousScore(ghost, ip)); i++) ghost = `ghost-${i}`;
    const owner = preferred(ip);
    const key = `/herald/candidates/${ip}/${ghost}`;
    const arpP = probe(ip, 8000);
    await sleep(300);
    const put = await lab.client.execAsync(process.execPath, ['--import', 'tsx', ETCD_KV, etcd.endpoint, 'put', key, '']);
    assert.equal(put.code, 0, put.stderr);
    const arp = await arpP;
    assert.deepEqual(darkGaps(arp), [], 'the owner never gave the IP away to a lease-less candidate');
    assert.deepEqual(ownersByNodes().get(ip), [owner.name]);
    const left = await lab.client.execAsync(process.execPath, ['--import', 'tsx', ETCD_KV, etcd.endpoint, 'get', key]);
    assert.equal(left.stdout.trim(), 'null', 'the stale key was removed');
    assert.ok(lab.nodes.some((n) => (status(n).ha?.ownership.staleKeysIgnored ?? 0) > 0));
    assert.ok(lab.nodes.some((n) => agents.get(n)!.text().includes(key)), 'a warning names the key');
  });

  test('a lease-less owner key carries no authority: the IP does not stay dark, its candidates take it back', async () => {
    const ip = IPS[0]!;
    await settle();
    const key = `/herald/owners/${ip}`;
    // Overwrite the owner key without a lease (a hand edit, a broken tool, a restore).
    const put = await lab.client.execAsync(process.execPath, ['--import', 'tsx', ETCD_KV, etcd.endpoint, 'put', key, 'nobody']);
    assert.equal(put.code, 0, put.stderr);
    await waitFor(() => ownersByNodes().get(ip)?.length === 1, { timeoutMs: 10_000, what: 'a real owner again' });
    const got = await lab.client.execAsync(process.execPath, ['--import', 'tsx', ETCD_KV, etcd.endpoint, 'get', key]);
    const kv = JSON.parse(got.stdout) as { value: string; lease: string } | null;
    assert.ok(kv && kv.lease !== '0' && kv.value !== 'nobody', `the owner key is a real node's again: ${got.stdout}`);
    await settle();
  });

  test('an etcd outage (withdraw) costs no owner change: our keys move onto the new lease', async () => {
    await settle();
    const before = JSON.stringify([...ownersByNodes()].sort());
    const arpP = probe(IPS[0]!, 11_000);
    await sleep(1000);
    await etcd.kill();
    await sleep(5000);
    await etcd.start();
    const arp = await arpP;
    await waitFor(() => lab.nodes.every((n) => status(n).ha?.session.state === 'live'), { timeoutMs: 15_000, what: 'every session live again' });
    await waitFor(() => IPS.every((ip) => ownersByNodes().get(ip)?.length === 1), { timeoutMs: 15_000, what: 'every IP owned again' });
    assert.equal(JSON.stringify([...ownersByNodes()].sort()), before, 'the same owners as before the outage');
    assert.ok(lab.nodes.some((n) => (status(n).ha?.ownership.keysMovedToNewLease ?? 0) > 0), 'the owners moved their keys onto their new leases');
    assert.equal(arp.dualAnswer, 0);
    const dark = darkGaps(arp).reduce((sum, g) => sum + g.ms, 0);
    process.stdout.write(`# outage 5000 ms (withdraw): dark ${Math.round(dark)} ms\n`);
  });

  test('an etcd outage with --on-store-loss keep: answered throughout, no gap on recovery, no owner change', async () => {
    for (const n of lab.nodes) await agents.get(n)!.stop('SIGTERM');
    for (const n of lab.nodes) await start(n, ['--on-store-loss', 'keep']);
    await settle();
    const before = JSON.stringify([...ownersByNodes()].sort());
    const probes = IPS.map((ip) => probe(ip, 16_000));
    await sleep(1000);
    await etcd.kill();
    await sleep(10_000);
    await etcd.start();
    const results = await Promise.all(probes);
    for (const [i, arp] of results.entries()) {
      assert.equal(arp.dualAnswer, 0, `${IPS[i]}: no request answered by two MACs`);
      assert.deepEqual(darkGaps(arp), [], `${IPS[i]} answered through the outage and the recovery`);
    }
    await waitFor(() => lab.nodes.every((n) => status(n).ha?.session.state === 'live'), { timeoutMs: 15_000, what: 'every session live again' });
    assert.equal(JSON.stringify([...ownersByNodes()].sort()), before, 'the same owners as before the outage');
  });
});
