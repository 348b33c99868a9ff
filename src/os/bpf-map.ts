/**
 * A BPF map reached through its file descriptor (from a loaded object or a pin),
 * with a codec that turns typed keys and values into the exact byte layouts the
 * C program uses. Every read goes to the kernel: nothing is cached here.
 */
import type { Disposable } from '../core/disposable.js';
import { HeraldError } from '../core/errors.js';
import { BPF_ANY, BPF_EXIST, BPF_NOEXIST, ERRNO, SyscallError, libbpf, type MapInfo } from './libbpf.js';

export interface MapCodec<K, V> {
  readonly keySize: number;
  readonly valueSize: number;
  encodeKey(key: K): Buffer;
  decodeKey(buf: Buffer): K;
  encodeValue(value: V): Buffer;
  decodeValue(buf: Buffer): V;
}

export type UpdateMode = 'any' | 'create' | 'replace';
const updateFlags: Record<UpdateMode, bigint> = { any: BPF_ANY, create: BPF_NOEXIST, replace: BPF_EXIST };

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
    private readonly fd: number,
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

  /** Every key in the map, read live from the kernel. */
  keys(): K[] {
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

  /** Every entry; keys deleted between the key walk and the lookup are skipped. */
  entries(): Array<[K, V]> {
    const out: Array<[K, V]> = [];
    for (const key of this.keys()) {
      const value = this.lookup(key);
      if (value !== undefined) out.push([key, value]);
    }
    return out;
  }

  /**
   * One chunk of a batched walk (BPF_MAP_LOOKUP_BATCH): up to `max` entries
   * after `cursor` (null: from the start). `next` is null when the walk is done.
   * Raw buffers, so a caller can filter without decoding every entry.
   */
  lookupBatch(cursor: Buffer | null, max: number): { keys: Buffer; values: Buffer; count: number; next: Buffer | null } {
    this.assertOpen();
    const { keySize, valueSize } = this.codec;
    const keys = Buffer.alloc(keySize * max);
    const values = Buffer.alloc(valueSize * max);
    const out = Buffer.alloc(Math.max(8, keySize));
    const count = [max];
    const rc = libbpf().mapLookupBatch(this.fd, cursor, out, keys, values, count);
    const n = count[0] ?? 0;
    if (rc === -ERRNO.ENOENT) return { keys, values, count: n, next: null };
    if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', `lookup batch in ${this.name}`, -rc);
    return { keys, values, count: n, next: out };
  }

  /**
   * Deletes `count` packed raw keys (BPF_MAP_DELETE_BATCH). Keys already gone
   * (the LRU evicted them, or the datapath re-created nothing) are skipped:
   * returns how many were deleted.
   */
  deleteBatch(keys: Buffer, count: number): number {
    this.assertOpen();
    const lib = libbpf();
    const ks = this.codec.keySize;
    let deleted = 0;
    let off = 0;
    while (off < count) {
      const n = [count - off];
      const rc = lib.mapDeleteBatch(this.fd, keys.subarray(off * ks, count * ks), n);
      const done = n[0] ?? 0;
      deleted += done;
      off += done;
      if (rc >= 0) break;
      if (rc !== -ERRNO.ENOENT) throw new SyscallError('HERALD_BPF_MAP', `delete batch in ${this.name}`, -rc);
      off += 1; // that key is gone already: skip it and go on
    }
    return deleted;
  }

  /** Writes `count` packed raw keys and values in one call (BPF_MAP_UPDATE_BATCH). */
  updateBatch(keys: Buffer, values: Buffer, count: number): void {
    this.assertOpen();
    const n = [count];
    const rc = libbpf().mapUpdateBatch(this.fd, keys, values, n);
    if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', `update batch in ${this.name}`, -rc);
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

  private assertOpen(): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', `map ${this.name} is closed`);
  }
}
