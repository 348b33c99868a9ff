/**
 * The harness of the fast Lease ownership tests (kubernetes-lease-ownership*.test.ts):
 * nodes (a LeaseOwnership each, its own client on one in-memory Lease API —
 * test/helpers/fake-kube-leases.ts — and one manual clock), a recording log,
 * a fake wire watch, recorded owned sets, moves and fences; a pump that runs
 * the clock's due timers and the fake's deliveries until a condition holds;
 * and simulated other nodes (a node Lease the test writes and renews itself).
 */
import type { OwnershipView } from '../../src/controlplane/ownership/backend.js';
import type { OwnerWatch, WatchTarget } from '../../src/controlplane/ownership/edges.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import type { KubeClient, KubeObject } from '../../src/intent/sources/kube-client.js';
import { LeaseOwnership, type FenceRecord, type LeaseOwnershipOptions, type OwnershipMove } from '../../src/store/kubernetes/lease-ownership.js';
import { FakeLeaseApi, leasesPath } from './fake-kube-leases.js';
import { ManualClock } from './manual-clock.js';
import { recordingLogger, type LogLine } from './recording-logger.js';

export const NS = 'herald-system';
export const IP = '198.51.100.7';
export const IP2 = '198.51.100.8';
export const START = 10_000;
export const OPTS: LeaseOwnershipOptions = {
  namespace: NS,
  durationS: 6,
  renewMs: 2000,
  safetyMs: 500,
  contendDelayMs: 300,
  handoverHoldMs: 5000,
  skipPreferredMs: 60_000,
  handedBackWithinMs: 10_000,
  releaseGraceMs: 2000,
};

/** The wire, faked: the test says who went silent. */
export class FakeOwnerWatch implements OwnerWatch {
  targets: readonly WatchTarget[] = [];
  heard = false;
  private cb: (node: string, ip: string) => void = () => {};
  setTargets(targets: readonly WatchTarget[]): void {
    this.targets = targets;
  }
  onSilent(cb: (node: string, ip: string) => void): void {
    this.cb = cb;
  }
  stillSilent(): boolean {
    return !this.heard;
  }
  silent(node: string, ip: string): void {
    this.cb(node, ip);
  }
}

/** `nodes`, the most preferred for `ip` first. */
export const byPref = (ip: string, nodes: string[]): string[] => [...nodes].sort((a, b) => (rendezvousScore(b, ip) > rendezvousScore(a, ip) ? 1 : -1));

/** An IP (of 198.51.100.0/24 from 10 up) for which `first` outranks every other node named. */
export function ipPreferring(first: string, ...others: string[]): string {
  for (let i = 10; i < 250; i++) {
    const ip = `198.51.100.${i}`;
    if (others.every((o) => rendezvousScore(first, ip) > rendezvousScore(o, ip))) return ip;
  }
  throw new Error('no such IP');
}

export interface Node {
  readonly name: string;
  readonly own: LeaseOwnership;
  readonly client: KubeClient;
  readonly log: ReturnType<typeof recordingLogger>;
  readonly watch: FakeOwnerWatch;
  /** Every owned set emitted, in order. */
  readonly sets: Array<ReadonlySet<string>>;
  readonly views: OwnershipView[];
  /** For each owned set emitted: how many requests the API had seen then. */
  readonly emittedAt: number[];
  readonly moves: OwnershipMove[];
  readonly fences: FenceRecord[];
  owned(): ReadonlySet<string>;
  cands(ips: string[]): void;
}

export function harness() {
  const api = new FakeLeaseApi();
  const clock = new ManualClock();
  clock.advance(START);
  const nodes: Node[] = [];

  /** A node with its own client; started unless `start: false`. */
  async function node(name: string, o: Partial<LeaseOwnershipOptions> & { start?: boolean; elect?: string[]; /** false: no wire watch */ wire?: boolean } = {}): Promise<Node> {
    const { start, elect, wire, ...opts } = o;
    const log = recordingLogger();
    const watch = new FakeOwnerWatch();
    const client = api.client(name);
    const own = new LeaseOwnership(client, name, { log, clock, ...(wire === false ? {} : { watch }) }, { ...OPTS, ...opts });
    const sets: Array<ReadonlySet<string>> = [];
    const views: OwnershipView[] = [];
    const emittedAt: number[] = [];
    const moves: OwnershipMove[] = [];
    const fences: FenceRecord[] = [];
    own.onMove((m) => moves.push(m));
    own.onFence((f) => fences.push(f));
    for (const e of elect ?? []) own.elect(e);
    const n: Node = {
      name,
      own,
      client,
      log,
      watch,
      sets,
      views,
      emittedAt,
      moves,
      fences,
      owned: () => sets.at(-1) ?? new Set(),
      cands: (ips) => own.setCandidates(new Map(ips.map((ip) => [ip, ['eth0']] as const))),
    };
    nodes.push(n);
    if (start !== false) {
      await own.start((v) => {
        views.push(v);
        sets.push(new Set(v.owned));
        emittedAt.push(api.requests.length);
      });
      await settle();
    }
    return n;
  }

  /** Runs the due zero-delay timers and the fake's deliveries `rounds` times (time does not move). */
  async function settle(rounds = 12): Promise<void> {
    for (let i = 0; i < rounds; i++) {
      clock.advance(0);
      await new Promise((r) => setImmediate(r));
    }
  }

  /** Moves the clock `ms` forward in slices, settling after each. */
  async function advance(ms: number, slice = 100): Promise<void> {
    let left = ms;
    while (left > 0) {
      const step = Math.min(slice, left);
      clock.advance(step);
      left -= step;
      await settle();
    }
  }

  /** Settles until `cond` holds (time does not move); throws with the logs otherwise. */
  async function until(cond: () => boolean, what: string): Promise<void> {
    for (let i = 0; i < 300; i++) {
      if (cond()) return;
      await settle(1);
    }
    throw new Error(`never: ${what}\n${nodes.map((n) => `--- ${n.name}\n${dump(n)}`).join('\n')}`);
  }

  /** Advances (in slices) until `cond` holds, at most `maxMs`; returns how long it took. */
  async function advanceUntil(cond: () => boolean, what: string, maxMs: number, slice = 100): Promise<number> {
    const t0 = clock.now();
    while (!cond()) {
      if (clock.now() - t0 >= maxMs) throw new Error(`not within ${maxMs} ms: ${what}\n${nodes.map((n) => `--- ${n.name}\n${dump(n)}`).join('\n')}`);
      clock.advance(slice);
      await settle();
    }
    return clock.now() - t0;
  }

  const dump = (n: Node) => n.log.lines.map((l) => `${l.level} ${l.msg} ${JSON.stringify(l.obj)}`).join('\n');
  const lines = (n: Node, level: LogLine['level'], msg: string | RegExp) => n.log.lines.filter((l) => l.level === level && (typeof msg === 'string' ? l.msg === msg : msg.test(l.msg)));

  /** The test's own client (requests logged as 'test'). */
  const admin = api.client('test');
  const lease = (name: string) => api.get(NS, name);

  /**
   * A simulated other node: its node Lease written by the test; `renew()`
   * writes it again (a renewal others see), `remove()` deletes it.
   */
  async function simNode(name: string, durationS = OPTS.durationS) {
    const path = leasesPath(NS, `node-${name}`);
    let cur = await admin.request<KubeObject>('POST', leasesPath(NS), {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: `node-${name}`, namespace: NS },
      spec: { holderIdentity: name, leaseDurationSeconds: durationS },
    });
    return {
      get uid() {
        return cur.metadata.uid as string;
      },
      async renew() {
        cur = await admin.request<KubeObject>('PUT', path, { ...cur, spec: { ...(cur.spec as object), renewTime: new Date(clock.now()).toISOString() } });
        await settle();
      },
      async remove() {
        await admin.request('DELETE', path);
        await settle();
      },
    };
  }

  /** An IP Lease written by the test, held by `holder` (bound to `uid` when given). */
  async function ipLease(ip: string, holder: string, uid?: string, extra: Record<string, string> = {}): Promise<KubeObject> {
    const { ipLeaseName, NODE_LEASE_UID_ANNOTATION } = await import('../../src/store/kubernetes/lease-ownership.js');
    const obj = await admin.request<KubeObject>('POST', leasesPath(NS), {
      metadata: { name: ipLeaseName(ip), namespace: NS, annotations: { 'herald.dev/ip': ip, ...(uid ? { [NODE_LEASE_UID_ANNOTATION]: uid } : {}), ...extra } },
      spec: { holderIdentity: holder, leaseTransitions: 0 },
    });
    await settle();
    return obj;
  }

  /** Disposes every node (an after-each). */
  function stopAll(): void {
    for (const n of nodes) n.own.dispose();
  }

  return { api, clock, node, settle, advance, until, advanceUntil, dump, lines, admin, lease, simNode, ipLease, stopAll, nodes };
}
