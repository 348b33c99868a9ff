/**
 * The load balancer's datapath pieces, built by the composition root:
 * program + pinned maps, attach on the configured interfaces, the lb-services
 * reconciler, and the conntrack GC job (adaptive interval).
 */
import type { Clock } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError, describeError } from '../../core/errors.js';
import type { Jobs } from '../../core/jobs.js';
import type { Logger } from '../../core/logger.js';
import { Reconciler, type ReconcilerConfig } from '../../core/reconciler/reconciler.js';
import type { StateDB } from '../../core/statedb/index.js';
import type { Links } from '../../os/links.js';
import { lbServicesTable, type LbServiceRow } from '../tables/lb-services.js';
import { connectionsByVip, ConntrackGc, gcIntervalDefaults, nextGcInterval, type GcIntervalBounds, type GcPassResult } from './ct-gc.js';
import { ctEvictions } from './layout.js';
import { LbServiceOps } from './ops.js';
import { LbProgram, defaultLifetimes, detachLb, detachLbXdp, type CtLifetimes } from './program.js';
import { LbServiceWriter } from './services.js';

export interface LbOptions {
  /** Interfaces the programs attach to (the announcing interfaces). */
  interfaces: string[];
  pinDir: string;
  ctMapSize: number;
  maglevSize: number;
  lifetimes: CtLifetimes;
  gc: GcIntervalBounds;
  /** The node's IPv4 used as the source toward the backends of SNAT services. */
  snatAddress?: string;
  /** The node's IPv6, the same for IPv6 service IPs. */
  snatAddress6?: string;
  /** SNAT source ports [min, max] (default 32768–60999, the kernel's ephemeral range). */
  snatPorts?: { min: number; max: number };
  /**
   * XDP+tc (`--lb-xdp`): the XDP program on the same interfaces takes the
   * forward path of DNAT services it can send on itself (back out the same
   * interface, or to one of `targets`); everything else goes to the tc
   * programs as without it. Off: tc only.
   */
  xdp?: { targets: string[] };
  /** The service policy's pin directory (XDP leaves every policed IP to tc; see LbLoadOptions). */
  policyPinDir?: string;
}

export const lbDefaults = { ctMapSize: 262_144, maglevSize: 16381, lifetimes: defaultLifetimes, gc: gcIntervalDefaults };

export interface LbStats {
  /** ct4 entries (as of the last GC pass). */
  ctEntries: number;
  ct6Entries: number;
  /** Capacity of each table. */
  ctMax: number;
  gcDeleted: number;
  /** Entries the LRU evicted (created − deleted − live, as of the last GC pass): table pressure. */
  ctEvicted: number;
  gcPasses: number;
  gcIntervalMs: number;
  lastPass?: GcPassResult;
}

export class LbStack implements Disposable {
  readonly program: LbProgram;
  readonly gc: ConntrackGc;
  /** The IPv6 table's collector (ct6: same passes, its NAT entries with their connections). */
  readonly gc6: ConntrackGc;
  private live = { 4: 0, 6: 0 };
  readonly reconciler: Reconciler<LbServiceRow>;
  private readonly ifindexes: Array<{ name: string; ifindex: number }> = [];
  private readonly xdpAttached: Array<{ name: string; ifindex: number }> = [];
  readonly stats: LbStats;

  constructor(
    private readonly deps: { db: StateDB; links: Links; clock: Clock; log: Logger; jobs: Jobs },
    private readonly opts: LbOptions,
    reconcilerConfig: ReconcilerConfig,
  ) {
    this.program = LbProgram.load({
      pinDir: opts.pinDir,
      ctMapSize: opts.ctMapSize,
      maglevSize: opts.maglevSize,
      ...(opts.xdp && opts.policyPinDir !== undefined ? { policyPinDir: opts.policyPinDir } : {}),
    });
    this.program.setLifetimes(opts.lifetimes);
    this.program.setSnatAddress(opts.snatAddress, 4);
    this.program.setSnatAddress(opts.snatAddress6, 6);
    if (opts.snatPorts) this.program.setSnatPortRange(opts.snatPorts.min, opts.snatPorts.max);
    this.gc = new ConntrackGc(this.program.maps.ct4, {
      monotonicNs: () => deps.clock.monotonicNs(),
      snatAddress: () => opts.snatAddress,
      recordDeleted: (n) => this.program.recordDeleted(n),
    });
    this.gc6 = new ConntrackGc(this.program.maps.ct6, {
      monotonicNs: () => deps.clock.monotonicNs(),
      snatAddress: () => opts.snatAddress6,
      recordDeleted: (n) => this.program.recordDeleted(n),
    });
    this.stats = { ctEntries: 0, ct6Entries: 0, ctMax: opts.ctMapSize, gcDeleted: 0, ctEvicted: 0, gcPasses: 0, gcIntervalMs: opts.gc.minMs };
    const observe = (family: 4 | 6) => (r: GcPassResult) => {
      this.live[family] = r.remaining;
      this.stats.ctEntries = this.live[4];
      this.stats.ct6Entries = this.live[6];
      // One set of datapath counters for both tables: the eviction count needs both live counts.
      this.stats.ctEvicted = ctEvictions(this.program.stats(), this.live[4] + this.live[6]);
      this.stats.gcDeleted += r.deleted;
      if (family === 4) this.stats.gcPasses++;
      this.stats.lastPass = r;
    };
    this.gc.observe(observe(4));
    this.gc6.observe(observe(6));
    const writer = new LbServiceWriter({
      maps: this.program.maps,
      maglevSize: opts.maglevSize,
      setMaglevTable: (id, t) => this.program.setMaglevTable(id, t),
      flush: async (req) => {
        const [r4, r6] = await Promise.all([this.gc.flush(req), this.gc6.flush(req)]);
        const r = { deleted: r4.deleted + r6.deleted };
        if (r.deleted > 0) deps.log.info({ serviceId: req.serviceId, backends: req.backendIds, deleted: r.deleted }, 'connections flushed');
      },
    });
    this.reconciler = new Reconciler<LbServiceRow>(
      { name: 'lb-services', db: deps.db, table: lbServicesTable, ops: new LbServiceOps(writer), clock: deps.clock, log: deps.log },
      reconcilerConfig,
    );
  }

  private connectionCount: { at: number; byVip: ReadonlyMap<string, number>; running: boolean } = { at: -Infinity, byVip: new Map(), running: false };

  /**
   * Live connections per VIP (both conntrack tables), as of the last count:
   * asking starts a new count when the last is older than `maxAgeMs` (one
   * batched walk at a time, yielding between batches), so the cost is bounded
   * by how often anyone looks — the cluster view asks once a second while a
   * page is open — never by traffic.
   */
  connections(maxAgeMs = 2000): ReadonlyMap<string, number> {
    const c = this.connectionCount;
    const now = Date.now();
    if (!c.running && now - c.at >= maxAgeMs) {
      c.running = true;
      const ns = this.deps.clock.monotonicNs();
      void Promise.all([connectionsByVip(this.program.maps.ct4, ns), connectionsByVip(this.program.maps.ct6, ns)])
        .then(([a, b]) => (this.connectionCount = { at: Date.now(), byVip: new Map([...a, ...b]), running: false }))
        .catch((e: unknown) => {
          this.deps.log.warn({ err: describeError(e) }, 'counting LB connections failed');
          this.connectionCount = { ...this.connectionCount, at: Date.now(), running: false };
        });
    }
    return c.byVip;
  }

  async start(): Promise<void> {
    for (const name of this.opts.interfaces) {
      const link = await this.deps.links.byName(name);
      if (!link) throw new HeraldError('HERALD_LINK_NOT_FOUND', `--lb-interfaces: no interface ${name}`);
      this.program.attach(link.ifindex);
      this.ifindexes.push({ name, ifindex: link.ifindex });
      this.deps.log.info({ iface: name }, 'load balancer attached (tc ingress + egress, priority 3)');
    }
    if (this.opts.xdp) {
      const targets: number[] = [];
      for (const name of this.opts.xdp.targets) {
        const link = await this.deps.links.byName(name);
        if (!link) throw new HeraldError('HERALD_LINK_NOT_FOUND', `--lb-xdp-targets: no interface ${name}`);
        targets.push(link.ifindex);
      }
      this.program.setXdpTargets(targets);
      for (const { name, ifindex } of this.ifindexes) {
        this.program.attachXdp(ifindex);
        this.xdpAttached.push({ name, ifindex });
        this.deps.log.info({ iface: name, targets: this.opts.xdp.targets }, 'load balancer XDP attached (native; tc keeps everything XDP passes)');
      }
      // A stop leaves no XDP program behind: the tc programs (which stay, with the pinned maps,
      // so connections survive a restart) handle everything until the next agent attaches it again.
      this.deps.jobs.hook('lb-xdp', { start: () => {}, stop: () => this.detachXdp() });
    }
    this.deps.jobs.hook('lb-services', { start: () => this.reconciler.start(), stop: () => this.reconciler.dispose() });
    this.deps.jobs.oneShot('ct-gc', async (signal, health) => {
      let expected = this.opts.gc.minMs;
      let last = Date.now();
      while (!signal.aborted) {
        await sleep(expected, signal);
        if (signal.aborted) return;
        try {
          const actual = Date.now() - last;
          last = Date.now();
          const r4 = await this.gc.collect();
          const r6 = await this.gc6.collect();
          const r = { scanned: r4.scanned + r6.scanned, deleted: r4.deleted + r6.deleted };
          const ratio = r.scanned > 0 ? r.deleted / r.scanned : 0;
          expected = nextGcInterval(expected, actual, ratio, this.opts.gc);
          this.stats.gcIntervalMs = expected;
          health.ok(`scanned ${r.scanned}, deleted ${r.deleted}; next in ${Math.round(expected / 1000)} s`);
        } catch (e) {
          health.degraded(describeError(e));
        }
      }
    });
  }

  /** Detaches the programs (a clean stop). The pinned maps stay for the next agent. */
  detachXdp(): void {
    for (const { name, ifindex } of this.xdpAttached.splice(0)) {
      try {
        detachLbXdp(ifindex, name);
      } catch {
        /* the interface is gone */
      }
    }
  }

  detach(): void {
    this.detachXdp();
    for (const { name, ifindex } of this.ifindexes) {
      try {
        detachLb(ifindex, name, this.opts.pinDir);
      } catch {
        /* the interface is gone */
      }
    }
  }

  dispose(): void {
    this.program.dispose();
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
