/**
 * A BPF map reached through its file descriptor (from a loaded object or a pin),
 * with a codec that turns typed keys and values into the exact byte layouts the
 * C program uses. Every read goes to the kernel: nothing is cached here.
 */
import type { Disposable } from '../core/disposable.js';
import { HeraldError } from '../core/errors.js';
import { BPF_ANY, BPF_EXIST, BPF_NOEXIST, ERRNO, SyscallError, libbpf, type BatchOpts, type MapInfo } from './libbpf.js';

export interface MapCodec<K, V> {
  readonly keySize: number;
  readonly valueSize: number;
  encodeKey(key: K): Buffer;
  /** Optional: writes the key's bytes at `offset` (batches encode into one buffer without a Buffer per key). */
  writeKey?(key: K, buf: Buffer, offset: number): void;
  decodeKey(buf: Buffer): K;
  encodeValue(value: V): Buffer;
  decodeValue(buf: Buffer): V;
}

export type UpdateMode = 'any' | 'create' | 'replace';
const updateFlags: Record<UpdateMode, bigint> = { any: BPF_ANY, create: BPF_NOEXIST, replace: BPF_EXIST };

/** Entries per batch syscall unless the caller says otherwise. */
export const defaultBatchSize = 4096;

/**
 * One batch of raw entries read from the kernel: `count` keys of `keySize`
 * bytes and their values, back to back. The buffers are reused by the next
 * batch: copy (or decode) what you keep.
 */
export interface RawBatch {
  readonly count: number;
  readonly keys: Buffer;
  readonly values: Buffer;
  readonly keySize: number;
  readonly valueSize: number;
}

/**
 * Per element of a batch write: undefined when it was applied, else why not
 * (a SyscallError with its errno, or HERALD_BPF_MAP_FULL as update() throws).
 */
export type BatchResult = HeraldError | undefined;

/** The errno name behind a batch element's error ('EEXIST', 'ENOENT', …), if it came from the kernel. */
export function batchErrno(r: BatchResult): string | undefined {
  if (r instanceof SyscallError) return r.errnoName;
  const cause = (r as { cause?: unknown } | undefined)?.cause;
  return cause instanceof SyscallError ? cause.errnoName : undefined;
}

export interface BpfMapInfo {
  type: number;
  id: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  name: string;
}

export function mapInfoByFd(fd: number): BpfMapInfo {
  const lib = libbpf();
  const info: MapInfo = {};
  const len = [lib.koffi.sizeof(lib.types.mapInfo)];
  const rc = lib.objGetInfoByFd(fd, info, len);
  if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', 'bpf_obj_get_info_by_fd', -rc);
  return {
    type: info.type ?? 0,
    id: info.id ?? 0,
    keySize: info.key_size ?? 0,
    valueSize: info.value_size ?? 0,
    maxEntries: info.max_entries ?? 0,
    flags: info.map_flags ?? 0,
    name: info.name ?? '',
  };
}

export class BpfMap<K, V> implements Disposable {
  private closed = false;

  private constructor(
    readonly name: string,
    /** The descriptor (the heartbeat thread writes the config map through it directly). */
    readonly fd: number,
    private readonly codec: MapCodec<K, V>,
    private readonly ownsFd: boolean,
  ) {}

  /** Wrap a map fd this object owns (closed by dispose), e.g. one from bpf_map_create. */
  static fromOwnedFd<K, V>(name: string, fd: number, codec: MapCodec<K, V>): BpfMap<K, V> {
    BpfMap.checkLayout(name, fd, codec);
    return new BpfMap(name, fd, codec, true);
  }

  /** Wrap a map fd owned by a loaded object (not closed by dispose). */
  static fromObjectFd<K, V>(name: string, fd: number, codec: MapCodec<K, V>): BpfMap<K, V> {
    BpfMap.checkLayout(name, fd, codec);
    return new BpfMap(name, fd, codec, false);
  }

  /** Open a pinned map; the fd is ours and closed by dispose(). */
  static openPinned<K, V>(path: string, codec: MapCodec<K, V>): BpfMap<K, V> {
    const lib = libbpf();
    const fd = lib.objGet(path);
    if (fd < 0) {
      const errno = -fd;
      if (errno === ERRNO.ENOENT) {
        throw new HeraldError('HERALD_BPF_MAP', `no pinned map at ${path} (is the agent's datapath loaded? see --bpf-pin-dir)`);
      }
      throw new SyscallError('HERALD_BPF_MAP', `bpf_obj_get ${path}`, errno);
    }
    try {
      BpfMap.checkLayout(path, fd, codec);
    } catch (e) {
      lib.close(fd);
      throw e;
    }
    return new BpfMap(path, fd, codec, true);
  }

  /** Buffer sizes must equal key_size/value_size exactly: libbpf cannot check them. */
  private static checkLayout(name: string, fd: number, codec: MapCodec<unknown, unknown>): void {
    const info = mapInfoByFd(fd);
    if (info.keySize !== codec.keySize || info.valueSize !== codec.valueSize) {
      throw new HeraldError(
        'HERALD_BPF_PIN_MISMATCH',
        `map ${name}: kernel layout key ${info.keySize} B / value ${info.valueSize} B, ` +
          `this herald expects ${codec.keySize} B / ${codec.valueSize} B (a map from another herald version?)`,
      );
    }
  }

  info(): BpfMapInfo {
    this.assertOpen();
    return mapInfoByFd(this.fd);
  }

  lookup(key: K): V | undefined {
    this.assertOpen();
    const value = Buffer.alloc(this.codec.valueSize);
    const rc = libbpf().mapLookupElem(this.fd, this.codec.encodeKey(key), value);
    if (rc === -ERRNO.ENOENT) return undefined;
    if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', `lookup in ${this.name}`, -rc);
    return this.codec.decodeValue(value);
  }

  update(key: K, value: V, mode: UpdateMode = 'any'): void {
    this.assertOpen();
    const rc = libbpf().mapUpdateElem(this.fd, this.codec.encodeKey(key), this.codec.encodeValue(value), updateFlags[mode]);
    if (rc >= 0) return;
    const errno = -rc;
    if (errno === ERRNO.E2BIG || errno === ERRNO.ENOSPC) {
      throw new HeraldError('HERALD_BPF_MAP_FULL', `map ${this.name} is full`, {
        cause: new SyscallError('HERALD_BPF_MAP', 'bpf_map_update_elem', errno),
      });
    }
    throw new SyscallError('HERALD_BPF_MAP', `update in ${this.name}`, errno);
  }

  /** Returns false when the key was not there. */
  delete(key: K): boolean {
    this.assertOpen();
    const rc = libbpf().mapDeleteElem(this.fd, this.codec.encodeKey(key));
    if (rc === -ERRNO.ENOENT) return false;
    if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', `delete in ${this.name}`, -rc);
    return true;
  }

  /**
   * Walks the whole map in batches of up to `batchSize` entries, one
   * bpf_map_lookup_batch call per batch (instead of two syscalls per entry).
   * Entries written or deleted during the walk may or may not be seen, as
   * with a key-by-key walk. Map types without batch support fall back to
   * get_next_key + lookup. For hash maps the resume point is the next hash
   * bucket, so deleting the keys of a batch from inside `fn` (e.g. a GC:
   * collect expired keys, deleteBatchRaw them) does not disturb the walk.
   * Per-CPU maps are not supported (their values are value_size × CPUs),
   * as everywhere in this class.
   */
  forEachBatch(fn: (batch: RawBatch) => void, batchSize = defaultBatchSize): void {
    for (const batch of this.batches(batchSize)) fn(batch);
  }

  /**
   * The same walk, awaiting `fn` after each batch: a long walk (the conntrack
   * GC over a million entries) can yield to the event loop between batches
   * (`await new Promise((r) => setImmediate(r))` inside `fn`).
   */
  async forEachBatchAsync(fn: (batch: RawBatch) => void | Promise<void>, batchSize = defaultBatchSize): Promise<void> {
    for (const batch of this.batches(batchSize)) await fn(batch);
  }

  /** The walk itself: one RawBatch per bpf_map_lookup_batch call (see forEachBatch). */
  private *batches(batchSize: number): Generator<RawBatch> {
    this.assertOpen();
    if (!(Number.isInteger(batchSize) && batchSize > 0)) throw new HeraldError('HERALD_BAD_ARGUMENT', `batch size must be a positive integer, got ${batchSize}`);
    const lib = libbpf();
    const { keySize, valueSize } = this.codec;
    let size = batchSize;
    let keys: Buffer = Buffer.allocUnsafe(keySize * size);
    let values: Buffer = Buffer.allocUnsafe(valueSize * size);
    // The resume token: a bucket index (u32) for hash maps, a key for arrays.
    let inBatch: Buffer | null = null;
    let outBatch: Buffer = Buffer.alloc(Math.max(keySize, 8));
    const count = [0];
    const opts = batchOpts(0n);
    for (;;) {
      this.assertOpen();
      count[0] = size;
      const rc = lib.mapLookupBatch(this.fd, inBatch, outBatch, keys, values, count, opts);
      const errno = rc < 0 ? -rc : 0;
      if (errno === ERRNO.ENOSPC && count[0] === 0) {
        // One hash bucket holds more entries than the batch: retry the same position with room for it.
        size *= 2;
        keys = Buffer.allocUnsafe(keySize * size);
        values = Buffer.allocUnsafe(valueSize * size);
        continue;
      }
      if (errno !== 0 && errno !== ERRNO.ENOENT) {
        if (inBatch === null && (errno === ERRNO.EINVAL || errno === ERRNO.ENOTSUPP || errno === ERRNO.EOPNOTSUPP)) {
          yield* this.byKey();
          return;
        }
        throw new SyscallError('HERALD_BPF_MAP', `batch lookup in ${this.name}`, errno);
      }
      if (count[0]! > 0) yield { count: count[0]!, keys, values, keySize, valueSize };
      if (errno === ERRNO.ENOENT) return; // the end of the map (the last batch may still have held entries)
      const token: Buffer = inBatch ?? Buffer.alloc(outBatch.length);
      inBatch = outBatch;
      outBatch = token;
    }
  }

  /** The key-by-key walk, for map types without batch lookup. */
  private *byKey(): Generator<RawBatch> {
    const lib = libbpf();
    const { keySize, valueSize } = this.codec;
    let prev: Buffer | null = null;
    for (;;) {
      const next = Buffer.alloc(keySize);
      const rc = lib.mapGetNextKey(this.fd, prev, next);
      if (rc === -ERRNO.ENOENT) return;
      if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', `iterate ${this.name}`, -rc);
      prev = next;
      const value = Buffer.alloc(valueSize);
      const lrc = lib.mapLookupElem(this.fd, next, value);
      if (lrc === -ERRNO.ENOENT) continue; // deleted between the two calls
      if (lrc < 0) throw new SyscallError('HERALD_BPF_MAP', `lookup in ${this.name}`, -lrc);
      yield { count: 1, keys: next, values: value, keySize, valueSize };
    }
  }

  /**
   * Writes (creates or replaces: the kernel's batch update takes no
   * BPF_NOEXIST/BPF_EXIST) `count` entries laid out back to back in `keys`
   * and `values`, `batchSize` per bpf_map_update_batch call. The kernel stops
   * at the first element that fails: that element gets its error and the walk
   * goes on after it, so every element has its own outcome.
   */
  updateBatchRaw(keys: Buffer, values: Buffer, count: number, batchSize = defaultBatchSize): BatchResult[] {
    this.assertOpen();
    const { keySize, valueSize } = this.codec;
    if (keys.length < count * keySize || values.length < count * valueSize) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `batch update in ${this.name}: buffers hold fewer than ${count} entries`);
    }
    const lib = libbpf();
    const opts = batchOpts(BPF_ANY);
    return this.runBatch(count, batchSize, 'update', (from, n, done) =>
      lib.mapUpdateBatch(this.fd, keys.subarray(from * keySize, (from + n) * keySize), values.subarray(from * valueSize, (from + n) * valueSize), done, opts),
    );
  }

  /** Deletes `count` keys laid out back to back (bpf_map_delete_batch); a key not there gets ENOENT, as its own outcome. */
  deleteBatchRaw(keys: Buffer, count: number, batchSize = defaultBatchSize): BatchResult[] {
    this.assertOpen();
    const { keySize } = this.codec;
    if (keys.length < count * keySize) throw new HeraldError('HERALD_BAD_ARGUMENT', `batch delete in ${this.name}: the buffer holds fewer than ${count} keys`);
    const lib = libbpf();
    const opts = batchOpts(0n);
    return this.runBatch(count, batchSize, 'delete', (from, n, done) => lib.mapDeleteBatch(this.fd, keys.subarray(from * keySize, (from + n) * keySize), done, opts));
  }

  private runBatch(count: number, batchSize: number, op: string, call: (from: number, n: number, done: number[]) => number): BatchResult[] {
    if (!(Number.isInteger(batchSize) && batchSize > 0)) throw new HeraldError('HERALD_BAD_ARGUMENT', `batch size must be a positive integer, got ${batchSize}`);
    const results: BatchResult[] = new Array<BatchResult>(count).fill(undefined);
    const done = [0];
    let from = 0;
    while (from < count) {
      const n = Math.min(batchSize, count - from);
      done[0] = n;
      const rc = call(from, n, done);
      if (rc >= 0) {
        from += n;
        continue;
      }
      const applied = done[0]!;
      if (applied < n) {
        // Elements before `applied` were written; the one at `applied` failed with this errno.
        results[from + applied] = this.batchError(op, -rc);
        from += applied + 1;
        continue;
      }
      // The call failed as a whole (no element named): one element per call, so each gets its own outcome.
      for (let i = from; i < from + n; i++) {
        done[0] = 1;
        const rc1 = call(i, 1, done);
        if (rc1 < 0) results[i] = this.batchError(op, -rc1);
      }
      from += n;
    }
    return results;
  }

  private batchError(op: string, errno: number): HeraldError {
    const error = new SyscallError('HERALD_BPF_MAP', `${op} in ${this.name}`, errno);
    if (op === 'update' && (errno === ERRNO.E2BIG || errno === ERRNO.ENOSPC)) {
      return new HeraldError('HERALD_BPF_MAP_FULL', `map ${this.name} is full`, { cause: error });
    }
    return error;
  }

  /** Writes (creates or replaces) many entries; per entry its outcome (see updateBatchRaw). */
  updateMany(entries: ReadonlyArray<readonly [K, V]>): BatchResult[] {
    const { keySize, valueSize } = this.codec;
    const keys = Buffer.alloc(keySize * entries.length);
    const values = Buffer.alloc(valueSize * entries.length);
    entries.forEach(([k, v], i) => {
      this.writeKey(k, keys, i * keySize);
      this.codec.encodeValue(v).copy(values, i * valueSize);
    });
    return this.updateBatchRaw(keys, values, entries.length);
  }

  /** Deletes many keys; per key its outcome (ENOENT: it was not there). */
  deleteMany(keys: readonly K[]): BatchResult[] {
    const { keySize } = this.codec;
    const buf = Buffer.alloc(keySize * keys.length);
    keys.forEach((k, i) => this.writeKey(k, buf, i * keySize));
    return this.deleteBatchRaw(buf, keys.length);
  }

  /** Encodes `key` into `buf` at `offset` (without a Buffer per key when the codec can). */
  writeKey(key: K, buf: Buffer, offset: number): void {
    if (this.codec.writeKey) this.codec.writeKey(key, buf, offset);
    else this.codec.encodeKey(key).copy(buf, offset);
  }

  decodeKey(buf: Buffer): K {
    return this.codec.decodeKey(buf);
  }

  get keySize(): number {
    return this.codec.keySize;
  }

  get valueSize(): number {
    return this.codec.valueSize;
  }

  /** Every key in the map, read live from the kernel (in batches). */
  keys(): K[] {
    const out: K[] = [];
    this.forEachBatch((b) => {
      for (let i = 0; i < b.count; i++) out.push(this.codec.decodeKey(Buffer.from(b.keys.subarray(i * b.keySize, (i + 1) * b.keySize))));
    });
    return out;
  }

  /** The key-by-key walk (get_next_key), one syscall per key: kept to compare with the batch walk. */
  keysOneByOne(): K[] {
    this.assertOpen();
    const lib = libbpf();
    const out: K[] = [];
    let prev: Buffer | null = null;
    for (;;) {
      const next = Buffer.alloc(this.codec.keySize);
      const rc = lib.mapGetNextKey(this.fd, prev, next);
      if (rc === -ERRNO.ENOENT) break;
      if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', `iterate ${this.name}`, -rc);
      out.push(this.codec.decodeKey(next));
      prev = next;
    }
    return out;
  }

  /** Every entry, read live from the kernel (in batches). */
  entries(): Array<[K, V]> {
    const out: Array<[K, V]> = [];
    this.forEachBatch((b) => {
      for (let i = 0; i < b.count; i++) {
        out.push([
          this.codec.decodeKey(Buffer.from(b.keys.subarray(i * b.keySize, (i + 1) * b.keySize))),
          this.codec.decodeValue(Buffer.from(b.values.subarray(i * b.valueSize, (i + 1) * b.valueSize))),
        ]);
      }
    });
    return out;
  }

  /**
   * Deletes `count` packed raw keys (deleteBatchRaw). Keys already gone (the
   * LRU evicted them) are skipped; any other failure throws. Returns how many
   * were deleted.
   */
  deleteBatch(keys: Buffer, count: number): number {
    let deleted = 0;
    for (const r of this.deleteBatchRaw(keys, count)) {
      if (r === undefined) deleted++;
      else if (batchErrno(r) !== 'ENOENT') throw r;
    }
    return deleted;
  }

  /** Writes `count` packed raw keys and values (updateBatchRaw); the first failure throws. */
  updateBatch(keys: Buffer, values: Buffer, count: number): void {
    const failed = this.updateBatchRaw(keys, values, count).find((r) => r !== undefined);
    if (failed) throw failed;
  }

  /** The map's fd (for a map-in-map value or a per-CPU read); owned by this object. */
  get descriptor(): number {
    this.assertOpen();
    return this.fd;
  }

  get rawCodec(): MapCodec<K, V> {
    return this.codec;
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsFd) libbpf().close(this.fd);
  }

  protected assertOpen(): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', `map ${this.name} is closed`);
  }
}

function batchOpts(elemFlags: bigint): BatchOpts {
  return { sz: libbpf().koffi.sizeof(libbpf().types.batchOpts), elem_flags: elemFlags, flags: 0n };
}
