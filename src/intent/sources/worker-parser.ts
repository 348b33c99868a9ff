/**
 * Parsing and validation off the main thread. YAML parsing of a large file
 * takes seconds (about 5 s for 4 MiB of Services) and can take gigabytes;
 * on the agent's event loop that would stall the datapath heartbeat, the
 * lease keep-alives and the ARP probing, so every IP on the node would go
 * silent. Each job runs in a fresh worker thread with its own heap limit
 * (running out of it kills the worker, not the agent) and a stall timeout;
 * either refuses the input with the file being parsed named.
 */
import { Worker } from 'node:worker_threads';
import { truncate } from '../quote.js';
import { MiB, type ManifestLimits } from '../limits.js';
import type { ManifestError } from '../diagnostics.js';
import type { ManifestLoad } from '../parse.js';
import { toManifestLoad, type ParseJob, type ParseMessage } from './parse-job.js';

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
const WORKER_TS = new URL('./parse-worker.ts', import.meta.url);

/**
 * The worker thread. From dist/ it is the compiled parse-worker.js; when the
 * sources run under tsx (tests), the worker loads tsx first, because a
 * worker does not inherit the parent's module hooks.
 */
function spawnWorker(job: ParseJob, heapMb: number): Worker {
  const resourceLimits = { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: 32 };
  if (!import.meta.url.endsWith('.ts')) return new Worker(WORKER_JS, { workerData: job, resourceLimits });
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((m) => m.tsImport(${JSON.stringify(WORKER_TS.href)}, ${JSON.stringify(import.meta.url)}))`;
  return new Worker(boot, { eval: true, workerData: job, resourceLimits });
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
