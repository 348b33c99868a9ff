/**
 * The demo: a client and three nodes on one segment, a real etcd, three herald
 * agents, one service. The client resolves the service IP to its owner and
 * fetches the owner's page; then the owner's agent is killed (kill -9) and the
 * measured failover gap and the new owner are printed. Everything is torn down
 * at the end, and on Ctrl-C.
 *
 *   bash scripts/demo.sh        (installs and builds first)
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LabEtcd } from '../etcd.js';
import { Lab, sleep, supervisedAgentPid, waitFor, type Host, type LabProcess } from '../lab.js';

const HERALD = fileURLToPath(new URL('../../bin/herald', import.meta.url));
const PROBE = fileURLToPath(new URL('../failover-probe.ts', import.meta.url));
const HTTP_SERVER = fileURLToPath(new URL('../http-server.ts', import.meta.url));
const VIP = '198.51.100.10';

const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: demo-pool }
spec:
  blocks: [{ start: ${VIP}, stop: 198.51.100.19 }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: demo-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: demo }
spec:
  type: LoadBalancer
  ports: [{ port: 8080 }]
`;

const step = (s: string) => process.stdout.write(`\n==> ${s}\n`);
const show = (s: string) => process.stdout.write(s.trimEnd().replace(/^/gm, '    ') + '\n');

function ownerOf(nodes: Host[], agents: Map<Host, LabProcess>): Host | undefined {
  for (const n of nodes) {
    if (!agents.get(n)?.running) continue;
    const r = n.exec(HERALD, ['status', '--json', '--status-socket', n.statusSocket]);
    if (r.code !== 0) continue;
    const st = JSON.parse(r.stdout) as { owned: Array<{ ip: string }> };
    if (st.owned.some((o) => o.ip === VIP)) return n;
  }
  return undefined;
}

async function main(): Promise<void> {
  step('building the lab: client 192.0.2.1, nodes n1-n3 192.0.2.11-13, etcd on 192.0.2.2 — one bridge, network namespaces');
  const lab = Lab.create({ nodes: 3, storeHost: true, tag: 'demo' });
  const dir = mkdtempSync(join(tmpdir(), 'herald-demo-'));
  const etcd = new LabEtcd(lab.store!);
  try {
    await etcd.start();
    show(`etcd (Debian's etcd-server) is up at ${etcd.endpoint}`);

    step('starting a tiny web server on every node (it answers with the node name) and herald agents');
    const agents = new Map<Host, LabProcess>();
    for (const n of lab.nodes) {
      n.spawn('http', process.execPath, ['--import', 'tsx', HTTP_SERVER, '--port', '8080', '--name', n.name]);
      const agent = n.spawn('agent', HERALD, [
        'agent', '--node', n.name, '--store', 'etcd', '--etcd', etcd.endpoint, '--local-routes',
        '--bpf-pin-dir', n.pinDir, '--state-dir', n.stateDir, '--status-socket', n.statusSocket,
      ]);
      agents.set(n, agent);
    }
    for (const [n, a] of agents) {
      await a.waitForOutput('agent running', 30_000);
      show(`${n.name}: agent running (MAC ${n.mac('eth0')})`);
    }

    step('applying a pool, an L2 announcement policy and a LoadBalancer service (herald apply, into etcd)');
    writeFileSync(join(dir, 'demo.yaml'), MANIFESTS);
    show(lab.nodes[0]!.must(HERALD, ['apply', '-f', join(dir, 'demo.yaml'), '--etcd', etcd.endpoint]));

    await waitFor(() => ownerOf(lab.nodes, agents) !== undefined, { timeoutMs: 20_000, what: 'an owner for the service IP' });
    const owner = ownerOf(lab.nodes, agents)!;
    step(`the service got ${VIP}; its owner is ${owner.name}`);
    show(owner.must(HERALD, ['status', '--status-socket', owner.statusSocket]).split('\n').slice(0, 18).join('\n'));

    step(`client: who has ${VIP}? and GET http://${VIP}:8080/`);
    show(lab.client.exec('arping', ['-c', '2', '-w', '3', '-I', 'eth0', VIP]).stdout);
    await waitFor(() => lab.client.exec('curl', ['-s', '-m', '1', `http://${VIP}:8080/`]).stdout.trim() !== '', { what: 'the page' });
    show(`page: ${lab.client.must('curl', ['-s', '-m', '2', `http://${VIP}:8080/`]).trim()}`);

    step(`killing ${owner.name}'s agent (kill -9) while the client sends an ARP request and an HTTP GET every 10 ms`);
    const outJson = join(dir, 'probe.json');
    const probe = lab.client.execAsync(process.execPath, ['--import', 'tsx', PROBE, '--iface', 'eth0', '--src-ip', lab.client.ip, '--target', VIP, '--interval-ms', '10', '--duration-ms', '6000', '--http-port', '8080', '--out-json', outJson]);
    await sleep(1500);
    const killed = agents.get(owner)!;
    const pid = supervisedAgentPid(killed); // the agent process: its supervisor silences it and frees its lease
    if (pid) process.kill(pid, 'SIGKILL');
    else await killed.stop('SIGKILL');
    await probe;
    const result = JSON.parse(readFileSync(outJson, 'utf8')) as {
      arp: { longestGapMs: number; dualAnswer: number };
      http: { longestGapMs: number; names: Array<{ name: string }> } | null;
    };
    const next = ownerOf(lab.nodes, agents);
    step('result');
    show(
      [
        `ARP failover gap:  ${result.arp.longestGapMs.toFixed(0)} ms (longest time without an ARP reply)`,
        `HTTP failover gap: ${result.http?.longestGapMs.toFixed(0) ?? '-'} ms (longest time without a page)`,
        `requests answered by two MACs at once: ${result.arp.dualAnswer}`,
        `served by, in order: ${result.http?.names.map((x) => x.name).join(' → ') ?? '-'}`,
        `new owner: ${next?.name ?? 'none'}${next ? ` (MAC ${next.mac('eth0')})` : ''}`,
      ].join('\n'),
    );
    show(`client now: ${lab.client.must('curl', ['-s', '-m', '2', `http://${VIP}:8080/`]).trim()}; neighbour entry: ${lab.client.must('ip', ['neigh', 'show', VIP]).trim()}`);
  } finally {
    step('tearing the lab down');
    await lab.destroy();
    await etcd.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write('\ndone.\n');
}

main().catch((e) => {
  process.stderr.write(`demo failed: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
