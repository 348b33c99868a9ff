/**
 * Restored allocations are held for their Services until those are applied
 * again. A store wipe takes the intent with it, so right after a restore the
 * allocator sees no Services at all; without a hold it would persist "nothing
 * allocated" and the re-applied Services would get new IPs (issue 9).
 *
 * `allocate()` knows nothing of holds: it drops Services that are not in the
 * intent. `applyHold` puts the held ones back before the state is persisted,
 * and refuses a state that gave a held IP to another Service (that would be
 * the reassignment the hold exists to prevent).
 */
import type { AllocationState } from './state.js';
import { sortedEntries } from '../../core/order.js';

export type HoldOutcome = { readonly ok: true; readonly state: AllocationState } | { readonly ok: false; readonly conflict: string };

/** `next` (fresh from the allocator) with the holds of `current` applied. */
export function applyHold(next: AllocationState, current: AllocationState): HoldOutcome {
  const allocations: Record<string, readonly string[]> = { ...next.allocations };
  const fingerprints: Record<string, string> = { ...(next.fingerprints ?? {}) };
  const usedBy = new Map<string, string>();
  for (const [svc, ips] of Object.entries(next.allocations)) for (const ip of ips) usedBy.set(ip, svc);
  const stillHeld: string[] = [];
  for (const svc of current.held ?? []) {
    if (Object.hasOwn(next.allocations, svc)) continue; // applied again: an ordinary allocation from now on
    const ips = Object.hasOwn(current.allocations, svc) ? current.allocations[svc]! : [];
    const taken = ips.find((ip) => usedBy.has(ip));
    if (taken !== undefined) return { ok: false, conflict: `${taken} is held for ${svc} but was given to ${usedBy.get(taken)}` };
    allocations[svc] = ips;
    const fp = current.fingerprints?.[svc];
    if (fp !== undefined) fingerprints[svc] = fp;
    stillHeld.push(svc);
  }
  return { ok: true, state: withHeld({ version: 1, allocations: sortKeys(allocations), fingerprints: sortKeys(fingerprints) }, stillHeld) };
}

/** `state` holding `services` (none: no `held` field at all). */
export function withHeld(state: AllocationState, services: readonly string[]): AllocationState {
  const { held: _drop, ...rest } = state;
  return services.length > 0 ? { ...rest, held: [...new Set(services)].sort() } : rest;
}

function sortKeys<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(sortedEntries(record));
}
