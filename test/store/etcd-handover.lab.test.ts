/**
 * A planned hand-over while the agents' log reader has stopped reading
 * (issue 16), in a 2-node lab with a real etcd: the first agent up owns the
 * VIP and 400 IPv6 service addresses, the preferred node joins, and the
 * owner hands the VIP and about half the addresses over — thousands of log
 * lines — while the process reading both agents' stderr (a `cat` at the end
 * of a real pipe) is stopped.
 *
 * The agent used to write its log synchronously: once the pipe was full its
 * whole event loop waited for the reader, the datapath heartbeat with it, so
 * every IP it owned went silent, and the hand-over stood still for as long as
 * the reader did (the failover bench's harness, busy in a synchronous status
 * read, left a VIP unanswered for 17 s that way). Now a stalled log reader
 * costs the agent nothing: its event loop never waits for the reader, and the
 * VIP moves and is answered by its new owner while the reader is still
 * stopped. (A loaded machine may still wake an agent up late by a second or
 * two — CPU, not the reader; the old logger held both agents for about the
 * whole 8 s pause.)
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { ProbeResult } from '../../lab/failover-probe.js';
import { EtcdLab } from '../helpers/etcd-lab.js';
import { sleep, waitFor, type Host, type LabProcess } from '../../lab/lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { HERALD, labSkipReason } from '../helpers/lab-tools.js';

const VIP = '198.51.100.60';
const EXTRA = 400;
const PROBE = fileURLToPath(new URL('../../lab/failover-probe.ts', import.meta.url));

interface Status {
  owned: Array<{ ip: string }>;
}

/** The late wake-ups an agent logged (JSON lines): when, and how long it slept. */
function lateWakeups(log: string): Array<{ time: number; sleptMs: number }> {
  const out: Array<{ time: number; sleptMs: number }> = [];
  for (const line of log.split('\n')) {
    if (!line.includes('heartbeat woke up late')) continue;
    try {
      const { time, sleptMs } = JSON.parse(line) as { time: number; sleptMs: number };
      out.push({ time, sleptMs });
    } catch {
      /* a line cut by the lab's bounded buffer */
    }
  }
  return out;
}

describe('a planned hand-over with the log reader stopped (lab, real etcd)', { skip: labSkipReason() }, () => {
  let e: EtcdLab;
  const agents = new Map<Host, LabProcess>();
  const status = (n: Host) => JSON.parse(n.must(HERALD, ['status', '--json', '--status-socket', n.statusSocket])) as Status;

  /** The agent with its stderr (and stdout) into a pipe read by `cat`: the reader the test stops. */
  const start = async (n: Host): Promise<LabProcess> => {
    const args = ['agent', '--node', n.netns, '--bpf-pin-dir', n.pinDir, '--state-dir', n.stateDir, '--status-socket', n.statusSocket, '--store', 'etcd', '--etcd', e.etcd.endpoint, '--handover-hold', '1s', '--log-format', 'json'];
    const p = n.spawn('agent', 'sh', ['-c', `"$0" "$@" 2>&1 | cat`, HERALD, ...args]);
    agents.set(n, p);
    await p.waitForOutput('agent running', 30_000);
    return p;
  };
  /** The `cat` reading an agent's pipe (a descendant of the lab process: nsenter, the shell). */
  const readerOf = (p: LabProcess): number => {
    const parent = new Map<number, number>();
    const cats: number[] = [];
    for (const d of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
      try {
        const [, comm, rest] = /^\d+ \((.*)\) (.*)$/s.exec(readFileSync(`/proc/${d}/stat`, 'utf8'))!;
        parent.set(Number(d), Number(rest!.split(' ')[1]));
        if (comm === 'cat') cats.push(Number(d));
      } catch {
        /* gone */
      }
    }
    for (const cat of cats) for (let q = parent.get(cat), i = 0; q !== undefined && i < 4; q = parent.get(q), i++) if (q === p.pid) return cat;
    throw new Error(`no reader found for ${p.name}`);
  };

  before(async () => {
    e = await EtcdLab.create({ nodes: 2, tag: 'hho' });
    for (const [i, h] of e.lab.nodes.entries()) {
      h.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.disable_ipv6=0']);
      h.must('ip', ['-6', 'addr', 'add', `2001:db8::${(0x11 + i).toString(16)}/64`, 'dev', 'eth0', 'nodad']);
    }
    e.write(
      'vip.yaml',
      `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: vip }
spec:
  blocks: [{ start: ${VIP} }]
---
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: many }
spec:
  blocks: [{ cidr: "2001:db8:300::/112" }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: all }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: ho }
spec: { type: LoadBalancer, ipFamilies: [IPv4], ports: [{ port: 80 }] }
`,
    );
    e.apply('vip.yaml');
    // etcd takes at most 128 operations per transaction: 100 services per file.
    for (let f = 0; f * 100 < EXTRA; f++) {
      const docs = Array.from({ length: 100 }, (_, i) => `apiVersion: v1
kind: Service
metadata: { name: s${f * 100 + i}, namespace: many }
spec: { type: LoadBalancer, ipFamilies: [IPv6], ipFamilyPolicy: SingleStack, ports: [{ port: 80 }] }`);
      e.write(`many-${f}.yaml`, docs.join('\n---\n') + '\n');
      e.apply(`many-${f}.yaml`);
    }
  });

  after(async () => {
    for (const p of agents.values()) {
      try {
        process.kill(readerOf(p), 'SIGCONT');
      } catch {
        /* gone */
      }
    }
    await e?.destroy();
  });

  test('the VIP moves to its preferred node and is answered while the reader of both agents’ logs is stopped: neither agent waits for the reader', async () => {
    const [a, b] = e.lab.nodes as [Host, Host];
    const [preferred, first] = rendezvousScore(a.netns, VIP) > rendezvousScore(b.netns, VIP) ? [a, b] : [b, a];
    const firstAgent = await start(first);
    await waitFor(() => status(first).owned.length === EXTRA + 1, { timeoutMs: 60_000, intervalMs: 500, what: `${first.name} to own all ${EXTRA + 1} IPs`, onTimeout: () => `${status(first).owned.length} owned` });
    const preferredAgent = await start(preferred);
    // Stop reading both agents' logs, then watch the VIP for as long as the reader stays stopped.
    const readers = [readerOf(firstAgent), readerOf(preferredAgent)];
    const pausedAt = Date.now();
    for (const pid of readers) process.kill(pid, 'SIGSTOP');
    const out = join(e.dir, 'probe.json');
    const probe = await e.lab.client.execAsync(process.execPath, [
      '--import', 'tsx', PROBE, '--iface', 'eth0', '--src-ip', '192.0.2.250', '--src-mac', '02:00:00:00:02:fa',
      '--target', VIP, '--interval-ms', '10', '--duration-ms', '8000', '--http-port', '1', '--http-timeout-ms', '50', '--no-neigh', '--out-json', out,
    ]);
    for (const pid of readers) process.kill(pid, 'SIGCONT');
    assert.equal(probe.code, 0, probe.stderr);
    const result = JSON.parse(readFileSync(out, 'utf8')) as ProbeResult;
    await sleep(1000); // the logs drain
    // A wake-up at least half the pause late means the loop waited for the reader (the old logger: ~the whole pause).
    const held = [firstAgent, preferredAgent].flatMap((p) => lateWakeups(p.text()).filter((w) => w.time >= pausedAt && w.sleptMs >= 4000).map((w) => `${p.name}: ${w.sleptMs} ms`));
    assert.deepEqual(held, [], 'no agent waited for its stopped log reader');
    const macs = new Set(result.replies.map(([, m]) => result.macs[m]));
    assert.ok(macs.has(preferred.mac()), `the preferred node answered for the VIP while the log reader was stopped (answering MACs: ${[...macs].join(', ')}; ${preferred.name} is ${preferred.mac()})`);
    assert.equal(result.arp.dualAnswer, 0, 'never two MACs for one request');
    assert.ok(status(preferred).owned.some((o) => o.ip === VIP));
  });
});
