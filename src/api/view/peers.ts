/**
 * Other nodes' reports for the cluster view: each agent's view server
 * answers GET /v1/node (its per-IP answer counters, rows not done, health);
 * the node a page is open on fetches every peer's report once per period —
 * only while a page or stream client is open — so its page shows every
 * node's counters, not only its own. Where a peer's view server listens is
 * on its node card in the store (`viewUrl`); the same bearer token is sent.
 *
 * Bounded: one request per peer at a time, a deadline per request, at most
 * `maxBytes` read from an answer (a larger one is an error, not a memory
 * spike), peers without a URL are skipped.
 */
import { request } from 'node:http';
import type { NodeReport, PeerReport } from './model.js';

export interface PeerTarget {
  node: string;
  /** http://host:port of its view server. */
  url: string;
}

export interface PeerPollerOptions {
  periodMs: number;
  timeoutMs: number;
  maxBytes: number;
}

export const peerPollerDefaults: PeerPollerOptions = { periodMs: 1000, timeoutMs: 800, maxBytes: 8 << 20 };

export class PeerPoller {
  private readonly reports = new Map<string, PeerReport>();
  private readonly inFlight = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly deps: {
      /** The peers to ask (this node excluded). */
      peers: () => readonly PeerTarget[];
      /** Whether anyone looks (a page or a stream is open): no fetches otherwise. */
      wanted: () => boolean;
      token?: string;
    },
    private readonly opts: PeerPollerOptions = peerPollerDefaults,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.poll(), this.opts.periodMs);
    this.timer.unref();
  }

  /** Peers' last reports (and fetch errors), by node; peers no longer listed are forgotten. */
  current(): ReadonlyMap<string, PeerReport> {
    return this.reports;
  }

  /** One round: a request to every listed peer that has none outstanding. */
  poll(): void {
    if (!this.deps.wanted()) return;
    const peers = this.deps.peers();
    const names = new Set(peers.map((p) => p.node));
    for (const n of [...this.reports.keys()]) if (!names.has(n)) this.reports.delete(n);
    for (const p of peers) {
      if (this.inFlight.has(p.node)) continue;
      this.inFlight.add(p.node);
      void this.fetch(p)
        .then(
          (report) => this.reports.set(p.node, { report, error: '' }),
          (e: Error) => this.reports.set(p.node, { report: this.reports.get(p.node)?.report ?? null, error: e.message }),
        )
        .finally(() => this.inFlight.delete(p.node));
    }
  }

  private fetch(p: PeerTarget): Promise<NodeReport> {
    return new Promise((resolve, reject) => {
      let url: URL;
      try {
        url = new URL('/v1/node', p.url);
      } catch {
        return reject(new Error(`bad view URL ${JSON.stringify(p.url).slice(0, 100)}`));
      }
      if (url.protocol !== 'http:') return reject(new Error(`unsupported view URL ${url.protocol}`));
      const req = request(
        { hostname: url.hostname.replace(/^\[|\]$/g, ''), port: url.port, path: url.pathname, headers: this.deps.token ? { authorization: `Bearer ${this.deps.token}` } : {}, timeout: this.opts.timeoutMs },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > this.opts.maxBytes) {
              reject(new Error(`answer larger than ${this.opts.maxBytes} bytes`));
              res.destroy();
              req.destroy();
              return;
            }
            chunks.push(c);
          });
          res.on('end', () => {
            if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}`));
            try {
              resolve(parseReport(Buffer.concat(chunks).toString('utf8'), p.node));
            } catch (e) {
              reject(e as Error);
            }
          });
          res.on('error', (e) => reject(e));
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.opts.timeoutMs} ms`)));
      req.on('error', reject);
      req.end();
    });
  }

  dispose(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/** A peer's answer, checked: only numbers as counters, only strings as texts; its node must be the one asked. */
export function parseReport(text: string, node: string): NodeReport {
  const v = JSON.parse(text) as Partial<NodeReport>;
  if (typeof v !== 'object' || v === null || v.node !== node) throw new Error(`the report is not ${node}'s`);
  const replies: Record<string, number> = {};
  for (const [ip, n] of Object.entries(v.replies ?? {})) if (typeof n === 'number' && Number.isFinite(n)) replies[ip.slice(0, 64)] = n;
  const notDone = (Array.isArray(v.notDone) ? v.notDone : [])
    .filter((r) => typeof r?.reconciler === 'string' && typeof r.key === 'string' && (r.kind === 'pending' || r.kind === 'error'))
    .slice(0, 10_000)
    .map((r) => ({ reconciler: r.reconciler.slice(0, 64), key: r.key.slice(0, 200), kind: r.kind, ...(typeof r.error === 'string' ? { error: r.error.slice(0, 500) } : {}) }));
  const advertised = (Array.isArray(v.advertised) ? v.advertised : []).filter((ip): ip is string => typeof ip === 'string').slice(0, 100_000).map((ip) => ip.slice(0, 64));
  const connections: Record<string, number> = {};
  for (const [ip, n] of Object.entries(typeof v.connections === 'object' && v.connections !== null ? v.connections : {})) if (typeof n === 'number' && Number.isFinite(n) && n >= 0) connections[ip.slice(0, 64)] = n;
  return {
    node,
    at: typeof v.at === 'number' ? v.at : 0,
    replies,
    notDone,
    health: typeof v.health === 'string' ? v.health.slice(0, 500) : '',
    ...(advertised.length ? { advertised } : {}),
    ...(v.connections !== undefined ? { connections } : {}),
  };
}
