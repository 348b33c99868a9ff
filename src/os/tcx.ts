/**
 * tcx: the kernel's BPF-link based tc hook (Linux ≥ 6.6, BPF_TCX_INGRESS /
 * BPF_TCX_EGRESS). A program attached through a tcx link runs before any
 * legacy clsact filter, without the classifier layer (`tcf_classify` →
 * `cls_bpf_classify`) in between, and its return codes are the same as in
 * direct-action mode (TC_ACT_UNSPEC = TCX_NEXT, TC_ACT_OK = TCX_PASS, …).
 *
 * Debian's libbpf 1.1.2 predates `bpf_program__attach_tcx` (libbpf 1.3), and
 * its `bpf_link_create` cannot pass tcx's relative program, so the link is
 * created and the hook queried through the bpf(2) syscall itself (the
 * attributes are plain u32/u64 fields); update, detach, pin and info go
 * through libbpf as elsewhere.
 */
import { SyscallError, libbpf } from './libbpf.js';

export const BPF_TCX_INGRESS = 46;
export const BPF_TCX_EGRESS = 47;
export const BPF_LINK_TYPE_TCX = 11;
export const BPF_F_BEFORE = 1 << 3;
export const BPF_F_AFTER = 1 << 4;
export const BPF_F_ID = 1 << 5;

const BPF_PROG_QUERY = 16;
const BPF_LINK_CREATE = 28;
const BPF_ATTR_SIZE = 128;

export type TcxPoint = typeof BPF_TCX_INGRESS | typeof BPF_TCX_EGRESS;

/** Where a new link goes: before/after the program with this id, or first/last. */
export type TcxPlacement = { before: number } | { after: number } | 'first' | 'last';

/** Creates a tcx link (the returned fd holds it; pin it to keep it past this process). */
export function tcxLinkCreate(ifindex: number, progFd: number, point: TcxPoint, where: TcxPlacement): number {
  const lib = libbpf();
  const attr = Buffer.alloc(BPF_ATTR_SIZE);
  attr.writeUInt32LE(progFd, 0); // link_create.prog_fd
  attr.writeUInt32LE(ifindex, 4); // link_create.target_ifindex
  attr.writeUInt32LE(point, 8); // link_create.attach_type
  let flags = 0;
  if (where === 'first') flags = BPF_F_BEFORE;
  else if (where === 'last') flags = BPF_F_AFTER;
  else if ('before' in where) {
    flags = BPF_F_BEFORE | BPF_F_ID;
    attr.writeUInt32LE(where.before, 16); // link_create.tcx.relative_id
  } else {
    flags = BPF_F_AFTER | BPF_F_ID;
    attr.writeUInt32LE(where.after, 16);
  }
  attr.writeUInt32LE(flags, 12); // link_create.flags
  const fd = lib.bpfSyscall(BPF_LINK_CREATE, attr, BPF_ATTR_SIZE);
  if (fd < 0) throw new SyscallError('HERALD_TC_ATTACH', `tcx link on ifindex ${ifindex}`, lib.errno());
  return fd;
}

export interface TcxEntry {
  progId: number;
  /** 0 for a program attached without a link (bpf_prog_attach). */
  linkId: number;
}

/**
 * The programs on a tcx hook, in the order they run. Throws (EINVAL) on a
 * kernel without tcx; an interface with nothing attached gives [].
 */
export function tcxQuery(ifindex: number, point: TcxPoint): TcxEntry[] {
  const lib = libbpf();
  const max = 64;
  const progIds = Buffer.alloc(4 * max);
  const linkIds = Buffer.alloc(4 * max);
  const attr = Buffer.alloc(BPF_ATTR_SIZE);
  attr.writeUInt32LE(ifindex, 0); // query.target_ifindex
  attr.writeUInt32LE(point, 4); // query.attach_type
  attr.writeBigUInt64LE(lib.koffi.address(progIds) as bigint, 16); // query.prog_ids
  attr.writeUInt32LE(max, 24); // query.count
  attr.writeBigUInt64LE(lib.koffi.address(linkIds) as bigint, 40); // query.link_ids
  const rc = lib.bpfSyscall(BPF_PROG_QUERY, attr, BPF_ATTR_SIZE);
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', `tcx query on ifindex ${ifindex}`, lib.errno());
  const n = Math.min(attr.readUInt32LE(24), max);
  const out: TcxEntry[] = [];
  for (let i = 0; i < n; i++) out.push({ progId: progIds.readUInt32LE(4 * i), linkId: linkIds.readUInt32LE(4 * i) });
  return out;
}

export interface LinkInfo {
  type: number;
  id: number;
  progId: number;
  /** tcx links: the interface (0 once the interface is gone: the link is defunct) and hook. */
  ifindex: number;
  attachType: number;
}

/** bpf_link_info of a link fd (the tcx part of its union). */
export function linkInfo(fd: number): LinkInfo {
  const lib = libbpf();
  const info = Buffer.alloc(64);
  const len = [info.length];
  const rc = lib.objGetInfoByFdRaw(fd, info, len);
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_obj_get_info_by_fd (link)', -rc);
  return { type: info.readUInt32LE(0), id: info.readUInt32LE(4), progId: info.readUInt32LE(8), ifindex: info.readUInt32LE(16), attachType: info.readUInt32LE(20) };
}

/** The name of a loaded program by id (bpf_prog_info.name), or undefined when it is gone. */
export function programName(progId: number): string | undefined {
  const lib = libbpf();
  const fd = lib.progGetFdById(progId);
  if (fd < 0) return undefined;
  try {
    const info = Buffer.alloc(256); // struct bpf_prog_info prefix; name[16] at offset 64
    const len = [info.length];
    if (lib.objGetInfoByFdRaw(fd, info, len) < 0) return undefined;
    const name = info.subarray(64, 80);
    const end = name.indexOf(0);
    return name.subarray(0, end < 0 ? 16 : end).toString();
  } finally {
    lib.close(fd);
  }
}

/** Swaps the program of a link atomically (BPF_LINK_UPDATE): no packet sees neither. */
export function linkUpdate(linkFd: number, progFd: number): void {
  const rc = libbpf().linkUpdate(linkFd, progFd);
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_link_update', -rc);
}

/** Detaches a link's program from its hook now (BPF_LINK_DETACH), whoever else holds the link. */
export function linkDetach(linkFd: number): void {
  const rc = libbpf().linkDetach(linkFd);
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_link_detach', -rc);
}

export function objPin(fd: number, path: string): void {
  const rc = libbpf().objPin(fd, path);
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', `pinning ${path}`, -rc);
}
