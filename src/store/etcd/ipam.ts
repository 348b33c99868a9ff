/**
 * LB-IPAM coordination on etcd: the allocator is elected through a key created
 * only if absent and attached to the agent's lease; the allocation state lives
 * in one key, written in a transaction that succeeds only while this agent's
 * leadership key (and lease) still stands and the state key is what it last
 * read — a deposed allocator is fenced off. Every agent watches both keys.
 *
 * The store is not trusted to remember (issue 9). Every agent keeps a copy of
 * the state in force in --state-dir, and every save bumps its generation. A
 * store whose state is missing, older or unreadable is "behind" — a store
 * failure, never "everything was deleted": the state in force stays, the
 * agents offer their copies under ipam/copies/<node> on their own leases, and
 * the allocator, after a bounded wait for live agents' offers, writes back the
 * newest one and only then allocates again. The restored allocations are held
 * for their Services until these are applied again (see hold.ts).
 *
 * Keys without a live lease carry no authority: an allocator key or an offer
 * whose lease is 0, unknown or expired is ignored with a warning and removed
 * if unchanged since it was read.
 *
 * This file is over the usual size because the restore protocol is one state
 * machine; its pure parts are in controlplane/ipam/{state,hold}.ts.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { IKeyValue, IResponseHeader, Watcher } from 'etcd3';
import type { IpamCoordinator, IpamStateStatus } from '../../controlplane/ipam/coordinator.js';
import { applyHold, withHeld } from '../../controlplane/ipam/hold.js';
import {
  EMPTY_ALLOCATION_STATE,
  allocationStateSchema,
  generationOf,
  parseAllocationState,
  quoteBounded,
  sameAllocations,
  type AllocationState,
} from '../../controlplane/ipam/state.js';
import { systemClock, type Clock, type TimerHandle } from '../../core/clock.js';
import { describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { Trigger } from '../../core/trigger.js';
import { StateFile } from '../../os/state-file.js';
import type { EtcdSession } from './session.js';

export interface EtcdIpamOptions {
  /** Where this agent keeps its copy of the allocation state (none: no copy, for tests of other parts). */
  readonly stateDir?: string;
  /** How long the allocator waits for live agents' copies before restoring the newest. */
  readonly restoreWaitMs?: number;
  /** How long restored allocations stay held for Services that are not applied again. */
  readonly restoreHoldMs?: number;
  readonly clock?: Clock;
}

export const etcdIpamDefaults = {
  // A wiped store voids every lease; agents re-grant within about a keep-alive
  // period and offer on their next read, well inside this.
  restoreWaitMs: 3000,
  restoreHoldMs: 15 * 60_000,
};

/** The file name of the copy in --state-dir (ipam.json is the local store's). */
export const IPAM_COPY_FILE = 'ipam-etcd-copy.json';

type StoreView =
  | { readonly kind: 'missing' }
  | { readonly kind: 'valid'; readonly state: AllocationState; readonly mod: string }
  | { readonly kind: 'invalid'; readonly error: string; readonly mod: string };

interface Offer {
  readonly node: string;
  readonly state: AllocationState;
  readonly kv: IKeyValue;
}

export class EtcdIpamCoordinator implements IpamCoordinator {
  readonly kind = 'etcd' as const;
  /** The state in force: what this node announces from and allocates from. */
  private state: AllocationState = EMPTY_ALLOCATION_STATE;
  private source: IpamStateStatus['source'] = 'none';
  private restoredFrom: string | undefined;
  /** `state` may be allocated from: it came from the store, the copy or a restore, or the store is fresh and nothing is known. */
  private haveBase = false;
  private store: StoreView = { kind: 'missing' };
  /** Mod revision of the state key as last read or written ('0': absent); writes require it unchanged. */
  private storeMod = '0';
  /** Why the store's state cannot be taken as it is (undefined: it can). */
  private behind: string | undefined;
  private offers = new Map<string, Offer>();
  private myOffer: { generation: number; lease: string } | undefined;
  private leader: string | undefined;
  private leaderLease: string | undefined;
  private clusterId: string | undefined;
  private maxRevision = 0;
  private readonly liveLeases = new Set<string>();
  private readonly warnedKeys = new Set<string>();
  private restoring = false;
  /** Counts our writes of the state key, so a read that raced one is not taken for the store going back. */
  private writes = 0;
  private holdTimer: TimerHandle | undefined;
  private holdExpired = false;
  private holdConflict: string | undefined;
  private lastStateError: { message: string; at: string } | undefined;
  private loggedBadMod: string | undefined;
  private copy: StateFile<AllocationState> | undefined;
  private watcher: Watcher | undefined;
  private onChange: () => void = () => {};
  private disposed = false;
  private readonly ipamPrefix: string;
  private readonly leaderKey: string;
  private readonly stateKey: string;
  private readonly copiesPrefix: string;
  private readonly clock: Clock;
  private readonly restoreWaitMs: number;
  private readonly restoreHoldMs: number;

  constructor(
    private readonly session: EtcdSession,
    private readonly nodeName: string,
    private readonly log: Logger,
    private readonly opts: EtcdIpamOptions = {},
  ) {
    this.ipamPrefix = `${session.prefix}ipam/`;
    this.leaderKey = `${this.ipamPrefix}allocator`;
    this.stateKey = `${this.ipamPrefix}state`;
    this.copiesPrefix = `${this.ipamPrefix}copies/`;
    this.clock = opts.clock ?? systemClock;
    this.restoreWaitMs = opts.restoreWaitMs ?? etcdIpamDefaults.restoreWaitMs;
    this.restoreHoldMs = opts.restoreHoldMs ?? etcdIpamDefaults.restoreHoldMs;
    this.reads = new Trigger({ name: 'etcd ipam refresh', run: () => this.readOnce(), clock: this.clock, log });
  }

  async start(onChange: () => void): Promise<void> {
    this.onChange = onChange;
    await this.loadCopy();
    await this.watch();
    this.session.onState(() => void this.refresh());
    await this.refresh();
    await this.contend();
  }

  /** The copy in --state-dir is the state in force until the store shows a newer one. */
  private async loadCopy(): Promise<void> {
    if (this.opts.stateDir === undefined) return;
    await mkdir(this.opts.stateDir, { recursive: true, mode: 0o700 });
    this.copy = new StateFile<AllocationState>({ path: join(this.opts.stateDir, IPAM_COPY_FILE), schema: allocationStateSchema });
    try {
      const copy = await this.copy.load();
      if (!copy) return;
      this.state = copy;
      this.copied = JSON.stringify(copy);
      this.source = 'local-copy';
      this.haveBase = true;
      this.log.info({ generation: generationOf(copy), services: Object.keys(copy.allocations).length }, 'allocation state loaded from the local copy');
    } catch (e) {
      this.recordStateError(`local copy: ${describeError(e)}`);
      this.log.error({ err: describeError(e) }, 'the local copy of the allocation state is unreadable; ignoring it');
    }
  }

  // Watch first, then read: a write between the two is seen by one or the
  // other (reading first would miss a state written before the watch starts).
  private async watch(): Promise<void> {
    const old = this.watcher;
    this.watcher = undefined;
    void old?.cancel().catch(() => undefined);
    const w = await this.session.client.watch().prefix(this.ipamPrefix).create();
    if (this.disposed) {
      void w.cancel();
      return;
    }
    this.watcher = w;
    w.on('put', () => void this.refresh());
    w.on('delete', () => void this.refresh());
    w.on('connected', () => void this.refresh()); // after an etcd restart, re-read
    w.on('error', (e) => this.log.warn({ err: describeError(e) }, 'etcd ipam watch error'));
  }

  /** Reads of the leader, the state and the offers: one at a time; bursts coalesce. */
  private readonly reads: Trigger;

  /** Re-reads the leader, the state and the offers (one read at a time; bursts coalesce). */
  private refresh(): Promise<void> {
    return this.reads.triggerNow();
  }

  private signature(): string {
    return JSON.stringify([this.leader, this.leaderLease, this.state, this.isAllocator()]);
  }

  private async readOnce(): Promise<void> {
    if (this.disposed) return;
    const before = this.signature();
    const writes = this.writes;
    try {
      const res = await this.session.client.getAll().prefix(this.ipamPrefix).exec();
      if (this.writes !== writes) {
        // We wrote while this read was in flight: it may predate our write, read again.
        void this.reads.triggerNow();
        return;
      }
      await this.checkStoreIdentity(res.header);
      let leaderKv: IKeyValue | undefined;
      let stateKv: IKeyValue | undefined;
      const offers = new Map<string, Offer>();
      for (const kv of res.kvs) {
        const key = kv.key.toString();
        if (key === this.leaderKey) leaderKv = kv;
        else if (key === this.stateKey) stateKv = kv;
        else if (key.startsWith(this.copiesPrefix)) {
          const node = key.slice(this.copiesPrefix.length);
          const parsed = parseAllocationState(kv.value.toString());
          if (parsed.ok && node !== this.nodeName) offers.set(node, { node, state: parsed.state, kv });
        }
      }
      this.leader = undefined;
      this.leaderLease = undefined;
      if (leaderKv) {
        const lease = String(leaderKv.lease);
        if ((await this.leaseLive(lease)) === false) await this.dropStaleKey(leaderKv, 'allocator');
        else {
          this.leader = leaderKv.value.toString();
          this.leaderLease = lease;
        }
      }
      this.offers = offers;
      this.store = viewOf(stateKv);
      this.judgeStore();
    } catch (e) {
      // No event may come to start another read (the store holds still): read again shortly.
      this.log.debug({ err: describeError(e) }, 'etcd ipam refresh failed; reading again in 500 ms');
      if (!this.disposed) this.reads.triggerAt(this.clock.now() + 500);
      return;
    }
    await this.publishOffer().catch((e) => this.log.warn({ err: describeError(e) }, 'cannot publish or withdraw the offer of the local copy'));
    if (this.signature() !== before) this.onChange();
    if (!this.leader) await this.contend();
    else this.restoreIfNeeded();
  }

  /** A new cluster ID or a revision going back: the store was wiped or restored from a backup. */
  private async checkStoreIdentity(header: IResponseHeader): Promise<void> {
    const revision = Number(header.revision);
    const clusterId = String(header.cluster_id);
    const newCluster = this.clusterId !== undefined && clusterId !== this.clusterId;
    const wentBack = revision < this.maxRevision;
    if (newCluster || wentBack) {
      this.log.error(
        { clusterId: { was: this.clusterId, now: clusterId }, revision: { was: this.maxRevision, now: revision } },
        'etcd store wiped or rolled back: keeping the allocation state in force; the store is not trusted to remember it',
      );
      this.liveLeases.clear();
      this.myOffer = undefined;
      this.maxRevision = revision;
      // A watch resumes from the old revision, which the new store has not reached: watch anew.
      await this.watch();
    }
    this.clusterId = clusterId;
    this.maxRevision = Math.max(this.maxRevision, revision);
  }

  /** Takes the store's state if it is at least as new as the one in force; otherwise says why not. */
  private judgeStore(): void {
    const s = this.store;
    this.storeMod = s.kind === 'missing' ? '0' : s.mod;
    let behind: string | undefined;
    if (s.kind === 'valid') {
      if (this.source === 'none' || generationOf(s.state) >= generationOf(this.state)) this.accept(s.state, 'store');
      else behind = `the store holds generation ${generationOf(s.state)}, older than generation ${generationOf(this.state)} in force`;
    } else if (s.kind === 'invalid') {
      behind = 'the allocation state in the store is unreadable';
      this.recordStateError(s.error, s.mod);
    } else if (this.source !== 'none') {
      behind = `the allocation state is missing from the store while generation ${generationOf(this.state)} is known`;
    } else {
      this.haveBase = true; // a fresh store, and nothing known anywhere here: start from empty
    }
    const newest = this.newestOffer();
    if (behind === undefined && newest && (!this.haveBase || generationOf(newest.state) > generationOf(this.state))) {
      behind = `node ${newest.node} offers generation ${generationOf(newest.state)}, newer than generation ${generationOf(this.state)} in force`;
    }
    if (behind !== this.behind) {
      if (behind !== undefined) this.log.warn({ key: this.stateKey, reason: behind }, 'allocation state in the store ignored; the state in force stays');
      else this.log.info({ generation: generationOf(this.state) }, 'allocation state in the store is good again');
    }
    this.behind = behind;
  }

  private newestOffer(): Offer | undefined {
    let best: Offer | undefined;
    for (const o of this.offers.values()) if (!best || generationOf(o.state) > generationOf(best.state)) best = o;
    return best;
  }

  /** Makes `state` the one in force and keeps the local copy in step. */
  private accept(state: AllocationState, source: 'store' | 'restored', from?: string): Promise<void> {
    const same = sameAllocations(state, this.state) && generationOf(state) === generationOf(this.state);
    // The store echoing what was just restored is still the restored state.
    if (!(same && source === 'store' && this.source === 'restored')) {
      this.source = source;
      this.restoredFrom = from;
    }
    this.state = state;
    this.haveBase = true;
    this.syncHold();
    return this.saveCopy(state);
  }

  /** What the copy holds (as JSON), so an unchanged state is not rewritten. */
  private copied: string | undefined;

  private async saveCopy(state: AllocationState): Promise<void> {
    const text = JSON.stringify(state);
    if (!this.copy || text === this.copied) return;
    this.copied = text;
    try {
      await this.copy.save(state);
    } catch (e) {
      this.copied = undefined;
      this.log.error({ err: describeError(e) }, 'cannot write the local copy of the allocation state');
    }
  }

  /** While the store is behind, offer the state in force to the allocator (on our own lease). */
  private async publishOffer(): Promise<void> {
    const lease = this.session.leaseId;
    const key = `${this.copiesPrefix}${this.nodeName}`;
    const offering = this.behind !== undefined && this.source !== 'none';
    if (offering && lease) {
      const generation = generationOf(this.state);
      if (this.myOffer?.generation === generation && this.myOffer.lease === lease) return;
      await this.session.client.put(key).value(JSON.stringify(this.state)).lease(lease);
      this.myOffer = { generation, lease };
      this.log.info({ key, generation }, 'offering the local copy of the allocation state');
    } else if (!offering && this.myOffer) {
      this.myOffer = undefined;
      await this.session.client.delete().key(key);
    }
  }

  /** true: live; false: lease 0, unknown or expired; undefined: could not tell now. */
  private async leaseLive(lease: string): Promise<boolean | undefined> {
    if (lease === '0') return false;
    if (lease === this.session.leaseId || this.liveLeases.has(lease)) return true;
    try {
      const res = await this.session.client.leaseClient.leaseTimeToLive({ ID: lease });
      if (Number(res.TTL) < 0) return false; // -1: expired or never granted
      this.liveLeases.add(lease);
      return true;
    } catch (e) {
      this.log.debug({ err: describeError(e), lease }, 'cannot check a lease');
      return undefined;
    }
  }

  /** A key whose lease is not live: ignored, and removed if unchanged since read (so a real agent can take its place). */
  private async dropStaleKey(kv: IKeyValue, what: string): Promise<void> {
    const key = kv.key.toString();
    const seen = `${key}@${kv.mod_revision}`;
    if (!this.warnedKeys.has(seen)) {
      this.warnedKeys.add(seen);
      this.log.warn({ key, lease: String(kv.lease), value: quoteBounded(kv.value.toString()) }, `ignoring ${what} key ${key}: its lease is not live; removing it`);
    }
    try {
      await this.session.client.if(key, 'Mod', '==', kv.mod_revision).then(this.session.client.delete().key(key)).commit();
    } catch (e) {
      this.log.debug({ err: describeError(e), key }, 'cannot remove a stale key');
    }
  }

  private recordStateError(message: string, mod?: string): void {
    this.lastStateError = { message, at: new Date(this.clock.now()).toISOString() };
    if (mod === undefined || mod === this.loggedBadMod) return;
    this.loggedBadMod = mod;
    this.log.error(
      { key: this.stateKey, error: message, generationInForce: generationOf(this.state) },
      'allocation state in etcd cannot be parsed: the last good state stays in force and nothing is allocated from it',
    );
  }

  private async contend(): Promise<void> {
    const lease = this.session.leaseId;
    if (this.disposed || !lease || this.leader) return;
    try {
      const res = await this.session.client
        .if(this.leaderKey, 'Create', '==', 0)
        .then(this.session.client.put(this.leaderKey).value(this.nodeName).lease(lease))
        .commit();
      if (res.succeeded) {
        this.leader = this.nodeName;
        this.leaderLease = lease;
        this.log.info({}, 'elected LB-IPAM allocator');
        this.onChange();
        this.restoreIfNeeded();
      }
    } catch (e) {
      this.log.debug({ err: describeError(e) }, 'allocator election attempt failed');
    }
  }

  private isLeader(): boolean {
    return this.leader === this.nodeName && this.leaderLease !== undefined && this.leaderLease === this.session.leaseId;
  }

  private restoreIfNeeded(): void {
    if (this.isLeader() && this.behind !== undefined && !this.restoring && !this.disposed) void this.restore();
  }

  /**
   * The allocator's answer to a store that is behind: wait a bounded time for
   * live agents' offers, write back the newest state anyone holds (its own
   * included), and only then allocate again.
   */
  private async restore(): Promise<void> {
    this.restoring = true;
    let retry = false;
    // The store's state key as this restore knows it: a change after that (a read made while we
    // restored could not start another restore) is looked at again when this one ends.
    let knownMod = this.storeMod;
    this.onChange();
    this.log.warn({ reason: this.behind, waitMs: this.restoreWaitMs }, "collecting live agents' copies of the allocation state before restoring");
    try {
      await new Promise<void>((r) => this.clock.setTimeout(r, this.restoreWaitMs));
      await this.refresh();
      if (this.disposed || !this.isLeader() || this.behind === undefined) return;
      const candidates: Array<{ node: string; state: AllocationState }> = [];
      if (this.haveBase && this.source !== 'none') candidates.push({ node: this.nodeName, state: this.state });
      for (const offer of this.offers.values()) {
        if ((await this.leaseLive(String(offer.kv.lease))) === false) await this.dropStaleKey(offer.kv, 'allocation copy');
        else candidates.push(offer);
      }
      // Newest generation wins; on a tie our own (listed first).
      const best = candidates.reduce<(typeof candidates)[number] | undefined>((b, c) => (!b || generationOf(c.state) > generationOf(b.state) ? c : b), undefined);
      if (!best) {
        this.log.error({ key: this.stateKey, reason: this.behind }, 'no live agent holds a good allocation state: not allocating until the state in etcd is repaired');
        return;
      }
      const storeGeneration = this.store.kind === 'valid' ? generationOf(this.store.state) : -1;
      const restored = withHeld(
        { ...best.state, generation: Math.max(generationOf(best.state), storeGeneration + 1) },
        [...(best.state.held ?? []), ...Object.keys(best.state.allocations)],
      );
      if (!(await this.write(restored))) {
        this.log.warn({}, 'restoring the allocation state was fenced off; re-reading');
        retry = true;
        await this.refresh();
        return;
      }
      this.log.warn(
        { generation: generationOf(best.state), node: best.node, reason: this.behind, held: restored.held?.length ?? 0 },
        `store wiped or rolled back: restored allocation generation ${generationOf(best.state)} from node ${best.node}`,
      );
      this.behind = undefined;
      knownMod = this.storeMod;
      await this.accept(restored, 'restored', best.node);
      await this.publishOffer();
    } catch (e) {
      retry = true;
      this.log.warn({ err: describeError(e) }, 'restoring the allocation state failed; retrying');
    } finally {
      this.restoring = false;
      this.onChange();
      // Fenced off or failed, or the store changed again while we restored (reads made meanwhile
      // could not start another restore, and no change may come to start one): restore again
      // (each try waits restoreWaitMs). A store that holds still with nothing to restore from is not retried.
      if (retry || this.storeMod !== knownMod) this.restoreIfNeeded();
    }
  }

  /** Writes the state key while we are the allocator and the key is as we last saw it. */
  private async write(state: AllocationState): Promise<boolean> {
    const lease = this.session.leaseId;
    if (!lease || !this.isLeader()) return false;
    this.writes++; // before and after: a read overlapping the write in any way is redone
    const res = await this.session.client
      .if(this.leaderKey, 'Value', '==', this.nodeName)
      .and(this.leaderKey, 'Lease', '==', lease)
      .and(this.stateKey, 'Mod', '==', this.storeMod)
      .then(this.session.client.put(this.stateKey).value(JSON.stringify(state)))
      .commit()
      .finally(() => this.writes++);
    if (res.succeeded) {
      this.storeMod = String(res.header.revision);
      this.store = { kind: 'valid', state, mod: this.storeMod };
      this.maxRevision = Math.max(this.maxRevision, Number(res.header.revision));
    }
    return res.succeeded;
  }

  /** Holds expire after restoreHoldMs: Services never applied again give their IPs back. */
  private syncHold(): void {
    if ((this.state.held?.length ?? 0) === 0) {
      this.holdTimer?.cancel();
      this.holdTimer = undefined;
      this.holdExpired = false;
      return;
    }
    if (this.holdTimer || this.holdExpired) return;
    this.holdTimer = this.clock.setTimeout(() => {
      this.holdTimer = undefined;
      this.holdExpired = true;
      this.log.info({ services: this.state.held }, 'releasing restored allocations of Services that were not applied again');
      this.onChange();
    }, this.restoreHoldMs);
  }

  isAllocator(): boolean {
    return this.isLeader() && this.haveBase && this.behind === undefined && !this.restoring;
  }

  current(): AllocationState {
    return this.state;
  }

  async save(state: AllocationState): Promise<boolean> {
    if (!this.isAllocator()) return false;
    const held = this.holdExpired ? { ok: true as const, state: withHeld(state, []) } : applyHold(state, this.state);
    if (!held.ok) {
      if (held.conflict !== this.holdConflict) this.log.warn({ conflict: held.conflict }, 'not persisting an allocation that gives a held IP away');
      this.holdConflict = held.conflict;
      return false;
    }
    this.holdConflict = undefined;
    if (sameAllocations(held.state, this.state) && JSON.stringify(held.state.held ?? []) === JSON.stringify(this.state.held ?? [])) return true;
    const next: AllocationState = { ...held.state, generation: generationOf(this.state) + 1 };
    if (await this.write(next)) {
      await this.accept(next, 'store');
      return true;
    }
    this.log.warn({}, 'allocation write fenced off: no longer the allocator, or the state changed under us');
    await this.refresh();
    return false;
  }

  allocator(): string | undefined {
    return this.leader;
  }

  status(): IpamStateStatus {
    const waiting = !this.isLeader() || this.isAllocator()
      ? undefined
      : this.restoring
        ? `restoring the allocation state (${this.behind ?? 'store behind'})`
        : (this.behind ?? (this.haveBase ? undefined : 'no good allocation state known'));
    return {
      ...(this.leader ? { allocator: this.leader } : {}),
      generation: generationOf(this.state),
      source: this.source,
      ...(this.restoredFrom ? { restoredFrom: this.restoredFrom } : {}),
      ...(this.state.held?.length ? { held: this.state.held.length } : {}),
      ...(waiting ? { waiting } : this.holdConflict ? { waiting: `holding restored IPs: ${this.holdConflict}` } : {}),
      ...(this.lastStateError ? { lastStateError: this.lastStateError } : {}),
    };
  }

  dispose(): void {
    this.disposed = true;
    this.reads.dispose();
    this.holdTimer?.cancel();
    void this.watcher?.cancel();
  }
}

function viewOf(kv: IKeyValue | undefined): StoreView {
  if (!kv) return { kind: 'missing' };
  const mod = String(kv.mod_revision);
  const parsed = parseAllocationState(kv.value.toString());
  return parsed.ok ? { kind: 'valid', state: parsed.state, mod } : { kind: 'invalid', error: parsed.error, mod };
}
