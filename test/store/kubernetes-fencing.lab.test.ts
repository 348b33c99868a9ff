/**
 * Wire-verified fast takeover on the Kubernetes store (issue 15), with a real
 * kube-apiserver and two agents in node namespaces, node Leases of 30 s (a
 * takeover by expiry could not come within these tests' waits), and the
 * failover probe on the client counting requests answered by two MACs:
 *
 *   - a candidate starved of CPU (3 % of a core for 8 s) never fences a
 *     healthy owner (only silence observed while its own timer ran on time
 *     counts);
 *   - a frozen owner (its whole agent unit SIGSTOPped) goes silent on the wire
 *     and is fenced out — its node Lease deleted — so the other node answers
 *     within the freeze; after SIGCONT it never answers beside the successor;
 *   - a lost node (its switch port down and its path to the API server
 *     stalled) is fenced the same way; when it comes back it steps down.
 *
 * Without the fence each takeover waits for the 30 s Lease and the tests fail.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sleep, type Host, type Lab } from '../../lab/lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { arpProbe, darkGaps, starved } from '../helpers/faults.js';
import { applyObject } from '../helpers/kube.js';
import { KubeLab } from '../helpers/kube-lab.js';
import { HERALD, arping, labSkipReason, waitFor } from '../helpers/lab-tools.js';

const IP = '198.51.100.50';
const DURATION_S = 30;

interface KubeStatus {
  owned: Array<{ ip: string }>;
  kubernetes?: { leases?: { fencesIssued: number; fencedOut: number } };
}

describe('Kubernetes store: wire-verified fast takeover (lab, real kube-apiserver)', { skip: labSkipReason() }, () => {
  let k: KubeLab;
  let lab: Lab;
  let dir: string;
  const status = (n: Host) => JSON.parse(n.must(HERALD, ['status', '--json', '--status-socket', n.statusSocket])) as KubeStatus;
  const owners = () => lab.nodes.filter((n) => status(n).owned.some((o) => o.ip === IP));
  const preferred = () => lab.nodes.reduce((best, n) => (rendezvousScore(n.netns, IP) > rendezvousScore(best.netns, IP) ? n : best));
  const fences = () => lab.nodes.reduce((sum, n) => sum + (status(n).kubernetes?.leases?.fencesIssued ?? 0), 0);
  const logs = (n: Host) => (k.agents.get(n)?.text() ?? '').split('\n').filter((l) => /fenc|silent|woke up late|stepping down|re-checked/i.test(l)).slice(-12).join('\n');
  /** The preferred node owns the IP, alone, and answers it (after a fence it gets it back by a planned hand-over). */
  const settle = async () => {
    const p = preferred();
    await waitFor(() => owners().length === 1 && owners()[0] === p, { timeoutMs: 40_000, intervalMs: 200, what: `${p.name} to own ${IP} alone`, onTimeout: () => lab.nodes.map((n) => `${n.name}:\n${logs(n)}`).join('\n') });
    await waitFor(() => arping(lab.client, IP, { count: 1 }).macs.includes(p.mac('eth0')), { timeoutMs: 10_000, what: `${IP} answered by ${p.name}` });
    return p;
  };
  const fenceEvents = async () => {
    const r = await k.kube.api('GET', '/api/v1/namespaces/default/events');
    return ((r.body?.items ?? []) as Array<{ reason: string; message: string; involvedObject: { kind: string; name: string } }>).filter((e) => e.reason === 'OwnerFenced' && e.involvedObject.kind === 'Service' && e.involvedObject.name === 'fence');
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'herald-k8sfence-'));
    k = await KubeLab.create({ nodes: 2, tag: 'k8sfence', agentArgs: () => ['--kube-lease-duration', String(DURATION_S), '--kube-lease-renew', '2s', '--garp-interval', '200ms'] });
    lab = k.lab;
    await applyObject(k.kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'fence-pool' }, spec: { blocks: [{ start: IP }] } });
    await applyObject(k.kube, { apiVersion: 'cilium.io/v2alpha1', kind: 'CiliumL2AnnouncementPolicy', metadata: { name: 'fence-policy' }, spec: { loadBalancerIPs: true, interfaces: ['^eth0$'] } });
    await applyObject(k.kube, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'fence', namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }] } });
    for (const n of lab.nodes) await k.start(n);
  });

  after(async () => {
    await k?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('a CPU-starved candidate (3 % of a CPU for 8 s) never fences a healthy owner', async () => {
    const owner = await settle();
    const idle = lab.nodes.find((n) => n !== owner)!;
    const fencesBefore = fences();
    const arpP = arpProbe(lab, dir, IP, 12_000);
    await sleep(1000);
    await starved(k.agents.get(idle)!, 3, () => sleep(8000));
    const arp = await arpP;
    assert.equal(arp.dualAnswer, 0, 'no request answered by two MACs');
    assert.deepEqual(darkGaps(arp), [], `${IP} stayed answered throughout`);
    assert.equal(fences() - fencesBefore, 0, 'no node Lease deleted');
    assert.deepEqual(owners(), [owner], 'no owner change');
  });

  test('a frozen owner (SIGSTOP 6 s) is fenced out and replaced within the freeze; after SIGCONT it never answers beside the successor', async () => {
    const owner = await settle();
    const other = lab.nodes.find((n) => n !== owner)!;
    const unit = k.agents.get(owner)!;
    const arpP = arpProbe(lab, dir, IP, 10_000, 2);
    await sleep(500);
    const t0 = Date.now();
    unit.signal('SIGSTOP');
    try {
      await waitFor(() => arping(lab.client, IP, { count: 1 }).macs.includes(other.mac('eth0')), { timeoutMs: 5000, intervalMs: 100, what: `${IP} answered by ${other.name} while ${owner.name} is frozen (the ${DURATION_S} s Lease still runs)`, onTimeout: () => logs(other) });
      console.log(`k8s frozen owner: ${IP} answered by ${other.name} ${Date.now() - t0} ms after SIGSTOP (node Lease ${DURATION_S} s)`);
      await sleep(Math.max(0, 6000 - (Date.now() - t0)));
    } finally {
      unit.signal('SIGCONT');
    }
    const arp = await arpP;
    assert.equal(arp.dualAnswer, 0, `no request answered by two MACs (runs ${JSON.stringify(arp.dualAnswerRuns)})`);
    assert.ok((status(other).kubernetes?.leases?.fencesIssued ?? 0) >= 1, 'the successor fenced the frozen owner');
    await waitFor(() => (status(owner).kubernetes?.leases?.fencedOut ?? 0) >= 1, { timeoutMs: 10_000, what: `${owner.name} learnt it was fenced out`, onTimeout: () => logs(owner) });
    await waitFor(async () => (await fenceEvents()).some((e) => e.message.includes(`fenced out ${owner.netns}`)), { timeoutMs: 10_000, what: 'an OwnerFenced Event on the Service' });
  });

  // Two bugs this case found (2026-11-26): the IP was never handed back to the node fenced in the case above
  // (a 60 s skip of a preferred node that had in fact held the IP), and the node coming back answered once beside
  // its successor before the carrier regain was seen (its stamp stayed fresh through the outage: the heartbeat
  // is now held while every served link is dark).
  test('a lost node (port down, its API path stalled) is fenced out and replaced well inside the Lease; back, it steps down — never two MACs', async () => {
    const owner = await settle();
    const other = lab.nodes.find((n) => n !== owner)!;
    const bridge = k.bridges.get(owner)!;
    const arpP = arpProbe(lab, dir, IP, 14_000, 2);
    await sleep(500);
    const t0 = Date.now();
    lab.setPort(owner, 'eth0', false);
    bridge.signal('SIGSTOP');
    try {
      await waitFor(() => arping(lab.client, IP, { count: 1 }).macs.includes(other.mac('eth0')), { timeoutMs: 8000, intervalMs: 100, what: `${IP} answered by ${other.name} (the ${DURATION_S} s Lease still runs)`, onTimeout: () => logs(other) });
      console.log(`k8s node loss: ${IP} answered by ${other.name} ${Date.now() - t0} ms after the port went down (node Lease ${DURATION_S} s)`);
      await sleep(Math.max(0, 5000 - (Date.now() - t0)));
    } finally {
      lab.setPort(owner, 'eth0', true);
      bridge.signal('SIGCONT');
    }
    const arp = await arpP;
    assert.equal(arp.dualAnswer, 0, `no request answered by two MACs (runs ${JSON.stringify(arp.dualAnswerRuns)})`);
    await waitFor(() => (status(owner).kubernetes?.leases?.fencedOut ?? 0) >= 2, { timeoutMs: 15_000, what: `${owner.name} learnt it was fenced out again`, onTimeout: () => logs(owner) });
  });
});
