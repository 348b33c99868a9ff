/** Parsing of CLI option values with precise errors (commander calls these). */
import { InvalidArgumentError, Option } from 'commander';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { durationMs, formatDuration } from '../core/duration.js';

/** "250ms", "1.5s", "2m" or a bare number of milliseconds → milliseconds. */
export function parseDuration(text: string): number {
  const ms = durationMs(text);
  if (ms === undefined) throw new InvalidArgumentError(`"${text}" is not a duration (use e.g. 500ms, 3s, 5m)`);
  return ms;
}

export { formatDuration };

/** A duration flag whose --help default is printed with its unit (`(default: 3s)`), not as bare milliseconds. */
export function durationOption(flags: string, description: string, defaultMs?: number): Option {
  const opt = new Option(flags, description).argParser(parseDuration);
  return defaultMs === undefined ? opt : opt.default(defaultMs, formatDuration(defaultMs));
}

export function parseCount(text: string): number {
  if (!/^\d+$/.test(text.trim())) throw new InvalidArgumentError(`"${text}" is not a non-negative integer`);
  return Number(text);
}

export function parsePositiveInt(text: string): number {
  const n = parseCount(text);
  if (n < 1) throw new InvalidArgumentError(`"${text}" must be at least 1`);
  return n;
}

export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

const NODE_NAME_RE = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

export function parseNodeName(text: string): string {
  if (!NODE_NAME_RE.test(text)) {
    throw new InvalidArgumentError(`"${text}" is not a valid node name (lower-case DNS subdomain)`);
  }
  return text;
}

/** NODE_NAME (the Kubernetes downward API, spec.nodeName) or the host name. */
export function defaultNodeName(): string {
  const fromEnv = process.env['NODE_NAME']?.trim();
  return fromEnv ? fromEnv : hostname().toLowerCase();
}

export const DEFAULT_PIN_ROOT = '/sys/fs/bpf/herald';

export function pinDirFor(opts: { bpfPinDir?: string; node?: string }): string {
  return opts.bpfPinDir ?? join(DEFAULT_PIN_ROOT, opts.node ?? defaultNodeName());
}

const SIZE_RE = /^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB|K|M|G)?$/;
const SIZE_UNITS: Record<string, number> = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, KB: 1e3, MB: 1e6, GB: 1e9, K: 1024, M: 1024 ** 2, G: 1024 ** 3 };

/** "4MiB", "512KiB", "1MB", "300" (bytes) → bytes, at least 1. */
export function parseByteSize(text: string): number {
  const m = SIZE_RE.exec(text.trim());
  if (!m) throw new InvalidArgumentError(`"${text}" is not a size (use e.g. 4MiB, 512KiB or a number of bytes)`);
  const bytes = Math.floor(Number(m[1]) * (SIZE_UNITS[m[2] ?? 'B'] ?? 1));
  if (!Number.isSafeInteger(bytes) || bytes < 1) throw new InvalidArgumentError(`"${text}" must be at least 1 byte`);
  return bytes;
}
