/**
 * The responder map as the reconciler sees it: a set of (IP, ifindex) keys
 * with a capacity per address family (IPv4 keys live in responder_v4, IPv6
 * keys in responder_v6, each of `capacity` entries). One real implementation over the pinned BPF map, one
 * in-memory fake for unit tests; a shared contract test runs against both.
 */
import { isIpv4 } from '../../core/addr.js';
import { HeraldError } from '../../core/errors.js';
import { batchErrno, type BpfMap } from '../../os/bpf-map.js';
import type { ResponderMaps } from './family-maps.js';
import type { ResponderKey, ResponderStats } from './layout.js';

/** Per key of a batch: true (created / deleted), false (already there / was not there), or why it failed. */
export type KeyOutcome = boolean | Error;

/** Below this many keys a batch checks presence key by key instead of reading the whole map. */
export const DUMP_MIN_KEYS = 64;

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
  /** create() for many keys at once (one outcome per key, in order); an error is the key's alone. */
  createMany(keys: readonly ResponderKey[]): KeyOutcome[];
  /** delete() for many keys at once (one outcome per key, in order). */
  deleteMany(keys: readonly ResponderKey[]): KeyOutcome[];
  /** The keys in the map that `wanted` does not hold, read live (what a prune removes). */
  keysNotIn(wanted: readonly ResponderKey[]): ResponderKey[];
}

type FamilyMap = BpfMap<ResponderKey, ResponderStats>;

export class BpfResponderMap implements ResponderMap {
  readonly capacity: number;
  constructor(private readonly map: Pick<ResponderMaps, 'info' | 'keys' | 'lookup' | 'update' | 'delete' | 'v4' | 'v6'>) {
    this.capacity = map.info().maxEntries;
  }

  /** Indexes of `keys` per family map, in order. */
  private byFamily(keys: readonly ResponderKey[]): Array<{ map: FamilyMap | undefined; idx: number[] }> {
    const v4: number[] = [];
    const v6: number[] = [];
    keys.forEach((k, i) => (isIpv4(k.ip) ? v4 : v6).push(i));
    return [
      { map: this.map.v4, idx: v4 },
      { map: this.map.v6, idx: v6 },
    ];
  }

  /**
   * Batch create: which keys are already there (one batched read of the map
   * for large batches, a lookup per key for small ones), then one batched
   * write of the missing ones. A key that fails gets its own error; the
   * others are written. The kernel's batch write cannot say "create only":
   * an entry another writer created between the read and the write would
   * have its counters zeroed (the agent is the responder maps' only writer).
   */
  createMany(keys: readonly ResponderKey[]): KeyOutcome[] {
    const out: KeyOutcome[] = new Array<KeyOutcome>(keys.length).fill(false);
    for (const { map, idx } of this.byFamily(keys)) {
      if (idx.length === 0) continue;
      if (!map) {
        for (const i of idx) out[i] = new Error(`no IPv6 responder map to write ${keys[i]!.ip} to`);
        continue;
      }
      const ks = map.keySize;
      const encoded = Buffer.alloc(ks * idx.length);
      const bad = new Map<number, Error>();
      idx.forEach((i, j) => {
        try {
          map.writeKey(keys[i]!, encoded, j * ks);
        } catch (e) {
          bad.set(j, e as Error);
        }
      });
      const present = idx.length >= DUMP_MIN_KEYS ? presentKeys(map) : undefined;
      const missing: number[] = [];
      const writing = new Set<number | string>(); // a key twice in one batch is created once (the second is "already there")
      for (let j = 0; j < idx.length; j++) {
        const e = bad.get(j);
        if (e) {
          out[idx[j]!] = e;
          continue;
        }
        const id = rawKeyId(encoded, j * ks, ks);
        if (writing.has(id) || (present ? present.has(id) : this.has(keys[idx[j]!]!))) continue;
        writing.add(id);
        missing.push(j);
      }
      if (missing.length === 0) continue;
      const toWrite = Buffer.alloc(ks * missing.length);
      missing.forEach((j, m) => encoded.copy(toWrite, m * ks, j * ks, (j + 1) * ks));
      const zeroed = Buffer.alloc(map.valueSize * missing.length); // replies = conflicts = 0
      const results = map.updateBatchRaw(toWrite, zeroed, missing.length);
      results.forEach((r, m) => {
        out[idx[missing[m]!]!] = r === undefined ? true : r;
      });
    }
    return out;
  }

  /** One batched read per family, compared as raw keys: only the unwanted keys are decoded. */
  keysNotIn(wanted: readonly ResponderKey[]): ResponderKey[] {
    const out: ResponderKey[] = [];
    for (const { map, idx } of this.byFamily(wanted)) {
      if (!map) continue;
      const ks = map.keySize;
      const buf = Buffer.alloc(ks);
      const want = new Set<number | string>();
      for (const i of idx) {
        map.writeKey(wanted[i]!, buf, 0);
        want.add(rawKeyId(buf, 0, ks));
      }
      map.forEachBatch((b) => {
        for (let i = 0; i < b.count; i++) {
          if (!want.has(rawKeyId(b.keys, i * ks, ks))) out.push(map.decodeKey(Buffer.from(b.keys.subarray(i * ks, (i + 1) * ks))));
        }
      });
    }
    return out;
  }

  /** Batch delete: one batched call per family; a key that was not there is `false`. */
  deleteMany(keys: readonly ResponderKey[]): KeyOutcome[] {
    const out: KeyOutcome[] = new Array<KeyOutcome>(keys.length).fill(false);
    for (const { map, idx } of this.byFamily(keys)) {
      if (idx.length === 0 || !map) continue; // no IPv6 map: nothing of that family is there
      const results = map.deleteMany(idx.map((i) => keys[i]!));
      results.forEach((r, j) => {
        out[idx[j]!] = r === undefined ? true : batchErrno(r) === 'ENOENT' ? false : r;
      });
    }
    return out;
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

/**
 * A raw key as a Set member: an IPv4 key (4 address bytes + a u32 ifindex
 * below 2^21) as one exact number — no string per key in the hot loops —
 * anything else as its bytes in a latin1 string. The same bytes always give
 * the same id, so both sides of a comparison agree.
 */
function rawKeyId(buf: Buffer, offset: number, keySize: number): number | string {
  if (keySize === 8) {
    const ifindex = buf.readUInt32LE(offset + 4);
    if (ifindex < 0x200000) return buf.readUInt32BE(offset) * 0x200000 + ifindex;
  }
  return buf.toString('latin1', offset, offset + keySize);
}

/** Every key of `map` by its rawKeyId, read in batches. */
function presentKeys(map: FamilyMap): Set<number | string> {
  const present = new Set<number | string>();
  map.forEachBatch((b) => {
    for (let i = 0; i < b.count; i++) present.add(rawKeyId(b.keys, i * b.keySize, b.keySize));
  });
  return present;
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
  createMany(keys: readonly ResponderKey[]): KeyOutcome[] {
    return keys.map((k) => outcome(() => this.create(k)));
  }
  keysNotIn(wanted: readonly ResponderKey[]): ResponderKey[] {
    const want = new Set(wanted.map(FakeResponderMap.k));
    return this.keys().filter((k) => !want.has(FakeResponderMap.k(k)));
  }
  deleteMany(keys: readonly ResponderKey[]): KeyOutcome[] {
    return keys.map((k) => outcome(() => this.delete(k)));
  }
}

function outcome(f: () => boolean): KeyOutcome {
  try {
    return f();
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  }
}
