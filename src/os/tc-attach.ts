/**
 * How herald's tc programs are attached: through tcx links where the kernel
 * has them (Linux ≥ 6.6), else as legacy clsact `cls_bpf` filters
 * (direct-action, fixed handle and priority). Decided once per process
 * (`tcAttachMode()`; HERALD_TC_ATTACH=tcx|cls_bpf forces one) and the same for
 * every program, so their order is one order:
 *
 * - tcx: one link per program, hook and interface, pinned in bpffs when the
 *   caller gives a pin directory (`tcx_<program>_<ifindex>`) so the program
 *   keeps running after the agent exits, exactly as a cls_bpf filter stays.
 *   A restarted (or upgraded) agent finds its link on the hook (by program
 *   name) and swaps the program in it atomically (BPF_LINK_UPDATE). A new
 *   link is placed among herald's own by their legacy priority (lower runs
 *   first: the L2 responder, then the policy, then the LB).
 * - cls_bpf: as before (BPF_TC_F_REPLACE at the slot).
 *
 * Never two copies of one program: attaching in one mode removes what the
 * other mode left (an older herald's filter, a newer one's link) — after the
 * new attachment is in place, so no packet finds neither. While both are
 * there for that instant, the tcx copy runs first and a packet it answers or
 * drops never reaches the legacy copy; both read the same pinned maps.
 */
import { existsSync, rmSync } from 'node:fs';
import { HeraldError } from '../core/errors.js';
import { join } from 'node:path';
import { attachEgress, attachIngress, detachIngress, queryIngress, type TcSlot } from './tc.js';
import { BPF_TC_EGRESS, BPF_TC_INGRESS, SyscallError, libbpf } from './libbpf.js';
import {
  BPF_TCX_EGRESS,
  BPF_TCX_INGRESS,
  linkDetach,
  linkInfo,
  linkUpdate,
  objPin,
  programName,
  tcxLinkCreate,
  tcxQuery,
  type TcxPlacement,
  type TcxPoint,
} from './tcx.js';

export type TcAttachMode = 'tcx' | 'cls_bpf';

export interface TcProgramSpec {
  /** The program's name (compared as the kernel keeps it, 15 characters): how its tcx link is found again. */
  progName: string;
  /** Legacy filter handle and priority; the priority also orders herald's tcx links. */
  slot: TcSlot;
  egress?: boolean;
  /** Pin directory for the tcx link; without one the link lives as long as this process. */
  pinDir?: string;
  /** The legacy priority of another herald program by its name (undefined: not herald's). */
  rankOf: (progName: string) => number | undefined;
}

let detected: { mode: TcAttachMode; reason: string } | undefined;

/** tcx when the kernel has it (probed once: a tcx query on lo), else cls_bpf. */
export function tcAttachMode(): TcAttachMode {
  return tcAttachModeDetail().mode;
}

export function tcAttachModeDetail(): { mode: TcAttachMode; reason: string } {
  if (detected) return detected;
  const forced = process.env.HERALD_TC_ATTACH;
  if (forced === 'tcx' || forced === 'cls_bpf') {
    detected = { mode: forced, reason: 'HERALD_TC_ATTACH' };
    return detected;
  }
  if (forced !== undefined && forced !== '') {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `HERALD_TC_ATTACH=${JSON.stringify(forced.slice(0, 40))}: expected tcx or cls_bpf`);
  }
  try {
    tcxQuery(1, BPF_TCX_INGRESS);
    detected = { mode: 'tcx', reason: 'the kernel has tcx' };
  } catch (e) {
    detected = { mode: 'cls_bpf', reason: `no tcx in this kernel (${e instanceof SyscallError ? e.errnoName : String(e)})` };
  }
  return detected;
}

/** Links this process holds without a pin (no pin directory): closed on detach. */
const held = new Map<number, number>(); // link id → fd

/** The kernel keeps 15 characters of a program's name (BPF_OBJ_NAME_LEN 16 with the NUL). */
export function kernelName(progName: string): string {
  return progName.slice(0, 15);
}

function point(spec: TcProgramSpec): TcxPoint {
  return spec.egress ? BPF_TCX_EGRESS : BPF_TCX_INGRESS;
}

function pinPath(spec: TcProgramSpec, ifindex: number): string | undefined {
  return spec.pinDir === undefined ? undefined : join(spec.pinDir, `tcx_${spec.progName}_${ifindex}${spec.egress ? '_egress' : ''}`);
}

interface Found {
  progId: number;
  linkId: number;
}

/** herald's link for this program on the hook (by program name), if any. */
function findLinks(ifindex: number, spec: TcProgramSpec): Found[] {
  let entries;
  try {
    entries = tcxQuery(ifindex, point(spec));
  } catch {
    return []; // no tcx in this kernel, or the interface is gone
  }
  const name = kernelName(spec.progName);
  return entries.filter((e) => e.linkId !== 0 && programName(e.progId) === name);
}

function placement(ifindex: number, spec: TcProgramSpec): TcxPlacement {
  const mine = spec.slot.priority;
  const ranked = tcxQuery(ifindex, point(spec)).map((e) => {
    const name = programName(e.progId);
    return { progId: e.progId, rank: name === undefined ? undefined : spec.rankOf(name) };
  });
  const later = ranked.find((r) => r.rank !== undefined && r.rank > mine);
  if (later) return { before: later.progId };
  const earlier = ranked.filter((r) => r.rank !== undefined && r.rank <= mine).pop();
  if (earlier) return { after: earlier.progId };
  return mine <= 1 ? 'first' : 'last';
}

function openLink(linkId: number): number {
  const lib = libbpf();
  const fd = lib.linkGetFdById(linkId);
  if (fd < 0) throw new SyscallError('HERALD_TC_ATTACH', `bpf_link_get_fd_by_id ${linkId}`, lib.errno());
  return fd;
}

/** Keeps the link past this process (pin) or while it runs (held fd); closes `fd` when pinned. */
function keep(fd: number, linkId: number, path: string | undefined): void {
  const lib = libbpf();
  if (path === undefined) {
    const before = held.get(linkId);
    if (before !== undefined && before !== fd) lib.close(before);
    held.set(linkId, fd);
    return;
  }
  if (existsSync(path)) {
    const pinned = lib.objGet(path);
    let same = false;
    if (pinned >= 0) {
      try {
        same = linkInfo(pinned).id === linkId;
      } catch {
        same = false; // not a link
      }
      lib.close(pinned);
    }
    if (!same) rmSync(path, { force: true }); // a defunct link (its interface is gone) or a stale pin
    else {
      lib.close(fd);
      return;
    }
  }
  try {
    objPin(fd, path);
  } finally {
    if (held.get(linkId) !== fd) lib.close(fd);
  }
}

export interface TcAttachResult {
  progId: number;
  mode: TcAttachMode;
}

/**
 * Attaches `progFd` as `spec` on `ifindex` (or swaps it in atomically where
 * herald's program already runs), in this process's mode, and removes the
 * other mode's copy. Returns the program id in force.
 */
export function attachTc(ifindex: number, progFd: number, spec: TcProgramSpec): TcAttachResult {
  const mode = tcAttachMode();
  if (mode === 'cls_bpf') {
    const progId = spec.egress ? attachEgress(ifindex, progFd, spec.slot) : attachIngress(ifindex, progFd, spec.slot);
    detachTcx(ifindex, spec);
    return { progId, mode };
  }
  const path = pinPath(spec, ifindex);
  const [existing, ...extra] = findLinks(ifindex, spec);
  let linkId: number;
  let fd: number;
  if (existing) {
    fd = held.get(existing.linkId) ?? openLink(existing.linkId);
    linkUpdate(fd, progFd);
    linkId = existing.linkId;
  } else {
    fd = tcxLinkCreate(ifindex, progFd, point(spec), placement(ifindex, spec));
    linkId = linkInfo(fd).id;
  }
  try {
    keep(fd, linkId, path);
  } catch (e) {
    if (!existing) detachFd(fd);
    throw e;
  }
  for (const x of extra) detachLinkById(x.linkId); // a second link of the same program (should not happen): one answer only
  // An older herald's filter at the slot goes once the link is in place.
  if (queryIngress(ifindex, spec.slot, spec.egress ? BPF_TC_EGRESS : BPF_TC_INGRESS) !== undefined) {
    detachIngress(ifindex, spec.slot, libbpf().ifIndexToName(ifindex), spec.egress ? BPF_TC_EGRESS : BPF_TC_INGRESS);
  }
  return { progId: attachedId(ifindex, spec) ?? 0, mode };
}

function detachFd(fd: number): void {
  try {
    linkDetach(fd);
  } finally {
    libbpf().close(fd);
  }
}

function detachLinkById(linkId: number): void {
  const h = held.get(linkId);
  held.delete(linkId);
  if (h !== undefined) {
    detachFd(h);
    return;
  }
  let fd: number;
  try {
    fd = openLink(linkId);
  } catch {
    return; // gone meanwhile
  }
  detachFd(fd);
}

function detachTcx(ifindex: number, spec: TcProgramSpec): boolean {
  let any = false;
  for (const l of findLinks(ifindex, spec)) {
    detachLinkById(l.linkId);
    any = true;
  }
  const path = pinPath(spec, ifindex);
  if (path !== undefined && existsSync(path)) rmSync(path, { force: true });
  return any;
}

function attachedId(ifindex: number, spec: TcProgramSpec): number | undefined {
  const [link] = findLinks(ifindex, spec);
  return link?.progId;
}

/** The id of herald's program for `spec` on `ifindex` (either kind), or undefined when none is attached. */
export function queryTc(ifindex: number, spec: TcProgramSpec): number | undefined {
  return attachedId(ifindex, spec) ?? queryIngress(ifindex, spec.slot, spec.egress ? BPF_TC_EGRESS : BPF_TC_INGRESS);
}

/** How herald's program for `spec` is attached on `ifindex` now. */
export function attachedAs(ifindex: number, spec: TcProgramSpec): TcAttachMode | undefined {
  if (attachedId(ifindex, spec) !== undefined) return 'tcx';
  return queryIngress(ifindex, spec.slot, spec.egress ? BPF_TC_EGRESS : BPF_TC_INGRESS) !== undefined ? 'cls_bpf' : undefined;
}

/**
 * Removes herald's program for `spec` from `ifindex`, both kinds; with
 * `ifname`, also the clsact qdisc when no other filter is left on it.
 */
export function detachTc(ifindex: number, spec: TcProgramSpec, ifname?: string): boolean {
  const a = detachTcx(ifindex, spec);
  const b = detachIngress(ifindex, spec.slot, ifname, spec.egress ? BPF_TC_EGRESS : BPF_TC_INGRESS);
  return a || b;
}
