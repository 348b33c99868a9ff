/**
 * A stop's hand-over record: `<prefix>handover/<node>` on the stopping node's
 * lease, written once (one put) after its datapath fell silent and before its
 * owner keys are moved, naming for each IP the successor (node and the lease
 * its candidacy is on) the key is about to be moved to.
 *
 * A successor answers an IP the record names it for while the owner key still
 * names the stopping node on that same lease: the record and the key are both
 * store facts on one lease, so they vanish together at its revoke or expiry,
 * and each IP has exactly one successor. It is not a second fence beside the
 * owner key but a promise about it: a 1,000-IP stop is one put to honour
 * instead of eight transactions of moves to wait for.
 */

/** Bounded: a larger record (≈ 15,000 IPs) is not written; the moves alone do the hand-over then. */
export const HANDOVER_RECORD_MAX_BYTES = 1024 * 1024;

export interface HandoverMove {
  readonly ip: string;
  readonly node: string;
  readonly lease: string;
}

export interface HandoverRecord {
  /** The stopping node. */
  readonly node: string;
  /** ip → its successor. */
  readonly moves: ReadonlyMap<string, { readonly node: string; readonly lease: string }>;
}

/** The record's value, or undefined when it would exceed the bound. */
export function encodeHandoverRecord(node: string, moves: readonly HandoverMove[]): string | undefined {
  const text = JSON.stringify({ v: 1, node, moves: moves.map((m) => [m.ip, m.node, m.lease]) });
  return Buffer.byteLength(text) <= HANDOVER_RECORD_MAX_BYTES ? text : undefined;
}

/** The record in a stored value; undefined for anything else (oversized, broken, another shape): it grants nothing. */
export function parseHandoverRecord(value: Buffer | string): HandoverRecord | undefined {
  if (value.length > HANDOVER_RECORD_MAX_BYTES) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value.toString());
  } catch {
    return undefined;
  }
  if (parsed === null) return undefined; // any other JSON value destructures (a number's fields are undefined)
  const { v, node, moves } = parsed as { v?: unknown; node?: unknown; moves?: unknown };
  if (v !== 1 || typeof node !== 'string' || node === '' || !Array.isArray(moves)) return undefined;
  const out = new Map<string, { node: string; lease: string }>();
  for (const m of moves) {
    if (!Array.isArray(m) || m.length !== 3 || !m.every((s) => typeof s === 'string' && s !== '')) return undefined;
    const [ip, successor, lease] = m as [string, string, string];
    // Two successors for one IP is no promise at all: the whole record is refused.
    if (out.has(ip)) return undefined;
    out.set(ip, { node: successor, lease });
  }
  return { node, moves: out };
}
