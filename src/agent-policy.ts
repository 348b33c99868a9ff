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
 * Restart: the policy maps are not pinned. A restarted agent fills fresh maps
 * and attaches its program only once the first revision is realized in them;
 * BPF_TC_F_REPLACE then swaps programs atomically, so the previous agent's
 * program (kept alive by its tc filter, which a stop leaves in place) enforces
 * until that moment. `tc filter del dev IFACE ingress pref 2` removes it.
 */
import type { Clock } from './core/clock.js';
import type { Disposable } from './core/disposable.js';
import { describeError } from './core/errors.js';
import type { Logger } from './core/logger.js';
import type { RWTable, StateDB } from './core/statedb/index.js';
import { Trigger } from './core/trigger.js';
import { ruleSetsFromSnapshot } from './controlplane/policy/intake.js';
import { PolicyPipeline } from './controlplane/policy/pipeline.js';
import type { ServiceInfo } from './controlplane/policy/selection.js';
import { PolicyStack } from './datapath/policy/stack.js';
import { l2AnnounceTable } from './datapath/tables/l2-announce.js';
import { servicePolicyTable, type ServicePolicyRow } from './datapath/tables/service-policy.js';
import type { IntentSnapshot } from './intent/snapshot.js';
import { serviceSelectorLabels } from './intent/service.js';
import { libbpf } from './os/libbpf.js';

export interface AgentPolicyDeps {
  db: StateDB;
  clock: Clock;
  log: Logger;
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

  constructor(private readonly deps: AgentPolicyDeps) {
    deps.db.registerTable(servicePolicyTable);
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
    void this.watchAnnouncements();
  }

  /** policy_implementation_delay_seconds (the metrics module subscribes). */
  onDelay(listener: (seconds: number, source: string) => void): void {
    this.delayListeners.push(listener);
  }

  /** Loaded on first need (no policy anywhere: no program). */
  get stack(): PolicyStack {
    if (!this.stackInstance) {
      const stack = new PolicyStack({ db: this.deps.db, table: servicePolicyTable, clock: this.deps.clock, log: this.deps.log });
      stack.start();
      this.stackInstance = stack;
    }
    return this.stackInstance;
  }

  setSnapshot(snapshot: IntentSnapshot): void {
    this.snapshot = snapshot;
    this.sync.trigger();
  }

  private async watchAnnouncements(): Promise<void> {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      this.sync.trigger();
      try {
        await this.deps.db.watch(l2AnnounceTable, signal);
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
    if (sets.length === 0 && this.ruleKeys.size === 0 && !this.stackInstance) return; // no policy, ever: no work, nothing to load
    // Which service IPs this node announces, and where.
    const ips = new Map<string, Set<string>>();
    const ifaces = new Set<string>();
    for (const row of this.deps.db.readTxn().list(l2AnnounceTable)) {
      ifaces.add(row.iface);
      for (const o of row.origins) {
        if (!o.startsWith('service:')) continue;
        const key = o.slice('service:'.length);
        let set = ips.get(key);
        if (!set) ips.set(key, (set = new Set()));
        set.add(row.ip);
      }
    }
    const services: ServiceInfo[] = [...snapshot.services].map(([key, s]) => ({
      service: key,
      namespace: s.metadata.namespace,
      labels: serviceSelectorLabels(s),
      ips: [...(ips.get(key) ?? [])].sort(),
    }));
    const gone = [...this.serviceKeys].filter((k) => !snapshot.services.has(k));
    this.serviceKeys = new Set(snapshot.services.keys());
    const keys = new Set(sets.map((s) => s.key));
    for (const k of this.ruleKeys) if (!keys.has(k)) sets.push({ key: k, rules: [] });
    this.ruleKeys = keys;
    const a = await this.pipeline.submit({ kind: 'services', upsert: services, remove: gone }, 'intent');
    const b = await this.pipeline.submit({ kind: 'rules', sets }, 'intent');
    for (const e of [...a.errors, ...b.errors]) this.deps.log.warn({ service: e.service, err: e.error }, 'service policy not applied');
    await Promise.all([a.realized, b.realized]);
    // Attach only once the maps hold the revision (see the header).
    for (const name of ifaces) {
      if (this.attached.has(name)) continue;
      const ifindex = libbpf().ifNameToIndex(name);
      if (ifindex <= 0) continue;
      this.stack.attach(ifindex);
      this.attached.set(name, ifindex);
    }
    this.lastError = undefined;
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

  /** Stops; the attached program keeps enforcing the last revision (see the header). */
  dispose(): void {
    this.abort.abort();
    this.sync.dispose();
    this.pipeline.dispose();
    this.stackInstance?.dispose();
  }

  /** Resolves when the latest intent is enforced (tests, tools). */
  async idle(): Promise<void> {
    await this.sync.idle();
    await this.pipeline.idle();
  }
}
