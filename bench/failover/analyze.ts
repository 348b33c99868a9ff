/**
 * Turns one probe run plus the moment of the failure into a trial's numbers,
 * and a case's trials into median / p99 / max. Pure functions of the probe's
 * JSON (times in ms on the probe's timeline), so they can be re-run on saved
 * raw results (--raw-dir).
 */
import type { ProbeResult } from '../../lab/failover-probe.js';

export interface TrialInput {
  probe: ProbeResult;
  /** The failure trigger, in ms on the probe's timeline. */
  triggerMs: number;
  /** Start of the steady-state window before the trigger, ms on the probe's timeline. */
  windowStartMs: number;
  /** MAC of the node that owned the IP before the failure. */
  oldMac: string;
  /** Node name served by the old owner's HTTP server. */
  oldName: string;
  /** MAC → node name, for readable output. */
  macNames: Record<string, string>;
}

export interface TrialResult {
  /** Pre-failure window looked healthy: old owner alone answered ARP and served HTTP. */
  steady: boolean;
  steadyProblem?: string;
  /**
   * ARP handover: from the old owner's last reply at or before the failure to
   * the first reply by any other MAC. null when no other MAC ever answered.
   */
  arpGapMs: number | null;
  /** First reply by a new MAC, relative to the trigger. */
  takeoverMs: number | null;
  newOwner: string | null;
  /** Longest stretch after the window start with no ARP reply at all (open tail included). */
  arpSilenceMs: number;
  /** Every stretch without an ARP reply longer than 1 s, [from, to] relative to the trigger (open tail included). */
  arpSilences: Array<[number, number]>;
  /**
   * Longest time between consecutive successful HTTP responses after the window
   * start; when HTTP never recovered it runs to the end of the probe (httpOpen).
   */
  httpGapMs: number;
  httpOpen: boolean;
  httpFailures: number;
  /** Node names that served HTTP after the trigger, in order (runs). */
  httpServedBy: string[];
  /** Requests answered by ≥ 2 MACs after the window start. */
  dualAnswer: number;
  /** First dual answer relative to the trigger (null: none). */
  firstDualMs: number | null;
  /** Did the old owner still answer ARP after the new owner appeared? */
  oldAnswersAfterTakeover: boolean;
  /** Gratuitous ARPs seen after the trigger, and the first one's time relative to it. */
  garps: number;
  firstGarpMs: number | null;
  /** When the client kernel's neighbour entry first moved to another MAC, relative to the trigger. */
  neighMovedMs: number | null;
  /** The probe's cadence stayed close to its interval (a stalled probe inflates gaps). */
  probeLateTicks: number;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

export function analyzeTrial(t: TrialInput): TrialResult {
  const p = t.probe;
  const macIdx = p.macs.indexOf(t.oldMac);
  const name = (mac: string) => t.macNames[mac] ?? mac;

  // Steady state before the failure.
  let problem: string | undefined;
  const pre = p.requests.sentAt.flatMap((s, i) => (s >= t.windowStartMs && s < t.triggerMs ? [i] : []));
  const preAnswered = pre.filter((i) => p.requests.firstReplyAt[i] !== null);
  const foreign = pre.filter((i) => p.requests.macSet[i]!.some((m) => m !== macIdx));
  if (pre.length === 0) problem = 'no requests before the trigger';
  else if (preAnswered.length < 0.9 * pre.length) problem = `only ${preAnswered.length}/${pre.length} requests answered before the trigger`;
  else if (foreign.length > 0) problem = `${foreign.length} requests before the trigger answered by another MAC`;
  const http = p.http;
  if (!problem && http) {
    const oldIdx = http.nameTable.indexOf(t.oldName);
    const preOk = http.successes.filter(([ts]) => ts >= t.windowStartMs && ts < t.triggerMs);
    if (preOk.length === 0 || preOk.some(([, n]) => n !== oldIdx)) problem = `HTTP before the trigger not served by ${t.oldName} alone`;
  }

  // ARP handover.
  let lastOld = -Infinity;
  for (const [, m, ts] of p.replies) if (m === macIdx && ts <= t.triggerMs && ts > lastOld) lastOld = ts;
  let firstNew: { t: number; mac: number } | undefined;
  for (const [, m, ts] of p.replies) {
    if (m !== macIdx && ts > Math.max(lastOld, t.windowStartMs) && (!firstNew || ts < firstNew.t)) firstNew = { t: ts, mac: m };
  }
  const arpGapMs = firstNew && Number.isFinite(lastOld) ? firstNew.t - lastOld : null;
  const oldAnswersAfterTakeover = firstNew ? p.replies.some(([, m, ts]) => m === macIdx && ts > firstNew.t) : false;

  // ARP silence: consecutive answered requests from the window start; open tail counts.
  const answeredAt = p.requests.firstReplyAt.filter((x): x is number => x !== null && x >= t.windowStartMs).sort((a, b) => a - b);
  let arpSilenceMs = 0;
  const arpSilences: Array<[number, number]> = [];
  let prev = t.windowStartMs;
  for (const x of [...answeredAt, p.endMs]) {
    arpSilenceMs = Math.max(arpSilenceMs, x - prev);
    if (x - prev > 1000) arpSilences.push([r3(prev - t.triggerMs), r3(x - t.triggerMs)]);
    prev = x;
  }

  // HTTP gap, the same way.
  let httpGapMs = 0;
  let httpOpen = false;
  let httpFailures = 0;
  const httpServedBy: string[] = [];
  if (http) {
    const ok = http.successes.filter(([ts]) => ts >= t.windowStartMs).sort((a, b) => a[0] - b[0]);
    let last = t.windowStartMs;
    for (const [ts, n] of ok) {
      httpGapMs = Math.max(httpGapMs, ts - last);
      last = ts;
      if (ts > t.triggerMs) {
        const nm = http.nameTable[n] ?? '?';
        if (httpServedBy[httpServedBy.length - 1] !== nm) httpServedBy.push(nm);
      }
    }
    const tail = p.endMs - last;
    if (tail > httpGapMs) {
      httpGapMs = tail;
      httpOpen = true;
    }
    httpFailures = http.failures.filter(([ts]) => ts >= t.triggerMs).length;
  }

  const dual = p.requests.macSet.flatMap((set, i) => (set.length >= 2 && p.requests.sentAt[i]! >= t.windowStartMs ? [i] : []));
  const firstDual = dual.length ? p.requests.sentAt[dual[0]!]! - t.triggerMs : null;
  const garps = p.garps.filter((g) => g.t >= t.triggerMs);
  const moved = p.neigh.find((n) => n.t >= t.triggerMs && n.mac !== null && n.mac !== t.oldMac);
  const cadenceLate = p.requests.sentAt.filter((s, i) => i > 0 && s >= t.windowStartMs && s - p.requests.sentAt[i - 1]! > 2 * p.intervalMs).length;

  return {
    steady: problem === undefined,
    ...(problem ? { steadyProblem: problem } : {}),
    arpGapMs: arpGapMs === null ? null : r3(arpGapMs),
    takeoverMs: firstNew ? r3(firstNew.t - t.triggerMs) : null,
    newOwner: firstNew ? name(p.macs[firstNew.mac] ?? '?') : null,
    arpSilenceMs: r3(arpSilenceMs),
    arpSilences,
    httpGapMs: r3(httpGapMs),
    httpOpen,
    httpFailures,
    httpServedBy,
    dualAnswer: dual.length,
    firstDualMs: firstDual === null ? null : r3(firstDual),
    oldAnswersAfterTakeover,
    garps: garps.length,
    firstGarpMs: garps[0] ? r3(garps[0].t - t.triggerMs) : null,
    neighMovedMs: moved ? r3(moved.t - t.triggerMs) : null,
    probeLateTicks: cadenceLate,
  };
}

export interface Stat {
  n: number;
  median: number | null;
  /** Nearest rank: with 20 samples p99 is the maximum. */
  p99: number | null;
  max: number | null;
}

export function stat(xs: number[]): Stat {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return { n: 0, median: null, p99: null, max: null };
  const rank = (q: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
  const mid = s.length / 2;
  const median = s.length % 2 ? s[Math.floor(mid)]! : (s[mid - 1]! + s[mid]!) / 2;
  return { n: s.length, median: r3(median), p99: r3(rank(0.99)), max: r3(s[s.length - 1]!) };
}

export interface CaseSummary {
  trials: number;
  /** Trials whose pre-failure window was not steady (kept, but flagged). */
  unsteady: number;
  arpGap: Stat;
  /** Trials in which no other MAC ever answered (no ARP takeover seen). */
  noTakeover: number;
  takeover: Stat;
  arpSilence: Stat;
  httpGap: Stat;
  /** Trials whose HTTP never recovered before the probe stopped (gap runs to the end). */
  httpOpen: number;
  /** Trials in which at least one request was answered by two MACs. */
  dualAnswerTrials: number;
  /** Trials in which the old owner kept answering after the new one appeared. */
  oldKeptAnswering: number;
}

export function summarize(trials: TrialResult[]): CaseSummary {
  const nums = (f: (t: TrialResult) => number | null) => trials.map(f).filter((x): x is number => x !== null);
  return {
    trials: trials.length,
    unsteady: trials.filter((t) => !t.steady).length,
    arpGap: stat(nums((t) => t.arpGapMs)),
    noTakeover: trials.filter((t) => t.arpGapMs === null).length,
    takeover: stat(nums((t) => t.takeoverMs)),
    arpSilence: stat(nums((t) => t.arpSilenceMs)),
    httpGap: stat(nums((t) => t.httpGapMs)),
    httpOpen: trials.filter((t) => t.httpOpen).length,
    dualAnswerTrials: trials.filter((t) => t.dualAnswer > 0).length,
    oldKeptAnswering: trials.filter((t) => t.oldAnswersAfterTakeover).length,
  };
}
