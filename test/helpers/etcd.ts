/**
 * A real, throw-away etcd server for tests: Debian's /usr/bin/etcd (3.4) on
 * loopback, free ports, a temp data dir, fast raft timings.
 *
 * Cleanup: call `stop()` from an `after` hook. As a last resort, process
 * 'exit', SIGINT and SIGTERM hooks kill the server and remove the temp dir
 * (synchronously), so a failing or interrupted test file leaves no etcd
 * behind. Only SIGKILL of the test process itself can.
 *
 * etcd 3.4 creates a unix socket listener `unix://localhost:NNNN` as a file
 * literally named `localhost:NNNN` in its working directory, so the server
 * runs with cwd = the temp dir; after SIGKILL that file stays behind and
 * blocks the next bind, so `restart()` removes it first (platform.md §7).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const ETCD_BINARY = '/usr/bin/etcd';

export interface EtcdServer {
  /** `http://127.0.0.1:PORT` */
  readonly endpoint: string;
  /** `unix:///tmp/…/localhost:NNNN` when started with `{ unix: true }`. */
  readonly unixEndpoint: string | undefined;
  readonly dataDir: string;
  /** SIGTERM, wait for exit, remove the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL and wait for exit (data dir kept, for restart()). */
  kill(): Promise<void>;
  /** SIGSTOP: the server keeps its connections but answers nothing until resume() (a stalled store). */
  pause(): void;
  /** SIGCONT after pause(). */
  resume(): void;
  /** Starts the server again on the same ports and data (after kill() or by itself: stops first). */
  restart(): Promise<void>;
  /** Stops the server, empties its data dir and starts it again: a store that lost everything. */
  wipe(): Promise<void>;
  /** The server's stderr so far (for failure messages). */
  output(): string;
}

/** Transactions the server has handled so far (its gRPC metrics): how many a step cost, as a difference. */
export async function etcdTxnCount(endpoint: string): Promise<number> {
  const text = await (await fetch(`${endpoint}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('grpc_server_handled_total{') && l.includes('grpc_method="Txn"'))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

export interface StartEtcdOptions {
  /** Also listen on a unix socket in the temp dir. */
  readonly unix?: boolean;
  /** Milliseconds to wait for health; default 15 s. */
  readonly readyTimeoutMs?: number;
  /** The etcd binary; default Debian's (ETCD_BINARY). */
  readonly binary?: string;
  /** Extra flags (e.g. `--auto-compaction-retention`). */
  readonly extraArgs?: readonly string[];
}

/** A port that was free a moment ago (bind to 0, read, close). */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

const live = new Set<() => void>();
const cleanupAll = (): void => {
  for (const cleanup of live) cleanup();
  live.clear();
};
process.once('exit', cleanupAll);
// A test run interrupted by a signal emits no 'exit': clean up, then die of the same signal.
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    cleanupAll();
    process.kill(process.pid, sig);
  });
}

export async function startEtcd(opts: StartEtcdOptions = {}): Promise<EtcdServer> {
  const dir = mkdtempSync(join(tmpdir(), 'herald-etcd-'));
  const dataDir = join(dir, 'data');
  const clientPort = await freePort();
  const peerPort = await freePort();
  const socketName = `localhost:${await freePort()}`;
  const socketPath = opts.unix ? join(dir, socketName) : undefined;
  const endpoint = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const name = `herald-test-${clientPort}`;
  const listen = [endpoint, ...(socketPath ? [`unix://${socketName}`] : [])].join(',');
  const args = [
    `--name=${name}`,
    `--data-dir=${dataDir}`,
    `--listen-client-urls=${listen}`,
    `--advertise-client-urls=${endpoint}`,
    `--listen-peer-urls=${peer}`,
    `--initial-advertise-peer-urls=${peer}`,
    `--initial-cluster=${name}=${peer}`,
    '--initial-cluster-state=new',
    '--heartbeat-interval=50',
    '--election-timeout=500',
    '--logger=zap',
    '--log-level=warn',
    ...(opts.extraArgs ?? []),
  ];
  const binary = opts.binary ?? ETCD_BINARY;
  const readyTimeoutMs = opts.readyTimeoutMs ?? 15_000;

  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let stderr = '';
  let stopped = false;

  const hardCleanup = (): void => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  live.add(hardCleanup);

  const launch = async (): Promise<void> => {
    // A socket file left by a SIGKILLed server: etcd would fail with "address already in use".
    if (socketPath && existsSync(socketPath)) rmSync(socketPath, { force: true });
    const proc = spawn(binary, args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (s: string) => {
      stderr = (stderr + s).slice(-20_000);
    });
    exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    let spawnError: Error | undefined;
    proc.once('error', (e) => (spawnError = e));
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(`etcd exited (${proc.exitCode ?? proc.signalCode}) before it was healthy:\n${stderr}`);
      }
      if (spawnError) throw new Error(`cannot start ${binary}: ${spawnError.message}`);
      if (await healthy(endpoint) && (!socketPath || existsSync(socketPath))) return;
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        await exited;
        throw new Error(`etcd not healthy after ${readyTimeoutMs} ms:\n${stderr}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  const signal = async (sig: NodeJS.Signals): Promise<void> => {
    const proc = child;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill(sig);
    await exited;
  };

  try {
    await launch();
  } catch (e) {
    hardCleanup();
    live.delete(hardCleanup);
    throw e;
  }

  return {
    endpoint,
    unixEndpoint: socketPath ? `unix://${socketPath}` : undefined,
    dataDir,
    async stop() {
      if (stopped) return;
      stopped = true;
      // etcd 3.4 can wait without end in a graceful stop while a client's stream is still open (seen
      // once in CI: every test of a file passed, then its after hook never returned): SIGKILL after 5 s.
      const late = setTimeout(() => void signal('SIGKILL'), 5000);
      await signal('SIGTERM');
      clearTimeout(late);
      rmSync(dir, { recursive: true, force: true });
      live.delete(hardCleanup);
    },
    async kill() {
      await signal('SIGKILL');
    },
    pause() {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGSTOP');
    },
    resume() {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGCONT');
    },
    async restart() {
      if (stopped) throw new Error('etcd: restart() after stop()');
      await signal('SIGTERM');
      await launch();
    },
    async wipe() {
      if (stopped) throw new Error('etcd: wipe() after stop()');
      await signal('SIGTERM');
      rmSync(dataDir, { recursive: true, force: true });
      await launch();
    },
    output: () => stderr,
  };
}

async function healthy(endpoint: string): Promise<boolean> {
  try {
    const res = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) });
    const body = (await res.json()) as { health?: unknown };
    return res.ok && body.health === 'true';
  } catch {
    return false;
  }
}

/**
 * A TCP pass-through on loopback to an etcd endpoint that a test can cut
 * (every connection dropped, new ones refused) and restore on the same port:
 * an outage of one client while etcd itself keeps running.
 */
export class TcpProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  /** `http://127.0.0.1:PORT` of the proxy. */
  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const addr = server.address();
    if (typeof addr === 'object' && addr !== null) this.port = addr.port;
    this.server = server;
  }

  /** Drops every connection and stops listening. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Listens again on the same port. */
  restore(): Promise<void> {
    return this.start();
  }

  close(): Promise<void> {
    return this.cut();
  }
}

/** host and port of an `http://host:port` endpoint. */
export function hostPort(endpoint: string): { host: string; port: number } {
  const u = new URL(endpoint);
  return { host: u.hostname, port: Number(u.port) };
}
