/** Durations as people write them in flags and annotations: "250ms", "1.5s", "2m", or bare milliseconds. */

const DURATION_RE = /^(\d+(?:\.\d+)?)(ms|s|m)?$/;

/** Milliseconds, or undefined when `text` is not a duration. */
export function durationMs(text: string): number | undefined {
  const m = DURATION_RE.exec(text.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  const unit = m[2] ?? 'ms';
  const ms = unit === 'ms' ? n : unit === 's' ? n * 1000 : n * 60_000;
  return Number.isFinite(ms) ? Math.round(ms) : undefined;
}

/** Milliseconds → the shortest exact form with a unit: 800 → "800ms", 3000 → "3s", 120000 → "2m". */
export function formatDuration(ms: number): string {
  if (ms !== 0 && ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms !== 0 && ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
