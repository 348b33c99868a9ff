/**
 * The one boundary to a Kubernetes API server: @kubernetes/client-node 1.x
 * for configuration (kubeconfig or in-cluster service account), its Watch
 * and its ListWatch informer; plain JSON requests over node:https with the
 * same credentials for the rest (objects stay raw JSON, exactly as the API
 * server sent them, so they validate like files do).
 *
 * Errors are HERALD_KUBE_API with the HTTP status in `status` (0 = no answer)
 * and the API server's Status `reason` (Conflict, Forbidden, NotFound, …).
 *
 * client-node makes a new agent per request (a new TLS context, parsed from
 * the credentials, and a full handshake); one agent is kept per set of
 * credentials instead (a new one when they change, e.g. a rotated
 * certificate), with its TLS context built once. With `keepAlive` (bulk
 * clients) requests share connections; the agent itself does not (see the
 * option): each request has its own connection, resuming the TLS session.
 */
import { createHash } from 'node:crypto';
import { Agent, request } from 'node:https';
import { createSecureContext } from 'node:tls';
import type * as k8s from '@kubernetes/client-node';
import { HeraldError } from '../../core/errors.js';

export type KubeModule = typeof import('@kubernetes/client-node');

export class KubeApiError extends HeraldError {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super('HERALD_KUBE_API', message, options);
  }
}

/** 409: a conditional write lost (stale resourceVersion) or the object already exists. */
export function isConflict(e: unknown): boolean {
  return e instanceof KubeApiError && e.status === 409;
}

export function isNotFound(e: unknown): boolean {
  return e instanceof KubeApiError && e.status === 404;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string>; [k: string]: unknown };
  [k: string]: unknown;
}

/**
 * Deletes the object at `path` only as read: GET it, let `accept` judge it,
 * DELETE it with its uid and resourceVersion as preconditions (`known`: the
 * first attempt trusts a cached copy instead of a read). A write in
 * between (a 409) reads again — while `again()` allows, `attempts` times in
 * all. Other API errors are thrown.
 */
export async function deleteAsRead(
  client: KubeClient,
  path: string,
  accept: (cur: KubeObject) => boolean,
  opts: { attempts?: number; again?: () => boolean; /** The object as already known (a watch cache): the first attempt deletes it without reading. */ known?: KubeObject } = {},
): Promise<'deleted' | 'gone' | 'refused' | 'conflict'> {
  for (let attempt = 0; attempt < (opts.attempts ?? 3); attempt++) {
    if (attempt > 0 && opts.again && !opts.again()) return 'conflict';
    let cur: KubeObject;
    if (attempt === 0 && opts.known) cur = opts.known;
    else {
      try {
        cur = await client.request<KubeObject>('GET', path);
      } catch (e) {
        if (isNotFound(e)) return 'gone';
        throw e;
      }
    }
    if (!accept(cur)) return 'refused';
    try {
      await client.request('DELETE', path, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: cur.metadata.uid, resourceVersion: cur.metadata.resourceVersion } });
      return 'deleted';
    } catch (e) {
      if (isNotFound(e)) return 'gone';
      if (!isConflict(e)) throw e;
    }
  }
  return 'conflict';
}

export interface KubeList {
  metadata: { resourceVersion?: string; continue?: string };
  items: KubeObject[];
}

export interface KubeClientOptions {
  /** A kubeconfig file; in-cluster (service account) when unset. */
  readonly kubeconfig?: string;
  /** Deadline of one request (not of watches). */
  readonly timeoutMs?: number;
  /**
   * Reuse connections (off by default). Off, every request has its own TLS
   * connection, as client-node does: a kept connection that a middlebox
   * dropped silently would hold a node Lease renewal until its deadline
   * (seen in the lab, whose agents reach the API server through a bridge).
   * Bulk clients (bench/k8s) turn it on.
   */
  readonly keepAlive?: boolean;
}

/** The agent options that make one set of credentials (see agentFor). */
const TLS_FIELDS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'servername', 'rejectUnauthorized'] as const;

export class KubeClient {
  readonly server: string;
  private readonly timeoutMs: number;
  /** Requests sent, by verb (for tests and status). */
  readonly sent = new Map<string, number>();
  private agent: { key: string; agent: Agent } | undefined;
  private readonly reuse: boolean;

  private constructor(
    readonly k8s: KubeModule,
    readonly kc: k8s.KubeConfig,
    opts: KubeClientOptions,
  ) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new HeraldError('HERALD_BAD_ARGUMENT', 'kubernetes: the kubeconfig names no current cluster');
    this.server = cluster.server.replace(/\/+$/, '');
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.reuse = opts.keepAlive ?? false;
  }

  /** Loads client-node (only Kubernetes agents pay for it) and the credentials. */
  static async create(opts: KubeClientOptions = {}): Promise<KubeClient> {
    const k8s = await import('@kubernetes/client-node');
    const kc = new k8s.KubeConfig();
    try {
      if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
      else kc.loadFromCluster();
    } catch (e) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `kubernetes: cannot load ${opts.kubeconfig ?? 'the in-cluster service account'}: ${(e as Error).message}`, { cause: e });
    }
    return new KubeClient(k8s, kc, opts);
  }

  /** One JSON request; resolves with the parsed body of a 2xx answer, throws KubeApiError otherwise. */
  async request<T = unknown>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    const opts: Parameters<typeof request>[1] = { method, headers: { accept: 'application/json' } };
    await this.kc.applyToHTTPSOptions(opts as never);
    opts.agent = this.agentFor(opts.agent as Agent | undefined);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined) opts.headers = { ...opts.headers, 'content-type': contentType, 'content-length': String(Buffer.byteLength(payload)) };
    this.sent.set(method, (this.sent.get(method) ?? 0) + 1);
    const where = `${method} ${path}`;
    // A kept connection the server closed just as we reused it fails before the request was read
    // (ECONNRESET/EPIPE on a reused socket): sent once more on a fresh one, as Node's docs advise.
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.send<T>(path, opts, payload, where);
      } catch (e) {
        if (attempt > 0 || !(e instanceof KubeApiError) || !(e as KubeApiError & { staleSocket?: boolean }).staleSocket) throw e;
      }
    }
  }

  private send<T>(path: string, opts: Parameters<typeof request>[1], payload: string | undefined, where: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const req = request(`${this.server}${path}`, opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (e) => reject(new KubeApiError(0, 'ConnectionError', `kubernetes: ${where}: ${e.message}`, { cause: e })));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: any;
          try {
            parsed = text === '' ? undefined : JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) return resolve(parsed as T);
          const reason = typeof parsed?.reason === 'string' ? parsed.reason : String(status);
          const message = typeof parsed?.message === 'string' ? parsed.message : text.slice(0, 200);
          reject(new KubeApiError(status, reason, `kubernetes: ${where}: ${status} ${reason}: ${message}`));
        });
      });
      req.setTimeout(this.timeoutMs, () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on('error', (e) => {
        const err = new KubeApiError(0, 'ConnectionError', `kubernetes: ${where}: ${e.message}`, { cause: e });
        const code = (e as NodeJS.ErrnoException).code;
        if (req.reusedSocket && (code === 'ECONNRESET' || code === 'EPIPE')) Object.assign(err, { staleSocket: true });
        reject(err);
      });
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  /**
   * One agent per set of TLS options, replacing client-node's fresh one: its
   * TLS context is built once (client-node's agent built one per connection:
   * parsing the key and certificates again for every request, the largest
   * part of a status write's CPU at 10,000 Services). With `keepAlive` it
   * keeps connections; without, every request still has its own connection
   * (TLS sessions resumed).
   */
  private agentFor(fresh: Agent | undefined): Agent | undefined {
    if (!fresh || fresh.constructor !== Agent) return fresh; // a proxy agent (proxy-url): left as client-node made it
    const o = fresh.options as Record<string, unknown>;
    const h = createHash('sha1');
    for (const f of TLS_FIELDS) h.update(f).update('\u0000').update(String(o[f] ?? '')).update('\u0000');
    const key = h.digest('hex');
    fresh.destroy();
    if (this.agent?.key === key) return this.agent.agent;
    this.agent?.agent.destroy();
    const tlsOptions: Record<string, unknown> = {};
    for (const f of ['ca', 'cert', 'key', 'pfx', 'passphrase']) if (o[f] !== undefined) tlsOptions[f] = o[f];
    // Idle kept connections are closed after 30 s, before the API server's own idle timeout.
    const options: Record<string, unknown> = this.reuse ? { keepAlive: true, maxSockets: 32, maxFreeSockets: 8, timeout: 30_000 } : { keepAlive: false };
    options.secureContext = createSecureContext(tlsOptions);
    for (const f of ['servername', 'rejectUnauthorized']) if (o[f] !== undefined) options[f] = o[f];
    this.agent = { key, agent: new Agent(options) };
    return this.agent.agent;
  }

  /** Closes the kept connections (idle ones do not hold the process open either way). */
  close(): void {
    this.agent?.agent.destroy();
    this.agent = undefined;
  }

  /** A whole collection, page by page (500 a page), at one resourceVersion. */
  async list(path: string): Promise<KubeList> {
    const items: KubeObject[] = [];
    let cont: string | undefined;
    let resourceVersion: string | undefined;
    do {
      const sep = path.includes('?') ? '&' : '?';
      const page = await this.request<KubeList>('GET', `${path}${sep}limit=500${cont ? `&continue=${encodeURIComponent(cont)}` : ''}`);
      items.push(...(page.items ?? []));
      resourceVersion = page.metadata?.resourceVersion;
      cont = page.metadata?.continue || undefined;
    } while (cont);
    return { metadata: { ...(resourceVersion ? { resourceVersion } : {}) }, items };
  }
}
