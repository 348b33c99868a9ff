/**
 * The responder map as the reconciler sees it: a set of (IP, ifindex) keys
 * with a capacity per address family (IPv4 keys live in responder_v4, IPv6
 * keys in responder_v6, each of `capacity` entries). One real implementation over the pinned BPF map, one
 * in-memory fake for unit tests; a shared contract test runs against both.
 */
import { isIpv4 } from '../../core/addr.js';
import { HeraldError } from '../../core/errors.js';
import type { ResponderMaps } from './family-maps.js';
import type { ResponderKey } from './layout.js';

export interface ResponderMap {
  /** Entries per family. */
  readonly capacity: number;
  /** Every key of both families, read live. */
  keys(): ResponderKey[];
  has(key: ResponderKey): boolean;
  /** Adds the key with zeroed counters; false when it was already there (counters kept). Throws HERALD_BPF_MAP_FULL. */
  create(key: ResponderKey): boolean;
  /** false when it was not there. */
  delete(key: ResponderKey): boolean;
}

export class BpfResponderMap implements ResponderMap {
  readonly capacity: number;
  constructor(private readonly map: Pick<ResponderMaps, 'info' | 'keys' | 'lookup' | 'update' | 'delete'>) {
    this.capacity = map.info().maxEntries;
  }
  keys(): ResponderKey[] {
    return this.map.keys();
  }
  has(key: ResponderKey): boolean {
    return this.map.lookup(key) !== undefined;
  }
  create(key: ResponderKey): boolean {
    if (this.has(key)) return false;
    try {
      this.map.update(key, { replies: 0n, conflicts: 0n }, 'create');
      return true;
    } catch (e) {
      // EEXIST: created between our lookup and update (another writer): fine.
      if ((e as { errnoName?: string }).errnoName === 'EEXIST') return false;
      throw e;
    }
  }
  delete(key: ResponderKey): boolean {
    return this.map.delete(key);
  }
}

/** In-memory fake with the real map's semantics (capacity, create-if-absent). */
export class FakeResponderMap implements ResponderMap {
  private readonly entries = new Map<string, ResponderKey>();
  /** Makes the next N writes fail with this error (tests of retries). */
  failWrites: { count: number; error: Error } | undefined;

  constructor(readonly capacity = 65536) {}

  private static k(key: ResponderKey): string {
    return `${key.ip}|${key.ifindex}`;
  }
  private maybeFail(): void {
    if (this.failWrites && this.failWrites.count > 0) {
      this.failWrites.count--;
      throw this.failWrites.error;
    }
  }
  keys(): ResponderKey[] {
    return [...this.entries.values()];
  }
  has(key: ResponderKey): boolean {
    return this.entries.has(FakeResponderMap.k(key));
  }
  create(key: ResponderKey): boolean {
    if (this.has(key)) return false;
    this.maybeFail();
    const v4 = isIpv4(key.ip);
    if ([...this.entries.values()].filter((k) => isIpv4(k.ip) === v4).length >= this.capacity) {
      throw new HeraldError('HERALD_BPF_MAP_FULL', `map responder_v${v4 ? 4 : 6} is full`);
    }
    this.entries.set(FakeResponderMap.k(key), { ...key });
    return true;
  }
  delete(key: ResponderKey): boolean {
    this.maybeFail();
    return this.entries.delete(FakeResponderMap.k(key));
  }
}
