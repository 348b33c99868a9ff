/**
 * The agent's CPU priority. On a saturated machine an agent at the same
 * priority as the load starts late, answers late and can miss its liveness
 * heartbeat (a spurious move); keepalived offers the same knob
 * (`vrrp_priority` / `process_priority`). bin/herald applies it before the
 * code is even loaded, so start-up itself runs ahead of the load.
 */
import { InvalidArgumentError } from 'commander';
import { setPriority } from 'node:os';

export const AGENT_NICE_DEFAULT = -10;

export function parseNice(value: string): number {
  const n = /^[+-]?\d+$/.test(value.trim()) ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < -20 || n > 19) throw new InvalidArgumentError(`--nice ${value}: expected a whole number from -20 to 19`);
  return n;
}

/** Sets this process's nice value; returns why it could not, or undefined. */
export function applyNice(nice: number): string | undefined {
  try {
    setPriority(0, nice);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}
