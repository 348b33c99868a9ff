/**
 * A JSON state file that survives crashes: `save` writes a temporary file
 * next to the target, fsyncs it, renames it over the target and fsyncs the
 * directory, so after a crash the file holds either the old or the new
 * value, never a torn mix. `load` validates with a zod schema: a file that
 * exists but is not valid is an error naming the file and the problem,
 * never silently "no state".
 *
 * Saves from one StateFile are serialised in call order. Two processes
 * writing the same path each use their own temporary file (`.tmp-<pid>`);
 * the last rename wins.
 */
import { open, readFile, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { z } from 'zod';
import { HeraldError } from '../core/errors.js';

export interface StateFileOptions<T> {
  readonly path: string;
  readonly schema: z.ZodType<T>;
  /** Pretty-print with this indent (default 0: one line). */
  readonly indent?: number;
}

function isErrno(e: unknown, code: string): boolean {
  return e instanceof Error && (e as NodeJS.ErrnoException).code === code;
}

export class StateFile<T> {
  readonly path: string;
  readonly #schema: z.ZodType<T>;
  readonly #indent: number;
  /** The tail of the save queue; never rejects. */
  #queue: Promise<void> = Promise.resolve();

  constructor(options: StateFileOptions<T>) {
    if (options.path === '') throw new HeraldError('HERALD_BAD_ARGUMENT', 'state file path must not be empty');
    this.path = options.path;
    this.#schema = options.schema;
    this.#indent = options.indent ?? 0;
  }

  /** The stored value, or `undefined` if the file does not exist. Throws HERALD_BAD_ARGUMENT if it is unreadable or invalid. */
  async load(): Promise<T | undefined> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return undefined;
      throw new HeraldError('HERALD_BAD_ARGUMENT', `cannot read state file ${this.path}`, { cause: e });
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      const detail = text.trim() === '' ? 'it is empty' : `it is not valid JSON (${(e as Error).message})`;
      throw new HeraldError('HERALD_BAD_ARGUMENT', `corrupt state file ${this.path}: ${detail}`, { cause: e });
    }
    const result = this.#schema.safeParse(value);
    if (!result.success) {
      const issues = result.error.issues.map((i) => `${i.path.length > 0 ? i.path.map(String).join('.') : '(root)'}: ${i.message}`);
      throw new HeraldError('HERALD_BAD_ARGUMENT', `invalid state file ${this.path}: ${issues.join('; ')}`, {
        cause: result.error,
      });
    }
    return result.data;
  }

  /** Writes `value` atomically and durably; resolves once it is on disk. Saves run one at a time, in call order. */
  save(value: T): Promise<void> {
    // Serialise now, so a value mutated after the call is not what gets written.
    const text = `${JSON.stringify(value, null, this.#indent)}\n`;
    const run = this.#queue.then(() => this.#write(text));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #write(text: string): Promise<void> {
    const tmp = `${this.path}.tmp-${process.pid}`;
    try {
      const file = await open(tmp, 'w', 0o600);
      try {
        await file.writeFile(text, 'utf8');
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(tmp, this.path);
    } catch (e) {
      await rm(tmp, { force: true }).catch(() => undefined);
      throw new HeraldError('HERALD_INTERNAL', `cannot write state file ${this.path}`, { cause: e });
    }
    // The rename is durable only once the directory entry is.
    try {
      const dir = await open(dirname(this.path), 'r');
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    } catch (e) {
      throw new HeraldError('HERALD_INTERNAL', `cannot fsync the directory of state file ${this.path}`, { cause: e });
    }
  }
}
