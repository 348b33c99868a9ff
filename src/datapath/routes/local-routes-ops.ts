/** Reconciles the l2-announce table into local routes: one per announced address (IPv4 /32, IPv6 /128). */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import { isIpv4 } from '../../core/addr.js';
import type { LocalRoutes } from '../../os/local-routes.js';
import type { L2AnnounceRow } from '../tables/l2-announce.js';

export class LocalRoutesOps implements ReconcilerOps<L2AnnounceRow> {
  constructor(
    private readonly routes: LocalRoutes,
    /** Whether another row still announces this IP (the same IP on two interfaces shares one route). */
    private readonly stillAnnounced: (ip: string) => boolean,
  ) {}

  async update(row: L2AnnounceRow): Promise<void> {
    if (isIpv4(row.ip)) await this.routes.quietArp(row.iface);
    await this.routes.add(row.ip);
  }

  async delete(row: L2AnnounceRow): Promise<void> {
    if (this.stillAnnounced(row.ip)) return;
    await this.routes.del(row.ip);
  }

  async prune(desired: readonly L2AnnounceRow[]): Promise<void> {
    const wanted = new Set(desired.map((r) => r.ip));
    for (const ip of await this.routes.list()) if (!wanted.has(ip)) await this.routes.del(ip);
  }
}
