/**
 * A stop's hand-over record: `<prefix>handover/<node>` on the stopping node's
 * lease, written once after its datapath fell silent and before its
 * owner keys are moved, naming for each IP the successor (node and the lease
 * its candidacy is on) the key is about to be moved to.
 *
 * A successor answers an IP the record names it for while the owner key still
 * names the stopping node on that same lease: the record and the key are both
 * store facts on one lease, so they vanish together at its revoke or expiry,
 * and each IP has exactly one successor. It is not a second fence beside the
 * owner key but a promise about it: a 1,000-IP stop is one put to honour
 * instead of eight transactions of moves to wait for.
 *
 * The same record is written for a node that cannot write it any more — by
 * its supervisor after a crash (`cause: 'crash'`, from the plan the live agent
 * kept current) or by the candidate that fences it after its silence
 * (`cause: 'wire-silence'`) — and always only where none stands (a
 * transaction on the key's version): one record per departure, so never two
 * successors named for one IP.
 */

/**
 * IPs per move transaction: one compare and one put each (etcd's default
 * limit is 128 per branch), so 1,000 IPs go in 8 transactions. Measured
 * against a real etcd on the loaded VM: 1,000 IPs as 17 transactions of 60
 * with the successors' candidacy compared and ours deleted took 220–490 ms
 * until the last watch event; as 8–10 lean ones, 46–73 ms.
 */
export const HANDOVER_CHUNK = 125;
/**
 * After the record is written, the moves wait this long: the successors'
 * datapaths go first (started at once, the moves' puts and watch events take
 * the CPU the successors need to answer: last of 1,000 IPs 133–201 ms that
 * way, on 2 cores shared with etcd).
 */
export const HANDOVER_MOVES_AFTER_MS = 100;

/**
 * What a supervisor does for its agent if the agent dies without releasing:
 * the same hand-over a stop makes (the record on the agent's lease, then each
 * owner key moved onto its successor's lease, only while still on the
 * agent's), kept current by the live agent because only it can read the view.
 */
export interface CrashHandoverPlan {
  /** The agent's lease: the record goes on it; each move compares the owner key with it. */
  readonly lease: string;
  /** Where the record goes (`<prefix>handover/<node>`). */
  readonly recordKey: string;
  /** Owner keys are `<ownersPrefix><ip>`. */
  readonly ownersPrefix: string;
  /** The record (encodeHandoverRecord): the stopping node and each IP's successor. */
  readonly record: string;
}

/** Bounded: a larger record (≈ 50,000 IPs; version 1 held ≈ 15,000) is not written; the moves alone do the hand-over then. */
export const HANDOVER_RECORD_MAX_BYTES = 1024 * 1024;

export interface HandoverMove {
  readonly ip: string;
  readonly node: string;
  readonly lease: string;
}

/** Who wrote a record, if not the stopping node itself: its supervisor after a crash, or a node fencing it after its silence. */
export type HandoverCause = 'crash' | 'wire-silence';

export interface HandoverRecord {
  /** The stopping node. */
  readonly node: string;
  /** Absent: the node's own stop. */
  readonly cause?: HandoverCause;
  /** ip → its successor. */
  readonly moves: ReadonlyMap<string, { readonly node: string; readonly lease: string }>;
}

/**
 * The record's value, or undefined when it would exceed the bound. Grouped by
 * successor (`to: [[node, lease, ip, ip, …], …]`, version 2): a 1,000-IP stop
 * is ~19 KB instead of version 1's ~60 KB of one [ip, node, lease] per IP —
 * the one put the successors wait for, and the value each of them parses.
 */
export function encodeHandoverRecord(node: string, moves: readonly HandoverMove[], cause?: HandoverCause): string | undefined {
  const groups = new Map<string, [string, string, ...string[]]>();
  for (const m of moves) {
    const key = `${m.node}\u0000${m.lease}`;
    const group = groups.get(key);
    if (group) group.push(m.ip);
    else groups.set(key, [m.node, m.lease, m.ip]);
  }
  const text = JSON.stringify({ v: 2, node, ...(cause ? { cause } : {}), to: [...groups.values()] });
  return Buffer.byteLength(text) <= HANDOVER_RECORD_MAX_BYTES ? text : undefined;
}

const nonEmptyString = (s: unknown): s is string => typeof s === 'string' && s !== '';

/**
 * The record in a stored value (version 2, or version 1 as written by an
 * agent from before it); undefined for anything else (oversized, broken,
 * another shape): it grants nothing.
 */
export function parseHandoverRecord(value: Buffer | string): HandoverRecord | undefined {
  if (value.length > HANDOVER_RECORD_MAX_BYTES) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value.toString());
  } catch {
    return undefined;
  }
  if (parsed === null) return undefined; // any other JSON value destructures (a number's fields are undefined)
  const { v, node, cause, moves, to } = parsed as { v?: unknown; node?: unknown; cause?: unknown; moves?: unknown; to?: unknown };
  if (!nonEmptyString(node)) return undefined;
  if (cause !== undefined && cause !== 'crash' && cause !== 'wire-silence') return undefined;
  const out = new Map<string, { node: string; lease: string }>();
  // Two successors for one IP is no promise at all: the whole record is refused.
  const add = (ip: string, successor: { node: string; lease: string }) => (out.has(ip) ? false : (out.set(ip, successor), true));
  if (v === 2 && Array.isArray(to)) {
    for (const group of to) {
      if (!Array.isArray(group) || group.length < 3 || !group.every(nonEmptyString)) return undefined;
      const [successor, lease, ...ips] = group as string[];
      const target = { node: successor!, lease: lease! };
      for (const ip of ips) if (!add(ip, target)) return undefined;
    }
  } else if (v === 1 && Array.isArray(moves)) {
    for (const m of moves) {
      if (!Array.isArray(m) || m.length !== 3 || !m.every(nonEmptyString)) return undefined;
      const [ip, successor, lease] = m as [string, string, string];
      if (!add(ip, { node: successor, lease })) return undefined;
    }
  } else {
    return undefined;
  }
  return { node, ...(cause ? { cause } : {}), moves: out };
}
