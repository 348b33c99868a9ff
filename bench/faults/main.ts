/**
 * bench/faults — herald's HA behaviour under faults (issue 9), for the
 * README's reliability table: a 3-node lab with a real etcd, two service IPs,
 * and the failover probe on the client sending a fresh broadcast ARP request
 * for each IP every 10 ms (2 ms for a paused owner), recording which MACs
 * answer each one.
 *
 *   pause non-owner Ns   SIGSTOP a node that owns nothing for 1, 2, 5 s
 *   pause owner Ns       SIGSTOP the owner of one IP for 2, 5, 10 s (2 ms probe)
 *   lease-less ghost     a candidate key without a lease for a more preferred, nonexistent node (10 s)
 *   etcd down 5s         etcd killed 5 s, agents with --on-store-loss withdraw (the default)
 *   etcd down 10s keep   etcd killed 10 s, agents with --on-store-loss keep
 *   churn …              1,000 IPv6 Services applied and deleted in files of 100
 *                        for 60 s beside `stress-ng --cpu 2`, the agents at its
 *                        priority (`--nice 0`: busy and starved): a healthy owner
 *                        must not be fenced.
 *                        Run with the heartbeat on its own thread (the default)
 *                        and with --no-heartbeat-thread (`--only churn`).
 *
 * Per trial: dual-answered requests (two MACs answered one request), dark ms
 * (time in runs of >= 3 unanswered requests, the worst IP of the trial),
 * owner changes (changes of the answering node seen by the probe, all IPs),
 * IPs changed (owner at the end of the trial ≠ at its start, from `status
 * --json` → `owned`), revocations (agents' "fenced out a silent owner" lines).
 * Every trial starts from a settled cluster: each IP owned once by its
 * rendezvous-preferred node.
 *
 * `--herald-root` selects whose `bin/herald` the agents run (default: this
 * checkout), so one bench measures an old and a new build; the probe and the
 * analysis are always this checkout's.
 *
 *   node --import tsx bench/faults/main.ts [--herald-root DIR] [--trials N] [--only SUBSTR[,SUBSTR]] [--out-json FILE]
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { churnRounds, writeChurnFiles } from '../../lab/churn.js';
import { sleep } from '../../lab/lab.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { describe, FaultLab, IPS, type Owners } from './cluster.js';
import { measureIp, stat, type IpMeasure, type Stat } from './measure.js';

const args = process.argv.slice(2);
const value = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const HERE = fileURLToPath(new URL('../..', import.meta.url));
const HERALD_ROOT = resolve(value('herald-root') ?? HERE);
const TRIALS = Number(value('trials') ?? 3);
const OUT_JSON = value('out-json');
const ONLY = value('only')?.split(',').filter(Boolean);

const log = (s: string) => process.stderr.write(s + '\n');

interface TrialRecord {
  trial: number;
  dualAnswered: number;
  /** Dual answers to requests sent after the fault ended (a resumed owner). */
  dualAnsweredAfterFault: number;
  /** The worst IP's dark time in this trial. */
  darkMs: number;
  ownerChanges: number;
  ipsChanged: number;
  revocations: number;
  /** Heartbeats that fired past the liveness limit (all agents). */
  lateWakeups: number;
  /** etcd faults: from the kill until etcd was healthy again. */
  outageMs?: number;
  ownersBefore: string;
  ownersAfter: string;
  settledBefore: string;
  ips: IpMeasure[];
}

interface FaultResult {
  name: string;
  trials: TrialRecord[];
  summary: {
    trials: number;
    dualAnswered: number;
    dualAnsweredAfterFault: number;
    darkMs: Stat;
    ownerChanges: number;
    ipsChanged: number;
    revocations: number;
    lateWakeups: number;
    outageMs: Stat;
  };
  wallMs: number;
}

interface Fault {
  name: string;
  /** IPs to probe, given the settled owners. */
  ips: (fl: FaultLab) => string[];
  intervalMs: number;
  /** Agents' extra flags (restarted when they change). */
  agentArgs?: string[];
  /** Runs the fault with the probes running; returns the probe time the fault ended and anything to record. */
  run: (fl: FaultLab, t: { nowMs: () => number; trial: number }) => Promise<{ endedAtMs: number; outageMs?: number }>;
}

function pauseNonOwner(ms: number): Fault {
  return {
    name: `pause non-owner ${ms / 1000}s`,
    ips: () => [...IPS],
    intervalMs: 10,
    run: async (fl, t) => {
      // 2 IPs, 3 nodes: once settled, one node is preferred for neither and owns nothing.
      const idle = fl.nodes.find((n) => IPS.every((ip) => fl.preferred(ip) !== n))!;
      await sleep(500);
      const agent = fl.agents.get(idle)!;
      agent.signal('SIGSTOP');
      await sleep(ms);
      agent.signal('SIGCONT');
      const endedAtMs = t.nowMs();
      await sleep(3000); // it resumes, acts on its late clock, re-joins
      return { endedAtMs };
    },
  };
}

function pauseOwner(ms: number): Fault {
  return {
    name: `pause owner ${ms / 1000}s`,
    ips: () => [IPS[0]],
    intervalMs: 2,
    run: async (fl, t) => {
      const owner = fl.preferred(IPS[0]);
      await sleep(500);
      const agent = fl.agents.get(owner)!;
      agent.signal('SIGSTOP');
      await sleep(ms);
      agent.signal('SIGCONT');
      const endedAtMs = t.nowMs();
      await sleep(3000);
      return { endedAtMs };
    },
  };
}

const leaseLessGhost: Fault = {
  name: 'lease-less ghost 10s',
  ips: () => [IPS[1]],
  intervalMs: 10,
  run: async (fl, t) => {
    const ip = IPS[1];
    // A node name that out-scores every real node for this IP, fresh per trial.
    let ghost = '';
    const best = rendezvousScore(fl.preferred(ip).netns, ip);
    for (let i = 0; !ghost || rendezvousScore(ghost, ip) <= best; i++) ghost = `ghost-t${t.trial}-${i}`;
    const key = `/herald/candidates/${ip}/${ghost}`;
    await sleep(300);
    await fl.etcdKey('put', key);
    await sleep(10_000);
    const endedAtMs = t.nowMs();
    await fl.etcdKey('del', key);
    return { endedAtMs };
  },
};

function etcdDown(ms: number, onStoreLoss: 'withdraw' | 'keep'): Fault {
  return {
    name: `etcd down ${ms / 1000}s ${onStoreLoss}`,
    ips: () => [...IPS],
    intervalMs: 10,
    // withdraw is every version's default: no restart between the pauses and this fault.
    agentArgs: onStoreLoss === 'withdraw' ? [] : ['--on-store-loss', onStoreLoss],
    run: async (fl, t) => {
      await sleep(1000);
      const killedAt = t.nowMs();
      await fl.etcd.kill();
      await sleep(ms);
      await fl.etcd.start();
      const endedAtMs = t.nowMs();
      await sleep(8000); // recovery: sessions re-granted, keys re-asserted or re-contended
      return { endedAtMs, outageMs: Math.round(endedAtMs - killedAt) };
    },
  };
}

function churn(seconds: number, thread: boolean): Fault {
  return {
    name: `churn 1000 svc ${seconds}s + stress-ng, heartbeat ${thread ? 'thread' : 'on agent thread'}`,
    ips: () => [...IPS],
    intervalMs: 10,
    // At stress-ng's priority (the agent's default -10 lets it win the CPU): busy and starved.
    agentArgs: ['--nice', '0', ...(thread ? [] : ['--no-heartbeat-thread'])],
    run: async (fl, t) => {
      const { pool, files } = writeChurnFiles(fl.dir);
      const herald = async (verb: 'apply' | 'delete', file: string) => {
        const r = await fl.nodes[0]!.execAsync(fl.herald, [verb, '-f', file, '--etcd', fl.etcd.endpoint]);
        if (r.code !== 0) throw new Error(`${verb} ${file}: ${r.stdout}${r.stderr}`);
      };
      await herald('apply', pool);
      const stress: ChildProcess = spawn('stress-ng', ['--cpu', String(cpus().length), '--timeout', `${seconds + 30}s`, '--quiet'], { stdio: 'ignore', detached: true });
      let rounds = 0;
      try {
        await sleep(1000);
        rounds = await churnRounds(files, seconds * 1000, herald);
      } finally {
        try {
          if (stress.pid) process.kill(-stress.pid, 'SIGKILL'); // stress-ng and its workers
        } catch {
          stress.kill('SIGKILL');
        }
      }
      const endedAtMs = t.nowMs();
      log(`    ${rounds} apply/delete rounds of 1,000 Services`);
      await sleep(2000);
      return { endedAtMs };
    },
  };
}

const FAULTS: Fault[] = [
  pauseNonOwner(1000),
  pauseNonOwner(2000),
  pauseNonOwner(5000),
  pauseOwner(2000),
  pauseOwner(5000),
  pauseOwner(10_000),
  leaseLessGhost,
  etcdDown(5000, 'withdraw'),
  etcdDown(10_000, 'keep'),
  churn(60, true),
  churn(60, false),
];

function ipsChanged(before: Owners, after: Owners): number {
  return IPS.filter((ip) => (before.get(ip) ?? []).join('+') !== (after.get(ip) ?? []).join('+')).length;
}

async function runFault(fl: FaultLab, f: Fault, trials: number, macNames: Map<string, string>): Promise<FaultResult> {
  const started = Date.now();
  const records: TrialRecord[] = [];
  for (let trial = 1; trial <= trials; trial++) {
    const settled = await fl.settle();
    const before = fl.owners();
    const revocationsBefore = fl.revocations();
    const lateBefore = fl.lateWakeups();
    const probe = await fl.probe(f.ips(fl), f.intervalMs);
    let ran: { endedAtMs: number; outageMs?: number };
    try {
      ran = await f.run(fl, { nowMs: probe.nowMs, trial });
    } finally {
      // A failed fault must not leave an agent stopped.
      for (const a of fl.agents.values()) a.signal('SIGCONT');
    }
    const results = await probe.finish();
    const after = fl.owners();
    const ips = results.map((r) => measureIp(r, macNames, ran.endedAtMs));
    const rec: TrialRecord = {
      trial,
      dualAnswered: ips.reduce((s, m) => s + m.dualAnswered, 0),
      dualAnsweredAfterFault: ips.reduce((s, m) => s + m.dualAnsweredAfter, 0),
      darkMs: Math.max(...ips.map((m) => m.darkMs)),
      ownerChanges: ips.reduce((s, m) => s + m.ownerChanges, 0),
      ipsChanged: ipsChanged(before, after),
      revocations: fl.revocations() - revocationsBefore,
      lateWakeups: fl.lateWakeups() - lateBefore,
      ...(ran.outageMs !== undefined ? { outageMs: ran.outageMs } : {}),
      ownersBefore: describe(before),
      ownersAfter: describe(after),
      settledBefore: `${settled.settled} in ${settled.ms} ms`,
      ips,
    };
    records.push(rec);
    log(
      `  trial ${trial}: dual ${rec.dualAnswered} (after ${rec.dualAnsweredAfterFault}), dark ${rec.darkMs} ms, owner changes ${rec.ownerChanges} ` +
        `[${ips.map((m) => `${m.ip}: ${m.owners.join('→')}`).join('; ')}], IPs changed ${rec.ipsChanged}, revocations ${rec.revocations}, late wake-ups ${rec.lateWakeups}` +
        (rec.outageMs !== undefined ? `, outage ${rec.outageMs} ms` : '') + ` (settled: ${rec.settledBefore})`,
    );
  }
  const sum = (k: 'dualAnswered' | 'dualAnsweredAfterFault' | 'ownerChanges' | 'ipsChanged' | 'revocations' | 'lateWakeups') => records.reduce((s, r) => s + r[k], 0);
  return {
    name: f.name,
    trials: records,
    summary: {
      trials: records.length,
      dualAnswered: sum('dualAnswered'),
      dualAnsweredAfterFault: sum('dualAnsweredAfterFault'),
      darkMs: stat(records.map((r) => r.darkMs)),
      ownerChanges: sum('ownerChanges'),
      ipsChanged: sum('ipsChanged'),
      revocations: sum('revocations'),
      lateWakeups: sum('lateWakeups'),
      outageMs: stat(records.flatMap((r) => (r.outageMs !== undefined ? [r.outageMs] : []))),
    },
    wallMs: Date.now() - started,
  };
}

function table(results: FaultResult[]): string {
  const ms = (x: number | null) => (x === null ? '—' : String(Math.round(x)));
  const headers = ['fault', 'trials', 'dual-answered requests', 'dark ms (median / max)', 'owner changes', 'IPs changed', 'revocations', 'late wake-ups', 'notes'];
  const rows = results.map((r) => {
    const s = r.summary;
    const notes: string[] = [];
    if (r.name.startsWith('pause owner')) notes.push(`dual after resume ${s.dualAnsweredAfterFault}`);
    if (s.outageMs.median !== null) notes.push(`outage ${ms(s.outageMs.median)} ms (median, kill → etcd healthy)`);
    return [r.name, String(s.trials), String(s.dualAnswered), `${ms(s.darkMs.median)} / ${ms(s.darkMs.max)}`, String(s.ownerChanges), String(s.ipsChanged), String(s.revocations), String(s.lateWakeups), notes.join('; ')];
  });
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

function heraldVersion(root: string): string {
  try {
    return execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

async function main(): Promise<void> {
  if (!Number.isInteger(TRIALS) || TRIALS < 1) throw new Error('--trials must be a positive integer');
  if (!existsSync(resolve(HERALD_ROOT, 'dist/cli/main.js'))) throw new Error(`${HERALD_ROOT} is not built (npm run build there)`);
  const faults = ONLY ? FAULTS.filter((f) => ONLY.some((o) => f.name.includes(o))) : FAULTS;
  if (faults.length === 0) throw new Error(`no fault matches --only ${ONLY?.join(',')}; faults: ${FAULTS.map((f) => f.name).join(', ')}`);
  const commit = heraldVersion(HERALD_ROOT);
  const started = Date.now();
  log(`bench/faults: herald ${HERALD_ROOT} (${commit}), ${faults.length} faults × ${TRIALS} trials`);
  const fl = await FaultLab.create(HERALD_ROOT, log);
  const results: FaultResult[] = [];
  try {
    const macNames = fl.macNames();
    let agentArgs: string[] = [];
    for (const f of faults) {
      const want = f.agentArgs ?? [];
      if (want.join(' ') !== agentArgs.join(' ')) {
        log(`bench/faults: restarting the agents with ${want.join(' ') || 'defaults'}`);
        await fl.stopAgents();
        await fl.startAgents(want);
        agentArgs = want;
      }
      log(`bench/faults: ${f.name}`);
      const r = await runFault(fl, f, TRIALS, macNames);
      results.push(r);
      log(`bench/faults: ${f.name} done in ${(r.wallMs / 1000).toFixed(1)} s`);
    }
  } finally {
    await fl.destroy();
  }
  const wallS = (Date.now() - started) / 1000;
  if (OUT_JSON) {
    writeFileSync(OUT_JSON, JSON.stringify({ heraldRoot: HERALD_ROOT, commit, trialsPerFault: TRIALS, ips: IPS, wallSeconds: wallS, faults: results }, null, 2) + '\n');
  }
  console.log(`herald ${commit} (${HERALD_ROOT}), ${TRIALS} trials per fault, wall time ${wallS.toFixed(0)} s`);
  console.log('');
  console.log(table(results));
  console.log('');
  console.log('dual-answered: ARP requests answered by two MACs, all trials. dark: per trial the worst probed IP\'s time in runs of >= 3 unanswered requests.');
  console.log('owner changes: changes of the answering node seen by the probe, all trials and IPs. IPs changed: owner after the trial ≠ before (status → owned).');
  console.log(`revocations: agents' "fenced out a silent owner" log lines. Probe: a fresh ARP request every 10 ms (2 ms for "pause owner").`);
}

main().catch((e: unknown) => {
  log(`bench/faults: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  process.exitCode = 1;
});
