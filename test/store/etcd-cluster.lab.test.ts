/**
 * Three nodes, a client and a real etcd (in its own lab host) on one segment:
 * intent applied with `herald apply`, allocation by one elected allocator,
 * exactly one owner per IP, and ownership moving on SIGTERM, kill -9 and link
 * loss, with the client's neighbour entry following the gratuitous burst.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { LabEtcd } from '../../lab/etcd.js';
import { EtcdLab } from '../helpers/etcd-lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { sleep, supervisedAgentPid, type Host, type Lab, type LabProcess } from '../../lab/lab.js';
import { HERALD, arping, craft, labSkipReason, mapDump, startCapture, stopCapture, waitFor } from '../helpers/lab-tools.js';

const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: ha-pool }
spec:
  blocks: [{ start: 198.51.100.10, stop: 198.51.100.29 }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: ha-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
${['a', 'b', 'c', 'd', 'e', 'f']
  .map(
    (n) => `---
apiVersion: v1
kind: Service
metadata: { name: svc-${n}, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]`,
  )
  .join('\n')}
`;

interface Status {
  owned: Array<{ ip: string }>;
  services: Array<{ service: string; ingress: string[] }>;
  candidates: Array<{ ip: string; owner: string | null }>;
}
const status = (n: Host) => JSON.parse(n.must(HERALD, ['status', '--json', '--status-socket', n.statusSocket])) as Status;
const HTTP_SERVER = fileURLToPath(new URL('../../lab/http-server.ts', import.meta.url));
const PROBE = fileURLToPath(new URL('../../lab/failover-probe.ts', import.meta.url));
const IPS = ['198.51.100.10', '198.51.100.11', '198.51.100.12', '198.51.100.13', '198.51.100.14', '198.51.100.15'];

describe('HA on etcd: three nodes (lab)', { skip: labSkipReason() }, () => {
  let e: EtcdLab;
  let lab: Lab;
  let etcd: LabEtcd;
  let dir: string;
  let agents: Map<Host, LabProcess>;
  const start = (n: Host) => e.start(n);
  /** Owner of each IP according to the nodes themselves (what they own). */
  const ownersByNodes = () => {
    const owners = new Map<string, string[]>();
    for (const n of lab.nodes) {
      if (!agents.get(n)?.running) continue;
      for (const o of status(n).owned) owners.set(o.ip, [...(owners.get(o.ip) ?? []), n.name]);
    }
    return owners;
  };
  const preferred = (ip: string) =>
    lab.nodes.reduce((best, n) => (rendezvousScore(n.netns, ip) > rendezvousScore(best.netns, ip) ? n : best)).name;
  /** Every IP owned once, by its preferred node: the settled state. */
  const spreadAsPreferred = () => {
    const o = ownersByNodes();
    return IPS.every((ip) => o.get(ip)?.length === 1 && o.get(ip)![0] === preferred(ip));
  };
  const settle = () => waitFor(spreadAsPreferred, { timeoutMs: 25_000, what: 'every IP owned once by its preferred node', onTimeout: () => JSON.stringify([...ownersByNodes()]) });
  const allOwnedOnce = () => {
    const o = ownersByNodes();
    return IPS.every((ip) => o.get(ip)?.length === 1);
  };

  before(async () => {
    e = await EtcdLab.create({ nodes: 3, tag: 'ha', agentArgs: () => ['--local-routes', '--garp-interval', '200ms'] });
    ({ lab, etcd, dir, agents } = e);
    e.write('ha.yaml', MANIFESTS);
    assert.match(e.apply('ha.yaml'), /ciliumloadbalancerippool\.cilium\.io\/ha-pool created/);
    for (const n of lab.nodes) {
      n.spawn('http', process.execPath, ['--import', 'tsx', HTTP_SERVER, '--port', '8080', '--name', n.name]);
      await start(n);
    }
    await waitFor(allOwnedOnce, { timeoutMs: 20_000, what: 'every IP owned by exactly one node' });
  });

  after(async () => {
    await e?.destroy();
  });

  test('allocation is the same on every node, and each IP has exactly one owner, spread over the nodes', () => {
    const views = lab.nodes.map((n) => status(n).services.map((s) => `${s.service}=${s.ingress.join(',')}`).sort().join(' '));
    assert.equal(new Set(views).size, 1, views.join('\n'));
    assert.match(views[0]!, /default\/svc-a=198\.51\.100\.10/);
  });

  test('ownership spreads over the nodes deterministically (rendezvous hashing, Cilium #28326), one owner per IP', async () => {
    // The first agent up took everything; the others become preferred for
    // their share and the owner hands those IPs over after the hold-down.
    await waitFor(spreadAsPreferred, { timeoutMs: 20_000, what: 'every IP owned by its preferred node', onTimeout: () => JSON.stringify([...ownersByNodes()]) });
    assert.ok(new Set(IPS.map(preferred)).size >= 2, 'these names spread the IPs');
    // On the wire: one MAC per IP.
    for (const ip of IPS.slice(0, 3)) {
      const r = craft(lab.client, ip, 'valid', { count: 2 });
      assert.equal(new Set(r.replies.map((x) => x.mac)).size, 1, `${ip} answered by ${r.replies.map((x) => x.mac)}`);
    }
  });

  const ownerOf = (ip: string): Host => lab.nodes.find((n) => ownersByNodes().get(ip)?.includes(n.name))!;

  test('--local-routes: the owner serves the IP to host services, and only the owner routes it', async () => {
    const ip = IPS[4]!;
    const owner = ownerOf(ip);
    await waitFor(() => lab.client.exec('curl', ['-s', '-m', '1', `http://${ip}:8080/`]).stdout.trim() === owner.name, { what: `the page of ${owner.name}` });
    // Routes follow ownership (right after ARP has moved, on a hand-over).
    const routedBy = () => lab.nodes.filter((n) => n.must('ip', ['route', 'show', 'table', 'local', 'proto', '250']).includes(`local ${ip} `));
    await waitFor(() => routedBy().length === 1 && routedBy()[0] === owner, { what: `only ${owner.name} to route ${ip}`, onTimeout: () => routedBy().map((n) => n.name).join(',') });
    // Where a local route makes the IP local, the kernel must leave ARP for it to herald.
    assert.equal(owner.must('sysctl', ['-n', 'net.ipv4.conf.eth0.arp_ignore']).trim(), '1', 'the kernel leaves ARP to herald');
  });

  test('SIGTERM of the owner hands its IPs over; the client follows the gratuitous burst', async () => {
    const ip = IPS[0]!;
    const owner = ownerOf(ip);
    lab.client.must('ip', ['neigh', 'replace', ip, 'lladdr', owner.mac('eth0'), 'dev', 'eth0', 'nud', 'stale']);
    await agents.get(owner)!.stop('SIGTERM');
    await waitFor(() => ownersByNodes().get(ip)?.length === 1, { what: 'a new owner' });
    const next = ownerOf(ip);
    assert.notEqual(next, owner);
    await waitFor(() => lab.client.neighbourMac(ip) === next.mac('eth0'), { what: "the client's neighbour entry to follow" });
    assert.deepEqual(mapDump(owner).entries, [], 'the stopped node answers for nothing');
    const r = arping(lab.client, ip, { count: 2 });
    assert.deepEqual(new Set(r.macs), new Set([next.mac('eth0')]));
    assert.equal(lab.client.must('curl', ['-s', '-m', '2', `http://${ip}:8080/`]).trim(), next.name, 'the page now comes from the new owner');
    await start(owner);
    await settle();
  });

  test('kill -9 of the owner moves its IPs, the killed node goes silent, and the client follows the burst', async () => {
    const ip = IPS[1]!;
    const owner = ownerOf(ip);
    lab.client.must('ip', ['neigh', 'replace', ip, 'lladdr', owner.mac('eth0'), 'dev', 'eth0', 'nud', 'stale']);
    await agents.get(owner)!.stop('SIGKILL');
    await waitFor(() => ownersByNodes().get(ip)?.length === 1, { timeoutMs: 15_000, what: 'a new owner after the crash' });
    assert.notEqual(ownerOf(ip), owner);
    await sleep(1200); // the dead agent's liveness limit (1 s)
    const r = craft(lab.client, ip, 'valid', { count: 3 });
    assert.deepEqual(new Set(r.replies.map((x) => x.mac)), new Set([ownerOf(ip).mac('eth0')]), 'only the new owner answers');
    await waitFor(() => lab.client.neighbourMac(ip) === ownerOf(ip).mac('eth0'), { what: "the client's neighbour entry to follow" });
    await start(owner);
    await settle();
  });

  test('kill -9 of the agent under its supervisor: silenced and its lease revoked at once, no frame from the dead MAC after the new owner\'s burst', async () => {
    const ip = IPS[0]!;
    const owner = ownerOf(ip);
    const agent = agents.get(owner)!;
    const child = supervisedAgentPid(agent);
    assert.ok(child, 'the agent runs under its supervisor');
    const before = JSON.parse(owner.must(HERALD, ['status', '--json', '--status-socket', owner.statusSocket])) as { ha: { session: { lease: string } }; owned: unknown[] };
    const lease = before.ha.session.lease;
    const owned = before.owned.length;
    const capture = await startCapture(lab.client, 'arp');
    process.kill(child, 'SIGKILL'); // the agent process only: the supervisor survives it
    await agent.exited;
    const out = agent.text();
    // Silence first, then the lease: both done by the supervisor, not by expiry.
    const silenced = out.indexOf('datapath silenced');
    const revoked = out.indexOf(`revoked lease ${lease}`);
    assert.ok(silenced >= 0 && revoked > silenced, `the supervisor silences the datapath, then revokes lease ${lease}:\n${out.slice(-1500)}`);
    // In between, the hand-over the agent kept current: every IP it owned goes straight to its successor.
    const record = out.indexOf(`hand-over record written for ${owned} IPs`);
    const handed = out.indexOf(`handed ${owned} of ${owned} IPs over to their successors`);
    assert.ok(owned > 0 && silenced < record && record < handed && handed < revoked, `silenced, record, moves, revoke — in that order, for all ${owned} IPs:\n${out.slice(-1500)}`);
    assert.equal(mapDump(owner).liveness.ageMs, undefined, "the dead agent's liveness stamp is cleared");
    const ttl = JSON.parse(lab.store!.must('curl', ['-s', '-m', '2', '-X', 'POST', '-d', JSON.stringify({ ID: lease }), `${etcd.endpoint}/v3/lease/timetolive`])) as { TTL: string };
    assert.equal(Number(ttl.TTL), -1, `lease ${lease} is gone from etcd`);
    await waitFor(() => ownersByNodes().get(ip)?.length === 1, { timeoutMs: 15_000, what: 'a new owner after the crash' });
    const successor = ownerOf(ip);
    assert.notEqual(successor, owner);
    // No waiting for the liveness limit: the dead node is already silent.
    const r = craft(lab.client, ip, 'valid', { count: 3 });
    assert.deepEqual(new Set(r.replies.map((x) => x.mac)), new Set([successor.mac('eth0')]), 'only the new owner answers');
    const lines = await stopCapture(capture);
    const firstGarp = lines.findIndex((l) => l.includes(successor.mac('eth0')) && (l.includes(`${ip} is-at`) || l.includes(`tell ${ip}`)));
    assert.ok(firstGarp >= 0, `the new owner's gratuitous burst:\n${lines.join('\n')}`);
    const lateDead = lines.slice(firstGarp).filter((l) => l.includes(`${owner.mac('eth0')} >`));
    assert.deepEqual(lateDead, [], 'a frame from the dead MAC after the new owner\'s first gratuitous ARP');
    await start(owner);
    await settle();
  });

  test('link loss on the owner moves its IPs (Cilium #35507); its link back, the old owner re-checks before a word', async () => {
    const ip = IPS[2]!;
    const owner = ownerOf(ip);
    const agent = agents.get(owner)!;
    const sessionsBefore = agent.text().split('etcd session live').length;
    lab.setPort(owner, 'eth0', false);
    let capture: LabProcess | undefined;
    try {
      await waitFor(() => lab.nodes.some((n) => n !== owner && status(n).owned.some((o) => o.ip === ip)), { timeoutMs: 15_000, what: 'another node to own the IP' });
      const r = arping(lab.client, ip, { count: 2 });
      assert.equal(r.received, 2);
      assert.ok(!r.macs.includes(owner.mac('eth0')));
      capture = await startCapture(lab.client, `arp and ether src ${owner.mac('eth0')}`);
    } finally {
      lab.setPort(owner, 'eth0', true);
    }
    // Its lease was revoked while it was cut off, but by its own clock it
    // is still valid: the carrier coming back must hold it silent until the
    // store has been asked (no gratuitous burst, no defence, no reply).
    await waitFor(() => agent.text().split('etcd session live').length > sessionsBefore, { timeoutMs: 10_000, what: 'the old owner to learn its lease is gone and re-join' });
    const claims = (await stopCapture(capture)).filter((l) => l.includes(`${ip} is-at`) || l.includes(`tell ${ip}`));
    assert.deepEqual(claims, [], 'the old owner claimed the IP after its link came back');
    await settle();
  });

  test('a node cut off from etcd steps down before another node takes over: never two MACs for one request', async () => {
    const ip = IPS[3]!;
    const owner = ownerOf(ip);
    const out = join(dir, 'partition-probe.json');
    const probe = lab.client.execAsync(process.execPath, [
      '--import', 'tsx', PROBE, '--iface', 'eth0', '--src-ip', '192.0.2.250', '--src-mac', '02:00:00:00:02:fa',
      '--target', ip, '--interval-ms', '10', '--duration-ms', '9000', '--http-port', '1', '--http-timeout-ms', '50', '--no-neigh', '--out-json', out,
    ]);
    await sleep(1000);
    owner.must('ip', ['route', 'add', 'blackhole', `${lab.store!.ip}/32`]);
    try {
      await probe;
      const result = JSON.parse(readFileSync(out, 'utf8')) as { arp: { dualAnswer: number; answered: number; requests: number }; macs: string[] };
      assert.equal(result.arp.dualAnswer, 0, 'no request was answered by two nodes');
      const next = lab.nodes.find((n) => n !== owner && status(n).owned.some((o) => o.ip === ip));
      assert.ok(next, 'another node owns the IP after the partitioned owner stepped down');
      assert.deepEqual(mapDump(owner).entries.filter((e) => e.ip === ip), [], 'the partitioned node answers no more');
      assert.ok(result.macs.includes(next!.mac('eth0')));
    } finally {
      owner.must('ip', ['route', 'del', 'blackhole', `${lab.store!.ip}/32`]);
    }
    await settle();
  });

  test('restarting etcd loses no allocation and causes no double ownership', async () => {
    const before = lab.nodes.map((n) => status(n).services.map((s) => `${s.service}=${s.ingress.join(',')}`).sort().join(' '));
    await etcd.restart();
    await sleep(2000);
    await settle();
    const afterViews = lab.nodes.map((n) => status(n).services.map((s) => `${s.service}=${s.ingress.join(',')}`).sort().join(' '));
    assert.deepEqual(afterViews, before);
    for (const ip of IPS) assert.ok((ownersByNodes().get(ip)?.length ?? 0) <= 1);
  });
});
