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
}

export const EMPTY_ALLOCATION_STATE: AllocationState = Object.freeze({ version: 1, allocations: Object.freeze({}) });

const ipText = z.string().refine(isIp, { error: (iss) => `not an IP address: ${JSON.stringify(iss.input)}` });

export const allocationStateSchema: z.ZodType<AllocationState> = z.object({
  version: z.literal(1),
  allocations: z.record(z.string(), z.array(ipText)),
  fingerprints: z.record(z.string(), z.string()).optional(),
});

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
