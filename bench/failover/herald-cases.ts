/**
 * The herald half of the failover benchmark: three agents on etcd (in the
 * lab's store host), one LoadBalancer service whose IP is bench.vip, served
 * by every node's HTTP server through --local-routes. The failures:
 *
 *   clean-stop  SIGTERM to the owner's agent: it withdraws, revokes its lease,
 *               a successor takes over at once with a gratuitous burst.
 *   crash       SIGKILL to the owner's agent process (under its supervisor,
 *               which silences the datapath and revokes the lease at once).
 *   crash-unsupervised
 *               SIGKILL to an agent run with --no-supervisor: its datapath goes
 *               silent within the liveness limit (0.8 s), candidates see the silence on the
 *               wire (300 ms) and fence its lease out.
 *   node-loss   the owner's switch port goes down: silent at once, fenced out.
 *
 * Defaults only (see README): lease TTL 3 s, liveness 200 ms / 0.8 s, probes
 * every 50 ms, silence 300 ms. Each trial uses a fresh etcd prefix and fresh
 * agents; the owner is the rendezvous-preferred node for the VIP.
 */
import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LabEtcd } from '../../lab/etcd.js';
import { supervisedAgentPid, waitFor, type Host, type LabProcess } from '../../lab/lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { HERALD, startAgent } from '../../test/helpers/lab-tools.js';
import type { FailoverBench, FailoverCase, Scenario, Setup, Trigger } from './harness.js';
import { ownerLinkDown } from './harness.js';

export interface HeraldScenario extends Scenario {
  agents: Map<Host, LabProcess>;
  /** node → the file its agent's whole output goes to (HERALD_FAILOVER_LOG_DIR). */
  logFiles: Map<string, string>;
  /** Date.now() at the trigger: the agents' log lines are timed against it (HERALD_FAILOVER_TRACE=1). */
  triggeredAt?: number;
}

/** Every agent's log lines from just before the trigger on, as "+ms node message" (the hand-over path, traced). */
export function trace(s: HeraldScenario): string[] {
  const at = s.triggeredAt;
  if (at === undefined) return [];
  const out: Array<[number, string]> = [];
  for (const [host, agent] of s.agents) {
    for (const line of agent.text().split('\n')) {
      const m = /^\{.*"time":(\d+).*"msg":"([^"]*)"/.exec(line);
      if (!m) continue;
      const dt = Number(m[1]) - at;
      if (dt >= -20) out.push([dt, `${dt >= 0 ? '+' : ''}${dt} ms ${host.name} ${m[2]}`]);
    }
  }
  return out.sort((a, b) => a[0] - b[0]).map(([, l]) => l).slice(0, 40);
}

let etcd: LabEtcd | undefined;
let trial = 0;
const tmp = mkdtempSync(join(tmpdir(), 'herald-failover-herald-'));
process.once('exit', () => rmSync(tmp, { recursive: true, force: true }));

const manifests = (vip: string, port: number, family: 4 | 6) => `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: bench }
spec:
  blocks: [{ start: ${vip} }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: bench }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: bench }
spec:
  type: LoadBalancer
  ports: [{ port: ${port} }]${family === 6 ? '\n  ipFamilies: [IPv6]' : ''}
`;

/** extraManifests: more YAML files applied after the bench's service (etcd takes ≤ 128 objects per apply). */
/** anyOwner: whichever node ends up owning the VIP is the owner (with many IPs the spread, not rendezvous alone, places it). */
export const heraldSetup = (extraArgs: readonly string[] = [], extraManifests: readonly string[] = [], anyOwner = false): Setup => async (bench: FailoverBench): Promise<HeraldScenario> => {
  if (!etcd) {
    etcd = new LabEtcd(bench.lab.store!);
    await etcd.start();
    process.once('exit', () => rmSync(etcd!.dataDir, { recursive: true, force: true }));
  }
  const prefix = `/herald-t${++trial}/`;
  const file = join(tmp, `m${trial}.yaml`);
  writeFileSync(file, manifests(bench.vip, bench.httpPort, bench.family));
  const nodes = bench.nodes;
  nodes[0]!.must(HERALD, ['apply', '-f', file, '--etcd', etcd.endpoint, '--prefix', `${prefix}manifests/`]);
  extraManifests.forEach((text, i) => {
    const extra = join(tmp, `m${trial}-${i}.yaml`);
    writeFileSync(extra, text);
    nodes[0]!.must(HERALD, ['apply', '-f', extra, '--etcd', etcd!.endpoint, '--prefix', `${prefix}manifests/`]);
  });
  const agents = new Map<Host, LabProcess>();
  const logFiles = new Map<string, string>();
  const logDir = process.env.HERALD_FAILOVER_LOG_DIR;
  for (const n of nodes) {
    agents.set(n, startAgent(n, ['--store', 'etcd', '--etcd', etcd.endpoint, '--etcd-prefix', prefix, '--local-routes', ...(process.env.HERALD_FAILOVER_AGENT_ARGS?.split(' ').filter(Boolean) ?? []), ...(process.env.HERALD_FAILOVER_TRACE ? ['--log-format', 'json', '--log-level', process.env.HERALD_FAILOVER_TRACE === 'debug' ? 'debug' : 'info'] : []), ...extraArgs], `agent-t${trial}`));
    if (logDir) {
      // The whole output from the first line (the lab keeps a bounded tail in memory), closed when the agent exits.
      const file = join(logDir, `t${trial}-${n.name}.log`);
      const out = createWriteStream(file);
      const child = agents.get(n)!.child;
      child.stdout?.on('data', (c: Buffer) => out.write(c));
      child.stderr?.on('data', (c: Buffer) => out.write(c));
      child.once('exit', () => out.end());
      logFiles.set(n.name, file);
    }
  }
  let owner = nodes.reduce((best, n) => (rendezvousScore(n.netns, bench.vip) > rendezvousScore(best.netns, bench.vip) ? n : best));
  const owns = (n: Host) => {
    const r = n.exec(HERALD, ['status', '--json', '--status-socket', n.statusSocket]);
    return r.code === 0 && (JSON.parse(r.stdout) as { owned: Array<{ ip: string }> }).owned.some((o) => o.ip === bench.vip);
  };
  const teardown = async () => {
    await Promise.all([...agents.values()].map((a) => a.stop('SIGKILL')));
    for (const n of nodes) {
      n.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', n.pinDir]);
      n.exec('ip', ['route', 'flush', 'table', 'local', 'proto', '250']);
    }
  };
  try {
    if (anyOwner) {
      await waitFor(() => nodes.filter(owns).length === 1, {
        timeoutMs: 120_000,
        intervalMs: 1000, // a status of ~1,000 IPs costs the agent real CPU: do not poll it back to back
        what: `one node to own ${bench.vip}`,
        onTimeout: () =>
          nodes
            .map((n) => {
              const r = n.exec(HERALD, ['status', '--status-socket', n.statusSocket]);
              const problems = agents.get(n)!.text().split('\n').filter((l) => /WARN|ERROR|FATAL/.test(l)).slice(-8).join('\n');
              return `${n.name}: status exit ${r.code}: ${r.stdout.slice(0, 600)} ${r.stderr.slice(0, 300)}\n${problems}`;
            })
            .join('\n'),
      });
      owner = nodes.find(owns)!;
    }
    await waitFor(() => owns(owner) && nodes.every((n) => n === owner || !owns(n)), { timeoutMs: 30_000, what: `${owner.name} to own ${bench.vip}` });
  } catch (e) {
    // A failed setup must not leave its agents answering into the next attempt.
    await teardown();
    throw e;
  }
  const scenario: HeraldScenario = { owner, agents, logFiles, teardown };
  if (process.env.HERALD_FAILOVER_TRACE) scenario.notes = () => ({ trace: trace(scenario) });
  return scenario;
};

export const stopOwner =
  (signal: NodeJS.Signals): Trigger =>
  (_bench, scenario) => {
    const agent = (scenario as HeraldScenario).agents.get(scenario.owner)!;
    (scenario as HeraldScenario).triggeredAt = Date.now();
    agent.signal(signal);
  };

/** kill -9 of the owner's agent process only: its supervisor (the lab process's leader) lives on. */
export const crashAgentProcess: Trigger = (_bench, scenario) => {
  const agent = (scenario as HeraldScenario).agents.get(scenario.owner)!;
  const pid = supervisedAgentPid(agent);
  if (!pid) throw new Error(`${scenario.owner.name}: the agent runs without its supervisor`);
  process.kill(pid, 'SIGKILL');
};

export function heraldCases(): FailoverCase[] {
  return [
    { name: 'herald/clean-stop', setup: heraldSetup(), trigger: stopOwner('SIGTERM'), options: { postMs: 3000 } },
    { name: 'herald/crash', setup: heraldSetup(), trigger: crashAgentProcess, options: { postMs: 4000 } },
    // The same crash without the supervisor: bounded by the liveness limit and wire fencing.
    { name: 'herald/crash-unsupervised', setup: heraldSetup(['--no-supervisor']), trigger: stopOwner('SIGKILL'), options: { postMs: 4000 } },
    {
      name: 'herald/node-loss',
      setup: heraldSetup(),
      trigger: (bench, scenario) => {
        (scenario as HeraldScenario).triggeredAt = Date.now();
        return ownerLinkDown(bench, scenario);
      },
      options: { postMs: 4000 },
    },
    // Power loss: the owner's port goes down and its whole agent unit (supervisor, agent,
    // BIRD) freezes at the same instant — nothing on the node can say it is leaving.
    {
      name: 'herald/power-loss',
      setup: heraldSetup(),
      trigger: async (bench, scenario) => {
        (scenario as HeraldScenario).triggeredAt = Date.now();
        await ownerLinkDown(bench, scenario);
        (scenario as HeraldScenario).agents.get(scenario.owner)!.signal('SIGSTOP');
      },
      options: { postMs: 4000 },
    },
  ];
}
