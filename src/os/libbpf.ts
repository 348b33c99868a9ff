/**
 * Typed koffi bindings to libbpf 1.x (Debian's libbpf1) and the few libc calls
 * the datapath needs. Loaded lazily so commands that never touch the kernel
 * (validate, --help) work on machines without libbpf.
 *
 * libbpf 1.x int APIs return -errno; pointer APIs return NULL and set errno,
 * which must be read with koffi.errno() synchronously right after the call.
 */
import koffi, { type LibraryHandle, type TypeObject } from 'koffi';
import { HeraldError, type HeraldErrorCode } from '../core/errors.js';

export const BPF_TC_INGRESS = 1;
export const BPF_TC_EGRESS = 2;
export const BPF_TC_F_REPLACE = 1;
export const BPF_ANY = 0n;
export const BPF_NOEXIST = 1n;
export const BPF_EXIST = 2n;
/** __NR_bpf on x86_64 (herald's platform; arm64 is 280). */
const SYS_BPF = process.arch === 'arm64' ? 280 : 321;

type Ptr = unknown;

export interface Libbpf {
  objectOpenFile(path: string): Ptr;
  objectLoad(obj: Ptr): number;
  objectClose(obj: Ptr): void;
  objectFindProgramByName(obj: Ptr, name: string): Ptr;
  objectFindMapByName(obj: Ptr, name: string): Ptr;
  programFd(prog: Ptr): number;
  programSetLogBuf(prog: Ptr, buf: unknown, size: number): number;
  programSetLogLevel(prog: Ptr, level: number): number;
  mapSetPinPath(map: Ptr, path: string): number;
  mapSetMaxEntries(map: Ptr, max: number): number;
  mapFd(map: Ptr): number;
  mapSetInnerMapFd(map: Ptr, fd: number): number;
  mapCreate(type: number, name: string, keySize: number, valueSize: number, maxEntries: number): number;
  tcHookCreate(hook: TcHook): number;
  tcHookDestroy(hook: TcHook): number;
  tcAttach(hook: TcHook, opts: TcOpts): number;
  tcDetach(hook: TcHook, opts: TcOpts): number;
  tcQuery(hook: TcHook, opts: TcOpts): number;
  /** bpf_xdp_attach / bpf_xdp_detach / bpf_xdp_query_id (XDP_FLAGS_*; opts unused). */
  xdpAttach(ifindex: number, progFd: number, flags: number): number;
  xdpDetach(ifindex: number, flags: number): number;
  xdpQueryId(ifindex: number, flags: number, progId: number[]): number;
  mapUpdateElem(fd: number, key: Buffer, value: Buffer, flags: bigint): number;
  mapLookupElem(fd: number, key: Buffer, value: Buffer): number;
  mapDeleteElem(fd: number, key: Buffer): number;
  mapGetNextKey(fd: number, key: Buffer | null, nextKey: Buffer): number;
  /**
   * Batch calls (kernel ≥ 5.6 for hash maps). `count` is in/out: elements
   * offered, then elements processed (also on error: the element at that
   * index is the one that failed).
   */
  mapLookupBatch(fd: number, inBatch: Buffer | null, outBatch: Buffer, keys: Buffer, values: Buffer, count: number[], opts?: BatchOpts): number;
  mapUpdateBatch(fd: number, keys: Buffer, values: Buffer, count: number[], opts?: BatchOpts): number;
  mapDeleteBatch(fd: number, keys: Buffer, count: number[], opts?: BatchOpts): number;
  objGet(path: string): number;
  objGetInfoByFd(fd: number, info: MapInfo, len: number[]): number;
  /** bpf_obj_get_info_by_fd into a raw buffer (links, programs). */
  objGetInfoByFdRaw(fd: number, info: Buffer, len: number[]): number;
  objPin(fd: number, path: string): number;
  progGetFdById(id: number): number;
  linkGetFdById(id: number): number;
  linkUpdate(linkFd: number, progFd: number): number;
  linkDetach(linkFd: number): number;
  /** The bpf(2) syscall itself, for commands this libbpf cannot express (tcx); -1 + errno on failure. */
  bpfSyscall(cmd: number, attr: Buffer, size: number): number;
  close(fd: number): number;
  strerror(errno: number): string;
  ifNameToIndex(name: string): number;
  ifIndexToName(ifindex: number): string | undefined;
  errno(): number;
  koffi: typeof koffi;
  types: { tcHook: TypeObject; tcOpts: TypeObject; mapInfo: TypeObject; batchOpts: TypeObject };
}

/** struct bpf_map_batch_opts (24 bytes): elem_flags as for bpf_map_update_elem. */
export interface BatchOpts {
  sz: number;
  elem_flags: bigint;
  flags: bigint;
}

export interface TcHook {
  sz: number;
  ifindex: number;
  attach_point: number;
  parent: number;
}
export interface TcOpts {
  sz: number;
  prog_fd: number;
  flags: number;
  prog_id: number;
  handle: number;
  priority: number;
}
export interface MapInfo {
  type?: number;
  id?: number;
  key_size?: number;
  value_size?: number;
  max_entries?: number;
  map_flags?: number;
  name?: string;
}

let cached: Libbpf | undefined;

export function libbpf(): Libbpf {
  if (cached) return cached;
  let lib: LibraryHandle;
  try {
    lib = koffi.load('libbpf.so.1');
  } catch (e) {
    throw new HeraldError('HERALD_BPF_LOAD', 'cannot load libbpf.so.1 (install Debian package libbpf1)', { cause: e });
  }
  const libc = koffi.load('libc.so.6');
  koffi.opaque('bpf_object');
  koffi.opaque('bpf_program');
  koffi.opaque('bpf_map');
  // sizeof 24 / 32: natural trailing padding equals libbpf's `size_t :0`.
  const tcHook = koffi.struct('bpf_tc_hook', { sz: 'size_t', ifindex: 'int', attach_point: 'int', parent: 'uint32_t' });
  const tcOpts = koffi.struct('bpf_tc_opts', {
    sz: 'size_t',
    prog_fd: 'int',
    flags: 'uint32_t',
    prog_id: 'uint32_t',
    handle: 'uint32_t',
    priority: 'uint32_t',
  });
  const batchOpts = koffi.struct('bpf_map_batch_opts', { sz: 'size_t', elem_flags: 'uint64_t', flags: 'uint64_t' });
  // Prefix of struct bpf_map_info; the kernel fills only what fits in `len`.
  const mapInfo = koffi.struct('bpf_map_info_prefix', {
    type: 'uint32_t',
    id: 'uint32_t',
    key_size: 'uint32_t',
    value_size: 'uint32_t',
    max_entries: 'uint32_t',
    map_flags: 'uint32_t',
    name: koffi.array('char', 16, 'String'),
  });
  const f = {
    open: lib.func('bpf_object *bpf_object__open_file(const char *path, const void *opts)'),
    load: lib.func('int bpf_object__load(bpf_object *obj)'),
    closeObj: lib.func('void bpf_object__close(bpf_object *obj)'),
    findProg: lib.func('bpf_program *bpf_object__find_program_by_name(const bpf_object *obj, const char *name)'),
    findMap: lib.func('bpf_map *bpf_object__find_map_by_name(const bpf_object *obj, const char *name)'),
    progFd: lib.func('int bpf_program__fd(const bpf_program *prog)'),
    setLogBuf: lib.func('int bpf_program__set_log_buf(bpf_program *prog, void *buf, size_t size)'),
    setLogLevel: lib.func('int bpf_program__set_log_level(bpf_program *prog, uint32_t level)'),
    setPinPath: lib.func('int bpf_map__set_pin_path(bpf_map *map, const char *path)'),
    setMaxEntries: lib.func('int bpf_map__set_max_entries(bpf_map *map, uint32_t max_entries)'),
    mapFd: lib.func('int bpf_map__fd(const bpf_map *map)'),
    setInnerMapFd: lib.func('int bpf_map__set_inner_map_fd(bpf_map *map, int fd)'),
    mapCreate: lib.func(
      'int bpf_map_create(int map_type, const char *map_name, uint32_t key_size, uint32_t value_size, uint32_t max_entries, const void *opts)',
    ),
    hookCreate: lib.func('int bpf_tc_hook_create(bpf_tc_hook *hook)'),
    hookDestroy: lib.func('int bpf_tc_hook_destroy(bpf_tc_hook *hook)'),
    attach: lib.func('int bpf_tc_attach(const bpf_tc_hook *hook, _Inout_ bpf_tc_opts *opts)'),
    detach: lib.func('int bpf_tc_detach(const bpf_tc_hook *hook, const bpf_tc_opts *opts)'),
    query: lib.func('int bpf_tc_query(const bpf_tc_hook *hook, _Inout_ bpf_tc_opts *opts)'),
    xdpAttach: lib.func('int bpf_xdp_attach(int ifindex, int prog_fd, uint32_t flags, const void *opts)'),
    xdpDetach: lib.func('int bpf_xdp_detach(int ifindex, uint32_t flags, const void *opts)'),
    xdpQueryId: lib.func('int bpf_xdp_query_id(int ifindex, int flags, _Out_ uint32_t *prog_id)'),
    update: lib.func('int bpf_map_update_elem(int fd, const void *key, const void *value, uint64_t flags)'),
    lookup: lib.func('int bpf_map_lookup_elem(int fd, const void *key, void *value)'),
    del: lib.func('int bpf_map_delete_elem(int fd, const void *key)'),
    nextKey: lib.func('int bpf_map_get_next_key(int fd, const void *key, void *next_key)'),
    lookupBatch: lib.func(
      'int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, _Inout_ uint32_t *count, const bpf_map_batch_opts *opts)',
    ),
    updateBatch: lib.func('int bpf_map_update_batch(int fd, const void *keys, const void *values, _Inout_ uint32_t *count, const bpf_map_batch_opts *opts)'),
    deleteBatch: lib.func('int bpf_map_delete_batch(int fd, const void *keys, _Inout_ uint32_t *count, const bpf_map_batch_opts *opts)'),
    objGet: lib.func('int bpf_obj_get(const char *pathname)'),
    info: lib.func('int bpf_obj_get_info_by_fd(int fd, _Inout_ bpf_map_info_prefix *info, _Inout_ uint32_t *len)'),
    infoRaw: lib.func('int bpf_obj_get_info_by_fd(int fd, void *info, _Inout_ uint32_t *len)'),
    objPin: lib.func('int bpf_obj_pin(int fd, const char *pathname)'),
    progGetFdById: lib.func('int bpf_prog_get_fd_by_id(uint32_t id)'),
    linkGetFdById: lib.func('int bpf_link_get_fd_by_id(uint32_t id)'),
    linkUpdate: lib.func('int bpf_link_update(int link_fd, int new_prog_fd, const void *opts)'),
    linkDetach: lib.func('int bpf_link_detach(int link_fd)'),
    syscall: libc.func('long syscall(long number, ...)'),
    close: libc.func('int close(int fd)'),
    strerror: libc.func('const char *strerror(int errnum)'),
    ifNameToIndex: libc.func('unsigned int if_nametoindex(const char *ifname)'),
    ifIndexToName: libc.func('char *if_indextoname(unsigned int ifindex, _Out_ char *ifname)'),
  };
  // Route libbpf's own log lines through a quiet sink (it would print to stderr);
  // errors are reported through return codes and HeraldErrors instead.
  silenceLibbpf(lib);
  cached = {
    objectOpenFile: (path) => f.open(path, null),
    objectLoad: (obj) => f.load(obj),
    objectClose: (obj) => f.closeObj(obj),
    objectFindProgramByName: (obj, name) => f.findProg(obj, name),
    objectFindMapByName: (obj, name) => f.findMap(obj, name),
    programFd: (prog) => f.progFd(prog),
    programSetLogBuf: (prog, buf, size) => f.setLogBuf(prog, buf, size),
    programSetLogLevel: (prog, level) => f.setLogLevel(prog, level),
    mapSetPinPath: (map, path) => f.setPinPath(map, path),
    mapSetMaxEntries: (map, max) => f.setMaxEntries(map, max),
    mapFd: (map) => f.mapFd(map),
    mapSetInnerMapFd: (map, fd) => f.setInnerMapFd(map, fd),
    mapCreate: (type, name, keySize, valueSize, maxEntries) => f.mapCreate(type, name, keySize, valueSize, maxEntries, null),
    tcHookCreate: (hook) => f.hookCreate(hook),
    tcHookDestroy: (hook) => f.hookDestroy(hook),
    tcAttach: (hook, opts) => f.attach(hook, opts),
    tcDetach: (hook, opts) => f.detach(hook, opts),
    tcQuery: (hook, opts) => f.query(hook, opts),
    xdpAttach: (ifindex, progFd, flags) => f.xdpAttach(ifindex, progFd, flags, null),
    xdpDetach: (ifindex, flags) => f.xdpDetach(ifindex, flags, null),
    xdpQueryId: (ifindex, flags, progId) => f.xdpQueryId(ifindex, flags, progId),
    mapUpdateElem: (fd, key, value, flags) => f.update(fd, key, value, flags),
    mapLookupElem: (fd, key, value) => f.lookup(fd, key, value),
    mapDeleteElem: (fd, key) => f.del(fd, key),
    mapGetNextKey: (fd, key, next) => f.nextKey(fd, key, next),
    mapLookupBatch: (fd, inBatch, outBatch, keys, values, count, opts) => f.lookupBatch(fd, inBatch, outBatch, keys, values, count, opts ?? null),
    mapUpdateBatch: (fd, keys, values, count, opts) => f.updateBatch(fd, keys, values, count, opts ?? null),
    mapDeleteBatch: (fd, keys, count, opts) => f.deleteBatch(fd, keys, count, opts ?? null),
    objGet: (path) => f.objGet(path),
    objGetInfoByFd: (fd, info, len) => f.info(fd, info, len),
    objGetInfoByFdRaw: (fd, info, len) => f.infoRaw(fd, info, len),
    objPin: (fd, path) => f.objPin(fd, path),
    progGetFdById: (id) => f.progGetFdById(id),
    linkGetFdById: (id) => f.linkGetFdById(id),
    linkUpdate: (linkFd, progFd) => f.linkUpdate(linkFd, progFd, null),
    linkDetach: (linkFd) => f.linkDetach(linkFd),
    bpfSyscall: (cmd, attr, size) => Number(f.syscall(SYS_BPF, 'int', cmd, 'void *', attr, 'unsigned int', size)),
    close: (fd) => f.close(fd),
    strerror: (errno) => f.strerror(errno),
    ifNameToIndex: (name) => f.ifNameToIndex(name),
    ifIndexToName: (ifindex) => {
      const buf = Buffer.alloc(16); // IF_NAMESIZE
      const p = f.ifIndexToName(ifindex, buf);
      return p ? buf.subarray(0, buf.indexOf(0)).toString() : undefined;
    },
    errno: () => koffi.errno(),
    koffi,
    types: { tcHook, tcOpts, mapInfo, batchOpts },
  };
  return cached;
}

/** Messages libbpf printed most recently (warnings), kept for error context. */
const recentLibbpfLog: string[] = [];
export function takeLibbpfLog(): string[] {
  return recentLibbpfLog.splice(0);
}

function silenceLibbpf(lib: LibraryHandle): void {
  const libc = koffi.load('libc.so.6');
  const vsnprintf = libc.func('int vsnprintf(_Out_ uint8_t *buf, size_t size, const char *fmt, void *ap)');
  const proto = koffi.proto('int herald_libbpf_print_fn(int level, const char *fmt, void *ap)');
  const setPrint = lib.func('void *libbpf_set_print(herald_libbpf_print_fn *fn)');
  // Registered once for the life of the process: libbpf keeps the pointer.
  const cb = koffi.register((level: number, fmt: string, ap: unknown) => {
    if (level > 0) return 0; // INFO/DEBUG: drop
    const buf = Buffer.alloc(2048);
    const n = vsnprintf(buf, buf.length, fmt, ap) as number;
    recentLibbpfLog.push(buf.subarray(0, Math.max(0, Math.min(n, buf.length - 1))).toString().trimEnd());
    if (recentLibbpfLog.length > 50) recentLibbpfLog.shift();
    return 0;
  }, koffi.pointer(proto));
  setPrint(cb);
}

const errnoNames = new Map<number, string>();
export function errnoName(errno: number): string {
  if (errnoNames.size === 0) {
    for (const [k, v] of Object.entries(koffi.os.errno)) errnoNames.set(v, k);
  }
  return errnoNames.get(errno) ?? `E${errno}`;
}

/** An error from a libbpf/libc call, with the errno name as `errno` and a HeraldError code. */
export class SyscallError extends HeraldError {
  readonly errno: number;
  readonly errnoName: string;
  constructor(code: HeraldErrorCode, op: string, errno: number) {
    const name = errnoName(errno);
    super(code, `${op}: ${name} (${libbpf().strerror(errno)})`);
    this.errno = errno;
    this.errnoName = name;
  }
}

/** libbpf 1.x int APIs return -errno directly. */
export function check(code: HeraldErrorCode, op: string, rc: number): number {
  if (rc < 0) throw new SyscallError(code, op, -rc);
  return rc;
}

/** Pointer APIs return NULL and set errno: call right after the libbpf call. */
export function checkPtr<T>(code: HeraldErrorCode, op: string, p: T): T {
  if (p === null || p === 0n || p === undefined) throw new SyscallError(code, op, libbpf().errno());
  return p;
}

export const ERRNO = {
  get ENOENT() {
    return koffi.os.errno.ENOENT as number;
  },
  get EEXIST() {
    return koffi.os.errno.EEXIST as number;
  },
  get E2BIG() {
    return koffi.os.errno.E2BIG as number;
  },
  get ENOSPC() {
    return koffi.os.errno.ENOSPC as number;
  },
  get EINVAL() {
    return koffi.os.errno.EINVAL as number;
  },
  /** The kernel's internal ENOTSUPP (524), which batch calls on unsupported map types return. */
  get ENOTSUPP() {
    return 524;
  },
  get EOPNOTSUPP() {
    return koffi.os.errno.EOPNOTSUPP as number;
  },
  get EAGAIN() {
    return koffi.os.errno.EAGAIN as number;
  },
};
