/**
 * One health probe of a backend: a TCP connect, or an HTTP/1.1 GET whose
 * status must be 2xx or 3xx, within a timeout. The OS edge of health checks
 * (controlplane/health/checker.ts), one real implementation.
 */
import { request } from 'node:http';
import { connect } from 'node:net';

export interface ProbeRequest {
  readonly type: 'tcp' | 'http';
  readonly address: string;
  readonly port: number;
  readonly path: string;
  readonly timeoutMs: number;
}

export interface ProbeResult {
  readonly ok: boolean;
  /** Why it failed (or the HTTP status), for status and logs. */
  readonly detail: string;
}

export interface BackendProber {
  probe(req: ProbeRequest): Promise<ProbeResult>;
}

export class NetBackendProber implements BackendProber {
  probe(req: ProbeRequest): Promise<ProbeResult> {
    return req.type === 'tcp' ? tcp(req) : http(req);
  }
}

function tcp(req: ProbeRequest): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const socket = connect({ host: req.address, port: req.port, timeout: req.timeoutMs });
    const done = (r: ProbeResult) => {
      socket.destroy();
      resolve(r);
    };
    socket.once('connect', () => done({ ok: true, detail: 'connected' }));
    socket.once('timeout', () => done({ ok: false, detail: `no connection within ${req.timeoutMs}ms` }));
    socket.once('error', (e: NodeJS.ErrnoException) => done({ ok: false, detail: e.code ?? e.message }));
  });
}

function http(req: ProbeRequest): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (r: ProbeResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      r2.destroy();
      resolve(r);
    };
    const host = req.address.includes(':') ? `[${req.address}]` : req.address;
    const r2 = request({ host: req.address, port: req.port, path: req.path, method: 'GET', agent: false, headers: { host: `${host}:${req.port}`, 'user-agent': 'herald-health-check', connection: 'close' } }, (res) => {
      const status = res.statusCode ?? 0;
      res.resume();
      done({ ok: status >= 200 && status < 400, detail: `HTTP ${status}` });
    });
    // One bound on the whole exchange (connect, request, status line).
    const timer = setTimeout(() => done({ ok: false, detail: `no answer within ${req.timeoutMs}ms` }), req.timeoutMs);
    r2.once('error', (e: NodeJS.ErrnoException) => done({ ok: false, detail: e.code ?? e.message }));
    r2.end();
  });
}
