/**
 * The load-balancing control plane: intent and LB-IPAM results in, the
 * lb-services table out (one transaction, only rows that changed). The LB
 * reconciler applies it to the datapath's maps.
 */
import type { Logger } from '../../core/logger.js';
import type { Initializer, StateDB } from '../../core/statedb/index.js';
import { lbServicesTable, type LbServiceRow } from '../../datapath/tables/lb-services.js';
import { computeLbDesired, type LbDesiredInput, type LbWarning } from './desired.js';

const sameRow = (a: LbServiceRow | undefined, b: LbServiceRow): boolean => a !== undefined && JSON.stringify(a) === JSON.stringify(b);

export class LbControlPlane {
  private readonly init: Initializer;
  private readonly warned = new Set<string>();
  private warnings: readonly LbWarning[] = [];

  constructor(private readonly deps: { db: StateDB; log: Logger }) {
    // Registered before the reconciler starts: nothing is pruned until intent is in.
    this.init = deps.db.registerInitializer(lbServicesTable, 'lb-control-plane');
  }

  update(input: LbDesiredInput): void {
    const desired = computeLbDesired(input);
    for (const w of desired.warnings) {
      const key = `${w.service}\u0000${w.message}`;
      if (!this.warned.has(key)) this.deps.log.warn(w, 'service not load-balanced as written');
      this.warned.add(key);
    }
    this.deps.db.update([lbServicesTable], (t) => {
      for (const old of t.list(lbServicesTable)) if (!desired.rows.has(old.key)) t.delete(lbServicesTable, old);
      for (const r of desired.rows.values()) if (!sameRow(t.get(lbServicesTable, r.key), r)) t.insert(lbServicesTable, r);
    });
    this.init.done();
    this.warnings = desired.warnings;
  }

  status(): { warnings: readonly LbWarning[] } {
    return { warnings: this.warnings };
  }
}
