/**
 * Pure analysis of one failover-probe run for bench/faults: dual answers, dark
 * time and owner changes of one service IP, read from the per-request record
 * (send time and the set of MACs that answered each request).
 */
import type { ProbeResult } from '../../lab/failover-probe.js';

/** Fewer unanswered requests in a row are a late reply landing on the next request, not a dark IP. */
export const DARK_MIN_UNANSWERED = 3;

export interface IpMeasure {
  ip: string;
  intervalMs: number;
  requests: number;
  answered: number;
  /** Requests answered by two or more MACs. */
  dualAnswered: number;
  /** Of those, requests sent at or after `afterMs` (e.g. a paused owner's resume). */
  dualAnsweredAfter: number;
  /** Total time in runs of >= DARK_MIN_UNANSWERED unanswered requests (including one still open at the end). */
  darkMs: number;
  darkRuns: Array<{ fromMs: number; ms: number; unanswered: number }>;
  /** How many times the single answering node changed, and the sequence of answering nodes. */
  ownerChanges: number;
  owners: string[];
}

/** A responder's identity is "MAC" or "ETHSRC|SHA"; names it by the node whose MAC it carries. */
export function nameOf(identity: string, macNames: ReadonlyMap<string, string>): string {
  const parts = identity.split('|');
  const names = parts.map((m) => macNames.get(m) ?? m);
  return [...new Set(names)].join('|');
}

export function measureIp(r: ProbeResult, macNames: ReadonlyMap<string, string>, afterMs = Infinity): IpMeasure {
  const { sentAt, macSet } = r.requests;
  let answered = 0;
  let dual = 0;
  let dualAfter = 0;
  const darkRuns: IpMeasure['darkRuns'] = [];
  let runStart = -1;
  const closeRun = (end: number, endMs: number) => {
    const n = end - runStart;
    if (runStart >= 0 && n >= DARK_MIN_UNANSWERED) {
      darkRuns.push({ fromMs: round(sentAt[runStart]!), ms: round(endMs - sentAt[runStart]!), unanswered: n });
    }
    runStart = -1;
  };
  const owners: string[] = [];
  for (let i = 0; i < sentAt.length; i++) {
    const set = macSet[i]!;
    if (set.length === 0) {
      if (runStart < 0) runStart = i;
      continue;
    }
    closeRun(i, sentAt[i]!);
    answered++;
    if (set.length > 1) {
      dual++;
      if (sentAt[i]! >= afterMs) dualAfter++;
      continue; // split brain says nothing about who the owner is
    }
    const who = nameOf(r.macs[set[0]!]!, macNames);
    if (owners[owners.length - 1] !== who) owners.push(who);
  }
  closeRun(sentAt.length, r.endMs);
  return {
    ip: r.target,
    intervalMs: r.intervalMs,
    requests: sentAt.length,
    answered,
    dualAnswered: dual,
    dualAnsweredAfter: dualAfter,
    darkMs: round(darkRuns.reduce((s, g) => s + g.ms, 0)),
    darkRuns,
    ownerChanges: Math.max(0, owners.length - 1),
    owners,
  };
}

export interface Stat {
  median: number | null;
  max: number | null;
}

export function stat(xs: number[]): Stat {
  if (xs.length === 0) return { median: null, max: null };
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return { median: s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2, max: s[s.length - 1]! };
}

function round(x: number): number {
  return Math.round(x * 10) / 10;
}
