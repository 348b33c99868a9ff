/**
 * Runs `herald ARGS...` from source, as a child process, the way bin/herald
 * runs the built CLI: `node --import tsx test/helpers/herald-main.ts ARGS...`.
 * The child is killed if it outlives `timeoutMs`, so a hang fails the test.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('./herald-main.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../..', import.meta.url));

export interface HeraldRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

export async function runHerald(
  args: readonly string[],
  opts: { env?: Record<string, string | undefined>; timeoutMs?: number } = {},
): Promise<HeraldRun> {
  const started = Date.now();
  const env: Record<string, string | undefined> = { ...process.env, HERALD_ETCD: undefined, ...opts.env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
  try {
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (c, s) => resolve([c, s]));
    });
    return { code, signal, stdout, stderr, ms: Date.now() - started };
  } finally {
    clearTimeout(timer);
  }
}
