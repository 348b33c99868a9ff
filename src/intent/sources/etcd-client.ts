/**
 * The one place herald builds an etcd client (intent source, `herald apply`,
 * and later ownership and allocations): endpoint validation with precise
 * errors, call deadlines, fast re-dial, and store errors as one line.
 *
 * Notes on etcd3 1.1.2 (read in its lib/*.js; see platform.md §7):
 * - It strips only `http(s)://` from a host; grpc-js accepts `unix:///abs/path`.
 * - Its `dialTimeout` option is declared but never read, so what bounds a call
 *   to an unreachable server is the per-call deadline set here. Streams
 *   (watches) get no deadline: they live until cancelled.
 * - Unary calls are retried up to 3 times on "recoverable" errors, and a
 *   per-host circuit breaker opens after 3 consecutive failures (half-open
 *   after 5 s), so during an outage calls fail fast.
 * - A watch stream re-dials with `faultHandling.watchBackoff` (default
 *   exponential up to 30 s); capped at 2 s here so a restarted etcd is seen soon.
 */
import { createRequire } from 'node:module';
import type { Etcd3, IOptions } from 'etcd3';

import { HeraldError } from '../../core/errors.js';

// etcd3 (with gRPC) costs about 200 ms to load, and cockatiel (its fault
// policies) about 40 ms: both are required when a client is built, so only
// agents and commands that talk to etcd pay for them, not every start with
// the local store or a command that only validates endpoints.
const requireCjs = createRequire(import.meta.url);

export interface EtcdClientOptions {
  /** Validated endpoints (see `parseEtcdEndpoints`). */
  readonly endpoints: readonly string[];
  /** Deadline of each unary call, connecting included (ms). */
  readonly callTimeoutMs?: number;
  /** Cap of the watch stream's re-dial backoff (ms). */
  readonly watchBackoffMaxMs?: number;
  /**
   * For one-shot commands: no call (retries included) runs past this time
   * (epoch ms), so an unreachable or silent server fails within it.
   */
  readonly deadline?: number;
  /**
   * No client-side retries and no circuit breaker: for the lease keep-alive
   * loop, which retries on its own schedule and must never be locked out for
   * 5 s by a breaker that three slow calls opened.
   */
  readonly noFaultHandling?: boolean;
}

export const etcdClientDefaults = {
  callTimeoutMs: 3000,
  watchBackoffInitialMs: 100,
  watchBackoffMaxMs: 2000,
} as const;

const HTTP_RE = /^http:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})\/?$/;
const USAGE = 'use http://HOST:PORT or unix:///ABSOLUTE/PATH';

function badEndpoint(text: string, why: string): HeraldError {
  return new HeraldError('HERALD_BAD_ARGUMENT', `etcd endpoint ${JSON.stringify(text)}: ${why}`);
}

/** Validates one endpoint: `http://HOST:PORT` or `unix:///ABSOLUTE/PATH`. Returns it normalised. */
export function parseEtcdEndpoint(raw: string): string {
  const text = raw.trim();
  if (text.startsWith('unix://')) {
    const path = text.slice('unix://'.length);
    if (!path.startsWith('/')) throw badEndpoint(text, 'a unix socket needs an absolute path: unix:///ABSOLUTE/PATH');
    // sun_path is 108 bytes including the terminating NUL.
    if (Buffer.byteLength(path) > 107) throw badEndpoint(text, `the socket path is longer than 107 bytes`);
    return text;
  }
  if (text.startsWith('https://')) {
    throw badEndpoint(text, 'TLS is not supported yet (herald has no etcd TLS settings): use http:// on a trusted network, or unix://');
  }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
  if (!scheme) throw badEndpoint(text, `missing scheme: ${USAGE}`);
  if (scheme[1] !== 'http') throw badEndpoint(text, `unsupported scheme "${scheme[1]}": ${USAGE}`);
  const m = HTTP_RE.exec(text);
  if (!m) throw badEndpoint(text, 'expected http://HOST:PORT (the port is required; no path, user or query)');
  const port = Number(m[2]);
  if (port < 1 || port > 65535) throw badEndpoint(text, `port ${m[2]} is out of range (1-65535)`);
  return `http://${m[1]}:${port}`;
}

/** Endpoints from `--etcd a,b`, repeated options or HERALD_ETCD: comma-separated, at least one. */
export function parseEtcdEndpoints(input: string | readonly string[]): string[] {
  const parts = (typeof input === 'string' ? [input] : input).flatMap((s) => s.split(','));
  const endpoints = parts.map((s) => s.trim()).filter((s) => s !== '').map(parseEtcdEndpoint);
  if (endpoints.length === 0) throw new HeraldError('HERALD_BAD_ARGUMENT', `no etcd endpoint given: ${USAGE}`);
  return endpoints;
}

type WatchBackoff = NonNullable<NonNullable<IOptions['faultHandling']>['watchBackoff']>;

/** Doubling from `initialMs`, capped at `maxMs`, never exhausted (etcd3 keeps the last one anyway). */
function cappedBackoff(initialMs: number, maxMs: number): WatchBackoff {
  const at = (ms: number): WatchBackoff => ({ duration: ms, next: () => at(Math.min(ms * 2, maxMs)) });
  return { duration: initialMs, next: () => at(initialMs) } as WatchBackoff;
}

function noFaultHandling(): Pick<NonNullable<IOptions['faultHandling']>, 'host' | 'global'> {
  const { noop } = requireCjs('cockatiel') as typeof import('cockatiel');
  return { host: () => noop, global: noop };
}

/** A client for validated endpoints. The caller owns it: `client.close()`. */
export function createEtcdClient(opts: EtcdClientOptions): Etcd3 {
  const { Etcd3 } = requireCjs('etcd3') as typeof import('etcd3');
  if (opts.endpoints.length === 0) throw new HeraldError('HERALD_BAD_ARGUMENT', `no etcd endpoint given: ${USAGE}`);
  const callTimeoutMs = opts.callTimeoutMs ?? etcdClientDefaults.callTimeoutMs;
  const backoffMax = opts.watchBackoffMaxMs ?? etcdClientDefaults.watchBackoffMaxMs;
  if (!(callTimeoutMs > 0) || !(backoffMax > 0)) throw new HeraldError('HERALD_BAD_ARGUMENT', 'etcd timeouts must be > 0');
  return new Etcd3({
    hosts: [...opts.endpoints],
    defaultCallOptions: (ctx) => {
      if (ctx.isStream) return {};
      const next = Date.now() + callTimeoutMs;
      return { deadline: opts.deadline !== undefined ? Math.min(next, opts.deadline) : next };
    },
    grpcOptions: {
      // Re-dial a restarted server quickly (grpc's default backoff grows to 120 s).
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': backoffMax,
      // Notice a silently dead connection under a long-lived watch. etcd's
      // default keepalive enforcement allows pings every 5 s.
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      'grpc.keepalive_permit_without_calls': 1,
    },
    faultHandling: {
      watchBackoff: cappedBackoff(etcdClientDefaults.watchBackoffInitialMs, backoffMax),
      ...(opts.noFaultHandling ? noFaultHandling() : {}),
    },
  });
}

/** The useful part of a grpc/etcd3 error ("connect ECONNREFUSED 127.0.0.1:2379"). */
export function etcdErrorReason(e: unknown, timeoutMs?: number): string {
  if (!(e instanceof Error)) return String(e);
  const last = /Last error: (?:Error: )?(.*?)(?:\. Resolution note:.*)?$/s.exec(e.message);
  if (last?.[1]) return last[1].trim();
  if (/circuit breaker is open/.test(e.message)) return 'unreachable (several calls failed in a row; the next try is in a few seconds)';
  if (/DEADLINE_EXCEEDED/.test(e.message)) {
    return timeoutMs !== undefined ? `no answer within ${timeoutMs / 1000} s` : 'no answer before the call deadline';
  }
  const text = e.message.replace(/^\d+ [A-Z_]+: /, '').trim();
  if (/too many operations in txn/.test(text)) return `${text} (etcd --max-txn-ops, 128 by default: write fewer objects at a time)`;
  return text;
}

/** `cannot <action> etcd at <endpoints>: <reason>` as HERALD_STORE, keeping the cause. */
export function storeError(action: string, endpoints: readonly string[], e: unknown, timeoutMs?: number): HeraldError {
  if (e instanceof HeraldError) return e;
  const reason = etcdErrorReason(e, timeoutMs);
  return new HeraldError('HERALD_STORE', `cannot ${action} etcd at ${endpoints.join(',')}: ${reason}`, { cause: e });
}
