/**
 * Writes lb-services rows into the load balancer's maps: ids for services and
 * backends (stable across restarts: recovered from the pinned maps, never
 * reused while the agent runs, so a stale connection entry can never point at
 * a new backend), the backends map, one Maglev table per frontend (swapped
 * atomically) and the frontend entry. Removing a backend from a service first
 * stops new flows (table swap), then removes the backend (the datapath re-picks
 * for a flow whose backend is gone), then asks for its connections to be
 * flushed. A terminating backend leaves the table but keeps its entry, so its
 * connections live on.
 */
import { HeraldError } from '../../core/errors.js';
import { maglevTable } from './maglev.js';
import type { BpfMap } from '../../os/bpf-map.js';
import type { LbServiceRow } from '../tables/lb-services.js';
import { BACKEND_F_TERMINATING, PROTO_NUMBER, SVC_F_DSR, SVC_F_RANDOM, SVC_F_ROUND_ROBIN, SVC_F_SNAT, type BackendValue, type ServiceKey, type ServiceValue } from './layout.js';

export interface LbWriterMaps {
  services4: BpfMap<ServiceKey, ServiceValue>;
  services6: BpfMap<ServiceKey, ServiceValue>;
  backends: BpfMap<number, BackendValue>;
  maglev: BpfMap<number, number>;
}

/** Connections to flush: those of `serviceId` (all, or only to `backendIds`). */
export interface FlushRequest {
  serviceId: number;
  backendIds?: readonly number[];
}

export interface LbServiceWriterDeps {
  maps: LbWriterMaps;
  maglevSize: number;
  setMaglevTable(serviceId: number, table: Uint32Array): void;
  /** Flush connections (the conntrack GC); awaited before the row counts as done. */
  flush(req: FlushRequest): Promise<void>;
}

const backendKey = (ip: string, port: number): string => `${ip}:${port}`;
const frontendOf = (row: Pick<LbServiceRow, 'vip' | 'port' | 'proto'>): ServiceKey => ({ vip: row.vip, port: row.port, proto: PROTO_NUMBER[row.proto] });
const sKey = (k: ServiceKey): string => `${k.vip}|${k.port}|${k.proto}`;
const isV6 = (ip: string): boolean => ip.includes(':');

/**
 * The table of a random or round-robin service: its active backends in order in
 * slots 0..n-1 (the datapath takes slot random % n or the next in turn), repeated
 * to fill the table so that a reader of any slot still finds a backend.
 */
export function slotTable(active: readonly { id: number }[], m: number): Uint32Array {
  const t = new Uint32Array(m);
  if (active.length === 0) return t;
  for (let i = 0; i < m; i++) t[i] = active[i % active.length]!.id;
  return t;
}

export class LbServiceWriter {
  private readonly backendIds = new Map<string, number>();
  private readonly serviceIds = new Map<string, number>();
  /** Backend ids each frontend uses (this run; rebuilt by a full resync). */
  private readonly uses = new Map<string, Set<number>>();
  private nextBackendId = 1;
  private nextServiceId = 1;

  constructor(private readonly deps: LbServiceWriterDeps) {
    for (const [id, b] of deps.maps.backends.entries()) {
      this.backendIds.set(backendKey(b.ip, b.port), id);
      this.nextBackendId = Math.max(this.nextBackendId, id + 1);
    }
    for (const [k, v] of [...deps.maps.services4.entries(), ...deps.maps.services6.entries()]) {
      if (k.proto === 0) continue; // VIP marker
      this.serviceIds.set(sKey(k), v.id);
      this.nextServiceId = Math.max(this.nextServiceId, v.id + 1);
    }
  }

  /** The frontend map of the VIP's family. */
  private services(vip: string): BpfMap<ServiceKey, ServiceValue> {
    return isV6(vip) ? this.deps.maps.services6 : this.deps.maps.services4;
  }

  serviceId(row: Pick<LbServiceRow, 'vip' | 'port' | 'proto'>): number | undefined {
    return this.serviceIds.get(sKey(frontendOf(row)));
  }

  async update(row: LbServiceRow): Promise<void> {
    const v6 = isV6(row.vip);
    const wrongFamily = row.backends.find((b) => isV6(b.ip) !== v6);
    if (wrongFamily) throw new HeraldError('HERALD_BAD_ARGUMENT', `${row.key}: backend ${wrongFamily.ip} is not of the frontend's address family`);
    const { maps } = this.deps;
    const services = this.services(row.vip);
    const fk = frontendOf(row);
    const k = sKey(fk);
    let id = this.serviceIds.get(k);
    if (id === undefined) {
      id = this.nextServiceId++;
      this.serviceIds.set(k, id);
    }
    const wanted = new Set<number>();
    const active: { key: string; id: number }[] = [];
    for (const b of row.backends) {
      const bk = backendKey(b.ip, b.port);
      let bid = this.backendIds.get(bk);
      if (bid === undefined) {
        bid = this.nextBackendId++;
        this.backendIds.set(bk, bid);
      }
      maps.backends.update(bid, { ip: b.ip, port: b.port, family: v6 ? 6 : 4, flags: b.terminating ? BACKEND_F_TERMINATING : 0 });
      wanted.add(bid);
      if (!b.terminating) active.push({ key: `${bk}/${row.proto}`, id: bid });
    }
    const algorithm = row.algorithm ?? 'maglev';
    this.deps.setMaglevTable(id, algorithm === 'maglev' ? maglevTable(active, this.deps.maglevSize) : slotTable(active, this.deps.maglevSize));
    const flags =
      (row.mode === 'snat' ? SVC_F_SNAT : row.mode === 'dsr' ? SVC_F_DSR : 0) |
      (algorithm === 'random' ? SVC_F_RANDOM : algorithm === 'round-robin' ? SVC_F_ROUND_ROBIN : 0);
    const value: ServiceValue = { id, backends: active.length, flags, affinityTimeoutS: row.affinity === 'ClientIP' ? row.affinityTimeoutS : 0 };
    // An unchanged frontend is not rewritten: a rewrite restarts the datapath's
    // round-robin counter, and full reconciliations come every few minutes.
    const current = services.lookup(fk);
    if (!current || current.id !== value.id || current.backends !== value.backends || current.flags !== value.flags || current.affinityTimeoutS !== value.affinityTimeoutS) {
      services.update(fk, value);
    }
    services.update({ vip: row.vip, port: 0, proto: 0 }, { id: 0, backends: 0, flags: 0, affinityTimeoutS: 0 });
    const before = this.uses.get(k) ?? new Set<number>();
    this.uses.set(k, wanted);
    const gone = [...before].filter((b) => !wanted.has(b));
    if (gone.length > 0) {
      this.releaseBackends(gone);
      await this.deps.flush({ serviceId: id, backendIds: gone });
    }
  }

  async delete(row: Pick<LbServiceRow, 'vip' | 'port' | 'proto'>): Promise<void> {
    const { maps } = this.deps;
    const fk = frontendOf(row);
    const k = sKey(fk);
    const services = this.services(row.vip);
    const id = this.serviceIds.get(k) ?? services.lookup(fk)?.id;
    services.delete(fk);
    if (![...this.serviceIds.keys()].some((other) => other !== k && other.startsWith(`${row.vip}|`))) {
      services.delete({ vip: row.vip, port: 0, proto: 0 });
    }
    const used = this.uses.get(k);
    this.uses.delete(k);
    this.serviceIds.delete(k);
    if (id === undefined) return;
    maps.maglev.delete(id);
    if (used) this.releaseBackends([...used]);
    await this.deps.flush({ serviceId: id });
  }

  /** Full resync: everything `desired` does not hold goes (services, markers, backends, tables). */
  async prune(desired: readonly LbServiceRow[]): Promise<void> {
    const { maps } = this.deps;
    const wantFront = new Set(desired.map((r) => sKey(frontendOf(r))));
    const wantVip = new Set(desired.map((r) => r.vip));
    const wantBackends = new Set(desired.flatMap((r) => r.backends.map((b) => backendKey(b.ip, b.port))));
    const flushes: number[] = [];
    for (const [key, v] of [...maps.services4.entries(), ...maps.services6.entries()]) {
      if (key.proto === 0 ? wantVip.has(key.vip) : wantFront.has(sKey(key))) continue;
      this.services(key.vip).delete(key);
      if (key.proto !== 0) {
        maps.maglev.delete(v.id);
        this.serviceIds.delete(sKey(key));
        this.uses.delete(sKey(key));
        flushes.push(v.id);
      }
    }
    const wantIds = new Set(desired.map((r) => this.serviceId(r)).filter((x): x is number => x !== undefined));
    for (const id of maps.maglev.keys()) if (!wantIds.has(id)) maps.maglev.delete(id);
    for (const [id, b] of maps.backends.entries()) {
      if (wantBackends.has(backendKey(b.ip, b.port))) continue;
      maps.backends.delete(id);
      this.backendIds.delete(backendKey(b.ip, b.port));
    }
    for (const id of flushes) await this.deps.flush({ serviceId: id });
  }

  /** Deletes backends no frontend uses any more. */
  private releaseBackends(ids: readonly number[]): void {
    const still = new Set<number>();
    for (const set of this.uses.values()) for (const b of set) still.add(b);
    for (const id of ids) {
      if (still.has(id)) continue;
      const b = this.deps.maps.backends.lookup(id);
      this.deps.maps.backends.delete(id);
      if (b) this.backendIds.delete(backendKey(b.ip, b.port));
    }
  }
}
