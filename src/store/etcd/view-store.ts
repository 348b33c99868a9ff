/**
 * The cluster view's share of etcd:
 *
 *   <prefix>view/events/<node>/<seq>   → one event (JSON), no lease: it outlives the agent;
 *                                         at most `perNode` per node (the oldest deleted)
 *   <prefix>view/nodes/<node>          → the node's card (JSON), on its lease: present while alive
 *
 * One watch on `<prefix>view/` feeds the ring; an event's id is the store
 * revision of its key, so every agent shows the same timeline in the same
 * order, and a client resuming with the last id it saw gets neither a loss
 * nor a duplicate — across an agent restart too (the ring is re-read from
 * the store). Writes of one agent are serialized, so its events keep their
 * order; `record()` resolves once the event is in the store (bounded wait),
 * which is what makes "the reason is written before the key goes" hold.
 */
import type { Watcher } from 'etcd3';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { EventRing, eventRingDefaults, type ClusterEvent, type EventBody, type EventJournal } from '../../core/events.js';
import type { EtcdSession } from './session.js';

export interface NodeCard {
  node: string;
  version: string;
  startedAt: string;
  interfaces: string[];
  owned: number;
  lastError?: string;
  /** This node's view server, when it listens beyond localhost. */
  viewUrl?: string;
  updatedAt: string;
}

export interface ViewStoreOptions {
  /** Events kept in the store per node. */
  perNode: number;
  /** Longest a writer waits for an event to be stored. */
  writeTimeoutMs: number;
}

export const viewStoreDefaults: ViewStoreOptions = { perNode: 500, writeTimeoutMs: 1000 };

/** Hostile or broken values are bounded: a card or event larger than this is ignored. */
const MAX_VALUE_BYTES = 64 * 1024;

export class EtcdViewStore implements EventJournal {
  readonly ring = new EventRing(eventRingDefaults);
  private readonly nodeCards = new Map<string, NodeCard>();
  private readonly eventsPrefix: string;
  private readonly nodesPrefix: string;
  private readonly viewPrefix: string;
  private readonly ownKeys: string[] = [];
  private seq = 0;
  private chain: Promise<void> = Promise.resolve();
  private watcher: Watcher | undefined;
  private disposed = false;
  private lastCard = '';
  private readonly nodeListeners = new Set<() => void>();

  constructor(
    private readonly session: EtcdSession,
    private readonly node: string,
    private readonly log: Logger,
    private readonly opts: ViewStoreOptions = viewStoreDefaults,
  ) {
    this.viewPrefix = `${session.prefix}view/`;
    this.eventsPrefix = `${this.viewPrefix}events/`;
    this.nodesPrefix = `${this.viewPrefix}nodes/`;
  }

  /** Where this node's events go (the supervisor records a crash there). */
  get journalPrefix(): string {
    return `${this.eventsPrefix}${this.node}/`;
  }

  /** Reads what the store holds (our own event keys too), then follows it. */
  async start(): Promise<void> {
    await this.readAll();
  }

  private async readAll(): Promise<void> {
    if (this.disposed) return;
    const client = this.session.client;
    try {
      const res = await client.getAll().prefix(this.viewPrefix).exec();
      const revision = Number(res.header.revision);
      const events: ClusterEvent[] = [];
      this.nodeCards.clear();
      this.ownKeys.length = 0;
      for (const kv of res.kvs) {
        const key = kv.key.toString();
        if (key.startsWith(`${this.eventsPrefix}${this.node}/`)) this.ownKeys.push(key);
        const parsed = this.parse(key, kv.value, Number(kv.mod_revision));
        if (parsed?.event) events.push(parsed.event);
      }
      // In key order already: etcd returns a range sorted by key.
      const lastSeq = this.ownKeys.length > 0 ? Number(this.ownKeys[this.ownKeys.length - 1]!.split('/').pop()) : 0;
      this.seq = Math.max(this.seq, Number.isFinite(lastSeq) ? lastSeq : 0);
      events.sort((a, b) => a.id - b.id);
      this.ring.add(...events);
      this.notifyNodes();
      this.watchFrom(revision + 1);
    } catch (e) {
      this.log.warn({ err: describeError(e) }, 'cluster view: reading the store failed; retrying');
      setTimeout(() => void this.readAll(), 1000).unref();
    }
  }

  private watchFrom(revision: number): void {
    const old = this.watcher;
    old?.on('error', () => {});
    void old?.cancel().catch(() => {});
    const w = this.session.client.watch().prefix(this.viewPrefix).startRevision(String(revision)).watcher();
    this.watcher = w;
    let disconnected = false;
    w.on('data', (res) => {
      if (this.watcher !== w) return;
      const events: ClusterEvent[] = [];
      let nodes = false;
      for (const ev of res.events) {
        const key = ev.kv.key.toString();
        if (ev.type === 'Delete') {
          if (key.startsWith(this.nodesPrefix)) {
            this.nodeCards.delete(key.slice(this.nodesPrefix.length));
            nodes = true;
          }
          continue;
        }
        const parsed = this.parse(key, ev.kv.value, Number(ev.kv.mod_revision));
        if (parsed?.event) events.push(parsed.event);
        if (parsed?.card) nodes = true;
      }
      this.ring.add(...events); // none: a no-op
      if (nodes) this.notifyNodes();
    });
    w.on('disconnected', () => (disconnected = true));
    w.on('connected', () => {
      if (disconnected && this.watcher === w) void this.readAll(); // the ring ignores what it already has
    });
    w.on('error', (e) => {
      if (this.watcher !== w) return;
      this.log.warn({ err: describeError(e) }, 'cluster view: watch cancelled; re-reading');
      void this.readAll();
    });
  }

  private parse(key: string, value: Buffer, revision: number): { event?: ClusterEvent; card?: NodeCard } | undefined {
    if (value.length > MAX_VALUE_BYTES) return undefined;
    try {
      if (key.startsWith(this.eventsPrefix)) {
        const node = key.slice(this.eventsPrefix.length).split('/')[0] ?? '';
        const body = JSON.parse(value.toString()) as (EventBody & { at?: string }) | null;
        // Anything but an object with a text kind (null, a number, a string, an array) has no text `kind`.
        if (typeof body?.kind !== 'string') return undefined;
        return { event: { ...body, id: revision, node, at: typeof body.at === 'string' ? body.at : new Date(0).toISOString() } as ClusterEvent };
      }
      if (key.startsWith(this.nodesPrefix)) {
        const card = JSON.parse(value.toString()) as NodeCard;
        if (typeof card !== 'object' || card === null) return undefined;
        const node = key.slice(this.nodesPrefix.length);
        this.nodeCards.set(node, { ...card, node });
        return { card };
      }
    } catch {
      // A broken value names nothing: ignored.
    }
    return undefined;
  }

  /** Stores an event; resolves once stored (or failed, or timed out: never hangs the caller). */
  record(body: EventBody): Promise<void> {
    const at = new Date().toISOString();
    const write = this.chain.then(async () => {
      if (this.disposed) return;
      this.seq = Math.max(this.seq + 1, Date.now() * 1000);
      const key = `${this.eventsPrefix}${this.node}/${String(this.seq).padStart(20, '0')}`;
      const client = this.session.client;
      try {
        await client.put(key).value(JSON.stringify({ ...body, at }));
        this.ownKeys.push(key);
        const extra = this.ownKeys.length - this.opts.perNode;
        if (extra > 0) {
          const old = this.ownKeys.splice(0, extra);
          await client.if(old[0]!, 'Version', '>', -1).then(...old.map((k) => client.delete().key(k))).commit();
        }
      } catch (e) {
        this.log.debug({ err: describeError(e), kind: body.kind }, 'cluster view: storing an event failed');
      }
    });
    this.chain = write;
    return Promise.race([write, new Promise<void>((r) => setTimeout(r, this.opts.writeTimeoutMs).unref())]);
  }

  /** Publishes this node's card on its lease when it changed (and again after a new lease). */
  async publishCard(card: Omit<NodeCard, 'node' | 'updatedAt'>): Promise<void> {
    const lease = this.session.leaseId;
    if (!lease || this.disposed) return;
    const text = JSON.stringify({ ...card, node: this.node });
    if (text + lease === this.lastCard) return;
    try {
      await this.session.client.put(`${this.nodesPrefix}${this.node}`).value(JSON.stringify({ ...card, node: this.node, updatedAt: new Date().toISOString() })).lease(lease);
      this.lastCard = text + lease;
    } catch (e) {
      this.log.debug({ err: describeError(e) }, 'cluster view: publishing the node card failed');
    }
  }

  nodes(): ReadonlyMap<string, NodeCard> {
    return this.nodeCards;
  }

  onNodes(listener: () => void): () => void {
    this.nodeListeners.add(listener);
    return () => this.nodeListeners.delete(listener);
  }

  private notifyNodes(): void {
    for (const l of this.nodeListeners) l();
  }

  dispose(): void {
    this.disposed = true;
    const w = this.watcher;
    this.watcher = undefined;
    w?.on('error', () => {});
    void w?.cancel().catch(() => {});
  }
}
