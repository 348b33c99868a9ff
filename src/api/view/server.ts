/**
 * The cluster view over HTTP, read-only: the page (GET /), its script
 * (GET /app.js), the snapshot (GET /v1/view), this node's report for the
 * other nodes' views (GET /v1/node: per-IP counters, rows not done, health)
 * and the live stream (GET /v1/events, server-sent events). Every other method is refused (405):
 * there is no write path.
 *
 * Served on the status socket (for `herald events`) and, with
 * `--view-listen HOST:PORT`, over TCP for a browser: loopback by default;
 * any other address needs a bearer token (`--view-token-file`), checked on
 * every request, the page included (`?token=` for a browser's first load,
 * then a cookie-free Authorization header from the script).
 *
 * The stream never blocks the agent: each client's pending bytes are bounded
 * (`maxClientBytes`); a client that does not read (a stalled browser, a dead
 * peer) is cut off and resumes from its Last-Event-ID when it comes back.
 */
import { timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { fileURLToPath } from 'node:url';
import { HeraldError } from '../../core/errors.js';
import type { ClusterEvent, EventRing, Follower } from '../../core/events.js';
import { compactView, diffDetails, diffPerNode, type CountersPush, type IpDetails, type NodeReport, type ViewSnapshot } from './model.js';

export interface ViewSource {
  snapshot(): ViewSnapshot;
  readonly ring: EventRing;
  /** Called with the IPs whose owner changed (null: no owner now). */
  onOwners(listener: (changes: ReadonlyMap<string, string | null>) => void): () => void;
  /** Called when the node list changed (the client reloads the snapshot's nodes). */
  onNodes(listener: () => void): () => void;
  /** Pools (size, used, free, conflicts), pushed when allocations change. */
  pools(): ViewSnapshot['pools'];
  onPools(listener: () => void): () => void;
  /** Answers per node and IP, node health, IPs not reconciled (pushed every `countersMs`). */
  counters(): CountersPush;
  /** This node's own report (GET /v1/node): what other nodes' views fetch. */
  nodeReport(): NodeReport;
  /** Pool, LB backends and policy revision per IP (the same object while nothing changed); what changed is pushed with the counters. */
  details(): ReadonlyMap<string, IpDetails>;
}

export interface ViewServerOptions {
  /** Pending bytes per client before it is cut off. */
  maxClientBytes: number;
  /** How often counters are pushed to open pages. */
  countersMs: number;
  /** Clients at once (each holds one follower and one socket). */
  maxClients: number;
}

export const viewServerDefaults: ViewServerOptions = { maxClientBytes: 1 << 20, countersMs: 1000, maxClients: 64 };

const viewError = (message: string) => new HeraldError('HERALD_VIEW', message);

/** The front end, built by scripts/bundle.mjs from web/view/ (dist/view/app.js). */
function loadAsset(): string {
  try {
    return readFileSync(fileURLToPath(new URL('../../../dist/view/app.js', import.meta.url)), 'utf8');
  } catch {
    return `document.body.textContent = 'herald: the view front end is not built (npm run build)';`;
  }
}

const page = (script: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>herald cluster view</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
</head><body><div id="app">loading…</div><script src="${script}"></script></body></html>
`;

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

/** Parses HOST:PORT ([v6]:PORT); refuses a non-loopback host without a token. */
export function parseViewListen(text: string, token: string | undefined): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!m || !host || !Number.isInteger(port) || port < 0 || port > 65535) throw new HeraldError('HERALD_BAD_ARGUMENT', `--view-listen ${text}: expected HOST:PORT`);
  if (!isLoopback(host) && !token) {
    throw new HeraldError('HERALD_VIEW_TOKEN_REQUIRED', `--view-listen ${text} is reachable beyond this machine: give a bearer token with --view-token-file`);
  }
  return { host, port };
}

/**
 * The URL other nodes' views fetch this node's report from (published on its
 * node card): `--view-advertise-address HOST[:PORT]` when given (the port
 * defaults to the listening one); else the listening address when it is a
 * definite non-loopback one; else, for a wildcard (0.0.0.0, ::), this host's
 * first global address (IPv4 first; only IPv4 for 0.0.0.0). A server on
 * loopback only publishes nothing without an advertised address: peers could
 * not reach it.
 */
export function viewAdvertiseUrl(
  listen: { host: string; port: number } | undefined,
  advertise: string | undefined,
  addresses: readonly { address: string; family: 4 | 6; internal: boolean }[],
): string | undefined {
  if (!listen) return undefined;
  const url = (host: string, port: number) => `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  if (advertise !== undefined) {
    const m = /^(?:\[([^\]]+)\]|([^:[\]]+)|([0-9a-fA-F:]+))(?::(\d{1,5}))?$/.exec(advertise.includes(']') || advertise.split(':').length === 2 ? advertise : advertise.includes(':') ? `[${advertise}]` : advertise);
    const host = m?.[1] ?? m?.[2] ?? m?.[3];
    const port = m?.[4] !== undefined ? Number(m[4]) : listen.port;
    const hostOk = host !== undefined && (isIP(host) !== 0 || /^[a-zA-Z0-9]([a-zA-Z0-9-]{0,62}\.)*[a-zA-Z0-9-]{1,63}$/.test(host));
    if (!m || !hostOk || port < 1 || port > 65535) throw new HeraldError('HERALD_BAD_ARGUMENT', `--view-advertise-address ${advertise}: expected HOST or HOST:PORT ([v6]:PORT)`);
    return url(host!, port);
  }
  if (isLoopback(listen.host)) return undefined;
  if (listen.host !== '0.0.0.0' && listen.host !== '::') return url(listen.host, listen.port);
  const global = addresses.filter((a) => !a.internal && !isLoopback(a.address) && !/^fe80:/i.test(a.address) && (listen.host === '::' || a.family === 4));
  const pick = global.find((a) => a.family === 4) ?? global[0];
  return pick ? url(pick.address, listen.port) : undefined;
}

interface Client {
  res: ServerResponse;
  follower: Follower;
  closed: boolean;
  /** Not yet sent a counters push: its first one is whole (later ones carry only what changed). */
  fresh: boolean;
}

export class ViewHandler {
  private readonly clients = new Set<Client>();
  private readonly asset = loadAsset();
  private countersTimer: NodeJS.Timeout | undefined;
  private readonly unsubscribe: Array<() => void> = [];
  /** Clients cut off for not reading. */
  cutOff = 0;
  private lastDetails: ReadonlyMap<string, IpDetails> | undefined;
  private readonly sentDetails = new Map<string, string>();
  /** What the last counters push left every page holding: answers and connections per node and IP, BGP advertisers. */
  private readonly sentAnswers = new Map<string, Map<string, number>>();
  private sentAdvertised = '';

  constructor(
    private readonly source: ViewSource,
    private readonly opts: ViewServerOptions = viewServerDefaults,
    /** Required bearer token (undefined: none, loopback only). */
    private readonly token?: string,
  ) {
    this.unsubscribe.push(
      source.onOwners((changes) => this.broadcast('owners', Object.fromEntries(changes))),
      source.onNodes(() => this.broadcast('nodes', this.source.snapshot().nodes)),
      source.onPools(() => this.broadcast('pools', this.source.pools())),
    );
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Handles a request; false when the path is not the view's (the caller answers it). */
  handle(req: IncomingMessage, res: ServerResponse): boolean {
    const url = new URL(req.url ?? '/', 'http://view');
    const paths = ['/', '/index.html', '/app.js', '/v1/view', '/v1/node', '/v1/events'];
    if (!paths.includes(url.pathname)) return false;
    if (req.method !== 'GET') {
      req.resume(); // a body is never read, only drained
      res.writeHead(405, { allow: 'GET', connection: 'close', 'content-type': 'application/json' }).end(JSON.stringify({ error: 'read-only: only GET is served' }));
      return true;
    }
    if (this.token !== undefined && !this.authorized(req, url)) {
      res.writeHead(401, { 'www-authenticate': 'Bearer', 'content-type': 'application/json' }).end(JSON.stringify({ error: 'a bearer token is required' }));
      return true;
    }
    const headers = { 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' };
    switch (url.pathname) {
      case '/':
      case '/index.html':
        res.writeHead(200, { ...headers, 'content-type': 'text/html; charset=utf-8', 'content-security-policy': "default-src 'self'; style-src 'self' 'unsafe-inline'" })
          // The token the page was opened with (already checked) goes to its script too.
          .end(page(this.token !== undefined ? `app.js?token=${encodeURIComponent(this.token)}` : 'app.js'));
        return true;
      case '/app.js':
        res.writeHead(200, { ...headers, 'content-type': 'text/javascript; charset=utf-8' }).end(this.asset);
        return true;
      case '/v1/view': {
        // ?compact=1 (the page): the rows as columns with shared strings; otherwise one object per IP.
        const snapshot = this.source.snapshot();
        res.writeHead(200, { ...headers, 'content-type': 'application/json' }).end(JSON.stringify(url.searchParams.get('compact') === '1' ? compactView(snapshot) : snapshot));
        return true;
      }
      case '/v1/node':
        res.writeHead(200, { ...headers, 'content-type': 'application/json' }).end(JSON.stringify(this.source.nodeReport()));
        return true;
      default:
        this.stream(req, res, url);
        return true;
    }
  }

  private authorized(req: IncomingMessage, url: URL): boolean {
    const header = req.headers.authorization ?? '';
    const given = header.startsWith('Bearer ') ? header.slice(7) : (url.searchParams.get('token') ?? '');
    const a = Buffer.from(given);
    const b = Buffer.from(this.token ?? '');
    return a.length === b.length && timingSafeEqual(a, b);
  }

  private stream(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (this.clients.size >= this.opts.maxClients) {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '5' }).end(JSON.stringify({ error: 'too many view clients' }));
      return;
    }
    const lastHeader = req.headers['last-event-id'];
    const afterText = (Array.isArray(lastHeader) ? lastHeader[0] : lastHeader) ?? url.searchParams.get('after') ?? undefined;
    const after = afterText !== undefined && /^\d{1,16}$/.test(afterText) ? Number(afterText) : undefined;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    res.socket?.setNoDelay(true);
    const client: Client = { res, follower: undefined as unknown as Follower, closed: false, fresh: true };
    // Follow first, then replay: an event added in between is in both; ids filter it.
    let sentUpTo = after ?? 0;
    const flush = () => {
      if (client.closed) return;
      if (client.follower.overflowed) return this.cut(client, 'overflow');
      const events = client.follower.drain().filter((e) => e.id > sentUpTo);
      if (events.length === 0) return;
      this.send(client, events);
      sentUpTo = events[events.length - 1]!.id;
    };
    client.follower = this.source.ring.follow(() => queueMicrotask(flush));
    this.clients.add(client);
    res.write(`retry: 1000\n\n`);
    if (after !== undefined) {
      const { events, gap } = this.source.ring.since(after);
      if (gap) this.write(client, `event: reload\ndata: {"reason":"events were dropped from the ring; reload the snapshot"}\n\n`);
      if (events.length > 0) {
        this.send(client, events);
        sentUpTo = events[events.length - 1]!.id;
      }
    } else {
      sentUpTo = this.source.ring.last;
    }
    this.ensureCounters();
    const done = () => this.drop(client);
    req.on('close', done);
    res.on('error', done);
  }

  private send(client: Client, events: readonly ClusterEvent[]): void {
    let text = '';
    for (const e of events) text += `id: ${e.id}\nevent: event\ndata: ${JSON.stringify(e)}\n\n`;
    this.write(client, text);
  }

  private write(client: Client, text: string): void {
    if (client.closed) return;
    if (client.res.writableLength + text.length > this.opts.maxClientBytes) return this.cut(client, 'slow');
    client.res.write(text);
  }

  private broadcast(event: string, data: unknown): void {
    if (this.clients.size === 0) return;
    const text = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const c of this.clients) this.write(c, text);
  }

  /** A client that does not keep up is cut off: it reconnects with its Last-Event-ID. */
  private cut(client: Client, _why: 'slow' | 'overflow'): void {
    this.cutOff++;
    this.drop(client);
    client.res.destroy();
  }

  private drop(client: Client): void {
    if (client.closed) return;
    client.closed = true;
    client.follower.close();
    this.clients.delete(client);
    if (this.clients.size === 0 && this.countersTimer) {
      clearInterval(this.countersTimer);
      this.countersTimer = undefined;
    }
  }

  private ensureCounters(): void {
    if (this.countersTimer) return;
    this.countersTimer = setInterval(() => this.pushCounters(), this.opts.countersMs);
    this.countersTimer.unref();
  }

  /**
   * The counters push: answers only where they changed since the last push
   * (LB connections are sparse: whole) (`nodes` names the nodes covered: a page drops the
   * others'), BGP advertisers only when they changed; a client's first push
   * is whole. 10,000 IPs' counters every second were 0.4 MB per page each
   * time, and the page compared them all.
   */
  private pushCounters(): void {
    if (this.clients.size === 0) return;
    const c = this.source.counters();
    const at = Date.now();
    const details = this.changedDetails();
    const answers = diffPerNode(this.sentAnswers, c.answers);
    const advertisedText = JSON.stringify(c.advertised ?? {});
    const advertisedChanged = advertisedText !== this.sentAdvertised;
    this.sentAdvertised = advertisedText;
    const common = { at, nodes: Object.keys(c.answers), health: c.health, reconcile: c.reconcile, ...details };
    let deltaText: string | undefined;
    let fullText: string | undefined;
    for (const client of this.clients) {
      if (client.fresh) {
        client.fresh = false;
        // Whole, details too: the page's snapshot may predate the baseline the deltas start from.
        fullText ??= `event: counters\ndata: ${JSON.stringify({ ...common, full: true, details: Object.fromEntries(this.source.details()), answers: c.answers, connections: c.connections ?? {}, advertised: c.advertised ?? {} })}\n\n`;
        this.write(client, fullText);
      } else {
        deltaText ??= `event: counters\ndata: ${JSON.stringify({ ...common, answers, connections: c.connections ?? {}, ...(advertisedChanged ? { advertised: c.advertised ?? {} } : {}) })}\n\n`;
        this.write(client, deltaText);
      }
    }
  }

  /** The per-IP details that changed since the last push (pages hold the snapshot's and apply these on top). */
  private changedDetails(): { details?: Record<string, IpDetails> } {
    const now = this.source.details();
    if (this.lastDetails === undefined) {
      // The baseline: what a page's snapshot already has.
      this.lastDetails = now;
      diffDetails(this.sentDetails, now);
      return {};
    }
    if (now === this.lastDetails) return {};
    this.lastDetails = now;
    const details = diffDetails(this.sentDetails, now);
    return Object.keys(details).length > 0 ? { details } : {};
  }

  dispose(): void {
    for (const u of this.unsubscribe) u();
    for (const c of [...this.clients]) {
      this.drop(c);
      c.res.end();
    }
    if (this.countersTimer) clearInterval(this.countersTimer);
  }
}

/** The view over TCP (a browser's way in). */
export class ViewServer {
  private server: Server | undefined;

  constructor(
    private readonly listen: { host: string; port: number },
    private readonly handler: ViewHandler,
  ) {}

  async start(): Promise<void> {
    const server = createServer((req, res) => {
      if (!this.handler.handle(req, res)) {
        const status = req.method === 'GET' ? 404 : 405;
        req.resume();
        res.writeHead(status, { connection: 'close', 'content-type': 'application/json', ...(status === 405 ? { allow: 'GET' } : {}) }).end(JSON.stringify({ error: status === 404 ? 'not found' : 'read-only: only GET is served' }));
      }
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) => reject(viewError(`--view-listen ${this.listen.host}:${this.listen.port}: ${(e as Error).message}`)));
      server.listen(this.listen.port, this.listen.host, () => resolve());
    });
    server.unref();
    this.server = server;
  }

  get address(): { host: string; port: number } | undefined {
    const a = this.server?.address();
    return a && typeof a === 'object' ? { host: a.address, port: a.port } : undefined;
  }

  dispose(): void {
    this.handler.dispose();
    this.server?.closeAllConnections();
    this.server?.close();
    this.server = undefined;
  }
}
