/**
 * An in-memory Lease API (coordination.k8s.io/v1 Leases only) shaped like
 * KubeClient, with the semantics kube-apiserver has for them — checked
 * against a real one by test/store/kubernetes-lease-api.contract.test.ts:
 *
 * - one global resourceVersion counter (decimal strings, +1 on every write);
 *   `uid` and `creationTimestamp` set at create;
 * - POST of an existing name → 409 AlreadyExists; PUT with another
 *   resourceVersion (or uid) than the stored one → 409 Conflict; PUT without
 *   one → 422 Invalid (Leases take no unconditional update); PUT of a
 *   missing Lease creates it (create on update), unless its body names a
 *   uid (the Lease it was read as was deleted) → 409 Conflict; DELETE whose `preconditions.uid` / `.resourceVersion` do not
 *   match → 409 Conflict; GET / DELETE of a missing Lease → 404;
 * - a collection GET (and `list()`) returns the items and the list's
 *   resourceVersion;
 * - `k8s` holds the real @kubernetes/client-node `ListWatch` and `V1MicroTime`, and a fake `Watch`:
 *   `watch(path, {resourceVersion}, cb, done)` delivers ADDED / MODIFIED /
 *   DELETED of every later write in order (a DELETED object carries the
 *   delete's resourceVersion), asynchronously (setImmediate), so the real
 *   `k8s.ListWatch` runs on it unchanged.
 *
 * Faults: `failNext` (a status for the next matching requests), `hold` (a
 * request waits, before it is applied — or only its answer, after —, until released), `dropEvents` /
 * `pauseWatch` (a client's watch loses or delays events), `breakWatches`
 * (every open watch ends with an error), and `requests` (the log). Each
 * node gets its own client (`client(who)`) on the one API, so a fault can
 * name whose request it is.
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ListWatch as ListWatchType } from '@kubernetes/client-node';
import { V1MicroTime } from '@kubernetes/client-node/dist/types.js';
import { KubeApiError, type KubeClient, type KubeList, type KubeObject } from '../../src/intent/sources/kube-client.js';

/**
 * client-node's own ListWatch (dist/cache.js), its code unchanged, loaded
 * without its two imports: the informer's event-name constants (inlined
 * here) and the ObjectSerializer, which it uses only for label and field
 * selectors (LeaseOwnership passes none) and which loads every generated
 * model — 0.9 s per test process, paid again for each mutant of a mutation
 * run. A client-node whose cache.js no longer starts with those two imports
 * fails here, loudly.
 */
async function loadListWatch(): Promise<typeof ListWatchType> {
  const src = readFileSync(new URL(import.meta.resolve('@kubernetes/client-node/dist/cache.js')), 'utf8');
  const informer = /^import \{ ADD, CHANGE, CONNECT, DELETE, ERROR, UPDATE, \} from '\.\/informer\.js';$/m;
  const serializer = /^import \{ ObjectSerializer \} from '\.\/serializer\.js';$/m;
  if (!informer.test(src) || !serializer.test(src)) throw new Error('fake-kube-leases: @kubernetes/client-node dist/cache.js changed its imports: update loadListWatch');
  const code = src
    .replace(informer, "const ADD = 'add', CHANGE = 'change', CONNECT = 'connect', DELETE = 'delete', ERROR = 'error', UPDATE = 'update';")
    .replace(serializer, 'const ObjectSerializer = { serialize: (v) => String(v) };')
    .replace(/^\/\/# sourceMappingURL=.*$/m, '');
  const file = join(tmpdir(), `herald-listwatch-${createHash('sha256').update(code).digest('hex').slice(0, 16)}.mjs`);
  const part = `${file}.${process.pid}`;
  writeFileSync(part, code);
  renameSync(part, file); // atomic: test processes running at once each write the same text
  return ((await import(pathToFileURL(file).href)) as { ListWatch: typeof ListWatchType }).ListWatch;
}
const ListWatch = await loadListWatch();

const LEASES = /^\/apis\/coordination\.k8s\.io\/v1\/namespaces\/([^/?]+)\/leases(?:\/([^/?]+))?(?:\?.*)?$/;

export interface LoggedRequest {
  readonly who: string;
  readonly method: string;
  readonly path: string;
  readonly body: any;
  /** HTTP status answered (0 while held). */
  status: number;
}

export interface RequestMatch {
  readonly who?: string;
  readonly method?: string;
  /** A Lease name (exact) or a pattern on the path. */
  readonly name?: string;
  readonly path?: RegExp;
}

export interface WatchEvent {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED';
  readonly object: KubeObject;
}

interface Stored {
  readonly ns: string;
  obj: KubeObject;
}

interface OpenWatch {
  readonly who: string;
  readonly ns: string;
  queue: WatchEvent[];
  cb: (phase: string, obj: any) => void;
  done: (err: any) => void;
  closed: boolean;
  scheduled: boolean;
}

const clone = <T>(x: T): T => (x === undefined ? x : JSON.parse(JSON.stringify(x)));

function parse(path: string): { ns: string; name: string | undefined } {
  const m = LEASES.exec(path);
  if (!m) throw new KubeApiError(404, 'NotFound', `fake: ${path}: only Leases are served`);
  return { ns: decodeURIComponent(m[1]!), name: m[2] === undefined ? undefined : decodeURIComponent(m[2]) };
}

function matches(m: RequestMatch, who: string, method: string, path: string): boolean {
  if (m.who !== undefined && m.who !== who) return false;
  if (m.method !== undefined && m.method !== method) return false;
  if (m.name !== undefined && parse(path).name !== m.name) return false;
  if (m.path !== undefined && !m.path.test(path)) return false;
  return true;
}

export class FakeLeaseApi {
  private rv = 1000;
  private uidSeq = 0;
  private readonly store = new Map<string, Stored>();
  /** Every write, in order (the watch replays them from a resourceVersion). */
  private readonly history: Array<{ rv: number; ns: string; event: WatchEvent }> = [];
  private readonly watches = new Set<OpenWatch>();
  private readonly faults: Array<{ match: RequestMatch; status: number; reason: string; times: number }> = [];
  private readonly holds: Array<{ match: RequestMatch; reached: () => void; gate: Promise<void>; answer: boolean }> = [];
  private readonly drops: Array<{ who?: string; pred: (e: WatchEvent) => boolean }> = [];
  private readonly paused = new Set<string>();
  readonly requests: LoggedRequest[] = [];
  /** The query of every watch opened, with who opened it. */
  readonly watchQueries: Array<{ who: string; query: Record<string, unknown> }> = [];

  /** A KubeClient for `who` (its requests are logged and matched under that name). */
  client(who = 'client'): KubeClient {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const api = this;
    class FakeWatch {
      constructor(_kc: unknown) {}
      async watch(path: string, query: Record<string, unknown>, cb: (phase: string, obj: any) => void, done: (err: any) => void): Promise<{ abort(): void }> {
        return api.openWatch(who, path, query, cb, done);
      }
    }
    const k8s = { ListWatch, V1MicroTime, Watch: FakeWatch };
    const client = {
      k8s,
      kc: undefined,
      server: 'https://fake.invalid',
      sent: new Map<string, number>(),
      request: <T = unknown>(method: string, path: string, body?: unknown): Promise<T> => {
        client.sent.set(method, (client.sent.get(method) ?? 0) + 1);
        return api.request(who, method, path, body) as Promise<T>;
      },
      list: async (path: string): Promise<KubeList> => {
        const page = await client.request<KubeList>('GET', `${path}${path.includes('?') ? '&' : '?'}limit=500`);
        return { metadata: { ...(page.metadata.resourceVersion ? { resourceVersion: page.metadata.resourceVersion } : {}) }, items: page.items };
      },
      close: () => {},
    };
    return client as unknown as KubeClient;
  }

  // ---- faults ----

  /** The next `times` requests matching `match` fail with `status` (nothing applied). */
  failNext(match: RequestMatch, status: number, reason = String(status), times = 1): void {
    this.faults.push({ match, status, reason, times });
  }

  /** Forgets every pending failNext. */
  clearFaults(): void {
    this.faults.length = 0;
  }

  /**
   * The next request matching `match` waits, before it is applied, until
   * `release()`; `reached` resolves when it arrived.
   */
  hold(match: RequestMatch, opts: { /** Applied at once; only its answer waits. */ answer?: boolean } = {}): { reached: Promise<void>; release: () => void } {
    let release!: () => void;
    let reached!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const arrived = new Promise<void>((r) => (reached = r));
    this.holds.push({ match, reached, gate, answer: opts.answer === true });
    return { reached: arrived, release };
  }

  /** `who`'s watch (every watch without `who`) loses the events `pred` picks, until the returned function is called. */
  dropEvents(pred: (e: WatchEvent) => boolean, who?: string): () => void {
    const d = { ...(who === undefined ? {} : { who }), pred };
    this.drops.push(d);
    return () => void this.drops.splice(this.drops.indexOf(d), 1);
  }

  /** `who`'s watch delivers nothing until resumeWatch (events queue up, none is lost). */
  pauseWatch(who: string): void {
    this.paused.add(who);
  }

  resumeWatch(who: string): void {
    this.paused.delete(who);
    for (const w of this.watches) if (w.who === who) this.schedule(w);
  }

  /** Every open watch (of `who`, or all) ends with `err` (the ListWatch reports an error and is restarted by its owner). */
  breakWatches(err: unknown = new Error('fake: watch broken'), who?: string): void {
    for (const w of [...this.watches]) {
      if (who !== undefined && w.who !== who) continue;
      this.close(w);
      w.done(err);
    }
  }

  get openWatches(): number {
    return this.watches.size;
  }

  // ---- direct access (the test's own view, no request logged) ----

  get(ns: string, name: string): KubeObject | undefined {
    return clone(this.store.get(`${ns}/${name}`)?.obj);
  }

  names(ns: string): string[] {
    return [...this.store.values()].filter((s) => s.ns === ns).map((s) => s.obj.metadata.name).sort();
  }

  get resourceVersion(): string {
    return String(this.rv);
  }

  // ---- the API ----

  private async request(who: string, method: string, path: string, body: unknown): Promise<unknown> {
    const entry: LoggedRequest = { who, method, path, body: clone(body), status: 0 };
    this.requests.push(entry);
    // An answer never comes back in the caller's own turn (as over a socket).
    await Promise.resolve();
    const held = this.holds.findIndex((h) => matches(h.match, who, method, path));
    const h = held >= 0 ? this.holds.splice(held, 1)[0]! : undefined;
    if (h && !h.answer) {
      h.reached();
      await h.gate;
    }
    try {
      const fault = this.faults.findIndex((f) => matches(f.match, who, method, path));
      if (fault >= 0) {
        const f = this.faults[fault]!;
        if (--f.times <= 0) this.faults.splice(fault, 1);
        throw new KubeApiError(f.status, f.reason, `fake: ${method} ${path}: ${f.status} ${f.reason}`);
      }
      const out = this.apply(method, path, clone(body) as any);
      entry.status = 200;
      if (h?.answer) {
        h.reached();
        await h.gate;
      }
      return out;
    } catch (e) {
      entry.status = e instanceof KubeApiError ? e.status : 500;
      throw e;
    }
  }

  private apply(method: string, path: string, body: any): unknown {
    const { ns, name } = parse(path);
    const fail = (status: number, reason: string, msg: string) => {
      throw new KubeApiError(status, reason, `fake: ${method} ${path}: ${status} ${reason}: ${msg}`);
    };
    if (name === undefined) {
      if (method === 'GET') {
        const items = [...this.store.values()].filter((s) => s.ns === ns).map((s) => clone(s.obj));
        items.sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1));
        return { apiVersion: 'coordination.k8s.io/v1', kind: 'LeaseList', metadata: { resourceVersion: String(this.rv) }, items };
      }
      if (method === 'POST') {
        const n = body?.metadata?.name as string | undefined;
        if (!n) fail(422, 'Invalid', 'metadata.name: Required value');
        if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(n!)) fail(422, 'Invalid', `metadata.name: Invalid value: "${n}"`);
        const key = `${ns}/${n}`;
        if (this.store.has(key)) fail(409, 'AlreadyExists', `leases.coordination.k8s.io "${n}" already exists`);
        const obj: KubeObject = {
          ...body,
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { ...body.metadata, name: n!, namespace: ns, uid: `fake-uid-${++this.uidSeq}`, resourceVersion: String(++this.rv), creationTimestamp: new Date(0).toISOString() },
        };
        delete obj.metadata.deletionTimestamp;
        this.store.set(key, { ns, obj });
        this.written(ns, 'ADDED', obj);
        return clone(obj);
      }
      fail(405, 'MethodNotAllowed', method);
    }
    const key = `${ns}/${name}`;
    const cur = this.store.get(key);
    switch (method) {
      case 'GET':
        if (!cur) fail(404, 'NotFound', `leases.coordination.k8s.io "${name}" not found`);
        return clone(cur!.obj);
      case 'PUT': {
        if (body?.metadata?.name !== name) fail(400, 'BadRequest', 'the name of the object does not match the name on the URL');
        const rv = body.metadata.resourceVersion;
        const conditional = rv !== undefined && rv !== '';
        if (!cur) {
          // Leases allow create on update: a PUT of a missing Lease creates it, whatever resourceVersion it
          // carries — unless it names a uid (the object it was read as is gone: a precondition that fails).
          if (body.metadata.uid !== undefined) fail(409, 'Conflict', 'Precondition failed: UID in precondition does not match the UID in record (the object might have been deleted and then recreated)');
          const { resourceVersion: _rv, ...metadata } = body.metadata;
          return this.apply('POST', leasesPath(ns), { ...body, metadata });
        }
        if (!conditional) fail(422, 'Invalid', `leases.coordination.k8s.io "${name}" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update`);
        if (rv !== cur!.obj.metadata.resourceVersion) fail(409, 'Conflict', 'the object has been modified; please apply your changes to the latest version and try again');
        if (body.metadata.uid !== undefined && body.metadata.uid !== cur!.obj.metadata.uid) fail(409, 'Conflict', 'Precondition failed: UID in precondition does not match the UID in record');
        const obj: KubeObject = {
          ...body,
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { ...body.metadata, name, namespace: ns, uid: cur!.obj.metadata.uid, creationTimestamp: cur!.obj.metadata.creationTimestamp, resourceVersion: String(++this.rv) },
        };
        cur!.obj = obj;
        this.written(ns, 'MODIFIED', obj);
        return clone(obj);
      }
      case 'DELETE': {
        if (!cur) fail(404, 'NotFound', `leases.coordination.k8s.io "${name}" not found`);
        const pre = body?.preconditions ?? {};
        if (pre.uid !== undefined && pre.uid !== cur!.obj.metadata.uid) fail(409, 'Conflict', 'Precondition failed: UID in precondition does not match the UID in record');
        if (pre.resourceVersion !== undefined && pre.resourceVersion !== cur!.obj.metadata.resourceVersion) fail(409, 'Conflict', 'Precondition failed: ResourceVersion in precondition does not match');
        this.store.delete(key);
        const obj: KubeObject = { ...cur!.obj, metadata: { ...cur!.obj.metadata, resourceVersion: String(++this.rv) } };
        this.written(ns, 'DELETED', obj);
        return clone(obj);
      }
      default:
        return fail(405, 'MethodNotAllowed', method);
    }
  }

  private written(ns: string, type: WatchEvent['type'], obj: KubeObject): void {
    const event: WatchEvent = { type, object: clone(obj) };
    this.history.push({ rv: Number(obj.metadata.resourceVersion), ns, event });
    for (const w of this.watches) {
      if (w.ns !== ns) continue;
      w.queue.push(event);
      this.schedule(w);
    }
  }

  private async openWatch(who: string, path: string, query: Record<string, unknown>, cb: (phase: string, obj: any) => void, done: (err: any) => void): Promise<{ abort(): void }> {
    const { ns, name } = parse(path);
    if (name !== undefined) throw new KubeApiError(400, 'BadRequest', 'fake: watch a collection');
    this.watchQueries.push({ who, query: { ...query } });
    const from = Number(query.resourceVersion ?? '') || this.rv;
    const w: OpenWatch = { who, ns, queue: this.history.filter((h) => h.ns === ns && h.rv > from).map((h) => h.event), cb, done, closed: false, scheduled: false };
    this.watches.add(w);
    this.schedule(w);
    return { abort: () => this.close(w) };
  }

  private close(w: OpenWatch): void {
    w.closed = true;
    this.watches.delete(w);
  }

  private schedule(w: OpenWatch): void {
    if (w.scheduled || w.closed) return;
    w.scheduled = true;
    setImmediate(() => {
      w.scheduled = false;
      if (w.closed || this.paused.has(w.who)) return;
      while (w.queue.length > 0 && !w.closed) {
        const e = w.queue.shift()!;
        if (this.drops.some((d) => (d.who === undefined || d.who === w.who) && d.pred(e))) continue;
        w.cb(e.type, clone(e.object));
      }
    });
  }
}

/** The Lease collection path of a namespace. */
export const leasesPath = (ns: string, name?: string): string => `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases${name === undefined ? '' : `/${name}`}`;
