/**
 * The work an intent source hands to the parser thread (parse-worker.ts), as
 * plain structured-clonable data both ways: file texts or stored values plus
 * the limits in; valid objects, errors and warnings out. The snapshot is
 * built on the caller's side (it holds frozen maps, which do not cross).
 * Pure: runs the same in a worker or in-process.
 */
import type { ManifestError, ManifestWarning } from '../diagnostics.js';
import type { IntentObject } from '../kinds.js';
import type { ManifestLimits } from '../limits.js';
import { finishLoad, parseFile, type IgnoredObject, type ManifestLoad, type ParsedFile } from '../parse.js';
import { buildSnapshot } from '../snapshot.js';
import { readStoredValue } from './stored-manifest.js';

export type ParseJob =
  | {
      readonly kind: 'files';
      readonly files: readonly { readonly file: string; readonly text: string }[];
      /** Problems found while reading (unreadable, over the size cap), reported with the rest. */
      readonly ioErrors: readonly ManifestError[];
      readonly limits: ManifestLimits;
    }
  | {
      readonly kind: 'stored';
      readonly prefix: string;
      readonly kvs: readonly { readonly key: string; readonly value: string }[];
      readonly ioErrors: readonly ManifestError[];
      readonly limits: ManifestLimits;
    };

export interface ParseOutcome {
  readonly objects: readonly IntentObject[];
  readonly ignored: readonly IgnoredObject[];
  readonly errors: readonly ManifestError[];
  readonly warnings: readonly ManifestWarning[];
}

/** Worker → caller: `file` before each file is parsed (so a crash can be blamed on it), then `done`. */
export type ParseMessage = { readonly type: 'file'; readonly file: string } | { readonly type: 'done'; readonly outcome: ParseOutcome };

export function runParseJob(job: ParseJob, onFile: (file: string) => void = () => {}): ParseOutcome {
  const parsed: ParsedFile[] = [];
  if (job.kind === 'files') {
    for (const { file, text } of job.files) {
      onFile(file);
      parsed.push(parseFile(text, file, job.limits));
    }
  } else {
    for (const { key, value } of job.kvs) {
      onFile(key);
      parsed.push(readStoredValue(job.prefix, key, value, job.limits));
    }
  }
  const { objects, ignored, errors, warnings } = finishLoad(parsed, job.ioErrors, job.limits.maxDiagnostics);
  return { objects, ignored, errors, warnings };
}

/** The caller's side: the outcome as a load, with its snapshot when there are no errors. */
export function toManifestLoad(outcome: ParseOutcome): ManifestLoad {
  return { ...outcome, snapshot: outcome.errors.length === 0 ? buildSnapshot(outcome.objects) : undefined };
}
