/**
 * Bounds on manifest input, so that intent can never starve the agent: a
 * file or stored value is measured before it is read or parsed, and a YAML
 * stream is bounded in documents, aliases, nesting and (aliases expanded)
 * nodes before it is turned into objects. Pure: no I/O.
 */
import type { ManifestError } from './diagnostics.js';

export interface ManifestLimits {
  /** Largest manifest file or stored value, in bytes (UTF-8). */
  readonly maxBytes: number;
  /** YAML documents per file. */
  readonly maxDocuments: number;
  /** Alias nodes (`*name`) per file. Each is resolved by a scan of the document, so many are quadratic. */
  readonly maxAliases: number;
  /** Errors (and, separately, warnings) listed per file; the rest are counted in one more line. */
  readonly maxDiagnostics: number;
}

export const MiB = 1024 * 1024;

export const manifestLimitDefaults: ManifestLimits = {
  maxBytes: 4 * MiB,
  maxDocuments: 10_000,
  maxAliases: 10_000,
  maxDiagnostics: 100,
};

/** Collections nested deeper than this are refused (Kubernetes objects are a dozen levels deep at most). */
export const MAX_YAML_DEPTH = 100;

/**
 * YAML nodes per document once aliases are expanded: one per 4 bytes of the
 * size cap (the densest literal text, `- 1\n`), so aliases cannot make a
 * document bigger than a file within the cap could be.
 */
export function maxYamlNodes(limits: ManifestLimits): number {
  return Math.max(1024, Math.floor(limits.maxBytes / 4));
}

/** `4 MiB`, `60.5 MiB`, `512 KiB`, `300 bytes`. */
export function formatBytes(n: number): string {
  const unit = (size: number, name: string): string => {
    const v = n / size;
    return `${Number.isInteger(v) ? v : v.toFixed(1)} ${name}`;
  };
  if (n >= 1024 * MiB) return unit(1024 * MiB, 'GiB');
  if (n >= MiB) return unit(MiB, 'MiB');
  if (n >= 1024) return unit(1024, 'KiB');
  return `${n} byte${n === 1 ? '' : 's'}`;
}

/**
 * The error for input over the size cap. `bytes` undefined: the size is not
 * known, only that reading went past the cap (a pipe, a file still growing).
 */
export function tooLargeError(file: string, bytes: number | undefined, limits: ManifestLimits, what: 'file' | 'stored value' = 'file'): ManifestError {
  const size = bytes === undefined ? `more than ${limits.maxBytes} bytes` : `${bytes} bytes (${formatBytes(bytes)})`;
  return {
    severity: 'error',
    code: 'HERALD_MANIFEST_TOO_LARGE',
    file,
    path: '',
    message: `${what} is ${size}, over the limit of ${limits.maxBytes} bytes (${formatBytes(limits.maxBytes)}, --max-manifest-size); not read`,
  };
}

export { utf8Length } from '../core/text.js';

/** Validates limits given on the command line or in options. */
export function checkLimits(limits: ManifestLimits): string | undefined {
  for (const [name, v] of Object.entries(limits)) {
    if (!Number.isSafeInteger(v) || v < 1) return `${name} must be a positive integer, got ${String(v)}`;
  }
  return undefined;
}
