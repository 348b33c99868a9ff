/**
 * bench/wire-filter — what watching the wire costs an agent under a flood of
 * other hosts' ARP (issue #16). Three agents on etcd (bench/faults' lab), two
 * service IPs, so the two candidates of each IP watch its owner on the wire.
 * The client floods the segment with foreign ARP (trafgen, netsniff-ng) and
 * we read each agent's CPU time (utime + stime of its process group, from
 * /proc) over the flood, in two legs of one run:
 *   before   HERALD_WIRE_FILTER=off: the owner watch reads every ARP frame in JavaScript
 *   after    the default: classic BPF socket filters, only watched owners' replies are read
 * Also checked: the watch still hears the owners (no silent-owner reports, no
 * ownership change during the flood).
 *
 *   node --import tsx bench/wire-filter/main.ts [--rate 200000] [--seconds 10] [--broadcast] [--json]
 */
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep, type Host } from '../../lab/lab.js';
import { FaultLab, IPS } from '../faults/cluster.js';
import { foreignArpFrame } from '../lib/foreign-arp.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const args = process.argv.slice(2);
const opt = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const RATE = opt('rate', 200_000);
const SECONDS = opt('seconds', 10);
const JSON_OUT = args.includes('--json');
/**
 * By default the flood is addressed to n1's MAC, so the lab switch delivers it
 * to n1 only: broadcast to five namespaces, the 2-core VM spends its time in
 * the switch and trafgen's rate collapses. --broadcast floods every host.
 */
const BROADCAST = args.includes('--broadcast');
const log = (s: string) => {
  if (!JSON_OUT) process.stderr.write(s + '\n');
};
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());


/** CPU seconds used so far by every process in the group `pgid` (the agent and any helper it runs). */
function groupCpuS(pgid: number): number {
  let ticks = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid) ticks += Number(f[11]) + Number(f[12]); // pgrp, utime, stime
    } catch {
      /* exited */
    }
  }
  return ticks / CLK_TCK;
}

/** eth0 counters inside a host: /proc/net is the reader's namespace (sysfs would be the host's). */
function counters(h: Host): { rx: number; rxDrop: number; tx: number } {
  const line = h.must('cat', ['/proc/net/dev']).split('\n').find((l) => l.trim().startsWith('eth0:'))!;
  const f = line.split(':')[1]!.trim().split(/\s+/).map(Number);
  return { rx: f[1]!, rxDrop: f[3]!, tx: f[9]! };
}

interface Leg {
  leg: string;
  /** Frames/s trafgen put on the wire (client eth0 tx). */
  sentFps: number;
  /** Frames/s that reached each node's eth0 (the rest was lost to the 2-core lab's switch and veth backlogs). */
  floodFps: number[];
  /** Agent CPU per frame that reached its node, µs. */
  usPerFrame: number[];
  agentCorePct: number[];
  maxCorePct: number;
  idleCorePct: number[];
  watchTargets: number[];
  silentReports: number;
  ownersStable: boolean;
}

async function runLeg(fl: FaultLab, leg: 'before' | 'after'): Promise<Leg> {
  await fl.startAgents([], leg === 'before' ? { HERALD_WIRE_FILTER: 'off' } : {});
  const settled = await fl.settle();
  log(`  ${leg}: settled ${settled.settled} in ${settled.ms} ms`);
  await sleep(2000);
  const status = () =>
    fl.nodes.map((n) => (JSON.parse(n.must(fl.herald, ['status', '--json', '--status-socket', n.statusSocket])) as { ha?: { ownerWatch?: { targets: number; reports: number } } }).ha?.ownerWatch);
  const before = status();
  const ownersBefore = JSON.stringify([...fl.owners()].sort());
  const pids = fl.nodes.map((n) => fl.agents.get(n)!.pid);
  // Idle baseline over the same length of time.
  const idle0 = pids.map(groupCpuS);
  await sleep(SECONDS * 1000);
  const idle1 = pids.map(groupCpuS);
  // The flood.
  const conf = join(fl.dir, 'flood.cfg');
  const dst = BROADCAST ? 'ff:ff:ff:ff:ff:ff' : fl.nodes[0]!.mac('eth0');
  writeFileSync(conf, foreignArpFrame(1, dst) + foreignArpFrame(2, dst));
  const c0 = fl.nodes.map(counters);
  const tx0 = counters(fl.lab.client).tx;
  const cpu0 = pids.map(groupCpuS);
  const t0 = process.hrtime.bigint();
  const flood = spawn('timeout', ['-s', 'KILL', String(SECONDS), 'ip', 'netns', 'exec', fl.lab.client.netns, 'trafgen', '-o', 'eth0', '-i', conf, '-P', '1', '-b', `${RATE}pps`, '-q'], { stdio: 'ignore' });
  await new Promise((r) => flood.on('exit', r));
  const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu1 = pids.map(groupCpuS);
  const c1 = fl.nodes.map(counters);
  const tx1 = counters(fl.lab.client).tx;
  await sleep(1000);
  const after = status();
  const ownersAfter = JSON.stringify([...fl.owners()].sort());
  await fl.stopAgents();
  const pct = (a: number[], b: number[], s: number) => a.map((x, i) => Math.round(((b[i]! - x) / s) * 1000) / 10);
  const agentCorePct = pct(cpu0, cpu1, wallS);
  return {
    leg,
    sentFps: Math.round((tx1 - tx0) / wallS),
    floodFps: c0.map((c, i) => Math.round((c1[i]!.rx - c.rx) / wallS)),
    usPerFrame: c0.map((c, i) => Math.round(((cpu1[i]! - cpu0[i]!) / Math.max(1, c1[i]!.rx - c.rx)) * 1e7) / 10),
    agentCorePct,
    maxCorePct: Math.max(...agentCorePct),
    idleCorePct: pct(idle0, idle1, SECONDS),
    watchTargets: before.map((s) => s?.targets ?? 0),
    silentReports: after.reduce((a, s, i) => a + (s?.reports ?? 0) - (before[i]?.reports ?? 0), 0),
    ownersStable: ownersBefore === ownersAfter,
  };
}

async function main(): Promise<void> {
  const fl = await FaultLab.create(ROOT, log);
  const legs: Leg[] = [];
  try {
    await fl.stopAgents();
    for (const leg of ['before', 'after'] as const) {
      const r = await runLeg(fl, leg);
      legs.push(r);
      log(`  ${leg}: sent ${r.sentFps} frames/s, received ${r.floodFps.join(' / ')}; ${r.usPerFrame.join(' / ')} µs CPU per frame; agent CPU ${r.agentCorePct.join(' / ')} % of a core (idle ${r.idleCorePct.join(' / ')}); watch targets ${r.watchTargets.join('/')}; silent reports ${r.silentReports}; owners stable ${r.ownersStable}`);
    }
  } finally {
    await fl.destroy();
  }
  const [b, a] = legs as [Leg, Leg];
  const ratio = a.maxCorePct > 0 ? b.maxCorePct / a.maxCorePct : Infinity;
  if (JSON_OUT) {
    process.stdout.write(JSON.stringify({ rate: RATE, seconds: SECONDS, ips: IPS, legs, ratio }, null, 2) + '\n');
  } else {
    process.stdout.write(
      [
        `foreign ARP flood ${BROADCAST ? 'to every host (broadcast)' : "to n1 (unicast to its MAC)"}, ${SECONDS} s per leg (trafgen asked for ${RATE} frames/s)`,
        `leg      sent/s   received/s per node      agent CPU % of a core per node   µs CPU per frame   busiest`,
        ...legs.map((l) => `${l.leg.padEnd(8)} ${String(l.sentFps).padStart(6)}   ${l.floodFps.map((x) => String(x).padStart(6)).join(' ')}     ${l.agentCorePct.map((x) => x.toFixed(1).padStart(6)).join(' ')}     ${l.usPerFrame.map((x) => x.toFixed(1).padStart(5)).join(' ')}   ${l.maxCorePct.toFixed(1).padStart(6)}`),
        `busiest agent: ${b.maxCorePct.toFixed(1)} % → ${a.maxCorePct.toFixed(1)} % of a core (${ratio === Infinity ? '∞' : ratio.toFixed(1)}× less with the socket filter)`,
      ].join('\n') + '\n',
    );
  }
  if (legs.some((l) => l.silentReports > 0 || !l.ownersStable || l.watchTargets.every((t) => t === 0))) {
    process.stderr.write('WARNING: a leg had silent-owner reports, an ownership change, or no watch targets\n');
    process.exitCode = 1;
  }
}

await main();
