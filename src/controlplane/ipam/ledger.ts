/**
 * The book of one allocation run: which Services hold which IPs, the used
 * address sets that new allocations search, and the sharing-key index.
 * Every IP lives in exactly one `Holding`; an IP is added to a holding only
 * after the caller has checked compatibility with all its owners.
 */
import type { IpFamily } from '../../intent/index.js';
import { compareAddrs, type Addr } from '../../core/addr.js';
import { AddressSet } from './blocks.js';
import type { PoolView } from './pools.js';
import type { ServiceView } from './service-view.js';

export interface Holding {
  readonly addr: Addr;
  readonly text: string;
  /** The pool the IP is counted in. */
  readonly pool: PoolView;
  /** In the order they got the IP; never two incompatible Services. */
  readonly owners: ServiceView[];
  /** Sharing key of the owners (all owners have the same one). */
  readonly sharingKey: string | undefined;
}

export class Ledger {
  readonly #holdings = new Map<string, Holding>();
  readonly #used: Readonly<Record<IpFamily, AddressSet>> = { IPv4: new AddressSet(), IPv6: new AddressSet() };
  /** Sharing key → holdings, in address order. */
  readonly #byKey = new Map<string, Holding[]>();
  /** Service key → its holdings, in the order it got them. */
  readonly #byService = new Map<string, Holding[]>();

  get(text: string): Holding | undefined {
    return this.#holdings.get(text);
  }

  used(family: IpFamily): AddressSet {
    return this.#used[family];
  }

  /** The holdings of a Service. */
  of(view: ServiceView): readonly Holding[] {
    return this.#byService.get(view.key) ?? [];
  }

  holds(view: ServiceView, text: string): boolean {
    return this.of(view).some((h) => h.text === text);
  }

  /**
   * Holdings of a sharing key, oldest first: in the order they were taken
   * (imports first, oldest Service first), which is the order Cilium offers
   * a key's IPs to a joining Service.
   */
  sharing(key: string): readonly Holding[] {
    return this.#byKey.get(key) ?? [];
  }

  /** Gives a free address to `view`. */
  take(view: ServiceView, addr: Addr, text: string, pool: PoolView): Holding {
    if (this.#holdings.has(text)) throw new Error(`LB-IPAM ledger: ${text} is already held`);
    const holding: Holding = { addr, text, pool, owners: [], sharingKey: view.sharingKey };
    this.#holdings.set(text, holding);
    this.#used[addr.family].add(addr.value);
    if (view.sharingKey !== undefined) {
      const list = this.#byKey.get(view.sharingKey) ?? [];
      list.push(holding);
      this.#byKey.set(view.sharingKey, list);
    }
    this.join(view, holding);
    return holding;
  }

  /** Adds `view` as an owner of `holding` (compatibility is the caller's check). */
  join(view: ServiceView, holding: Holding): void {
    holding.owners.push(view);
    const list = this.#byService.get(view.key) ?? [];
    list.push(holding);
    this.#byService.set(view.key, list);
  }

  /**
   * Gives `holding` back with every owner (the incremental allocator, before
   * it reconsiders those owners): the address is free again and no longer
   * offered to its sharing key.
   */
  release(holding: Holding): void {
    if (this.#holdings.get(holding.text) !== holding) throw new Error(`LB-IPAM ledger: ${holding.text} is not held`);
    this.#holdings.delete(holding.text);
    this.#used[holding.addr.family].delete(holding.addr.value);
    if (holding.sharingKey !== undefined) {
      const list = (this.#byKey.get(holding.sharingKey) ?? []).filter((h) => h !== holding);
      if (list.length > 0) this.#byKey.set(holding.sharingKey, list);
      else this.#byKey.delete(holding.sharingKey);
    }
    for (const owner of holding.owners) {
      const list = (this.#byService.get(owner.key) ?? []).filter((h) => h !== holding);
      if (list.length > 0) this.#byService.set(owner.key, list);
      else this.#byService.delete(owner.key);
    }
  }

  /** Every holding, unordered (cheaper than `all()` when order does not matter). */
  holdings(): IterableIterator<Holding> {
    return this.#holdings.values();
  }

  /** Every holding, in ingress order (IPv4 first, then numerically). */
  all(): Holding[] {
    return [...this.#holdings.values()].sort((a, b) => compareAddrs(a.addr, b.addr));
  }
}
