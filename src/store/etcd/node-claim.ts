/**
 * One agent per node name on a store: `<prefix>nodes/<node>` is created only
 * if absent, on the agent's lease. A second agent started with the same
 * --node (a copied unit file, a forgotten lab process) would otherwise share
 * one identity for ownership and allocation, and two machines would answer
 * for the same IPs.
 *
 * A restarted agent whose previous process died without revoking its lease
 * finds its own old key, still alive until that lease expires; it waits up to
 * one TTL (plus a second of slack) for the key to go, then refuses. A
 * gracefully stopped agent revoked its lease, so its successor claims at once.
 */
import { hostname } from 'node:os';
import { monotonicMs, type Clock } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError, describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { EtcdSession } from './session.js';

export interface NodeClaimOptions {
  /** How long to wait for a key held on another lease to expire before refusing. */
  waitMs: number;
  pollMs: number;
}

export const nodeClaimWait = (ttlSeconds: number): NodeClaimOptions => ({ waitMs: ttlSeconds * 1000 + 1000, pollMs: 200 });

export class NodeClaim implements Disposable {
  private readonly key: string;
  private readonly value: string;
  private subscription: Disposable | undefined;

  constructor(
    private readonly session: EtcdSession,
    private readonly node: string,
    private readonly deps: { clock: Clock; log: Logger },
    private readonly opts: NodeClaimOptions,
  ) {
    this.key = `${session.prefix}nodes/${node}`;
    this.value = JSON.stringify({ host: hostname(), pid: process.pid, startedAt: new Date().toISOString() });
  }

  /** Claims the name (waiting out a dead predecessor's lease) or throws HERALD_NODE_NAME_TAKEN. */
  async claim(): Promise<void> {
    const deadline = monotonicMs(this.deps.clock) + this.opts.waitMs;
    for (;;) {
      const holder = await this.tryOnce();
      if (holder === undefined) break;
      if (monotonicMs(this.deps.clock) >= deadline) {
        throw new HeraldError(
          'HERALD_NODE_NAME_TAKEN',
          `node name ${this.node} is held by another agent on this store (${this.key} = ${holder}); ` +
            `give each agent its own --node (waited ${this.opts.waitMs}ms for the key to expire)`,
        );
      }
      await new Promise<void>((r) => this.deps.clock.setTimeout(r, this.opts.pollMs));
    }
    // A new lease after a store outage: the key went with the old one (or is still on it); take it back.
    this.subscription ??= this.session.onState((s) => {
      if (s === 'live') void this.reclaim(this.session.leaseId!);
    });
  }

  /**
   * Re-claims on `lease` until it succeeds, another agent holds the name, the
   * claim is disposed, or `lease` is no longer the session's live lease (lost,
   * or replaced: the new lease's own re-claim takes over). A slow store must
   * not leave the name unheld.
   */
  private async reclaim(lease: string): Promise<void> {
    // session.leaseId is undefined unless the session is live.
    for (let attempt = 1; !this.disposed && this.session.leaseId === lease; attempt++) {
      try {
        const holder = await this.tryOnce();
        if (holder !== undefined) this.deps.log.error({ node: this.node, holder }, 'node name taken by another agent while our lease was lost');
        return;
      } catch (e) {
        this.deps.log.warn({ err: describeError(e), attempt, lease }, 'could not re-claim the node name; retrying');
        await new Promise<void>((r) => this.deps.clock.setTimeout(r, this.opts.pollMs));
      }
    }
  }

  /** undefined when the key is ours now; else the holder's value. */
  private async tryOnce(): Promise<string | undefined> {
    const lease = this.session.leaseId;
    if (!lease) throw new HeraldError('HERALD_STORE', 'no etcd lease to claim the node name on');
    const client = this.session.client;
    const res = await client.if(this.key, 'Create', '==', 0).then(client.put(this.key).value(this.value).lease(lease)).else(client.get(this.key)).commit();
    if (res.succeeded) return undefined;
    // One transaction: the key exists when the create failed, and the else branch read it.
    const kv = res.responses[0]!.response_range.kvs[0]!;
    // Ours already (this process, a former lease): move it onto the current lease.
    if (kv.lease === lease || this.session.formerLeases.has(kv.lease)) {
      const moved = await client.if(this.key, 'Lease', '==', kv.lease).then(client.put(this.key).value(this.value).lease(lease)).commit();
      if (moved.succeeded) return undefined;
    }
    return kv.value.toString();
  }

  private disposed = false;

  dispose(): void {
    this.disposed = true;
    this.subscription?.dispose();
  }
}
