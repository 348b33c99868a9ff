/**
 * The allocation state LB-IPAM persists between runs, so that a restart
 * re-imports exactly what it handed out (never reshuffles). JSON-serialisable
 * and validated by `allocationStateSchema` when read back.
 */
import { z } from 'zod';
import { isIp } from '../../intent/index.js';

export interface AllocationState {
  readonly version: 1;
  /** Service key (`namespace/name`) → its IPs, sorted (IPv4 first). Every handled Service has an entry. */
  readonly allocations: Readonly<Record<string, readonly string[]>>;
  /**
   * Service key → fingerprint of the inputs its allocation depended on. On
   * import, Services whose inputs are unchanged go first, so when two
   * Services that shared an IP stop being compatible, the one that changed
   * is the one that moves.
   */
  readonly fingerprints?: Readonly<Record<string, string>>;
  /**
   * Bumped by the coordinator on every save, so that of two states the newer
   * is decidable (a wiped or rolled-back store is never taken for "everything
   * was deleted"). Absent in states written before it existed: 0.
   */
  readonly generation?: number;
  /**
   * Services whose allocations were restored after a store wipe and are held
   * for them until they are applied again (their intent was wiped too), so
   * that nobody else gets their IPs meanwhile.
   */
  readonly held?: readonly string[];
}

export const EMPTY_ALLOCATION_STATE: AllocationState = Object.freeze({ version: 1, allocations: Object.freeze({}) });

const ipText = z.string().refine(isIp, { error: (iss) => `not an IP address: ${JSON.stringify(iss.input)}` });

export const allocationStateSchema: z.ZodType<AllocationState> = z.object({
  version: z.literal(1),
  allocations: z.record(z.string(), z.array(ipText)),
  fingerprints: z.record(z.string(), z.string()).optional(),
  generation: z.number().int().nonnegative().optional(),
  held: z.array(z.string()).optional(),
});

export function generationOf(state: AllocationState): number {
  return state.generation ?? 0;
}

/** Same allocations and fingerprints (generation and holds aside): nothing to persist. */
export function sameAllocations(a: AllocationState, b: AllocationState): boolean {
  return sameRecord(a.allocations, b.allocations, sameList) && sameRecord(a.fingerprints ?? {}, b.fingerprints ?? {}, (x, y) => x === y);
}

/** The same state in every field (what a JSON comparison said, but in one pass without building strings; key order aside). */
export function sameState(a: AllocationState, b: AllocationState): boolean {
  return (
    a.version === b.version &&
    a.generation === b.generation &&
    (a.held === b.held || (a.held !== undefined && b.held !== undefined && sameList(a.held, b.held))) &&
    (a.fingerprints === undefined) === (b.fingerprints === undefined) &&
    sameAllocations(a, b)
  );
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a === b || (a.length === b.length && a.every((x, i) => x === b[i]));
}

function sameRecord<V>(a: Readonly<Record<string, V>>, b: Readonly<Record<string, V>>, same: (x: V, y: V) => boolean): boolean {
  if (a === b) return true;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const key of keys) if (!Object.hasOwn(b, key) || !same(a[key] as V, b[key] as V)) return false;
  return true;
}

/**
 * A short, stable hash of a string (cyrb53: 53 bits, hex). Only orders
 * imports, so a collision costs nothing but that ordering hint.
 */
export function fingerprint(text: string): string {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(16).padStart(14, '0');
}

/** How much of a bad stored value a log line or status quotes. */
export const QUOTE_LIMIT = 200;

/** `text` quoted for a log line, cut at QUOTE_LIMIT characters (a bad value can be huge). */
export function quoteBounded(text: string): string {
  if (text.length <= QUOTE_LIMIT) return JSON.stringify(text);
  return `${JSON.stringify(text.slice(0, QUOTE_LIMIT))}… (${text.length} characters)`;
}

export type ParsedState = { readonly ok: true; readonly state: AllocationState } | { readonly ok: false; readonly error: string };

/** Parses a stored allocation state; a failure says why and quotes the value (bounded). */
export function parseAllocationState(text: string): ParsedState {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { ok: false, error: `not JSON (${(e as Error).message}): ${quoteBounded(text)}` };
  }
  const parsed = allocationStateSchema.safeParse(value);
  if (parsed.success) return { ok: true, state: parsed.data };
  const issues = parsed.error.issues.slice(0, 3).map((i) => `${i.path.length > 0 ? i.path.map(String).join('.') : '(root)'}: ${i.message}`);
  return { ok: false, error: `invalid (${issues.join('; ')}): ${quoteBounded(text)}` };
}
