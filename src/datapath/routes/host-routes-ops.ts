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

  /** Thousands of routes (a start, a pool of 10,000 IPs) in one rtnetlink session, not one `ip` per route. */
  updateBatch(rows: readonly BgpRouteRow[]): Promise<(Error | undefined)[]> {
    return this.routes.replaceMany(rows.map((r) => ({ prefix: r.prefix, nextHops: r.nextHops })));
  }

  deleteBatch(rows: readonly BgpRouteRow[]): Promise<(Error | undefined)[]> {
    return this.routes.delMany(rows.map((r) => r.prefix));
  }

  async prune(desired: readonly BgpRouteRow[]): Promise<void> {
    const wanted = new Set(desired.map((r) => r.prefix));
    const stale = (await this.routes.list()).filter((r) => !wanted.has(r.prefix)).map((r) => r.prefix);
    const failed = (await this.routes.delMany(stale)).find((e) => e !== undefined);
    if (failed) throw failed;
  }
}
