/**
 * A TCP ⇄ unix-socket pass-through, to reach a server on the root namespace's
 * loopback (the test's kube-apiserver) from inside a lab host: the root side
 * listens on a unix socket (a file: visible from every network namespace)
 * and connects to 127.0.0.1:PORT; this side, run in a lab host, listens on
 * that host's 127.0.0.1:PORT and connects to the unix socket. The API
 * server's certificate (for 127.0.0.1) is then valid in every host.
 *
 *   node --import tsx lab/unix-bridge.ts --port 6443 --socket /tmp/…/api.sock
 *
 * The root side runs in a process of its own (`startRootBridge`, `--root`):
 * in the test's process, every synchronous step of the test (an arping, a
 * `herald status`) stalled the agents' new API connections behind it — a
 * fence's read took ~0.9 s in the lab.
 */
import { spawn } from 'node:child_process';
import { connect, createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';

/** In-process: the root-namespace side (unix socket → 127.0.0.1:port). */
export function unixToTcp(socket: string, port: number): Promise<Server> {
  const server = createServer((c) => {
    const up = connect(port, '127.0.0.1');
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => resolve(server));
  });
}

/** The root-namespace side in a child process of its own; `close()` stops it (so does our exit). */
export function startRootBridge(socket: string, port: number): Promise<{ close(): void }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--root', '--port', String(port), '--socket', socket], { stdio: ['ignore', 'pipe', 'inherit'] });
  const close = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', close);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('bridge listening')) resolve({ close });
    });
    child.once('exit', (code) => reject(new Error(`unix-bridge --root exited (${code}) before listening`)));
  });
}

function main(): void {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    if (i < 0 || !process.argv[i + 1]) throw new Error(`unix-bridge: ${name} is required`);
    return process.argv[i + 1]!;
  };
  const port = Number(arg('--port'));
  const socket = arg('--socket');
  if (process.argv.includes('--root')) {
    void unixToTcp(socket, port).then(() => console.log(`bridge listening on ${socket}`));
    return;
  }
  const server = createServer((c) => {
    const up = connect(socket);
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  server.listen(port, '127.0.0.1', () => console.log(`bridge listening on 127.0.0.1:${port}`));
}

if (process.argv[1]?.endsWith('unix-bridge.ts')) main();
