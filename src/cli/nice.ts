/**
 * The agent's CPU priority. On a saturated machine an agent at the same
 * priority as the load starts late, answers late and can miss its liveness
 * heartbeat (a spurious move); keepalived offers the same knob
 * (`vrrp_priority` / `process_priority`). bin/herald applies it before the
 * code is even loaded, so start-up itself runs ahead of the load.
 */
import { InvalidArgumentError } from 'commander';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { setPriority } from 'node:os';

export const AGENT_NICE_DEFAULT = -10;

export function parseNice(value: string): number {
  const n = /^[+-]?\d+$/.test(value.trim()) ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < -20 || n > 19) throw new InvalidArgumentError(`--nice ${value}: expected a whole number from -20 to 19`);
  return n;
}

/**
 * Sets the nice value of every thread of this process (Linux keeps one per
 * thread, and V8's threads exist before any of our code runs) and, when this
 * process leads its session, of the session's autogroup: with autogroup
 * scheduling (Debian's default) the kernel first shares the CPU between
 * sessions, so a service — its own session — only runs ahead of other
 * sessions through its group's nice. Returns why it could not, or undefined.
 */
export function applyNice(nice: number): string | undefined {
  try {
    for (const tid of readdirSync('/proc/self/task')) setPriority(Number(tid), nice);
    if (leadsSession() && existsSync('/proc/self/autogroup')) writeFileSync('/proc/self/autogroup', String(nice));
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** Whether this process is its session's leader (field 6 of /proc/self/stat is the session id). */
export function leadsSession(): boolean {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]) === process.pid;
}
