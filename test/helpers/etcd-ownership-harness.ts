/**
 * The harness of the fast ownership tests (etcd-ownership-fast*.test.ts):
 * members (a session and an ownership on one manual clock per test, a
 * recording log, a manual wire watch, recorded events and owned sets), a
 * pump that runs the clock's due timers until a condition holds, barriers,
 * and leases and keys of simulated other nodes written with the suite's own
 * client.
 */
import { waitFor } from '../../lab/lab.js';
import type { OwnerWatch, WatchTarget } from '../../src/controlplane/ownership/edges.js';
import type { EventBody } from '../../src/core/events.js';
import { EtcdOwnership, type EtcdOwnershipOptions } from '../../src/store/etcd/ownership.js';
import { rendezvousScore } from '../../src/controlplane/ownership/rendezvous.js';
import { encodeHandoverRecord, parseHandoverRecord } from '../../src/store/etcd/handover-record.js';
import { EtcdSession } from '../../src/store/etcd/session.js';
import { ManualClock } from './manual-clock.js';
import type { RealEtcdSuite } from './real-etcd-suite.js';
import { recordingLogger, type LogLine } from './recording-logger.js';

export const IP = '198.51.100.7';
export const IP2 = '198.51.100.8';
export const START = 10_000;
export const OPTS: EtcdOwnershipOptions = { onStoreLoss: 'withdraw', contendDelayMs: 300, handoverHoldMs: 5000, skipPreferredMs: 20_000, fullRefreshMs: 30_000, releaseGraceMs: 3000 };

export class ManualWatch implements OwnerWatch {
  targets: readonly WatchTarget[] = [];
  private cb: (node: string, ip: string) => void = () => {};
  /** What stillSilent() answers. */
  silentStill = true;
  setTargets(t: readonly WatchTarget[]): void {
    this.targets = t;
  }
  onSilent(cb: (node: string, ip: string) => void): void {
    this.cb = cb;
  }
  stillSilent(): boolean {
    return this.silentStill;
  }
  silence(node: string, ip = IP): void {
    this.cb(node, ip);
  }
}

/** `nodes`, the most preferred for `ip` first. */
export const byPref = (ip: string, nodes: string[]): string[] => [...nodes].sort((a, b) => (rendezvousScore(b, ip) > rendezvousScore(a, ip) ? 1 : -1));

export interface Member {
  node: string;
  session: EtcdSession;
  own: EtcdOwnership;
  log: ReturnType<typeof recordingLogger>;
  watch: ManualWatch;
  events: EventBody[];
  /** How often the ownership said the owners changed (deps.onOwners). */
  ownersCalls: { n: number };
  /** Every owned set the ownership emitted, in order. */
  sets: Array<ReadonlySet<string>>;
  owned(): ReadonlySet<string>;
  /** The datapath's apply (replace it to fail or stall). */
  apply: { fn: () => void | Promise<void> };
  /** Candidate IPs (interface eth0 each), plus the barrier IPs. */
  cands(ips: string[], affinity?: Map<string, string>): void;
  /** One more candidate IP that stays (a barrier). */
  addBarrier(ip: string): void;
  /** Disposes the ownership and revokes the session's lease. */
  stop(): Promise<void>;
}

/** The harness shared by the fast ownership test files. */
export function harness(real: RealEtcdSuite) {
  let barrierN = 0;
  async function member(node: string, prefix: string, clock: ManualClock, o: Partial<EtcdOwnershipOptions> & { start?: boolean; events?: boolean; watch?: boolean } = {}): Promise<Member> {
    const log = recordingLogger();
    const session = real.own(new EtcdSession(real.sessionOptions(prefix, { ttlSeconds: 60, keepaliveMs: 10_000, marginMs: 5_000 }), { clock, log: recordingLogger() }));
    if (o.start !== false) await session.start();
    const watch = new ManualWatch();
    const events: EventBody[] = [];
    const ownersCalls = { n: 0 };
    const { start: _s, events: _e, watch: _w, ...opts } = o;
    const own = real.own(
      new EtcdOwnership(
        session,
        node,
        { clock, log, onOwners: () => void ownersCalls.n++, ...(o.watch === false ? {} : { watch }), ...(o.events === false ? {} : { events: (e: EventBody) => void events.push(e) }) },
        { ...OPTS, ...opts },
      ),
    );
    const sets: Array<ReadonlySet<string>> = [];
    const apply = { fn: (): void | Promise<void> => {} };
    let ips: string[] = [];
    let aff = new Map<string, string>();
    const barriers: string[] = [];
    const m: Member = {
      node,
      session,
      own,
      log,
      watch,
      events,
      ownersCalls,
      sets,
      owned: () => sets.at(-1) ?? new Set(),
      apply,
      cands(list, affinity) {
        ips = list;
        if (affinity) aff = affinity;
        own.setCandidates(new Map([...ips, ...barriers].map((ip) => [ip, ['eth0']])), aff);
      },
      addBarrier(ip) {
        barriers.push(ip);
        m.cands(ips);
      },
      async stop() {
        own.dispose();
        await session.revoke();
      },
    };
    if (o.start !== false) {
      await own.start(async (v) => {
        sets.push(new Set(v.owned));
        await apply.fn();
      });
    }
    return m;
  }

  /** A member that is a candidate for `ips` (IP by default), once it owns the first of them. */
  async function owning(node: string, prefix: string, clock: ManualClock, o: Parameters<typeof member>[3] = {}, ips = [IP]): Promise<Member> {
    const m = await member(node, prefix, clock, o);
    m.cands(ips);
    await until(clock, () => m.owned().has(ips[0]!), `${node} owns ${ips[0]}`, m);
    return m;
  }

  /** A member that is a candidate for IP, once it sees IP owned by `node-x` (the tests' other, simulated node). */
  async function seeingX(node: string, prefix: string, clock: ManualClock, o: Parameters<typeof member>[3] = {}): Promise<Member> {
    const m = await member(node, prefix, clock, o);
    m.cands([IP]);
    await until(clock, () => m.own.view().owners.get(IP) === 'node-x', `${node} sees node-x own ${IP}`, m);
    return m;
  }

  /** Counts `m`'s full re-reads of the store (its client's getAll) from now on. */
  function countReads(m: Member): { readonly n: number } {
    const client = m.session.client;
    const realGetAll = client.getAll.bind(client);
    const counter = { n: 0 };
    (client as { getAll: typeof client.getAll }).getAll = () => {
      counter.n++;
      return realGetAll();
    };
    return counter;
  }

  /**
   * `o`, the less preferred of node-a and node-b for IP, owns it; then the
   * more preferred one (`hi`, simulated: a candidacy key on its own lease) becomes a candidate.
   */
  async function ownerWithPreferred(prefix: string) {
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const o = await owning(lo, prefix, clock);
    const preferredLease = await lease();
    await candidacy(prefix, IP, hi, preferredLease.id);
    return { hi, lo, clock, o, preferredLease };
  }

  /**
   * `p`, the preferred of node-a and node-b for IP, owns `ips` (IP by
   * default); `s`, the other, is a candidate for them, and `p` sees it as
   * each IP's successor (its crash hand-over plan names `s`).
   */
  async function ownerAndSuccessor(prefix: string, ips = [IP]): Promise<{ p: Member; s: Member; clock: ManualClock }> {
    const [hi, lo] = byPref(IP, ['node-a', 'node-b']) as [string, string];
    const clock = clockAt();
    const p = await owning(hi, prefix, clock, {}, ips);
    await until(clock, () => ips.every((ip) => p.owned().has(ip)), `${hi} owns every IP`, p);
    const s = await member(lo, prefix, clock);
    s.cands(ips);
    await until(clock, () => ips.every((ip) => parseHandoverRecord(p.own.crashHandoverPlan()?.record ?? '')?.moves.get(ip)?.node === lo), `${hi} sees ${lo} as the successor`, p);
    return { p, s, clock };
  }

  /** Runs the due zero-delay timers (never moving time) until `cond` holds. */
  const until = (clock: ManualClock, cond: () => boolean | Promise<boolean>, what: string, m?: Member) =>
    waitFor(
      async () => {
        clock.advance(0);
        return await cond();
      },
      { timeoutMs: 5000, intervalMs: 5, what, ...(m ? { onTimeout: dump(m) } : {}) },
    );

  /**
   * A new IP only `m` is a candidate for: once `m` owns it, every pass that
   * started before this call (and its claims) has ended.
   */
  const barrier = async (m: Member, clock: ManualClock) => {
    const b = `203.0.113.${++barrierN % 250}`;
    m.addBarrier(b);
    await until(clock, () => m.owned().has(b), `${m.node} owns the barrier ${b}`, m);
  };

  const dump = (m: Member) => () => m.log.lines.map((l) => `${l.level} ${l.msg} ${JSON.stringify(l.obj)}`).join('\n');
  const lines = (m: Member, level: LogLine['level'], msg: string | RegExp) => m.log.lines.filter((l) => l.level === level && (typeof msg === 'string' ? l.msg === msg : msg.test(l.msg)));

  /** A live lease of another (simulated) node, revoked after the test. */
  const lease = async (): Promise<{ id: string; revoke: () => Promise<void> }> => {
    const l = real.raw.lease(60, { autoKeepAlive: false });
    const id = await l.grant();
    real.own({ dispose: () => void l.revoke().catch(() => undefined) });
    return { id, revoke: async () => void (await l.revoke()) };
  };
  const key = async (k: string): Promise<{ value: string; lease: string } | undefined> => {
    const kv = (await real.raw.get(k).exec()).kvs[0];
    return kv ? { value: kv.value.toString(), lease: String(kv.lease) } : undefined;
  };
  const ownerKey = (prefix: string, ip = IP) => key(`${prefix}owners/${ip}`);
  const clockAt = () => {
    const c = new ManualClock();
    c.advance(START);
    return c;
  };
  /** Another node's candidacy for `ip`, on `lease`. */
  const candidacy = (prefix: string, ip: string, node: string, leaseId: string) => real.raw.put(`${prefix}candidates/${ip}/${node}`).value('').lease(leaseId).exec();
  const ownerPut = (prefix: string, ip: string, node: string, leaseId: string) => real.raw.put(`${prefix}owners/${ip}`).value(node).lease(leaseId).exec();
  return { member, owning, seeingX, countReads, ownerWithPreferred, ownerAndSuccessor, until, barrier, dump, lines, lease, key, ownerKey, clockAt, candidacy, ownerPut, encodeHandoverRecord };
}

type Client = EtcdSession['client'];
type Watcher = Awaited<ReturnType<ReturnType<ReturnType<Client['watch']>['prefix']>['create']>>;

/** Makes every watch `client` builds from now on (with `realWatch`) go through `create(real)` at its create() step. */
export function interceptWatchCreate(client: Client, realWatch: Client['watch'], create: (real: () => Promise<Watcher>) => Promise<Watcher>): void {
  (client as { watch: Client['watch'] }).watch = () => {
    const builder = realWatch();
    const prefixOf = builder.prefix.bind(builder);
    return Object.assign(builder, {
      prefix: (p: string) => {
        const w = prefixOf(p);
        const real = w.create.bind(w);
        return Object.assign(w, { create: () => create(real) });
      },
    });
  };
}
