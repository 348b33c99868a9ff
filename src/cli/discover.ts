/**
 * Finding the one running agent when `--node` is not given: `herald status`
 * and `herald map dump` must compose with a plain `herald agent` whose socket
 * and pin directory are per node (/run/herald/<node>.sock,
 * /sys/fs/bpf/herald/<node>). Exactly one candidate: use it. Several (a lab
 * with many agents on one machine): list them and ask for --node. None: the
 * hostname's default, so the error names the path that was looked for.
 */
import { readdirSync, type Dirent } from 'node:fs';
import { join } from 'node:path';
import { HeraldError } from '../core/errors.js';

export interface Discovered {
  path: string;
  /** How it was chosen, for error messages. */
  how: 'flag' | 'node' | 'only-one' | 'default';
}

function list(dir: string, keep: (d: Dirent) => boolean): Dirent[] {
  try {
    return readdirSync(dir, { withFileTypes: true }).filter(keep);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

function choose(kind: string, flag: string, found: string[], fallback: string): Discovered {
  if (found.length === 1) return { path: found[0]!, how: 'only-one' };
  if (found.length > 1) {
    throw new HeraldError(
      'HERALD_BAD_ARGUMENT',
      `several agents run on this machine (${kind}: ${found.join(', ')}); choose one with --node <name> or ${flag}`,
    );
  }
  return { path: fallback, how: 'default' };
}

/** The status socket to ask: --status-socket, else /run/herald/<node>.sock, else the only socket in /run/herald. */
export function discoverStatusSocket(opts: { statusSocket?: string; node?: string }, dir: string, defaultNode: string): Discovered {
  if (opts.statusSocket) return { path: opts.statusSocket, how: 'flag' };
  if (opts.node) return { path: join(dir, `${opts.node}.sock`), how: 'node' };
  const socks = list(dir, (d) => d.isSocket() && d.name.endsWith('.sock')).map((d) => join(dir, d.name)).sort();
  return choose('status sockets', '--status-socket <path>', socks, join(dir, `${defaultNode}.sock`));
}

/** The pin directory to read: --bpf-pin-dir, else <root>/<node>, else the only node directory under <root>. */
export function discoverPinDir(opts: { bpfPinDir?: string; node?: string }, root: string, defaultNode: string): Discovered {
  if (opts.bpfPinDir) return { path: opts.bpfPinDir, how: 'flag' };
  if (opts.node) return { path: join(root, opts.node), how: 'node' };
  const dirs = list(root, (d) => d.isDirectory()).map((d) => join(root, d.name)).sort();
  return choose('pin directories', '--bpf-pin-dir <dir>', dirs, join(root, defaultNode));
}
