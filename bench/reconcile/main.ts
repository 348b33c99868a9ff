/**
 * bench/reconcile — how fast desired state reaches the kernel:
 *   commit → responder-map entry, one row at a time (median, p99)
 *   N rows in one transaction until all are in the map; a full reconciliation
 *   over N rows (nothing to do), and one that repairs 10% missing entries
 * against the real pinned BPF map, inside a lab node.
 *
 *   node --import tsx bench/reconcile/main.ts [--samples 1000] [--sizes 10000,60000] [--json] [--prof DIR] [--per-row]
 *
 * --per-row: the reconciler's row-by-row path (the ops' batch calls disabled), for comparison.
 */
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Lab } from '../../lab/lab.js';

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

const lab = Lab.create({ nodes: 1, tag: 'br' });
try {
  const node = lab.nodes[0]!;
  const r = node.exec(process.execPath, ['--import', 'tsx', WORKER, node.pinDir, opt('samples', '1000'), opt('sizes', '10000,60000'), opt('prof', ''), args.includes('--per-row') ? 'per-row' : 'batch']);
  if (r.code !== 0) throw new Error(r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    latency: { samples: number; medianUs: number; p99Us: number; maxUs: number };
    bulk: Array<{ rows: number; applyMs: number; fullMs: number; pruneOnlyMs: number; applyCpuMs: number; fullCpuMs: number; repairCpuMs: number }>;
  };
  if (args.includes('--json')) {
    console.log(JSON.stringify(out, null, 2));
  } else {
    console.log(`commit → map entry (${out.latency.samples} rows, one at a time): median ${out.latency.medianUs.toFixed(0)} µs, p99 ${out.latency.p99Us.toFixed(0)} µs, max ${out.latency.maxUs.toFixed(0)} µs`);
    console.log(`${args.includes('--per-row') ? 'row-by-row' : 'batched'} path; wall time (CPU time of the agent process)`);
    console.log('rows     one-txn apply        full pass (in sync)   full pass (repairs 10%)');
    const cell = (wall: number, cpu: number, w: number) => `${wall.toFixed(0)} ms (${cpu.toFixed(0)})`.padEnd(w);
    for (const b of out.bulk) {
      console.log(`${String(b.rows).padEnd(8)} ${cell(b.applyMs, b.applyCpuMs, 20)} ${cell(b.fullMs, b.fullCpuMs, 21)} ${cell(b.pruneOnlyMs, b.repairCpuMs, 0)}`);
    }
    console.log(`load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    console.log("(Cilium's l2responder has no published figure; it runs its full pass every 5 min over ≤4096 entries.)");
  }
} finally {
  await lab.destroy();
}
