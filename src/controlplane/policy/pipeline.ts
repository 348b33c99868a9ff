/**
 * The policy pipeline (Cilium's PolicyAdd path, for services):
 *
 *   submit(change) ──queue──▶ one change at a time (a Trigger pass drains
 *   the queue in order): repository.replace → bump revision → the services
 *   the removed and added rules select (and only those) get their effective
 *   policy recomputed (a pure function: rules → compiled LPM table); a
 *   service whose result is unchanged is not written → one statedb write
 *   txn for the rest → the caller gets the new revision (or the error).
 *
 * An IP several services share (LB-IPAM's sharing key) is taken out of
 * their rows and gets a row of its own, keyed `ip:<address>`, merged from
 * the sharing services' rules each restricted to that service's ports
 * (shared.ts): each service keeps its own rules on its own ports.
 *
 * The generic reconciler then applies the service-policy table to the BPF
 * maps (datapath/policy/ops.ts). `waitRealized` resolves once it has; the
 * time from enqueue to then is observed as policy_implementation_delay_seconds.
 */
import { monotonicMs, type Clock } from '../../core/clock.js';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError, describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { RWTable, StateDB } from '../../core/statedb/index.js';
import { Trigger } from '../../core/trigger.js';
import type { ServicePolicyRow } from '../../datapath/tables/service-policy.js';
import { compilePolicy, toPrefixEntries } from './compile.js';
import type { RuleSetInput } from './intake.js';
import { formatPrefix, PROTO_NAME, withDefaultDenySwitch, type PolicyRule } from './model.js';
import { PolicyRepository, type StoredRule } from './repository.js';
import { SelectionIndex, type ServiceInfo } from './selection.js';
import { resolveNamedPorts } from './named-ports.js';
import { mergeSharedRules } from './shared.js';

/** The row key of an IP several services share. */
export const SHARED_ROW_PREFIX = 'ip:';
/** After a failed table write, the resync pass comes this long after the last attempt (unless a change comes first). */
export const RESYNC_RETRY_MS = 1000;

export type PolicyChange =
  | { readonly kind: 'rules'; readonly sets: readonly RuleSetInput[] }
  | { readonly kind: 'services'; readonly upsert: readonly ServiceInfo[]; readonly remove?: readonly string[] };

export interface ChangeResult {
  readonly revision: number;
  /** Services whose datapath rows were rewritten. */
  readonly regenerated: readonly string[];
  /** Services whose new policy could not be compiled: they keep their previous row. */
  readonly errors: readonly { readonly service: string; readonly error: string }[];
  /** Resolves when the datapath enforces this revision for every regenerated service. */
  readonly realized: Promise<void>;
}

export interface PolicyPipelineDeps {
  readonly db: StateDB;
  readonly table: RWTable<ServicePolicyRow>;
  readonly clock: Clock;
  readonly log: Logger;
  /** Resolves when the datapath holds the table up to `tableRevision` (the reconciler's settled()). */
  readonly waitRealized?: (tableRevision: number) => Promise<void>;
  /** policy_implementation_delay_seconds. */
  readonly observeDelay?: (seconds: number, source: string) => void;
}

interface Pending {
  change: PolicyChange;
  source: string;
  enqueuedMs: number;
  resolve: (r: ChangeResult) => void;
  reject: (e: unknown) => void;
}

/** A stored rule never changes (a new version is a new object): its text is computed once. */
const ruleText = new WeakMap<PolicyRule, string>();

function describeRuleCached(r: PolicyRule): string {
  let text = ruleText.get(r);
  if (text === undefined) ruleText.set(r, (text = describeRule(r)));
  return text;
}

/** A rule as the row shows it; the text is made on first read (`herald policy`), not for every row written. */
function ruleView(r: PolicyRule): ServicePolicyRow['rules'][number] {
  return {
    id: r.id,
    verdict: r.verdict,
    origin: r.origin,
    get text() {
      return describeRuleCached(r);
    },
  };
}

export function describeRule(r: PolicyRule): string {
  if (r.peers.length === 0) return 'selects the service (allows nothing itself)';
  const peers = r.peers.map((b) => formatPrefix(b.cidr) + (b.except.length > 0 ? ` except ${b.except.map(formatPrefix).join(',')}` : '')).join(' ');
  const ports = r.ports === undefined ? 'any' : r.ports.map((p) => `${p.lo === p.hi ? p.lo : p.lo === 0 && p.hi === 65535 ? '*' : `${p.lo}-${p.hi}`}/${PROTO_NAME[p.proto]}`).join(',');
  return `${r.verdict} from ${peers} to ${ports}`;
}

export class PolicyPipeline implements Disposable {
  readonly repository = new PolicyRepository();
  private readonly index = new SelectionIndex<StoredRule>();
  private readonly queue: Pending[] = [];
  private readonly trigger: Trigger;
  private readonly svcIds = new Map<string, number>();
  private nextSvcId = 1;
  /** Effective rule ids per service, to skip recompiling what did not change. */
  private readonly effective = new Map<string, string>();
  private realizedRev = 0;
  /** Service IP → the services using it (more than one: a shared IP with a row of its own). */
  private readonly ipUsers = new Map<string, Set<string>>();
  private readonly inflight = new Set<Promise<void>>();
  /**
   * A table write failed after the model (repository, selection, IP users, ids) had taken its change:
   * the next pass regenerates every service and shared IP and compares with the table, and one is
   * scheduled RESYNC_RETRY_MS later if no change comes first. Nothing is left half-applied for good.
   */
  private resyncNeeded = false;

  constructor(private readonly deps: PolicyPipelineDeps) {
    this.trigger = new Trigger({ name: 'policy-queue', clock: deps.clock, log: deps.log, run: () => this.drain() });
  }

  /** The repository revision the datapath enforces (every change up to it realized). */
  get realizedRevision(): number {
    return this.realizedRev;
  }

  submit(change: PolicyChange, source = 'api'): Promise<ChangeResult> {
    if (this.trigger.isDisposed) return Promise.reject(new HeraldError('HERALD_STOPPED', 'policy pipeline is stopped'));
    return new Promise((resolve, reject) => {
      this.queue.push({ change, source, enqueuedMs: monotonicMs(this.deps.clock), resolve, reject });
      void this.trigger.triggerNow();
    });
  }

  /** Waits until every realized promise handed out so far has settled. */
  async idle(): Promise<void> {
    await this.trigger.idle();
    await Promise.allSettled([...this.inflight]);
  }

  private drain(): void {
    if (this.queue.length === 0 && this.resyncNeeded) this.queue.push(this.resyncPass());
    for (let p = this.queue.shift(); p !== undefined; p = this.queue.shift()) {
      try {
        p.resolve(this.apply(p));
      } catch (e) {
        p.reject(e);
      }
    }
    if (this.resyncNeeded) this.trigger.triggerAt(this.deps.clock.now() + RESYNC_RETRY_MS);
  }

  /** A pass with no change of its own, after a failed write: every row regenerated (see resyncNeeded). */
  private resyncPass(): Pending {
    return {
      change: { kind: 'rules', sets: [] },
      source: 'resync',
      enqueuedMs: monotonicMs(this.deps.clock),
      resolve: (r) => this.deps.log.info({ regenerated: r.regenerated.length, errors: r.errors.length }, 'policy table resynchronized after a failed write'),
      reject: (e) => this.deps.log.warn({ err: describeError(e), retryMs: RESYNC_RETRY_MS }, 'policy table resync failed; retrying'),
    };
  }

  private apply(p: Pending): ChangeResult {
    const affected = new Set<string>();
    const affectedIps = new Set<string>();
    const change = p.change;
    let revision = this.repository.revision;
    if (change.kind === 'rules') {
      for (const set of change.sets) {
        const r = this.repository.replace(set.key, set.rules);
        for (const rule of r.removed) for (const s of this.index.removeRule(rule)) affected.add(s);
        for (const rule of r.added) for (const s of this.index.addRule(rule)) affected.add(s);
        revision = r.revision;
      }
    } else {
      const touchedIps = new Set<string>();
      for (const name of change.remove ?? []) {
        for (const ip of this.index.service(name)?.ips ?? []) this.useIp(ip, name, false, touchedIps);
        this.index.removeService(name);
        affected.add(name);
      }
      for (const info of change.upsert) {
        const before = this.index.service(info.service);
        for (const ip of before?.ips ?? []) if (!info.ips.includes(ip)) this.useIp(ip, info.service, false, touchedIps);
        for (const ip of info.ips) this.useIp(ip, info.service, true, touchedIps);
        this.index.upsertService(info);
        // IPs or selection changed: regenerate (an identical service is a no-op below).
        if (!before || before.ips.join() !== info.ips.join()) this.effective.delete(info.service);
        affected.add(info.service);
      }
      // An IP that became (or stopped being) shared moves between its services' rows and its own.
      for (const ip of touchedIps) for (const s of this.ipUsers.get(ip) ?? []) affected.add(s);
      for (const ip of touchedIps) affectedIps.add(ip);
    }
    const db = this.deps.db;
    const table = this.deps.table;
    if (this.resyncNeeded) {
      // Everything the model knows and everything the table holds: rows of services or shared IPs
      // the model no longer has are deleted below (no info, no sharers); the shared IPs of known
      // services join through their services just below.
      for (const info of this.index.allServices()) affected.add(info.service);
      for (const row of db.readTxn().list(table)) {
        if (row.service.startsWith(SHARED_ROW_PREFIX)) affectedIps.add(row.service.slice(SHARED_ROW_PREFIX.length));
        else affected.add(row.service);
      }
    }
    for (const s of affected) for (const ip of this.index.service(s)?.ips ?? []) if (this.shared(ip)) affectedIps.add(ip);
    const regenerated: string[] = [];
    const errors: { service: string; error: string }[] = [];
    const txn = db.writeTxn([table]);
    try {
      for (const service of affected) {
        const info = this.index.service(service);
        const selecting = info ? [...this.index.rulesOf(service)].sort((a, b) => a.id - b.id) : [];
        const rules = withDefaultDenySwitch(resolveNamedPorts(selecting, info?.ports ?? []));
        const ownIps = (info?.ips ?? []).filter((ip) => !this.shared(ip));
        // Named ports resolve against the service's ports: those are part of its effective policy then.
        const named = selecting.some((r) => r.namedPorts !== undefined) ? JSON.stringify(info?.ports ?? []) : '';
        const fingerprint = `${rules.map((r) => r.id).join(',')}|${ownIps.join(',')}|${named}`;
        if (this.effective.get(service) === fingerprint) continue; // selective regeneration
        if (!info || rules.length === 0) {
          // No policy selects it (or it is gone): open.
          if (txn.delete(table, service)) regenerated.push(service);
          this.effective.delete(service);
          this.releaseId(service);
          continue;
        }
        let prefixes;
        try {
          prefixes = toPrefixEntries(compilePolicy(rules, service));
        } catch (e) {
          errors.push({ service, error: describeError(e) });
          continue;
        }
        txn.insert(table, {
          service,
          svcId: this.idOf(service),
          ips: ownIps,
          revision,
          prefixes,
          rules: rules.map((r) => ruleView(r)),
        });
        this.effective.set(service, fingerprint);
        regenerated.push(service);
      }
      for (const ip of affectedIps) this.regenerateShared(ip, revision, txn, regenerated, errors);
      txn.commit();
      this.resyncNeeded = false;
    } catch (e) {
      if (txn.isOpen) txn.abort();
      // The fingerprints of this pass describe rows that were never committed.
      this.effective.clear();
      if (!this.resyncNeeded) this.deps.log.warn({ err: describeError(e), retryMs: RESYNC_RETRY_MS }, 'policy table write failed: every service is regenerated at the next pass');
      this.resyncNeeded = true;
      throw e;
    }
    const tableRevision = db.readTxn().revision(table);
    const realized = this.track(tableRevision, revision, p);
    return { revision, regenerated, errors, realized };
  }

  private shared(ip: string): boolean {
    return (this.ipUsers.get(ip)?.size ?? 0) > 1;
  }

  private useIp(ip: string, service: string, use: boolean, touched: Set<string>): void {
    let users = this.ipUsers.get(ip);
    if (use) {
      if (!users) this.ipUsers.set(ip, (users = new Set()));
      if (!users.has(service)) touched.add(ip);
      users.add(service);
      return;
    }
    if (users?.delete(service)) touched.add(ip);
    if (users?.size === 0) this.ipUsers.delete(ip);
  }

  /** The row of an IP several services share (none when it is not shared, or no policy selects any of them). */
  private regenerateShared(ip: string, revision: number, txn: ReturnType<StateDB['writeTxn']>, regenerated: string[], errors: { service: string; error: string }[]): void {
    const key = `${SHARED_ROW_PREFIX}${ip}`;
    const table = this.deps.table;
    const sharers = this.shared(ip)
      ? [...this.ipUsers.get(ip)!].sort().map((service) => ({
          service,
          ports: this.index.service(service)?.ports ?? [],
          rules: withDefaultDenySwitch(resolveNamedPorts([...this.index.rulesOf(service)].sort((a, b) => a.id - b.id), this.index.service(service)?.ports ?? [])),
        }))
      : [];
    const fingerprint = JSON.stringify(sharers.map((s) => [s.service, s.ports, s.rules.map((r) => r.id)]));
    if (this.effective.get(key) === fingerprint) return;
    if (sharers.every((s) => s.rules.length === 0)) {
      if (txn.delete(table, key)) regenerated.push(key);
      this.effective.delete(key);
      this.releaseId(key);
      return;
    }
    const merged = mergeSharedRules(sharers);
    let prefixes;
    try {
      prefixes = toPrefixEntries(compilePolicy(merged, key));
    } catch (e) {
      errors.push({ service: key, error: describeError(e) });
      return;
    }
    const seen = new Set<number>();
    txn.insert(table, {
      service: key,
      svcId: this.idOf(key),
      ips: [ip],
      revision,
      prefixes,
      rules: merged.filter((r) => !seen.has(r.id) && seen.add(r.id)).map((r) => ruleView(r)),
    });
    this.effective.set(key, fingerprint);
    regenerated.push(key);
  }

  private track(tableRevision: number, revision: number, p: Pending): Promise<void> {
    const wait = this.deps.waitRealized?.(tableRevision) ?? Promise.resolve();
    const done = wait.then(() => {
      if (revision > this.realizedRev) this.realizedRev = revision;
      this.deps.observeDelay?.((monotonicMs(this.deps.clock) - p.enqueuedMs) / 1000, p.source);
    });
    this.inflight.add(done);
    const forget = () => this.inflight.delete(done);
    done.then(forget, (e: unknown) => {
      forget();
      this.deps.log.warn({ err: describeError(e), revision }, 'policy revision not realized');
    });
    return done;
  }

  private idOf(service: string): number {
    let id = this.svcIds.get(service);
    if (id === undefined) {
      id = this.nextSvcId++;
      this.svcIds.set(service, id);
    }
    return id;
  }

  /**
   * Ids are never reused in a process lifetime: the reconciler may apply a
   * new owner's row before the old owner's delete, and both would name the
   * same LPM slots.
   */
  private releaseId(service: string): void {
    this.svcIds.delete(service);
  }

  /** Effective rules and ids of every service, for `herald policy`. */
  services(): ServiceInfo[] {
    return [...this.index.allServices()];
  }

  dispose(): void {
    this.trigger.dispose();
    for (const p of this.queue.splice(0)) p.reject(new HeraldError('HERALD_STOPPED', 'policy pipeline is stopped'));
  }
}
