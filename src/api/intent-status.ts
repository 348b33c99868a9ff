/**
 * What the agent knows about its intent beyond the control plane: the last
 * rejected load (kept until a good one replaces it) and warnings about this
 * node (a --node name that no Node object has). Shown in both status views,
 * because a rejection that only the log or --json shows goes unnoticed.
 */
import type { ManifestDiagnostic } from '../intent/diagnostics.js';
import type { IntentSnapshot } from '../intent/snapshot.js';

export interface RejectedEntry {
  file: string;
  document: number | null;
  object: string | null;
  field: string;
  reason: string;
}

export interface IntentStatus {
  /** The last load that was refused (the previous good state stays in force); null once a good one arrives. */
  rejected: { at: string; errors: RejectedEntry[] } | null;
  /** Problems about this node's intent that do not stop anything but must not pass in silence. */
  warnings: string[];
}

export function nodeNameWarning(node: string, snapshot: IntentSnapshot): string | undefined {
  if (snapshot.nodes.size === 0 || snapshot.nodes.has(node)) return undefined;
  const names = [...snapshot.nodes.keys()].sort();
  return `--node ${node} matches no Node object in the intent (nodes: ${names.join(', ')}); node selectors see no labels for this node`;
}

export class IntentReport {
  private rejected: IntentStatus['rejected'] = null;
  private nodeWarning: string | undefined;

  constructor(private readonly node: string) {}

  /** A good snapshot: the rejection is over; returns the node warning if any (to log). */
  loaded(snapshot: IntentSnapshot): string | undefined {
    this.rejected = null;
    this.nodeWarning = nodeNameWarning(this.node, snapshot);
    return this.nodeWarning;
  }

  rejectedErrors(errors: readonly ManifestDiagnostic[], at: Date): void {
    this.rejected = {
      at: at.toISOString(),
      errors: errors.map((e) => ({
        file: e.file,
        document: e.document ?? null,
        object: e.object ? `${e.object.kind}${e.object.name ? `/${e.object.name}` : ''}` : null,
        field: e.path,
        reason: e.message,
      })),
    };
  }

  rejectedError(error: Error, at: Date): void {
    this.rejected = { at: at.toISOString(), errors: [{ file: '', document: null, object: null, field: '', reason: error.message }] };
  }

  status(): IntentStatus {
    return { rejected: this.rejected, warnings: this.nodeWarning ? [this.nodeWarning] : [] };
  }
}

/** Lines of the human status view for the intent's problems (none when all is well). */
export function renderIntentStatus(s: IntentStatus | undefined, pools: readonly { pool: string; conflicting: boolean; conditions: readonly { type: string; status: string; message: string }[] }[]): string[] {
  const out: string[] = [];
  for (const w of s?.warnings ?? []) out.push(`WARNING: ${w}`);
  if (s?.rejected) {
    out.push(`intent REJECTED at ${s.rejected.at} (the previous good state stays in force):`);
    for (const e of s.rejected.errors) {
      const where = [e.file || null, e.document !== null ? `document ${e.document}` : null, e.object, e.field || null].filter(Boolean).join(' ');
      out.push(`  ! ${where ? `${where}: ` : ''}${e.reason}`);
    }
  }
  for (const p of pools) {
    if (!p.conflicting) continue;
    const c = p.conditions.find((x) => x.type === 'cilium.io/PoolConflict' && x.status === 'True');
    out.push(`pool ${p.pool} CONFLICTING: ${c?.message || 'overlaps another pool'}`);
  }
  return out;
}
