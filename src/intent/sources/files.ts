/**
 * Intent from a manifest file or a directory of them (recursive), watched.
 *
 * Change detection: `fs.watch` on every directory of the tree (Node 20 has no
 * recursive watch on Linux) plus the parent of the path, so files created in
 * new subdirectories, editors that replace a file by rename, and the path
 * itself appearing or disappearing are all seen. Any event schedules a
 * re-scan after `debounceMs`; a periodic re-scan (`rescanMs`) catches events
 * the kernel dropped. A re-scan reads every file and hashes the contents, so
 * an event that changed nothing (a touch) publishes nothing.
 *
 * A change applies as a whole or not at all (SnapshotPublisher). Deleting
 * every manifest file is a valid change (an empty snapshot withdraws
 * everything); the path itself missing — at start or later — is an error and
 * the last good snapshot stays, because a directory swapped out or unmounted
 * for a moment must not withdraw every IP.
 *
 * The directory walk follows the rules of `loadManifestPath` (load.ts):
 * sorted, entries starting with "." skipped, symlinks followed once, only
 * .yaml/.yml/.json files inside directories. It is repeated here because the
 * watcher also needs the directories, and the hash must cover exactly the
 * bytes that were parsed (test/intent/sources/files.test.ts checks both agree).
 */
import { watch, type FSWatcher } from 'node:fs';
import { readdir, realpath, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { systemClock, type Clock } from '../../core/clock.js';
import { DisposableMap, toDisposable, type Disposable } from '../../core/disposable.js';
import { HeraldError, describeError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { Trigger } from '../../core/trigger.js';
import type { ManifestError } from '../diagnostics.js';
import { manifestLimitDefaults, type ManifestLimits } from '../limits.js';
import { MANIFEST_EXTENSIONS, readManifestFile } from '../load.js';
import type { ManifestLoad } from '../parse.js';
import type { ParseJob } from './parse-job.js';
import { SnapshotPublisher, contentHash } from './publisher.js';
import { parseManifestJob } from './worker-parser.js';
import type { IntentSource, IntentSourceHandlers } from './source.js';
import { compareStrings } from '../../core/order.js';

export interface FileIntentSourceOptions {
  readonly path: string;
  readonly log: Logger;
  /** Events within this long after the first one are coalesced into one re-scan. */
  readonly debounceMs?: number;
  /** Periodic re-scan, for events the kernel did not deliver. 0 disables it. */
  readonly rescanMs?: number;
  readonly clock?: Clock;
  /** Size cap and YAML bounds (limits.ts). */
  readonly limits?: ManifestLimits;
  /** Where parsing runs; default parseManifestJob (worker-parser.ts): inline when small and alias-free, else a worker thread. */
  readonly parse?: (job: ParseJob) => Promise<ManifestLoad>;
}

export const fileSourceDefaults = { debounceMs: 200, rescanMs: 10_000 } as const;

export interface ManifestScan {
  /** False when the path itself does not exist. */
  readonly exists: boolean;
  /**
   * Directories to watch, `path\0inode` → path (the inode, so that a
   * directory deleted and created again gets a new watch). The first entry
   * is the parent of the path, when it exists.
   */
  readonly dirs: ReadonlyMap<string, string>;
  readonly files: readonly { readonly file: string; readonly text: string }[];
  /** Every manifest file found, read or not (over the size cap, unreadable), as loadManifestPath's `files`. */
  readonly found: readonly string[];
  readonly errors: readonly ManifestError[];
}

function ioError(file: string, e: unknown): ManifestError {
  const code = typeof e === 'object' && e !== null && 'code' in e ? String(e.code) : undefined;
  const text = e instanceof Error ? e.message : String(e);
  return { severity: 'error', file, path: '', message: `cannot read: ${code ?? text}` };
}

const isEnoent = (e: unknown): boolean => typeof e === 'object' && e !== null && 'code' in e && e.code === 'ENOENT';
const isManifestFile = (name: string): boolean => MANIFEST_EXTENSIONS.some((ext) => name.toLowerCase().endsWith(ext));

/**
 * Reads the tree once (see the header for the rules); a file over the size
 * cap is not read, only reported. Never throws.
 */
export async function scanManifestPath(path: string, limits: ManifestLimits = manifestLimitDefaults): Promise<ManifestScan> {
  const dirs = new Map<string, string>();
  const names: string[] = [];
  const errors: ManifestError[] = [];
  const parent = dirname(resolve(path));
  try {
    dirs.set(`${parent}\u0000${(await stat(parent)).ino}`, parent);
  } catch {
    // No parent: only the periodic re-scan can notice the path appearing.
  }
  const visited = new Set<string>();
  const walk = async (dir: string, ino: number): Promise<void> => {
    let entries: string[];
    try {
      const real = await realpath(dir);
      if (visited.has(real)) return;
      visited.add(real);
      entries = await readdir(dir);
    } catch (e) {
      errors.push(ioError(dir, e));
      return;
    }
    dirs.set(`${dir}\u0000${ino}`, dir);
    entries.sort(compareStrings);
    for (const name of entries) {
      if (name.startsWith('.')) continue;
      const child = join(dir, name);
      try {
        const st = await stat(child);
        if (st.isDirectory()) await walk(child, st.ino);
        else if (st.isFile() && isManifestFile(name)) names.push(child);
      } catch (e) {
        // Deleted between readdir and stat: the next event re-scans anyway.
        if (!isEnoent(e)) errors.push(ioError(child, e));
      }
    }
  };
  try {
    const st = await stat(path);
    if (st.isDirectory()) await walk(path, st.ino);
    else names.push(path);
  } catch (e) {
    if (isEnoent(e)) return { exists: false, dirs, files: [], found: [], errors: [] };
    errors.push(ioError(path, e));
  }
  const files: { file: string; text: string }[] = [];
  for (const file of names) {
    try {
      const read = await readManifestFile(file, limits);
      if ('error' in read) errors.push(read.error);
      else files.push({ file, text: read.text });
    } catch (e) {
      if (!isEnoent(e) || file === path) errors.push(ioError(file, e));
    }
  }
  return { exists: true, dirs, files, found: names, errors };
}

export class FileIntentSource implements IntentSource {
  readonly name: string;
  private readonly debounceMs: number;
  private readonly rescanMs: number;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly parent: string;
  private readonly base: string;
  private readonly limits: ManifestLimits;
  private readonly parse: (job: ParseJob) => Promise<ManifestLoad>;
  private readonly abort = new AbortController();
  private readonly watchers = new DisposableMap<string, Disposable>();
  private publisher: SnapshotPublisher | undefined;
  /** Every event, the periodic re-scan and rescan() go through it: one scan at a time, bursts coalesced. */
  private readonly scans: Trigger;
  private disposed = false;

  constructor(private readonly opts: FileIntentSourceOptions) {
    this.debounceMs = opts.debounceMs ?? fileSourceDefaults.debounceMs;
    this.rescanMs = opts.rescanMs ?? fileSourceDefaults.rescanMs;
    if (opts.path === '') throw new HeraldError('HERALD_BAD_ARGUMENT', 'manifest path is empty');
    if (!(this.debounceMs >= 0) || !(this.rescanMs >= 0)) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', 'debounceMs and rescanMs must be >= 0');
    }
    this.clock = opts.clock ?? systemClock;
    this.limits = opts.limits ?? manifestLimitDefaults;
    this.parse = opts.parse ?? ((job) => parseManifestJob(job, { signal: this.abort.signal }));
    this.parent = dirname(resolve(opts.path));
    this.base = basename(resolve(opts.path));
    this.name = `files ${opts.path}`;
    this.log = opts.log.child({ source: this.name });
    this.scans = new Trigger({
      name: this.name,
      run: () => this.scanOnce(),
      clock: this.clock,
      log: this.log,
      delayMs: this.debounceMs,
      periodicMs: this.rescanMs,
      // Only a throwing handler gets here; the source keeps watching.
      onError: (e) => this.log.error({ err: describeError(e) }, 'applying manifests failed'),
    });
  }

  async start(handlers: IntentSourceHandlers): Promise<void> {
    if (this.disposed) throw new HeraldError('HERALD_STOPPED', `${this.name}: start() after dispose()`);
    if (this.publisher) throw new HeraldError('HERALD_INTERNAL', `${this.name}: started twice`);
    this.publisher = new SnapshotPublisher(handlers, this.log);
    await this.rescan(); // the periodic re-scan counts from the end of this first one
  }

  /** Re-scans now (and waits for it); also what every event leads to. */
  rescan(): Promise<void> {
    return this.scans.triggerNow();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.publisher?.close();
    this.abort.abort();
    this.scans.dispose();
    this.watchers.dispose();
  }

  private async scanOnce(): Promise<void> {
    const publisher = this.publisher;
    if (!publisher || this.disposed) return;
    const scan = await scanManifestPath(this.opts.path, this.limits);
    if (this.disposed) return;
    if (this.updateWatchers(scan.dirs)) void this.scans.triggerNow(); // a new directory: re-scan what it held before the watch
    if (!scan.exists) {
      publisher.fail(new HeraldError('HERALD_BAD_MANIFEST', `manifest path ${this.opts.path} does not exist`));
      return;
    }
    const hash = contentHash([
      ...scan.files.map((f) => [f.file, f.text] as const),
      ...scan.errors.map((e) => [`\u0000error ${e.file}`, e.message] as const),
    ]);
    const outcome = await publisher.offer(hash, () =>
      this.parse({ kind: 'files', files: scan.files, ioErrors: scan.errors, limits: this.limits }),
    );
    if (outcome !== 'same') this.log.debug({ files: scan.files.length, outcome }, 'manifests scanned');
  }

  /** Watches exactly `dirs`; true if a directory was added. */
  private updateWatchers(dirs: ReadonlyMap<string, string>): boolean {
    for (const id of [...this.watchers.keys()]) if (!dirs.has(id)) this.watchers.deleteAndDispose(id);
    let added = false;
    for (const [id, dir] of dirs) {
      if (this.watchers.has(id)) continue;
      let w: FSWatcher;
      // In the parent only the path itself matters (created, deleted, replaced).
      const only = dir === this.parent ? this.base : undefined;
      try {
        w = watch(dir, { persistent: false }, (_event, name) => {
          if (only === undefined || name === null || String(name) === only) this.scheduleScan();
        });
      } catch (e) {
        this.log.debug({ dir, err: describeError(e) }, 'cannot watch a directory (the periodic re-scan covers it)');
        continue;
      }
      // The directory went away (or inotify failed): forget the watch and look again.
      w.on('error', () => {
        this.watchers.deleteAndDispose(id);
        this.scheduleScan();
      });
      this.watchers.set(id, toDisposable(() => w.close()));
      added = true;
    }
    return added;
  }

  private scheduleScan(): void {
    this.scans.trigger();
  }
}
