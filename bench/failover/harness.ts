/**
 * The failover harness: one lab (a client and three nodes, each running a tiny
 * HTTP server that answers with its name), and `runTrials`, which repeats
 *
 *   setup → probe running → steady window → trigger → observe → teardown
 *
 * for one case and returns per-trial numbers and their summary. A case is two
 * small functions, so keepalived and herald are measured by the same code:
 *
 *   const r = await bench.runTrials('herald/clean-stop', setupHerald, stopOwner('SIGTERM'), 20);
 *
 * - setup(bench) brings the cluster up so that `owner` holds bench.vip, and
 *   returns a Scenario whose teardown() undoes everything it started;
 * - trigger(bench, scenario) causes the failure (stop a daemon, kill it, cut
 *   the owner's link); it must return promptly (don't wait for the takeover).
 *
 * After every trial the harness also brings every switch port back up and
 * flushes the client's neighbour entry for the VIP, so trials are independent.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Lab, sleep, type Host, type LabProcess } from '../../lab/lab.js';
import type { ProbeResult } from '../../lab/failover-probe.js';
import { analyzeTrial, summarize, type CaseSummary, type TrialResult } from './analyze.js';

const PROBE = fileURLToPath(new URL('../../lab/failover-probe.ts', import.meta.url));
const HTTP_SERVER = fileURLToPath(new URL('../../lab/http-server.ts', import.meta.url));

/** The probe asks from its own identity, so its replies never touch the client kernel's neighbour entry. */
export const PROBE_SRC_IP = '192.0.2.250';
/** The same for --family 6: an address on the client's on-link prefix that nobody holds. */
export const PROBE_SRC_IP6 = '2001:db8::fa';
export const PROBE_SRC_MAC = '02:00:00:00:02:fa';

export interface Scenario {
  /** The node that holds the VIP before the failure. */
  owner: Host;
  /** Undo everything setup started (daemons, addresses, routes). Must not throw. */
  teardown(): Promise<void>;
  /** Free-form details kept with the trial (e.g. the daemon's log tail on failure). */
  notes?: () => Record<string, unknown>;
}

export type Setup = (bench: FailoverBench) => Promise<Scenario>;
export type Trigger = (bench: FailoverBench, scenario: Scenario) => Promise<void> | void;

/** One row of the benchmark: a name, how to build the cluster, how to break it. */
export interface FailoverCase {
  /** "<system>-<variant>/<failure>", e.g. keepalived-fast/crash or herald/clean-stop. */
  name: string;
  setup: Setup;
  trigger: Trigger;
  options?: TrialOptions;
}

export interface TrialOptions {
  /** Steady window before the trigger, on average (default 1000 ms). */
  preMs?: number;
  /**
   * The actual steady window is preMs ± jitter/2, uniformly: a real failure hits
   * at a random phase of every periodic timer (VRRP adverts, lease renewals),
   * while a fixed wait after "cluster ready" would always hit the same phase.
   * Set it to the longest such period (default 1000 ms; at most 2·preMs − 400).
   */
  phaseJitterMs?: number;
  /** Observation after the trigger (default 5000 ms). */
  postMs?: number;
  /** Probe interval (default 10 ms). */
  intervalMs?: number;
  /** HTTP attempt timeout (default 200 ms). */
  httpTimeoutMs?: number;
  /** Extra attempts for a trial whose setup failed or whose pre-failure window was not steady (default 2). */
  retries?: number;
  /**
   * Run the probe at this nice value (default 0). The spurious-move bench saturates the CPU on
   * purpose; the instrument must not be the one starved, or its own lateness reads as gaps.
   */
  probeNice?: number;
}

export interface Trial extends TrialResult {
  index: number;
  attempts: number;
  notes?: Record<string, unknown>;
}

export interface CaseResult {
  name: string;
  options: Required<TrialOptions>;
  summary: CaseSummary;
  trials: Trial[];
  wallMs: number;
}

export interface BenchOptions {
  /** 6: the VIP is IPv6 (2001:db8:100::50), the probe asks with NDP and GETs over IPv6. */
  family?: 4 | 6;
  vip?: string;
  httpPort?: number;
  /** Copy every probe's raw JSON here (for re-analysis). */
  rawDir?: string;
  log?: (line: string) => void;
}

export class FailoverBench {
  readonly family: 4 | 6;
  readonly vip: string;
  readonly httpPort: number;
  readonly log: (line: string) => void;
  private readonly tmp: string;
  private readonly macs = new Map<string, string>();
  private servers: LabProcess[] = [];

  private constructor(
    readonly lab: Lab,
    private readonly opts: BenchOptions,
  ) {
    this.family = opts.family ?? 4;
    this.vip = opts.vip ?? (this.family === 6 ? '2001:db8:100::50' : '198.51.100.50');
    this.httpPort = opts.httpPort ?? 8080;
    this.log = opts.log ?? (() => undefined);
    this.tmp = mkdtempSync(join(tmpdir(), 'herald-failover-'));
    process.once('exit', () => rmSync(this.tmp, { recursive: true, force: true }));
  }

  /** A lab with a client and `nodes` nodes, each running the HTTP server. */
  static async create(opts: BenchOptions & { nodes?: number } = {}): Promise<FailoverBench> {
    const lab = Lab.create({ nodes: opts.nodes ?? 3, tag: 'fo', storeHost: true });
    const bench = new FailoverBench(lab, opts);
    try {
      if (bench.family === 6) {
        // Client ::1, nodes ::11, ::12, …; service addresses on-link for the client, so it solicits them.
        [lab.client, ...lab.nodes].forEach((h, i) => {
          h.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.disable_ipv6=0']);
          h.must('ip', ['-6', 'addr', 'add', `2001:db8::${i === 0 ? 1 : (0x10 + i).toString(16)}/64`, 'dev', 'eth0', 'nodad']);
        });
        lab.client.must('ip', ['-6', 'route', 'add', '2001:db8:100::/64', 'dev', 'eth0']);
      }
      await bench.startServers();
      for (const n of lab.nodes) bench.macs.set(n.mac(), n.name);
      return bench;
    } catch (e) {
      await bench.destroy();
      throw e;
    }
  }

  private async startServers(): Promise<void> {
    this.servers = this.lab.nodes.map((n) =>
      n.spawn('http', process.execPath, ['--import', 'tsx', HTTP_SERVER, '--port', String(this.httpPort), '--name', n.name, '--host', this.family === 6 ? '::' : '0.0.0.0']),
    );
    await Promise.all(this.servers.map((s) => s.waitForOutput('listening', 20_000)));
  }

  get nodes(): Host[] {
    return this.lab.nodes;
  }

  macOf(host: Host): string {
    for (const [mac, name] of this.macs) if (name === host.name) return mac;
    return host.mac();
  }

  /** Runs `trials` trials of one case; a trial that cannot be set up or is not steady is retried. */
  async runTrials(caseName: string, setup: Setup, trigger: Trigger, trials: number, options: TrialOptions = {}): Promise<CaseResult> {
    const o: Required<TrialOptions> = {
      preMs: options.preMs ?? 1000,
      phaseJitterMs: options.phaseJitterMs ?? 1000,
      postMs: options.postMs ?? 5000,
      intervalMs: options.intervalMs ?? 10,
      httpTimeoutMs: options.httpTimeoutMs ?? 200,
      retries: options.retries ?? 2,
      probeNice: options.probeNice ?? 0,
    };
    if (o.preMs - o.phaseJitterMs / 2 < 200) throw new Error(`${caseName}: preMs − phaseJitterMs/2 must leave ≥ 200 ms of steady window`);
    const started = Date.now();
    const results: Trial[] = [];
    for (let i = 0; i < trials; i++) {
      let attempt = 0;
      for (;;) {
        attempt++;
        let trial: Trial;
        try {
          trial = { index: i, attempts: attempt, ...(await this.runOne(caseName, i, attempt, setup, trigger, o)) };
        } catch (e) {
          if (!this.labAlive()) {
            throw new Error(
              `${caseName} #${i + 1}: the lab's namespaces were removed from outside this process ` +
                `(a concurrent scripts/lab-sweep.sh removes every hl* namespace?): ${(e as Error).message}`,
            );
          }
          if (attempt <= o.retries) {
            this.log(`  ${caseName} #${i + 1}: ${(e as Error).message.split('\n')[0]} — retrying`);
            continue;
          }
          throw e;
        }
        if (!trial.steady && attempt <= o.retries) {
          this.log(`  ${caseName} #${i + 1}: not steady before the trigger (${trial.steadyProblem}) — retrying`);
          continue;
        }
        results.push(trial);
        this.log(`  ${caseName} #${i + 1}: ${describe(trial)}`);
        const trace = trial.notes?.['trace'];
        if (Array.isArray(trace)) for (const line of trace) this.log(`      ${String(line)}`);
        break;
      }
    }
    return { name: caseName, options: o, summary: summarize(results), trials: results, wallMs: Date.now() - started };
  }

  private async runOne(
    caseName: string,
    index: number,
    attempt: number,
    setup: Setup,
    trigger: Trigger,
    o: Required<TrialOptions>,
  ): Promise<TrialResult & { notes?: Record<string, unknown> }> {
    const out = join(this.tmp, `probe-${process.pid}.json`);
    rmSync(out, { force: true });
    // The probe starts while the cluster comes up (node + tsx take ~0.5 s); only
    // the window from (trigger − preMs) on is analysed, and it must be steady.
    const maxMs = 120_000 + o.preMs + o.postMs;
    const probe = this.lab.client.spawn('probe', 'nice', [
      '-n', String(o.probeNice), process.execPath, '--import', 'tsx', PROBE,
      '--iface', 'eth0', '--src-ip', this.family === 6 ? PROBE_SRC_IP6 : PROBE_SRC_IP, '--src-mac', PROBE_SRC_MAC, '--target', this.vip,
      '--interval-ms', String(o.intervalMs), '--duration-ms', String(maxMs),
      '--http-port', String(this.httpPort), '--http-timeout-ms', String(o.httpTimeoutMs), '--out-json', out,
    ]);
    let scenario: Scenario | undefined;
    try {
      // Both must settle, so a cluster that came up is torn down even if the probe failed.
      const [up, ready] = await Promise.allSettled([setup(this), probe.waitForOutput(/ready t0Ns=\d+/, 20_000)]);
      if (up.status === 'fulfilled') scenario = up.value;
      if (up.status === 'rejected') throw up.reason;
      if (ready.status === 'rejected') throw ready.reason;
      const sc = up.value;
      const t0 = BigInt(/ready t0Ns=(\d+)/.exec(probe.text())![1]!);
      const preMs = o.preMs - o.phaseJitterMs / 2 + Math.random() * o.phaseJitterMs;
      await sleep(preMs);
      const triggerNs = process.hrtime.bigint();
      await trigger(this, sc);
      await sleep(o.postMs);
      await probe.stop('SIGTERM', 5000);
      const raw = readFileSync(out, 'utf8');
      if (this.opts.rawDir) copyFileSync(out, join(this.opts.rawDir, `${caseName.replace(/[^\w.-]+/g, '_')}-${index + 1}-${attempt}.json`));
      const result = JSON.parse(raw) as ProbeResult;
      const triggerMs = Number(triggerNs - t0) / 1e6;
      const analysed = analyzeTrial({
        probe: result,
        triggerMs,
        windowStartMs: triggerMs - preMs,
        oldMac: this.macOf(sc.owner),
        oldName: sc.owner.name,
        macNames: Object.fromEntries(this.macs),
      });
      const notes = sc.notes?.();
      return notes ? { ...analysed, notes } : analysed;
    } finally {
      if (probe.running) await probe.stop('SIGKILL', 2000);
      if (scenario) await scenario.teardown();
      this.restore();
    }
  }

  private labAlive(): boolean {
    return [this.lab.client, ...this.lab.nodes].every((h) => existsSync(`/run/netns/${h.netns}`));
  }

  /** Every port up, no stale neighbour entry for the VIP on the client. */
  restore(): void {
    for (const n of this.lab.nodes) this.lab.setPort(n, 'eth0', true);
    this.lab.client.exec('ip', ['neigh', 'flush', 'to', this.vip, 'dev', 'eth0']);
  }

  async destroy(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop('SIGTERM', 2000)));
    await this.lab.destroy();
    rmSync(this.tmp, { recursive: true, force: true });
  }
}

/** Trigger: the owner's switch port goes down (its link loses carrier). */
export const ownerLinkDown: Trigger = (bench, sc) => bench.lab.setPort(sc.owner, 'eth0', false);

function describe(t: TrialResult): string {
  const ms = (x: number | null) => (x === null ? 'none' : `${Math.round(x)} ms`);
  const parts = [
    `ARP gap ${ms(t.arpGapMs)}${t.newOwner ? ` → ${t.newOwner}` : ''}`,
    `HTTP gap ${t.httpOpen ? '>' : ''}${ms(t.httpGapMs)}`,
    `served by ${t.httpServedBy.join('→') || '—'}`,
  ];
  if (t.dualAnswer) parts.push(`dual answers ${t.dualAnswer} (from +${ms(t.firstDualMs)})`);
  if (!t.steady) parts.push(`UNSTEADY: ${t.steadyProblem}`);
  if (t.probeLateTicks) parts.push(`probe late ticks ${t.probeLateTicks}`);
  return parts.join(', ');
}
