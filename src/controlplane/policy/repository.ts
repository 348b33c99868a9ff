/**
 * The policy repository, after Cilium's (pkg/policy/repository.go): rules
 * grouped by the object they came from, a revision bumped by every change,
 * and CIDR prefixes reference-counted across rules. Pure and synchronous:
 * the pipeline serializes the calls.
 *
 * replace(key, rules) swaps an object's rules atomically (replace-by-labels):
 * the new prefixes are acquired before the old ones are released, so a
 * prefix both versions use never drops to zero references.
 */
import { prefixKey, type PolicyRule } from './model.js';
import type { RuleInput, Selection } from './intake.js';

export interface StoredRule extends PolicyRule {
  readonly key: string;
  readonly selection: Selection;
}

export interface RepositoryChange {
  readonly revision: number;
  readonly added: readonly StoredRule[];
  readonly removed: readonly StoredRule[];
}

export class PolicyRepository {
  private rev = 0;
  private nextId = 1;
  private readonly sets = new Map<string, readonly StoredRule[]>();
  private readonly prefixRefs = new Map<string, number>();

  get revision(): number {
    return this.rev;
  }

  /** Distinct prefixes referenced by the rules (each counted once). */
  get prefixCount(): number {
    return this.prefixRefs.size;
  }

  prefixRefCount(key: string): number {
    return this.prefixRefs.get(key) ?? 0;
  }

  get ruleCount(): number {
    let n = 0;
    for (const rules of this.sets.values()) n += rules.length;
    return n;
  }

  keys(): string[] {
    return [...this.sets.keys()];
  }

  *rules(): Iterable<StoredRule> {
    for (const rules of this.sets.values()) yield* rules;
  }

  /** Replaces every rule of `key` (none: deletes the key). Bumps the revision. */
  replace(key: string, inputs: readonly RuleInput[]): RepositoryChange {
    const removed = this.sets.get(key) ?? [];
    // A rule re-applied unchanged keeps its id, so its services need no regeneration.
    const old = new Map<string, number>();
    for (const r of removed) old.set(contentKey(r), r.id);
    const added: StoredRule[] = inputs.map((r) => {
      if (removed.length === 0) return { ...r, key, id: this.nextId++ };
      const k = contentKey(r);
      const id = old.get(k);
      old.delete(k);
      return { ...r, key, id: id ?? this.nextId++ };
    });
    for (const r of added) this.refs(r, +1);
    if (added.length > 0) this.sets.set(key, added);
    else this.sets.delete(key);
    for (const r of removed) this.refs(r, -1);
    this.rev++;
    return { revision: this.rev, added, removed };
  }

  delete(key: string): RepositoryChange {
    return this.replace(key, []);
  }

  private refs(rule: StoredRule, delta: number): void {
    for (const b of rule.peers) {
      for (const p of [b.cidr, ...b.except]) {
        const k = prefixKey(p);
        const n = (this.prefixRefs.get(k) ?? 0) + delta;
        if (n > 0) this.prefixRefs.set(k, n);
        else this.prefixRefs.delete(k);
      }
    }
  }
}

function contentKey(r: RuleInput): string {
  return JSON.stringify([r.verdict, r.peers, r.ports, r.namedPorts, r.selection, r.origin, r.defaultDeny], (_k, v: unknown) => (typeof v === 'bigint' ? v.toString(16) : v));
}
