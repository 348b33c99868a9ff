/**
 * Reconciles the lb-services table into the load balancer's maps through the
 * one generic reconciler: update = write a frontend (its backends, a new
 * Maglev table swapped in, flush of removed backends' connections), delete =
 * remove it and flush its connections, prune = full resync against the maps.
 */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import type { LbServiceRow } from '../tables/lb-services.js';
import type { LbServiceWriter } from './services.js';

export class LbServiceOps implements ReconcilerOps<LbServiceRow> {
  constructor(private readonly writer: LbServiceWriter) {}

  update(row: LbServiceRow): Promise<void> {
    return this.writer.update(row);
  }

  delete(row: LbServiceRow): Promise<void> {
    return this.writer.delete(row);
  }

  prune(desired: readonly LbServiceRow[]): Promise<void> {
    return this.writer.prune(desired);
  }
}
