/** One line per timeline event, the same words in the terminal (`herald events`) and on the page. */
import type { ClusterEvent } from '../../core/events.js';

export function describeEvent(e: ClusterEvent): string {
  switch (e.kind) {
    case 'owner-took':
      return e.from
        ? `took ${e.ip} from ${e.from}${e.gapMs !== undefined ? ` after ${e.gapMs} ms` : ''}: ${e.causeText ?? e.cause ?? ''}`
        : `took ${e.ip} (it had no owner)`;
    case 'owner-released':
      return `released ${e.ip}: ${e.why}`;
    case 'owner-fenced':
      return `fenced out ${e.fenced} (silent on the wire): revoked its lease${e.ips.length ? `; it owned ${e.ips.slice(0, 5).join(', ')}${e.ips.length > 5 ? ` and ${e.ips.length - 5} more` : ''}` : ''}`;
    case 'node-stopping':
      return 'stopping cleanly: withdrawing, then revoking its lease';
    case 'node-crashed':
      return `agent crashed (${e.signal ?? `exit code ${e.code ?? '?'}`}): its supervisor silenced the datapath and revokes its lease`;
    case 'node-started':
      return `agent started (herald ${e.version})`;
    case 'allocated':
      return `allocated ${e.ip} to ${e.service}`;
    case 'freed':
      return `freed ${e.ip} (was ${e.service})`;
    case 'store-lost':
      return `lost the store (${e.reason})`;
    case 'store-live':
      return `store back${e.outageMs !== undefined ? ` after ${(e.outageMs / 1000).toFixed(1)} s` : ''}`;
    case 'intent-rejected':
      return `intent rejected (the previous good intent stays in force): ${e.reasons.join('; ')}`;
    case 'intent-accepted':
      return 'intent accepted';
  }
}
