/**
 * Intent can't starve the datapath (issue 9), with a real agent in a lab:
 * the agent owns an IP and a client asks for it every 10 ms (fresh ARP
 * requests, lab/failover-probe.ts) while hostile files are dropped into
 * the watched manifests directory. Before the fix, a 60 MB manifest took
 * the agent from 93 MB to 2.24 GB and silenced every IP for 1.74 s.
 *
 *   - a 60 MB file: refused by its size (HERALD_MANIFEST_TOO_LARGE in the
 *     log), the previous intent stays in force, no probe goes unanswered,
 *     and the agent's RSS stays under 400 MB;
 *   - a 2.5 MB file full of YAML aliases: refused precisely, no probe goes
 *     unanswered, and the agent takes the next good change (it did not hang).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import type { ProbeResult } from '../../lab/failover-probe.js';
import { HERALD, arping, labSkipReason, startAgentReady, waitFor } from '../helpers/lab-tools.js';

const PROBE = fileURLToPath(new URL('../../lab/failover-probe.ts', import.meta.url));
const IP = '198.51.100.10';
const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: lab-pool }
spec:
  blocks:
  - start: 198.51.100.10
    stop: 198.51.100.19
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: lab-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
`;
const service = (name: string): string =>
  `apiVersion: v1\nkind: Service\nmetadata: { name: ${name}, namespace: default }\nspec:\n  type: LoadBalancer\n  ports: [{ port: 80 }]\n`;

interface Status {
  owned: Array<{ ip: string }>;
  services: Array<{ service: string; ingress: string[] }>;
}
const status = (n: Host): Status => JSON.parse(n.must(HERALD, ['status', '--json', '--status-socket', n.statusSocket])) as Status;

/** Resident memory of a process, MB (VmRSS in /proc/<pid>/status). */
function rssMb(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  assert.ok(m, `VmRSS of ${pid}`);
  return Number(m[1]) / 1024;
}

/** Requests sent in [fromMs, endMs - 100 ms] that no one answered (the tail may still be in flight). */
function unanswered(r: ProbeResult, fromMs: number): number {
  let n = 0;
  r.requests.sentAt.forEach((t, i) => {
    if (t >= fromMs && t <= r.endMs - 100 && r.requests.firstReplyAt[i] === null) n++;
  });
  return n;
}

describe('hostile manifests do not starve the datapath (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let agent: LabProcess;
  let dir: string;
  let out: string;

  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'im' });
    node = lab.nodes[0]!;
    dir = mkdtempSync(join(tmpdir(), 'herald-limits-lab-'));
    out = mkdtempSync(join(tmpdir(), 'herald-limits-out-'));
    writeFileSync(join(dir, 'base.yaml'), MANIFESTS);
    writeFileSync(join(dir, 'web.yaml'), service('web'));
    agent = await startAgentReady(node, ['--manifests', dir, '--garp-interval', '200ms']);
    await waitFor(() => status(node).owned.some((o) => o.ip === IP), { what: `${IP} to be owned` });
    await waitFor(() => arping(lab.client, IP, { count: 1 }).received === 1, { what: 'ARP replies' });
  });

  after(async () => {
    await lab?.destroy();
    for (const d of [dir, out]) if (d) rmSync(d, { recursive: true, force: true });
  });

  /** Runs the probe against IP for `durationMs`; `during` runs once it is probing. Returns its result and when `during` started (probe ms). */
  async function probing(name: string, durationMs: number, during: () => Promise<void>): Promise<{ result: ProbeResult; fromMs: number }> {
    const file = join(out, `${name}.json`);
    const probe = lab.client.spawn(`probe-${name}`, process.execPath, [
      '--import', 'tsx', PROBE, '--iface', 'eth0', '--src-ip', '192.0.2.250', '--src-mac', '02:00:00:00:02:fa',
      '--target', IP, '--interval-ms', '10', '--duration-ms', String(durationMs), '--http-port', '1', '--http-timeout-ms', '50', '--no-neigh', '--out-json', file,
    ]);
    await probe.waitForOutput('ready t0Ns=', 20_000);
    const t0 = BigInt(/ready t0Ns=(\d+)/.exec(probe.text())![1]!);
    const fromMs = Number(process.hrtime.bigint() - t0) / 1e6;
    await during();
    const { code } = await probe.exited;
    assert.equal(code, 0, probe.text().slice(-2000));
    return { result: JSON.parse(readFileSync(file, 'utf8')) as ProbeResult, fromMs };
  }

  test('a 60 MB manifest is refused by its size: the previous intent stays, every probe is answered, RSS stays bounded', async (t) => {
    const before = status(node).services;
    let maxRss = rssMb(agent.pid);
    const { result, fromMs } = await probing('big', 6000, async () => {
      // Real YAML (Services), written under a name the agent ignores, then renamed in at once.
      const tmp = join(dir, '.big.tmp');
      const fd = openSync(tmp, 'w');
      const chunk = Array.from({ length: 1000 }, (_, i) => `---\n${service(`bulk-${i}`)}`).join('');
      for (let written = 0; written < 60 * 1024 * 1024; written += chunk.length) writeSync(fd, chunk);
      closeSync(fd);
      renameSync(tmp, join(dir, 'big.yaml'));
      await waitFor(
        () => {
          maxRss = Math.max(maxRss, rssMb(agent.pid));
          return /intent rejected[\s\S]*big\.yaml[\s\S]*HERALD_MANIFEST_TOO_LARGE: file is \d+ bytes \(60(\.\d)? MiB\), over the limit of 4194304 bytes/.test(agent.text());
        },
        { what: 'the size error in the agent log', timeoutMs: 20_000, onTimeout: () => agent.text().slice(-3000) },
      );
      // Keep sampling while the probe runs (the periodic re-scan sees the file again).
      const until = Date.now() + 2000;
      while (Date.now() < until) {
        maxRss = Math.max(maxRss, rssMb(agent.pid));
        await new Promise((r) => setTimeout(r, 50));
      }
    });
    t.diagnostic(`probe: ${result.arp.requests} requests, ${result.arp.answered} answered, longest gap ${result.arp.longestGapMs} ms; agent RSS peak ${maxRss.toFixed(0)} MB`);
    assert.ok(result.arp.requests > 100, `${result.arp.requests} requests`);
    assert.equal(unanswered(result, fromMs), 0, `unanswered requests: ${JSON.stringify(result.arp.gaps)}`);
    assert.equal(result.arp.dualAnswer, 0);
    assert.deepEqual(new Set(result.macs), new Set([node.mac('eth0')]));
    assert.ok(maxRss < 400, `agent RSS peaked at ${maxRss.toFixed(0)} MB`);
    assert.deepEqual(status(node).services, before, 'the previous intent stays in force');
    rmSync(join(dir, 'big.yaml'));
  });

  test('a file full of YAML aliases is refused precisely, without a hang: probes answered, the next change applies', async (t) => {
    const { result, fromMs } = await probing('aliases', 5000, async () => {
      const tmp = join(dir, '.aliases.tmp');
      writeFileSync(tmp, `apiVersion: v1\nkind: List\nx: &x { a: 1 }\nitems:\n${'- *x\n'.repeat(500_000)}`);
      renameSync(tmp, join(dir, 'aliases.yaml'));
      await waitFor(() => /intent rejected[\s\S]*aliases\.yaml: HERALD_MANIFEST_TOO_LARGE: more than 10000 YAML aliases in the file; refused before parsing it/.test(agent.text()), {
        what: 'the alias error in the agent log',
        timeoutMs: 30_000,
        onTimeout: () => agent.text().slice(-3000),
      });
    });
    t.diagnostic(`probe: ${result.arp.requests} requests, ${result.arp.answered} answered, longest gap ${result.arp.longestGapMs} ms`);
    assert.equal(unanswered(result, fromMs), 0, `unanswered requests: ${JSON.stringify(result.arp.gaps)}`);
    assert.equal(result.arp.dualAnswer, 0);
    // The agent is not stuck: with the bomb gone, a new service is served.
    rmSync(join(dir, 'aliases.yaml'));
    writeFileSync(join(dir, 'db.yaml'), service('db'));
    await waitFor(() => status(node).services.some((s) => s.service === 'default/db' && s.ingress[0] === '198.51.100.11'), { what: 'the next good change' });
  });
});
