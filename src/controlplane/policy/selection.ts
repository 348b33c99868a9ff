/** Which services a rule selects (see intake.ts for the documented semantics). */
import type { EndpointSelectorLike, Selection } from './intake.js';
import type { ServicePort } from './shared.js';

export interface ServiceInfo {
  /** `namespace/name`. */
  readonly service: string;
  readonly namespace: string;
  /** The service's labels plus io.kubernetes.service.{namespace,name}. */
  readonly labels: Readonly<Record<string, string>>;
  /** Service IPs (canonical text) the datapath polices. */
  readonly ips: readonly string[];
  /** The service's (port, protocol) pairs: what it owns of an IP it shares with other services (shared.ts). */
  readonly ports?: readonly ServicePort[];
}

/** Drops Cilium's label source prefix: `k8s:app` → `app`. */
function bare(key: string): string {
  // Most keys carry no source prefix: no regex, no new string (10,000 rules are matched per import).
  if (key.charCodeAt(3) !== 58 /* ':' */ || !(key.startsWith('k8s:') || key.startsWith('any:'))) return key;
  return key.slice(4);
}

/** The first matchLabels pair, without building the entries array. */
function firstLabel(sel: EndpointSelectorLike): string | undefined {
  for (const k in sel.matchLabels) return `${bare(k)}=${sel.matchLabels[k]}`;
  return undefined;
}

export function endpointSelectorMatches(sel: EndpointSelectorLike, labels: Readonly<Record<string, string>>): boolean {
  for (const k in sel.matchLabels) if (labels[bare(k)] !== sel.matchLabels[k]) return false;
  for (const e of sel.matchExpressions) {
    const key = bare(e.key);
    const has = Object.hasOwn(labels, key);
    const value = labels[key];
    const values = e.values ?? [];
    switch (e.operator) {
      case 'In':
        if (!has || !values.includes(value!)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(value!)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
    }
  }
  return true;
}

export function selects(selection: Selection, svc: ServiceInfo): boolean {
  if (selection.kind === 'service') return selection.service === svc.service;
  if (selection.namespace !== undefined && selection.namespace !== svc.namespace) return false;
  return endpointSelectorMatches(selection.selector, svc.labels);
}

/**
 * Which rules select which services, kept incrementally so a change touches
 * only the services it can affect. Selectors with matchLabels are indexed by
 * their first label pair (candidates come from the services carrying it);
 * the rest are checked against every service.
 */
export class SelectionIndex<R extends { readonly id: number; readonly selection: Selection }> {
  private readonly services = new Map<string, ServiceInfo>();
  private readonly servicesByPair = new Map<string, Set<string>>();
  private readonly rulesByPair = new Map<string, Set<R>>();
  private readonly rulesByService = new Map<string, Set<R>>();
  private readonly scanRules = new Set<R>();
  /** service → rules selecting it. */
  private readonly selecting = new Map<string, Set<R>>();

  service(name: string): ServiceInfo | undefined {
    return this.services.get(name);
  }

  allServices(): IterableIterator<ServiceInfo> {
    return this.services.values();
  }

  rulesOf(service: string): ReadonlySet<R> {
    return this.selecting.get(service) ?? new Set();
  }

  /** Services the rule selects now. */
  servicesOf(rule: R): string[] {
    const out: string[] = [];
    for (const s of this.candidates(rule.selection)) if (selects(rule.selection, this.services.get(s)!)) out.push(s);
    return out;
  }

  addRule(rule: R): string[] {
    const bucket = this.ruleBucket(rule.selection);
    bucket.add(rule);
    const hit = this.servicesOf(rule);
    for (const s of hit) this.selectingOf(s).add(rule);
    return hit;
  }

  removeRule(rule: R): string[] {
    this.ruleBucket(rule.selection).delete(rule);
    const hit: string[] = [];
    for (const s of this.candidates(rule.selection)) if (this.selecting.get(s)?.delete(rule)) hit.push(s);
    return hit;
  }

  upsertService(info: ServiceInfo): void {
    this.removeService(info.service);
    this.services.set(info.service, info);
    for (const pair of pairs(info.labels)) setOf(this.servicesByPair, pair).add(info.service);
    const mine = new Set<R>();
    const consider = (r: R) => {
      if (selects(r.selection, info)) mine.add(r);
    };
    for (const pair of pairs(info.labels)) for (const r of this.rulesByPair.get(pair) ?? []) consider(r);
    for (const r of this.rulesByService.get(info.service) ?? []) consider(r);
    for (const r of this.scanRules) consider(r);
    this.selecting.set(info.service, mine);
  }

  removeService(name: string): void {
    const old = this.services.get(name);
    if (!old) return;
    for (const pair of pairs(old.labels)) this.servicesByPair.get(pair)?.delete(name);
    this.services.delete(name);
    this.selecting.delete(name);
  }

  private selectingOf(s: string): Set<R> {
    return setOf(this.selecting, s);
  }

  private ruleBucket(sel: Selection): Set<R> {
    if (sel.kind === 'service') return setOf(this.rulesByService, sel.service);
    const first = firstLabel(sel.selector);
    return first !== undefined ? setOf(this.rulesByPair, first) : this.scanRules;
  }

  /** The services a selection can select (a live view: callers only read it). */
  private candidates(sel: Selection): Iterable<string> {
    if (sel.kind === 'service') return this.services.has(sel.service) ? [sel.service] : [];
    const first = firstLabel(sel.selector);
    if (first !== undefined) return this.servicesByPair.get(first) ?? [];
    return this.services.keys();
  }
}

function pairs(labels: Readonly<Record<string, string>>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`);
}

function setOf<K, V>(m: Map<K, Set<V>>, k: K): Set<V> {
  let s = m.get(k);
  if (!s) m.set(k, (s = new Set()));
  return s;
}
