/**
 * The agent's read-only status API: HTTP over a local unix socket (owner-only
 * permissions), answering GET /v1/status with the agent's own data — tables,
 * IPAM results, ownership, reconciler health and the live BPF map.
 */
import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { dirname } from 'node:path';
import { HeraldError } from '../core/errors.js';

export const STATUS_SOCKET_DIR = '/run/herald';

export function defaultStatusSocket(node: string): string {
  return `${STATUS_SOCKET_DIR}/${node}.sock`;
}

export class StatusServer {
  private server: Server | undefined;

  constructor(
    private readonly socketPath: string,
    private readonly provider: () => unknown,
  ) {}

  async start(): Promise<void> {
    mkdirSync(dirname(this.socketPath), { recursive: true, mode: 0o755 });
    rmSync(this.socketPath, { force: true }); // a stale socket from a killed agent
    const server = createServer((req, res) => {
      if (req.method !== 'GET' || (req.url !== '/v1/status' && req.url !== '/')) {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not found' }));
        return;
      }
      try {
        const body = JSON.stringify(this.provider(), (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      } catch (e) {
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: String(e) }));
      }
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.socketPath, () => resolve());
    });
    chmodSync(this.socketPath, 0o600);
    server.unref();
    this.server = server;
  }

  dispose(): void {
    this.server?.close();
    rmSync(this.socketPath, { force: true });
  }
}

export function fetchStatus(socketPath: string, timeoutMs = 5000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: '/v1/status', method: 'GET', timeout: timeoutMs }, (res) => {
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
