/**
 * bench/startup — agent start → first ARP answer, in a lab, cold each run.
 *
 * A probe in the client namespace (first_reply.py) sends a broadcast ARP
 * request for the service IP every 2 ms and waits for the first reply with
 * select(); once it is listening, `herald agent --manifests DIR` is spawned
 * in the node and the time from the spawn to the reply is one sample. Each
 * run starts cold: pins, tc filter and LB-IPAM state of the previous run are
 * removed (`herald datapath remove`), so the BPF object is loaded, the maps
 * created and the program attached every time, as on a node's first start.
 * The agent's own log gives the milestones (intent loaded, interface served,
 * announcing), at the log's millisecond resolution.
 *
 * The peer is `node -e 0` spawned the same way (nsenter into the node): the
 * floor any Node.js agent pays before its first line of code. `herald --help`
 * and `herald --version` are timed the same way (spawn → exit), next to it.
 * `--herald A,B` measures several builds (e.g. main's and this branch's),
 * their runs interleaved so that both see the same background load.
 * `--load N` runs N `yes >/dev/null` busy loops for the whole measurement
 * (the 2-core development VM then has no idle core).
 *
 *   node --import tsx bench/startup/main.ts [--runs 9] [--load 0,2] [--herald bin/herald[,OTHER/bin/herald]] [--json]
 *        [--agent-node-args '--cpu-prof --cpu-prof-dir=DIR'] [--print-log]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Lab, type Host } from '../../lab/lab.js';
import { HERALD } from '../../test/helpers/lab-tools.js';

const PROBE = fileURLToPath(new URL('./first_reply.py', import.meta.url));
const args = process.argv.slice(2);
const value = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const RUNS = Number(value('runs') ?? 9);
const LOADS = (value('load') ?? '0,2').split(',').map(Number);
const BINS = (value('herald') ?? HERALD).split(',');
const JSON_OUT = args.includes('--json');
/** node flags for the agent only (e.g. '--cpu-prof --cpu-prof-dir=/tmp/prof'), for finding where the time goes. */
const AGENT_NODE_ARGS = value('agent-node-args')?.split(' ').filter(Boolean);
/** Print each agent's output (its log) after the run. */
const PRINT_LOG = args.includes('--print-log');
const TARGET = '198.51.100.40';
const log = (s: string) => process.stderr.write(s + '\n');

const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: bench-pool }
spec:
  blocks: [{ start: ${TARGET}, stop: 198.51.100.49 }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: bench-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]
`;

interface Sample {
  /** Spawn → first ARP reply seen by the client. */
  answerMs: number;
  /** Spawn → the agent's log lines (ms resolution). */
  intentMs?: number;
  servingMs?: number;
  announcingMs?: number;
}

const epochNow = (): number => performance.timeOrigin + performance.now();

/** The log line's HH:MM:ss.l (local time) as epoch ms, on the day of `ref`. */
function lineTime(text: string, message: string, ref: number): number | undefined {
  const line = text.split('\n').find((l) => l.includes(`: ${message}`) || l.includes(`"msg":"${message}"`));
  if (!line) return undefined;
  const m = /\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\]/.exec(line);
  if (!m) return undefined;
  const d = new Date(ref);
  d.setHours(Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4]));
  return d.getTime();
}

async function waitLine(p: ChildProcess, out: string[], pattern: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!out.join('').includes(pattern)) {
    if (p.exitCode !== null) throw new Error(`exited: ${out.join('')}`);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${pattern}: ${out.join('')}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

function spawnIn(host: Host, cmd: string, argv: string[]): { child: ChildProcess; out: string[] } {
  const child = spawn('nsenter', [`--net=/run/netns/${host.netns}`, '--', cmd, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const out: string[] = [];
  child.stdout!.on('data', (c: Buffer) => out.push(c.toString()));
  child.stderr!.on('data', (c: Buffer) => out.push(c.toString()));
  return { child, out };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  try {
    process.kill(-child.pid!, 'SIGTERM');
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      /* gone */
    }
  }, 5000);
  await exited;
  clearTimeout(timer);
}

function clean(node: Host, bin: string): void {
  node.exec(bin, ['datapath', 'remove', '--bpf-pin-dir', node.pinDir]);
  rmSync(node.stateDir, { recursive: true, force: true });
  rmSync(node.statusSocket, { force: true });
}

async function oneRun(lab: Lab, dir: string, bin: string): Promise<Sample> {
  const node = lab.nodes[0]!;
  clean(node, bin);
  const probe = spawnIn(lab.client, '/usr/bin/python3', [PROBE, 'eth0', lab.client.ip, TARGET, '2', '30']);
  let agent: ReturnType<typeof spawnIn> | undefined;
  try {
    await waitLine(probe.child, probe.out, 'ready', 10_000);
    const t0 = epochNow();
    const [cmd, pre] = AGENT_NODE_ARGS ? [process.execPath, [...AGENT_NODE_ARGS, bin]] : [bin, []];
    agent = spawnIn(node, cmd, [
      ...pre, 'agent', '--node', node.netns, '--manifests', dir, '--garp-count', '0',
      '--bpf-pin-dir', node.pinDir, '--state-dir', node.stateDir, '--status-socket', node.statusSocket,
    ]);
    await waitLine(probe.child, probe.out, '}', 30_000);
    const result = JSON.parse(probe.out.join('').split('\n').find((l) => l.startsWith('{'))!) as { replyAt?: number; timeout?: boolean };
    if (!result.replyAt) throw new Error(`no ARP answer in 30 s; agent said:\n${agent.out.join('')}`);
    await waitLine(agent.child, agent.out, 'agent running', 10_000).catch(() => {});
    const text = agent.out.join('');
    if (PRINT_LOG) log(text);
    const rel = (msg: string) => {
      const t = lineTime(text, msg, t0);
      return t === undefined ? undefined : t - t0;
    };
    const s: Sample = { answerMs: result.replyAt * 1000 - t0 };
    const intentMs = rel('intent loaded');
    const servingMs = rel('L2 responder serving interface');
    const announcingMs = rel('announcing');
    if (intentMs !== undefined) s.intentMs = intentMs;
    if (servingMs !== undefined) s.servingMs = servingMs;
    if (announcingMs !== undefined) s.announcingMs = announcingMs;
    return s;
  } finally {
    if (agent) await stopChild(agent.child);
    await stopChild(probe.child);
  }
}

/** Spawn → exit of `node ARGS` in the node's namespace. */
async function nodeRun(node: Host, argv: string[]): Promise<number> {
  const t0 = epochNow();
  const p = spawnIn(node, process.execPath, argv);
  const code = await new Promise((r) => p.child.once('exit', r));
  if (code !== 0) throw new Error(`node ${argv.join(' ')} exited ${String(code)}: ${p.out.join('')}`);
  return epochNow() - t0;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
};

function startLoad(n: number): ChildProcess[] {
  return Array.from({ length: n }, () => spawn('sh', ['-c', 'exec yes >/dev/null'], { stdio: 'ignore' }));
}

interface Row {
  herald: string;
  load: number;
  loadavg: number;
  runs: number;
  nodeMs: number;
  helpMs: number;
  versionMs: number;
  answerMs: number;
  min: number;
  max: number;
  intentMs: number;
  servingMs: number;
  announcingMs: number;
}

async function main(): Promise<void> {
  const lab = Lab.create({ nodes: 1, tag: 'su' });
  const dir = mkdtempSync(join(tmpdir(), 'herald-startup-'));
  writeFileSync(join(dir, 'all.yaml'), MANIFESTS);
  const rows: Row[] = [];
  try {
    for (const load of LOADS) {
      const hogs = startLoad(load);
      try {
        if (load > 0) await new Promise((r) => setTimeout(r, 1000));
        for (const bin of BINS) await oneRun(lab, dir, bin); // warm the page cache; not counted
        const samples = new Map<string, Sample[]>(BINS.map((b) => [b, []]));
        const floors: number[] = [];
        const helps = new Map<string, number[]>(BINS.map((b) => [b, []]));
        const versions = new Map<string, number[]>(BINS.map((b) => [b, []]));
        for (let i = 0; i < RUNS; i++) {
          floors.push(await nodeRun(lab.nodes[0]!, ['-e', '0']));
          for (const bin of BINS) {
            helps.get(bin)!.push(await nodeRun(lab.nodes[0]!, [bin, '--help']));
            versions.get(bin)!.push(await nodeRun(lab.nodes[0]!, [bin, '--version']));
            const s = await oneRun(lab, dir, bin);
            samples.get(bin)!.push(s);
            log(`${bin} load ${load} run ${i + 1}: answer ${s.answerMs.toFixed(0)} ms (intent ${s.intentMs ?? '?'}, serving ${s.servingMs ?? '?'}, announcing ${s.announcingMs ?? '?'})`);
          }
        }
        for (const bin of BINS) {
          const runs = samples.get(bin)!;
          const m = (f: (s: Sample) => number | undefined) => median(runs.map(f).filter((x): x is number => x !== undefined));
          const answers = runs.map((s) => s.answerMs);
          rows.push({
            herald: bin,
            load,
            loadavg: loadavg()[0]!,
            runs: RUNS,
            nodeMs: median(floors),
            helpMs: median(helps.get(bin)!),
            versionMs: median(versions.get(bin)!),
            answerMs: median(answers),
            min: Math.min(...answers),
            max: Math.max(...answers),
            intentMs: m((s) => s.intentMs),
            servingMs: m((s) => s.servingMs),
            announcingMs: m((s) => s.announcingMs),
          });
        }
      } finally {
        for (const h of hogs) h.kill('SIGKILL');
      }
    }
  } finally {
    clean(lab.nodes[0]!, BINS[0]!);
    await lab.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
  if (JSON_OUT) {
    console.log(JSON.stringify(rows));
    return;
  }
  const x = (ms: number, floor: number) => `${ms.toFixed(0)} ms (${(ms / floor).toFixed(1)}×)`;
  console.log('| herald | busy loops | load avg | node -e 0 | --help | --version | first ARP answer (median) | min–max | intent loaded | interface served | announcing |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.herald} | ${r.load} | ${r.loadavg.toFixed(1)} | ${r.nodeMs.toFixed(0)} ms | ${x(r.helpMs, r.nodeMs)} | ${x(r.versionMs, r.nodeMs)} | **${r.answerMs.toFixed(0)} ms** | ${r.min.toFixed(0)}–${r.max.toFixed(0)} ms | ${r.intentMs.toFixed(0)} ms | ${r.servingMs.toFixed(0)} ms | ${r.announcingMs.toFixed(0)} ms |`,
    );
  }
}

await main();
