/**
 * Reconciles the bgp-routes table into kernel host routes: one route per
 * advertised prefix, multipath when it has several next hops. A restarting
 * agent adopts the routes it finds (replace is a no-op on equal routes, so no
 * flap) and prunes the rest only once the table is initialized (the generic
 * reconciler's rule).
 */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import type { HostRoutes } from '../../os/host-routes.js';
import type { BgpRouteRow } from '../tables/bgp-routes.js';

export class HostRoutesOps implements ReconcilerOps<BgpRouteRow> {
  constructor(private readonly routes: HostRoutes) {}

  async update(row: BgpRouteRow): Promise<void> {
    await this.routes.replace({ prefix: row.prefix, nextHops: row.nextHops });
  }

  async delete(row: BgpRouteRow): Promise<void> {
    await this.routes.del(row.prefix);
  }

  async prune(desired: readonly BgpRouteRow[]): Promise<void> {
    const wanted = new Set(desired.map((r) => r.prefix));
    for (const r of await this.routes.list()) if (!wanted.has(r.prefix)) await this.routes.del(r.prefix);
  }
}
