/**
 * Loading manifests from disk: one file, or a directory walked recursively.
 * The only intent module that does I/O; parsing itself is `parse.ts`.
 */
import { open, readdir, realpath, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { HeraldError } from '../core/errors.js';
import { formatErrors, type ManifestError } from './diagnostics.js';
import { manifestLimitDefaults, tooLargeError, type ManifestLimits } from './limits.js';
import { finishLoad, parseFile, parseManifests, type ManifestLoad, type ParsedFile } from './parse.js';
import type { IntentSnapshot } from './snapshot.js';
import { compareStrings } from '../core/order.js';

export { parseManifests, type ManifestLoad };

export const MANIFEST_EXTENSIONS: readonly string[] = ['.yaml', '.yml', '.json'];

export interface PathLoad extends ManifestLoad {
  /** The files read, in the order they were read. */
  readonly files: readonly string[];
}

function ioError(file: string, e: unknown): ManifestError {
  const code = typeof e === 'object' && e !== null && 'code' in e ? String(e.code) : undefined;
  const text = e instanceof Error ? e.message : String(e);
  return { severity: 'error', file, path: '', message: `cannot read: ${code ?? text}` };
}

const READ_CHUNK = 64 * 1024;

/**
 * Reads a manifest file, bounded: a regular file over the cap is refused by
 * its size before a byte is read, and the read stops one byte past the cap
 * whatever the file is (one that grew after the check, a pipe), so memory
 * never follows the file. Throws only what the file system throws.
 */
export async function readManifestFile(
  path: string,
  limits: ManifestLimits = manifestLimitDefaults,
): Promise<{ readonly text: string } | { readonly error: ManifestError }> {
  const handle = await open(path, 'r');
  try {
    const st = await handle.stat();
    if (st.isFile() && st.size > limits.maxBytes) return { error: tooLargeError(path, st.size, limits) };
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.min(READ_CHUNK, limits.maxBytes + 1 - total));
      const { bytesRead } = await handle.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      chunks.push(chunk.subarray(0, bytesRead));
      total += bytesRead;
      if (total > limits.maxBytes) return { error: tooLargeError(path, undefined, limits) };
    }
    return { text: Buffer.concat(chunks, total).toString('utf8') };
  } finally {
    await handle.close();
  }
}

function isManifestFile(name: string): boolean {
  const lower = name.toLowerCase();
  return MANIFEST_EXTENSIONS.some((ext) => lower.endsWith(ext));
}

/**
 * Every manifest file under `dir`, recursively, sorted by name at each level.
 * Entries starting with "." are skipped: besides hidden files, that skips the
 * `..data` and `..<timestamp>` links of a mounted ConfigMap, which would
 * otherwise load each object twice. Symlinks are followed once.
 */
async function walk(dir: string, files: string[], errors: ManifestError[], visited: Set<string>): Promise<void> {
  let real: string;
  let names: string[];
  try {
    real = await realpath(dir);
    if (visited.has(real)) return;
    visited.add(real);
    names = await readdir(dir);
  } catch (e) {
    errors.push(ioError(dir, e));
    return;
  }
  names.sort(compareStrings);
  for (const name of names) {
    if (name.startsWith('.')) continue;
    const path = join(dir, name);
    try {
      const st = await stat(path);
      if (st.isDirectory()) await walk(path, files, errors, visited);
      else if (st.isFile() && isManifestFile(name)) files.push(path);
    } catch (e) {
      errors.push(ioError(path, e));
    }
  }
}

/**
 * Loads a manifest file (whatever its extension) or every `.yaml`, `.yml`
 * and `.json` file under a directory. Problems never throw: every error in
 * every file (unreadable files included) is in `errors`, and duplicates are
 * checked across all files.
 */
export async function loadManifestPath(path: string, limits: ManifestLimits = manifestLimitDefaults): Promise<PathLoad> {
  const ioErrors: ManifestError[] = [];
  const files: string[] = [];
  try {
    const st = await stat(path);
    if (st.isDirectory()) await walk(path, files, ioErrors, new Set());
    else files.push(path);
  } catch (e) {
    ioErrors.push(ioError(path, e));
  }
  const parsed: ParsedFile[] = [];
  for (const file of files) {
    try {
      const read = await readManifestFile(file, limits);
      if ('error' in read) ioErrors.push(read.error);
      else parsed.push(parseFile(read.text, file, limits));
    } catch (e) {
      ioErrors.push(ioError(file, e));
    }
  }
  return { ...finishLoad(parsed, ioErrors, limits.maxDiagnostics), files };
}

/** The snapshot of a load, or HERALD_BAD_MANIFEST listing every error (one per line). */
export function requireSnapshot(load: ManifestLoad): IntentSnapshot {
  if (load.snapshot) return load.snapshot;
  const n = load.errors.length;
  throw new HeraldError('HERALD_BAD_MANIFEST', `${n} manifest error${n === 1 ? '' : 's'}:\n${formatErrors(load.errors)}`);
}
