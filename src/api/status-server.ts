/**
 * The agent's read-only status API: HTTP over a local unix socket (owner-only
 * permissions), answering GET /v1/status with the agent's own data — tables,
 * IPAM results, ownership, reconciler health and the live BPF map.
 *
 * The socket path is handled with care, because it is a path an operator
 * typed: nothing there that is not a socket is ever removed (a regular file,
 * a directory or a symlink is refused); a socket is removed only when nobody
 * answers on it (a killed agent's leftover); one that answers means another
 * agent is serving it, and this one refuses to start. The socket is bound
 * inside a fresh 0700 directory, made 0600 and then hard-linked into place,
 * so it is never reachable with wider permissions (no process-wide umask
 * change, which would also apply to files other threads create meanwhile),
 * and link(2) never replaces what appeared at the path in the meantime. On
 * dispose only the socket this server created is removed (same inode).
 */
import { chmodSync, linkSync, lstatSync, mkdirSync, mkdtempSync, rmSync, unlinkSync, type Stats } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { basename, dirname, join } from 'node:path';
import { HeraldError } from '../core/errors.js';

export const STATUS_SOCKET_DIR = '/run/herald';

/** sun_path is 108 bytes on Linux, NUL included. */
const MAX_SOCKET_PATH = 107;

export function defaultStatusSocket(node: string): string {
  return `${STATUS_SOCKET_DIR}/${node}.sock`;
}

const socketError = (message: string, cause?: unknown): HeraldError =>
  new HeraldError('HERALD_STATUS_SOCKET', message, cause === undefined ? undefined : { cause });

function kindOf(st: Stats): string {
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isDirectory()) return 'a directory';
  if (st.isFile()) return 'a regular file';
  if (st.isFIFO()) return 'a FIFO';
  return 'not a socket';
}

function lstatOrUndefined(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw socketError(`--status-socket ${path}: ${(e as Error).message}`, e);
  }
}

/** Whether something accepts connections on the unix socket at `path`. */
function answers(path: string, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const sock = connect({ path });
    const timer = setTimeout(() => {
      sock.destroy();
      resolve(true); // accepted into the backlog but slow: someone is there
    }, timeoutMs);
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.destroy();
      resolve(true);
    });
    sock.once('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (e.code === 'ECONNREFUSED' || e.code === 'ENOENT') resolve(false);
      else reject(socketError(`--status-socket ${path}: cannot tell whether an agent serves it: ${e.message}`, e));
    });
  });
}

/**
 * Makes sure `path` is free to bind: absent, or a stale socket (removed).
 * Throws HERALD_STATUS_SOCKET, changing nothing, when something else is
 * there or an agent answers on it.
 */
export async function claimStatusSocketPath(path: string): Promise<void> {
  const st = lstatOrUndefined(path);
  if (!st) return;
  if (!st.isSocket()) {
    throw socketError(`--status-socket ${path} is ${kindOf(st)}, not a socket; refusing to replace it (remove it or choose another path)`);
  }
  if (await answers(path)) throw socketError(`another agent is serving ${path}; refusing to start a second one on it`);
  // Stale. Remove it only if it is still the very socket found dead.
  const again = lstatOrUndefined(path);
  if (again && again.isSocket() && again.ino === st.ino && again.dev === st.dev) unlinkSync(path);
}

export class StatusServer {
  private server: Server | undefined;
  /** The socket this server created, to remove exactly it on dispose. */
  private created: { dev: number; ino: number } | undefined;

  constructor(
    private readonly socketPath: string,
    private readonly provider: () => unknown,
    /** More read-only documents by path (e.g. /v1/policy). */
    private readonly routes: Readonly<Record<string, () => unknown>> = {},
    /** Other read-only paths (the cluster view): true when it answered. */
    private readonly extra?: (req: IncomingMessage, res: ServerResponse) => boolean,
  ) {}

  async start(): Promise<void> {
    const dir = dirname(this.socketPath);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    await claimStatusSocketPath(this.socketPath);
    const server = createServer((req, res) => {
      const route = req.url !== undefined && Object.hasOwn(this.routes, req.url) ? this.routes[req.url] : undefined;
      if (req.url !== '/v1/status' && !route && this.extra?.(req, res)) return;
      if (req.method !== 'GET') {
        req.resume();
        res.writeHead(405, { allow: 'GET', connection: 'close', 'content-type': 'application/json' }).end(JSON.stringify({ error: 'read-only: only GET is served' }));
        return;
      }
      if (req.url !== '/v1/status' && req.url !== '/' && !route) {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not found' }));
        return;
      }
      try {
        const body = JSON.stringify((route ?? this.provider)(), (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      } catch (e) {
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: String(e) }));
      }
    });
    // Bound where nobody else can reach it (mkdtemp makes a 0700 directory).
    const privateDir = mkdtempSync(join(dir, `.${basename(this.socketPath).slice(0, 8)}.`));
    const privatePath = join(privateDir, 's');
    try {
      if (Buffer.byteLength(privatePath) > MAX_SOCKET_PATH) {
        throw socketError(`--status-socket ${this.socketPath}: the path is too long for a unix socket (at most ${MAX_SOCKET_PATH - (privatePath.length - this.socketPath.length)} bytes here)`);
      }
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(privatePath, () => resolve());
      });
      chmodSync(privatePath, 0o600);
      try {
        linkSync(privatePath, this.socketPath); // fails if anything appeared there meanwhile
      } catch (e) {
        server.close();
        const code = (e as NodeJS.ErrnoException).code;
        throw socketError(
          code === 'EEXIST'
            ? `--status-socket ${this.socketPath}: something was created there while the agent was starting; refusing to replace it`
            : `--status-socket ${this.socketPath}: ${(e as Error).message}`,
          e,
        );
      }
      const st = lstatSync(this.socketPath);
      this.created = { dev: st.dev, ino: st.ino };
    } finally {
      rmSync(privateDir, { recursive: true, force: true });
    }
    server.unref();
    this.server = server;
  }

  dispose(): void {
    this.server?.close();
    this.server = undefined;
    const created = this.created;
    this.created = undefined;
    if (!created) return;
    try {
      const st = lstatSync(this.socketPath);
      // Another agent's socket (ours was replaced) or anything else stays.
      if (st.isSocket() && st.ino === created.ino && st.dev === created.dev) unlinkSync(this.socketPath);
    } catch {
      // Already gone.
    }
  }
}

export function fetchStatus(socketPath: string, timeoutMs = 5000, path = '/v1/status'): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: 'GET', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        try {
          resolve(JSON.parse(body));
        } catch (e) {
          reject(e);
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', (e: NodeJS.ErrnoException) =>
      reject(
        new HeraldError(
          'HERALD_BAD_ARGUMENT',
          e.code === 'ENOENT' || e.code === 'ECONNREFUSED'
            ? `no agent is listening on ${socketPath} (is it running? see --status-socket)`
            : `reading ${socketPath}: ${e.message}`,
        ),
      ),
    );
    req.end();
  });
}
