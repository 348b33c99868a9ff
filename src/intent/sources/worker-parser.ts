/**
 * Parsing and validation off the main thread. YAML parsing of a large file
 * takes seconds (about 5 s for 4 MiB of Services) and can take gigabytes;
 * on the agent's event loop that would stall the datapath heartbeat, the
 * lease keep-alives and the ARP probing, so every IP on the node would go
 * silent. Each job runs in a fresh worker thread with its own heap limit
 * (running out of it kills the worker, not the agent) and a stall timeout;
 * either refuses the input with the file being parsed named.
 *
 * Small input is parsed on the caller's thread instead (`parseManifestJob`):
 * a worker costs a thread start plus a second load of yaml and zod, about
 * 150 ms on an idle machine and twice that on a busy one — more than parsing
 * a few hundred objects, and most of an agent's time to its first answer.
 * Small is bounded so that the work stays small whatever the input says: at
 * most `inlineParseDefaults.maxBytes` in total and no YAML alias at all (an
 * alias is what lets a short file expand to millions of nodes), so time and
 * memory are linear in the bytes (64 KiB: about 270 Services, 40 ms of
 * parsing warm, 100 ms cold). The manifest limits themselves (documents,
 * aliases, depth, expanded nodes, size cap) are enforced by the same code
 * on either path (parseFile, readStoredValue).
 */
import type { Worker } from 'node:worker_threads';
import { startModuleWorker } from '../../core/worker.js';
import { truncate } from '../quote.js';
import { MiB, type ManifestLimits } from '../limits.js';
import type { ManifestError } from '../diagnostics.js';
import type { ManifestLoad } from '../parse.js';
import { hasTooManyAliases } from '../yaml-budget.js';
import { runParseJob, toManifestLoad, type ParseJob, type ParseMessage } from './parse-job.js';

export interface WorkerParseOptions {
  /** Heap of the parser thread, MB; default `defaultParserHeapMb(limits)`. */
  readonly heapMb?: number;
  /** A file still being parsed after this long is refused (and the thread stopped). */
  readonly stallTimeoutMs?: number;
  /** Aborting stops the thread; the result is then an error load. */
  readonly signal?: AbortSignal;
}

export const workerParseDefaults = { stallTimeoutMs: 60_000 } as const;

/**
 * 96 MB of heap per MiB of the size cap (at least 256): a valid 4 MiB file
 * of Services needs about 220 MB to parse and validate.
 */
export function defaultParserHeapMb(limits: ManifestLimits): number {
  return Math.max(256, Math.ceil((96 * limits.maxBytes) / MiB));
}

const WORKER_JS = new URL('./parse-worker.js', import.meta.url);

/** The worker thread (core/worker.ts: the compiled parse-worker.js from dist/, the source under tsx). */
function spawnWorker(job: ParseJob, heapMb: number): Worker {
  return startModuleWorker(WORKER_JS, { workerData: job, resourceLimits: { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: 32 } });
}

export const inlineParseDefaults = { maxBytes: 64 * 1024 } as const;

export interface ParseOptions extends WorkerParseOptions {
  /** Input up to this many bytes in total, with no YAML alias, is parsed inline; 0: always in a worker. */
  readonly inlineMaxBytes?: number;
}

/** Whether `job` is small enough to parse on the caller's thread (see the header). */
export function isInlineJob(job: ParseJob, maxBytes: number = inlineParseDefaults.maxBytes): boolean {
  const texts = job.kind === 'files' ? job.files.map((f) => f.text) : job.kvs.map((kv) => kv.value);
  let bytes = 0;
  for (const text of texts) {
    bytes += Buffer.byteLength(text);
    if (bytes > maxBytes) return false;
  }
  return texts.every((text) => !hasTooManyAliases(text, 0));
}

/** Parses and validates `job`, inline when small (isInlineJob), else in a worker. Never throws. */
export function parseManifestJob(job: ParseJob, opts: ParseOptions = {}): Promise<ManifestLoad> {
  if (!isInlineJob(job, opts.inlineMaxBytes ?? inlineParseDefaults.maxBytes)) return parseInWorker(job, opts);
  const refused = (message: string): ManifestLoad => ({
    objects: [],
    ignored: [],
    errors: [{ severity: 'error', file: '(manifests)', path: '', message }, ...job.ioErrors],
    warnings: [],
    snapshot: undefined,
  });
  if (opts.signal?.aborted) return Promise.resolve(refused('parsing stopped: the intent source is shutting down'));
  try {
    return Promise.resolve(toManifestLoad(runParseJob(job)));
  } catch (e) {
    return Promise.resolve(refused(`the parser failed: ${truncate(e instanceof Error ? e.message : String(e))}`));
  }
}

/** Parses and validates `job` in a worker thread. Never throws: every failure is an error in the load. */
export function parseInWorker(job: ParseJob, opts: WorkerParseOptions = {}): Promise<ManifestLoad> {
  const heapMb = opts.heapMb ?? defaultParserHeapMb(job.limits);
  const stallMs = opts.stallTimeoutMs ?? workerParseDefaults.stallTimeoutMs;
  return new Promise((resolve) => {
    let current: string | undefined;
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    const worker = spawnWorker(job, heapMb);
    const finish = (load: ManifestLoad): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      void worker.terminate();
      resolve(load);
    };
    const refuse = (message: string, tooLarge: boolean): void => {
      const error: ManifestError = {
        severity: 'error',
        ...(tooLarge ? { code: 'HERALD_MANIFEST_TOO_LARGE' as const } : {}),
        file: current ?? '(manifests)',
        path: '',
        message,
      };
      finish({ objects: [], ignored: [], errors: [error, ...job.ioErrors], warnings: [], snapshot: undefined });
    };
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => refuse(`parsing took longer than ${stallMs / 1000} s; refused`, true), stallMs);
      timer.unref();
    };
    const onAbort = (): void => refuse('parsing stopped: the intent source is shutting down', false);
    if (opts.signal?.aborted) return onAbort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    arm();
    worker.on('message', (m: ParseMessage) => {
      if (m.type === 'file') {
        current = m.file;
        arm();
      } else {
        try {
          finish(toManifestLoad(m.outcome));
        } catch (e) {
          refuse(`cannot build the snapshot: ${truncate(e instanceof Error ? e.message : String(e))}`, false);
        }
      }
    });
    worker.on('error', (e: Error & { code?: string }) => {
      if (e.code === 'ERR_WORKER_OUT_OF_MEMORY') refuse(`parsing needed more than ${heapMb} MB of memory; refused`, true);
      else refuse(`the parser failed: ${truncate(e.message)}`, false);
    });
    worker.on('exit', (code) => refuse(`the parser thread exited (code ${code}) without a result`, false));
  });
}
