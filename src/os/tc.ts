/**
 * tc ingress (clsact) attachment of a BPF program in direct-action mode, at a
 * fixed handle and priority so a later attach replaces the filter atomically
 * (BPF_TC_F_REPLACE: no window without a program) and a detach finds it.
 */
import { execFileSync } from 'node:child_process';
import { HeraldError } from '../core/errors.js';
import { BPF_TC_EGRESS, BPF_TC_F_REPLACE, BPF_TC_INGRESS, ERRNO, SyscallError, libbpf, type TcHook, type TcOpts } from './libbpf.js';

export interface TcSlot {
  handle: number;
  priority: number;
}

function hook(ifindex: number, attachPoint = BPF_TC_INGRESS): TcHook {
  const lib = libbpf();
  return { sz: lib.koffi.sizeof(lib.types.tcHook), ifindex, attach_point: attachPoint, parent: 0 };
}

function opts(slot: TcSlot, progFd = 0, flags = 0): TcOpts {
  const lib = libbpf();
  return { sz: lib.koffi.sizeof(lib.types.tcOpts), prog_fd: progFd, flags, prog_id: 0, handle: slot.handle, priority: slot.priority };
}

/** Attaches (or atomically replaces) the program at `slot` on ingress. Returns the program id. */
export function attachIngress(ifindex: number, progFd: number, slot: TcSlot): number {
  return attachAt(ifindex, progFd, slot, BPF_TC_INGRESS);
}

/** Attaches (or atomically replaces) the program at `slot` on egress. Returns the program id. */
export function attachEgress(ifindex: number, progFd: number, slot: TcSlot): number {
  return attachAt(ifindex, progFd, slot, BPF_TC_EGRESS);
}

function attachAt(ifindex: number, progFd: number, slot: TcSlot, point: number): number {
  const lib = libbpf();
  const h = hook(ifindex, point);
  const rc = lib.tcHookCreate(h);
  if (rc < 0 && rc !== -ERRNO.EEXIST) {
    throw new HeraldError('HERALD_TC_ATTACH', `creating clsact on ifindex ${ifindex}`, {
      cause: new SyscallError('HERALD_TC_ATTACH', 'bpf_tc_hook_create', -rc),
    });
  }
  const o = opts(slot, progFd, BPF_TC_F_REPLACE);
  const arc = lib.tcAttach(h, o);
  if (arc < 0) {
    throw new HeraldError('HERALD_TC_ATTACH', `attaching to tc ${point === BPF_TC_EGRESS ? 'egress' : 'ingress'} of ifindex ${ifindex}`, {
      cause: new SyscallError('HERALD_TC_ATTACH', 'bpf_tc_attach', -arc),
    });
  }
  return o.prog_id;
}

/** The id of the program at `slot`, or undefined when nothing is attached there. */
export function queryIngress(ifindex: number, slot: TcSlot, point = BPF_TC_INGRESS): number | undefined {
  const lib = libbpf();
  const o = opts(slot);
  const rc = lib.tcQuery(hook(ifindex, point), o);
  if (rc === -ERRNO.ENOENT || rc === -19 /* ENODEV */ || rc === -22 /* EINVAL: no clsact */) return undefined;
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_tc_query', -rc);
  return o.prog_id;
}

/**
 * Removes our filter; removes the clsact qdisc too when no other filter is left
 * on it, so a detach leaves the interface as it was before herald.
 */
export function detachIngress(ifindex: number, slot: TcSlot, ifname?: string, point = BPF_TC_INGRESS): boolean {
  const lib = libbpf();
  const rc = lib.tcDetach(hook(ifindex, point), opts(slot));
  if (rc === -ERRNO.ENOENT || rc === -19 || rc === -22) return false;
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_tc_detach', -rc);
  if (ifname && !hasOtherFilters(ifname)) {
    lib.tcHookDestroy(hook(ifindex, BPF_TC_INGRESS | BPF_TC_EGRESS));
  }
  return true;
}

function hasOtherFilters(ifname: string): boolean {
  for (const dir of ['ingress', 'egress']) {
    try {
      const out = execFileSync('tc', ['-j', 'filter', 'show', 'dev', ifname, dir], { encoding: 'utf8' });
      const filters = JSON.parse(out || '[]') as unknown[];
      if (filters.length > 0) return true;
    } catch {
      return true; // cannot tell: keep the qdisc
    }
  }
  return false;
}
