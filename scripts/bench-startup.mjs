// Startup cost of `herald --help` against a bare `node -e 0` (20 runs each, median).
// Usage: node scripts/bench-startup.mjs [path/to/bin/herald]
import { spawnSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';

const herald = process.argv[2] ?? new URL('../bin/herald', import.meta.url).pathname;
const RUNS = 20;
function median(cmd, args) {
  const times = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    const r = spawnSync(cmd, args, { stdio: 'ignore' });
    times.push(performance.now() - t0);
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}`);
  }
  times.sort((a, b) => a - b);
  return (times[RUNS / 2 - 1] + times[RUNS / 2]) / 2;
}
const bare = median(process.execPath, ['-e', '0']);
const help = median(process.execPath, [herald, '--help']);
let version = NaN;
try { version = median(process.execPath, [herald, '--version']); } catch { /* older builds had no --version */ }
console.log(`node -e 0: ${bare.toFixed(0)} ms; herald --help: ${help.toFixed(0)} ms (${(help / bare).toFixed(1)}x); herald --version: ${version.toFixed(0)} ms (${(version / bare).toFixed(1)}x); uptime load: ${(await import('node:os')).loadavg()[0].toFixed(1)}`);
