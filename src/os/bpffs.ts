/**
 * The BPF filesystem that holds herald's pinned maps. Like Cilium, herald
 * mounts it at /sys/fs/bpf when the host has not (minimal hosts, containers).
 */
import { mkdirSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import koffi from 'koffi';
import { HeraldError } from '../core/errors.js';
import { errnoName } from './libbpf.js';

const BPF_FS_MAGIC = 0xcafe4a11;
export const BPFFS_ROOT = '/sys/fs/bpf';

function isBpffs(path: string): boolean {
  try {
    return statfsSync(path).type === BPF_FS_MAGIC;
  } catch {
    return false;
  }
}

/** Makes sure `dir` exists on a bpf filesystem, mounting /sys/fs/bpf if needed. */
export function ensurePinDir(dir: string): void {
  if (!isBpffs(dir)) {
    let probe = dir;
    while (!isBpffs(probe) && probe !== '/' && probe !== BPFFS_ROOT) probe = dirname(probe);
    if (!isBpffs(probe)) {
      if (!dir.startsWith(BPFFS_ROOT + '/') && dir !== BPFFS_ROOT) {
        throw new HeraldError('HERALD_BAD_ARGUMENT', `pin directory ${dir} is not on a bpf filesystem`);
      }
      mountBpffs(BPFFS_ROOT);
    }
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
}

function mountBpffs(target: string): void {
  const mount = koffi.load('libc.so.6').func(
    'int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const void *data)',
  );
  mkdirSync(target, { recursive: true });
  if (mount('bpf', target, 'bpf', 0, null) !== 0) {
    const errno = koffi.errno();
    throw new HeraldError('HERALD_BPF_LOAD', `mounting bpffs at ${target}: ${errnoName(errno)}`);
  }
}
