/**
 * The bench/faults lab: 3 nodes running `bin/herald agent` from a chosen
 * checkout (so the same bench measures an old and a new build) against a real
 * etcd on a store host, two service IPs, and the failover probe on the client.
 *
 * Everything is read through what every herald version has: the probe on the
 * wire, `status --json` → `owned`, and the agents' logs (revocations).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ProbeResult } from '../../lab/failover-probe.js';
import { LabEtcd } from '../../lab/etcd.js';
import { Lab, sleep, waitFor, type Host, type LabProcess } from '../../lab/lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';

export const IPS = ['198.51.100.40', '198.51.100.41'] as const;
const PROBE = fileURLToPath(new URL('../../lab/failover-probe.ts', import.meta.url));
const ETCD_KEYS = fileURLToPath(new URL('./etcd-keys.ts', import.meta.url));
/** The line an agent logs when it revokes another node's lease (every version since fencing exists). */
export const REVOCATION_LOG = 'fenced out a silent owner';
/** The line an agent logs when its heartbeat fired past the liveness limit (its datapath fell silent). */
export const LATE_WAKEUP_LOG = 'heartbeat woke up late';

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
${['a', 'b'].map((n) => `---
apiVersion: v1
kind: Service
metadata: { name: faults-${n}, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]`).join('\n')}
`;

export type Owners = Map<string, string[]>;

export interface ProbeRun {
  /** CLOCK_MONOTONIC ns of the probe's time zero, to place our own events on its timeline. */
  t0Ns: bigint;
  /** Milliseconds on the probe's timeline, now. */
  nowMs(): number;
  /** Stops the probes and returns one result per IP. */
  finish(): Promise<ProbeResult[]>;
}

export class FaultLab {
  readonly agents = new Map<Host, LabProcess>();
  /** Revocation log lines per node, across agent restarts (LabProcess keeps only a bounded tail). */
  private readonly revocationLines = new Map<Host, number>();
  private lateWakeupLines = 0;
  private probeN = 0;

  private constructor(
    readonly lab: Lab,
    readonly etcd: LabEtcd,
    readonly herald: string,
    readonly dir: string,
    private readonly log: (s: string) => void,
  ) {}

  static async create(heraldRoot: string, log: (s: string) => void): Promise<FaultLab> {
    const lab = Lab.create({ nodes: 3, storeHost: true, tag: 'bf' });
    const etcd = new LabEtcd(lab.store!);
    const dir = mkdtempSync(join(tmpdir(), 'herald-bench-faults-'));
    const fl = new FaultLab(lab, etcd, join(heraldRoot, 'bin/herald'), dir, log);
    try {
      await etcd.start();
      writeFileSync(join(dir, 'faults.yaml'), MANIFESTS);
      lab.nodes[0]!.must(fl.herald, ['apply', '-f', join(dir, 'faults.yaml'), '--etcd', etcd.endpoint]);
      await fl.startAgents();
    } catch (e) {
      await fl.destroy();
      throw e;
    }
    return fl;
  }

  get nodes(): Host[] {
    return this.lab.nodes;
  }

  async startAgents(extra: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<void> {
    for (const n of this.nodes) {
      const p = n.spawn(`agent-${Date.now()}`, this.herald, [
        'agent', '--node', n.netns, '--bpf-pin-dir', n.pinDir, '--state-dir', n.stateDir, '--status-socket', n.statusSocket,
        '--store', 'etcd', '--etcd', this.etcd.endpoint, '--garp-interval', '200ms', ...extra,
      ], env);
      this.countRevocations(n, p);
      this.agents.set(n, p);
      await p.waitForOutput('agent running', 30_000);
    }
  }

  async stopAgents(): Promise<void> {
    for (const p of this.agents.values()) {
      p.signal('SIGCONT');
      await p.stop('SIGTERM', 5000);
    }
  }

  private countRevocations(n: Host, p: LabProcess): void {
    let carry = '';
    const onData = (chunk: Buffer) => {
      const lines = (carry + chunk.toString()).split('\n');
      carry = lines.pop()!;
      const hits = lines.filter((l) => l.includes(REVOCATION_LOG)).length;
      if (hits) this.revocationLines.set(n, (this.revocationLines.get(n) ?? 0) + hits);
      this.lateWakeupLines += lines.filter((l) => l.includes(LATE_WAKEUP_LOG)).length;
    };
    p.child.stdout?.on('data', onData);
    p.child.stderr?.on('data', onData);
  }

  /** Late heartbeat wake-ups logged by every agent so far. */
  lateWakeups(): number {
    return this.lateWakeupLines;
  }

  revocations(): number {
    return [...this.revocationLines.values()].reduce((a, b) => a + b, 0);
  }

  macNames(): Map<string, string> {
    return new Map(this.nodes.map((n) => [n.mac('eth0'), n.name]));
  }

  /** IP → names of the nodes that list it in `status --json` → `owned` (only call while no agent is stopped). */
  owners(): Owners {
    const owners: Owners = new Map();
    for (const n of this.nodes) {
      if (!this.agents.get(n)?.running) continue;
      const r = n.exec(this.herald, ['status', '--json', '--status-socket', n.statusSocket]);
      if (r.code !== 0) continue;
      const s = JSON.parse(r.stdout) as { owned: Array<{ ip: string }> };
      for (const o of s.owned) owners.set(o.ip, [...(owners.get(o.ip) ?? []), n.name]);
    }
    return owners;
  }

  preferred(ip: string): Host {
    return this.nodes.reduce((best, n) => (rendezvousScore(n.netns, ip) > rendezvousScore(best.netns, ip) ? n : best));
  }

  /**
   * Waits until every IP is owned once by its preferred node, twice in a row
   * 1 s apart (a trial starts from the steady state, not a transient). A
   * version that never gets there still gets measured: after the timeout it
   * settles for "owned once", and says so.
   */
  async settle(timeoutMs = 30_000): Promise<{ settled: 'preferred' | 'owned-once' | 'no'; ms: number }> {
    const started = Date.now();
    const once = (o: Owners) => IPS.every((ip) => o.get(ip)?.length === 1);
    const atPreferred = (o: Owners) => once(o) && IPS.every((ip) => o.get(ip)![0] === this.preferred(ip).name);
    for (const [kind, ok, ms] of [['preferred', atPreferred, timeoutMs], ['owned-once', once, 15_000]] as const) {
      try {
        await waitFor(async () => {
          if (!ok(this.owners())) return false;
          await sleep(1000);
          return ok(this.owners());
        }, { timeoutMs: ms, intervalMs: 200 });
        return { settled: kind, ms: Date.now() - started };
      } catch {
        this.log(`  not settled (${kind}) after ${Date.now() - started} ms: ${describe(this.owners())}`);
      }
    }
    return { settled: 'no', ms: Date.now() - started };
  }

  /** One failover probe per IP on the client (a fresh ARP request every `intervalMs`), running until finish(). */
  async probe(ips: readonly string[], intervalMs: number, maxMs = 120_000): Promise<ProbeRun> {
    const runs = ips.map((ip) => {
      const n = this.probeN++;
      const out = join(this.dir, `probe-${n}.json`);
      rmSync(out, { force: true });
      const proc = this.lab.client.spawn(`probe-${n}`, process.execPath, [
        '--import', 'tsx', PROBE, '--iface', 'eth0', '--src-ip', `192.0.2.${240 + (n % 10)}`,
        '--src-mac', `02:00:00:00:02:${(0xe0 + (n % 16)).toString(16)}`, '--target', ip,
        '--interval-ms', String(intervalMs), '--duration-ms', String(maxMs), '--http-port', '0', '--no-neigh', '--out-json', out,
      ]);
      return { proc, out };
    });
    try {
      await Promise.all(runs.map((r) => r.proc.waitForOutput(/ready t0Ns=\d+/, 30_000)));
    } catch (e) {
      for (const r of runs) await r.proc.stop('SIGKILL', 2000);
      throw e;
    }
    // Every probe reads CLOCK_MONOTONIC; the first one is the timeline all results are placed on.
    const t0s = runs.map((r) => BigInt(/ready t0Ns=(\d+)/.exec(r.proc.text())![1]!));
    const t0Ns = t0s[0]!;
    return {
      t0Ns,
      nowMs: () => Number(process.hrtime.bigint() - t0Ns) / 1e6,
      finish: async () => {
        await Promise.all(runs.map((r) => r.proc.stop('SIGTERM', 10_000)));
        return runs.map((r, i) => {
          const res = JSON.parse(readFileSync(r.out, 'utf8')) as ProbeResult;
          // Shift every probe's times onto the first probe's timeline.
          const shift = Number(t0s[i]! - t0Ns) / 1e6;
          if (shift) {
            res.requests.sentAt = res.requests.sentAt.map((t) => t + shift);
            res.endMs += shift;
          }
          return res;
        });
      },
    };
  }

  /** put (without a lease) or del a key, from the client host. */
  async etcdKey(op: 'put' | 'del', key: string, value = ''): Promise<void> {
    const r = await this.lab.client.execAsync(process.execPath, ['--import', 'tsx', ETCD_KEYS, this.etcd.endpoint, op, key, value]);
    if (r.code !== 0) throw new Error(`etcd ${op} ${key}: ${r.stdout}`);
  }

  async destroy(): Promise<void> {
    for (const p of this.agents.values()) p.signal('SIGCONT');
    await this.lab.destroy();
    await this.etcd.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function describe(o: Owners): string {
  return [...o].sort().map(([ip, ns]) => `${ip}:${ns.join('+')}`).join(' ') || '(nothing owned)';
}
