/**
 * XDP attachment of a BPF program to an interface through libbpf's
 * bpf_xdp_attach (netlink), in native (driver) mode: a driver without native
 * XDP is refused rather than silently given the slower generic mode, which
 * would cost more than the tc program it is meant to beat. One program per
 * interface and mode: an attach replaces what is there.
 */
import { execFileSync } from 'node:child_process';
import { HeraldError } from '../core/errors.js';
import { ERRNO, SyscallError, libbpf } from './libbpf.js';

/** XDP_FLAGS_DRV_MODE: native XDP only. */
export const XDP_FLAGS_DRV_MODE = 1 << 2;

/** Attaches (or replaces) `progFd` as the interface's native XDP program. */
export function attachXdp(ifindex: number, progFd: number): void {
  const rc = libbpf().xdpAttach(ifindex, progFd, XDP_FLAGS_DRV_MODE);
  if (rc < 0) {
    throw new HeraldError('HERALD_TC_ATTACH', `attaching native XDP to ifindex ${ifindex} (the driver must support native XDP)`, {
      cause: new SyscallError('HERALD_TC_ATTACH', 'bpf_xdp_attach', -rc),
    });
  }
}

/** The id of the interface's native XDP program, or undefined when none. */
export function queryXdp(ifindex: number): number | undefined {
  const id = [0];
  const rc = libbpf().xdpQueryId(ifindex, XDP_FLAGS_DRV_MODE, id);
  if (rc === -ERRNO.ENOENT || rc === -19 /* ENODEV */) return undefined;
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_xdp_query_id', -rc);
  return id[0] ? id[0] : undefined;
}

/** Removes the interface's native XDP program; false when there was none. */
export function detachXdp(ifindex: number): boolean {
  if (queryXdp(ifindex) === undefined) return false;
  const rc = libbpf().xdpDetach(ifindex, XDP_FLAGS_DRV_MODE);
  if (rc === -19) return false;
  if (rc < 0) throw new SyscallError('HERALD_TC_ATTACH', 'bpf_xdp_detach', -rc);
  return true;
}

/** The name of the interface's XDP program (`ip -j -d link`), or undefined when none or unknown. */
export function xdpProgramName(ifname: string): string | undefined {
  try {
    const out = execFileSync('ip', ['-j', '-d', 'link', 'show', 'dev', ifname], { encoding: 'utf8' });
    const links = JSON.parse(out || '[]') as Array<{ xdp?: { prog?: { name?: string } } }>;
    return links[0]?.xdp?.prog?.name;
  } catch {
    return undefined;
  }
}
