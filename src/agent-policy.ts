/**
 * Service traffic policy in the agent (part of the composition root): the
 * policy pipeline fed from intent (CNP, CCNP, loadBalancerSourceRanges) and
 * from the l2-announce table (which service IPs this node announces, on which
 * interfaces), the service-policy table reconciled into the policy program,
 * and the program attached on every announcing interface at tc priority 2.
 *
 * The program is loaded only once some intent carries policy: an agent
 * without any never touches tc priority 2.
 *
 * Restart (a crash, kill -9, an upgrade in place): the policy maps are pinned
 * (`<pin dir>/policy/`). A restarted agent reuses them with their entries —
 * the previous program, still attached, keeps enforcing from them — writes
 * its first revisions around the slots in force (ops.adopt()), and attaches
 * its own program (BPF_TC_F_REPLACE: atomic) once that revision is realized.
 * Entries no row wants are pruned only once the service-policy table is
 * initialized: the first pass after the L2 announcement table is complete.
 *
 * Clean stop (SIGTERM: the agent has withdrawn its IPs): the program is
 * detached from every interface. An interface deleted and re-created (a new
 * ifindex under the same name) is attached again on the next pass; one no
 * longer announcing anything is detached.
 */
import { existsSync } from 'node:fs';
import type { Clock } from './core/clock.js';
import type { Disposable } from './core/disposable.js';
import { describeError } from './core/errors.js';
import type { Logger } from './core/logger.js';
import type { Initializer, RWTable, StateDB } from './core/statedb/index.js';
import { Trigger } from './core/trigger.js';
import { ruleSetsFromSnapshot, servicePortsOf } from './controlplane/policy/intake.js';
import { PolicyPipeline } from './controlplane/policy/pipeline.js';
import type { ServiceInfo } from './controlplane/policy/selection.js';
import { pinnedMapPath } from './datapath/policy/program.js';
import { PolicyStack } from './datapath/policy/stack.js';
import { bgpRoutesTable } from './datapath/tables/bgp-routes.js';
import { birdConfigTable } from './datapath/tables/bird-config.js';
import { l2AnnounceTable } from './datapath/tables/l2-announce.js';
import { servicePolicyTable, type ServicePolicyRow } from './datapath/tables/service-policy.js';
import type { IntentSnapshot } from './intent/snapshot.js';
import { serviceSelectorLabels } from './intent/service.js';
import { libbpf } from './os/libbpf.js';
import { IprouteRouteLookup, type RouteLookup } from './os/route-lookup.js';

export interface AgentPolicyDeps {
  db: StateDB;
  clock: Clock;
  log: Logger;
  /** Pin the policy maps here (a restart keeps enforcing); absent: private maps. */
  pinDir?: string;
  /** Interfaces toward BGP peers (default: `ip route get`). */
  routes?: RouteLookup;
}

export interface PolicyStatus {
  revision: number;
  realizedRevision: number;
  rules: number;
  prefixes: number;
  interfaces: string[];
  services: Array<{ service: string; svcId: number; ips: readonly string[]; revision: number; realized: number | undefined; rules: ServicePolicyRow['rules'] }>;
  lastError?: string;
}

export interface PolicyDetail extends PolicyStatus {
  tables: readonly ServicePolicyRow[];
  drops: Array<{ service: string; rule: number; packets: bigint }>;
}

export class AgentPolicy implements Disposable {
  private stackInstance: PolicyStack | undefined;
  readonly pipeline: PolicyPipeline;
  private readonly sync: Trigger;
  private snapshot: IntentSnapshot | undefined;
  private ruleKeys = new Set<string>();
  private serviceKeys = new Set<string>();
  private readonly attached = new Map<string, number>();
  private readonly abort = new AbortController();
  private lastError: string | undefined;
  private readonly delayListeners: Array<(seconds: number, source: string) => void> = [];
  /** Done once the table holds the first complete intent: only then may the reconciler prune adopted entries. */
  private readonly init: Initializer;

  constructor(private readonly deps: AgentPolicyDeps) {
    deps.db.registerTable(servicePolicyTable);
    this.init = deps.db.registerInitializer(servicePolicyTable as RWTable<ServicePolicyRow>, 'policy');
    this.pipeline = new PolicyPipeline({
      db: deps.db,
      table: servicePolicyTable as RWTable<ServicePolicyRow>,
      clock: deps.clock,
      log: deps.log,
      waitRealized: (rev) => this.stack.realized(rev),
      observeDelay: (seconds, source) => {
        for (const l of this.delayListeners) l(seconds, source);
      },
    });
    this.sync = new Trigger({ name: 'policy-sync', clock: deps.clock, log: deps.log, run: () => this.pass(), onError: (e) => this.fail(e) });
  }

  start(): void {
    for (const table of [l2AnnounceTable, bgpRoutesTable, birdConfigTable]) void this.watchTable(table);
  }

  /** policy_implementation_delay_seconds (the metrics module subscribes). */
  onDelay(listener: (seconds: number, source: string) => void): void {
    this.delayListeners.push(listener);
  }

  /** Loaded on first need (no policy anywhere: no program). */
  get stack(): PolicyStack {
    if (!this.stackInstance) {
      const stack = new PolicyStack({ db: this.deps.db, table: servicePolicyTable, clock: this.deps.clock, log: this.deps.log, ...(this.deps.pinDir !== undefined ? { pinDir: this.deps.pinDir } : {}) });
      stack.start();
      this.stackInstance = stack;
    }
    return this.stackInstance;
  }

  /** Interfaces changed: check the attachments on the next pass. */
  linksChanged(): void {
    this.sync.trigger();
  }

  setSnapshot(snapshot: IntentSnapshot): void {
    this.snapshot = snapshot;
    this.sync.trigger();
  }

  private async watchTable(table: typeof l2AnnounceTable | typeof bgpRoutesTable | typeof birdConfigTable): Promise<void> {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      this.sync.trigger();
      try {
        await this.deps.db.watch(table, signal);
      } catch {
        return; // aborted
      }
    }
  }

  private fail(e: unknown): void {
    this.lastError = describeError(e);
    this.deps.log.warn({ err: this.lastError }, 'service policy sync failed');
  }

  private async pass(): Promise<void> {
    const snapshot = this.snapshot;
    if (!snapshot) return;
    const sets = ruleSetsFromSnapshot(snapshot);
    const db = this.deps.db;
    const announced = db.isInitialized(l2AnnounceTable) && db.isInitialized(bgpRoutesTable) && db.isInitialized(birdConfigTable);
    if (sets.length === 0 && this.ruleKeys.size === 0 && !this.stackInstance && !this.pinnedByEarlierRun()) {
      // No policy, ever (and none left pinned by an earlier run): no work, nothing to load.
      if (announced) this.init.done();
      return;
    }
    // Which service IPs this node announces (L2) or advertises (BGP), and where traffic to them comes in.
    const ips = new Map<string, Set<string>>();
    const add = (service: string, ip: string) => {
      let set = ips.get(service);
      if (!set) ips.set(service, (set = new Set()));
      set.add(ip);
    };
    const ifaces = new Set<string>();
    const txn = db.readTxn();
    for (const row of txn.list(l2AnnounceTable)) {
      ifaces.add(row.iface);
      for (const o of row.origins) if (o.startsWith('service:')) add(o.slice('service:'.length), row.ip);
    }
    // BGP: an advertised IP draws traffic in on the interfaces facing the peers, whether or not L2 owns it here.
    const bgpRows = txn.list(bgpRoutesTable);
    for (const row of bgpRows) for (const service of row.services) add(service, row.ip);
    if (bgpRows.length > 0) for (const name of await this.peerInterfaces()) ifaces.add(name);
    const services: ServiceInfo[] = [...snapshot.services].map(([key, s]) => ({
      service: key,
      namespace: s.metadata.namespace,
      labels: serviceSelectorLabels(s),
      ips: [...(ips.get(key) ?? [])].sort(),
      ports: servicePortsOf(s),
    }));
    const gone = [...this.serviceKeys].filter((k) => !snapshot.services.has(k));
    this.serviceKeys = new Set(snapshot.services.keys());
    const keys = new Set(sets.map((s) => s.key));
    for (const k of this.ruleKeys) if (!keys.has(k)) sets.push({ key: k, rules: [] });
    this.ruleKeys = keys;
    const a = await this.pipeline.submit({ kind: 'services', upsert: services, remove: gone }, 'intent');
    const b = await this.pipeline.submit({ kind: 'rules', sets }, 'intent');
    for (const e of [...a.errors, ...b.errors]) this.deps.log.warn({ service: e.service, err: e.error }, 'service policy not applied');
    // The table now holds the whole intent over a complete announcement table: pruning is safe.
    if (announced) this.init.done();
    await Promise.all([a.realized, b.realized]);
    // Attach only once the maps hold the revision (see the header).
    this.syncAttachments(ifaces);
    this.lastError = undefined;
  }

  /** The interfaces the node reaches its BGP peers through (their sessions, and the routes they send, use them). */
  private async peerInterfaces(): Promise<string[]> {
    const bird = this.deps.db.readTxn().get(birdConfigTable, 'bird');
    const routes = (this.deps.routes ??= new IprouteRouteLookup());
    const out = await Promise.all((bird?.peers ?? []).map((p) => routes.outputInterface(p.address)));
    return [...new Set(out.filter((x): x is string => x !== undefined && x !== 'lo'))];
  }

  /** Whether pinned maps of an earlier run exist (their entries must be pruned even if this run has no policy). */
  private pinnedByEarlierRun(): boolean {
    return this.deps.pinDir !== undefined && existsSync(pinnedMapPath(this.deps.pinDir, 'svc_v4'));
  }

  /**
   * The program on exactly the announcing interfaces: attached where it is
   * not, again where the interface was re-created (a new ifindex under the
   * same name), removed where nothing is announced any more.
   */
  private syncAttachments(ifaces: ReadonlySet<string>): void {
    for (const name of ifaces) {
      const ifindex = libbpf().ifNameToIndex(name);
      if (ifindex <= 0) continue; // gone: its announcement rows go too, and the next pass forgets it
      const before = this.attached.get(name);
      // Re-created interfaces may get the same ifindex back: ask the kernel whether our filter is there.
      if (before === ifindex && this.stack.isAttached(ifindex)) continue;
      if (before !== undefined && before !== ifindex) this.stack.detach(before); // re-created: the old ifindex is gone (false), forget it
      this.stack.attach(ifindex);
      this.attached.set(name, ifindex);
      this.deps.log.info({ iface: name, ifindex }, 'policy program attached');
    }
    for (const [name, ifindex] of this.attached) {
      if (ifaces.has(name) && libbpf().ifNameToIndex(name) === ifindex) continue;
      if (!ifaces.has(name)) this.stackInstance?.detach(ifindex);
      this.attached.delete(name);
    }
  }

  status(): PolicyStatus {
    const realized = this.stackInstance?.ops.realized() ?? new Map<string, number>();
    return {
      revision: this.pipeline.repository.revision,
      realizedRevision: this.pipeline.realizedRevision,
      rules: this.pipeline.repository.ruleCount,
      prefixes: this.pipeline.repository.prefixCount,
      interfaces: [...this.attached.keys()].sort(),
      services: this.deps.db
        .readTxn()
        .list(servicePolicyTable)
        .map((r) => ({ service: r.service, svcId: r.svcId, ips: r.ips, revision: r.revision, realized: realized.get(r.service), rules: r.rules })),
      ...(this.lastError !== undefined ? { lastError: this.lastError } : {}),
    };
  }

  /** The service-policy reconciler's rows not done (none before a policy exists). */
  notDone() {
    return this.stackInstance?.reconciler.notDone() ?? [];
  }

  /** Everything `herald policy` shows: status, each service's compiled prefixes, live drop counters. */
  detail(): PolicyDetail {
    const byId = new Map(this.deps.db.readTxn().list(servicePolicyTable).map((r) => [r.svcId, r.service]));
    return {
      ...this.status(),
      tables: this.deps.db.readTxn().list(servicePolicyTable),
      drops: (this.stackInstance?.program.drops() ?? []).map((d) => ({ service: byId.get(d.svcId) ?? `#${d.svcId}`, rule: d.rule, packets: d.packets })),
    };
  }

  /** Clean stop: the program leaves every interface (see the header); the pinned maps stay for the next run. */
  dispose(): void {
    this.abort.abort();
    this.sync.dispose();
    this.pipeline.dispose();
    if (this.stackInstance) {
      try {
        this.stackInstance.detachAll();
      } catch (e) {
        this.deps.log.warn({ err: describeError(e) }, 'detaching the policy program failed');
      }
      this.stackInstance.dispose();
    }
    this.attached.clear();
  }

  /** Resolves when the latest intent is enforced (tests, tools). */
  async idle(): Promise<void> {
    await this.sync.idle();
    await this.pipeline.idle();
  }
}
