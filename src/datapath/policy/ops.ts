/**
 * How the generic reconciler applies service-policy rows to the policy maps,
 * hitlessly: each service owns two LPM slots (svcId*2, svcId*2+1). A new
 * revision is written into the idle slot, complete, and only then does one
 * update per service IP flip the svc map to it. The slot left behind is
 * cleared just before it is reused (one revision later), so a packet that
 * read the old slot a moment before the flip still finds every entry.
 *
 * The "idle slot" is the one of the pair no svc entry points at, as the maps
 * say, not as this process remembers: with pinned maps a restarted agent
 * adopts what its previous life left (adopt()), and its new service ids need
 * not match the old ones. A slot some other service's IP still points at is
 * never written; both slots busy (only while that other service's own row
 * has not been applied yet) is a row error, retried.
 *
 * Many rows at once (updateBatch/deleteBatch, the reconciler's batch
 * capability) go through bpf_map_*_batch: clear every idle slot, write every
 * new slot, then flip every IP — a few syscalls for thousands of rows, in the
 * same order per row as update(). A row whose LPM writes failed is not
 * flipped (its service keeps enforcing its previous revision).
 */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import { HeraldError } from '../../core/errors.js';
import { batchErrno, type BatchResult, type BpfMap } from '../../os/bpf-map.js';
import type { ServicePolicyRow } from '../tables/service-policy.js';
import { familyOfIp, writeLpmKey, writeLpmValue, type LpmKey, type SvcValue } from './layout.js';
import type { PolicyMaps } from './program.js';

interface Applied {
  svcId: number;
  /** The slot the service's IPs point at. */
  slot: number;
  ips: Set<string>;
  revision: number;
}

export interface PolicyOpsEvents {
  /** A service's new revision is enforced (its svc entries point at it). */
  onEnforced?(service: string, revision: number): void;
}

type Lpm = BpfMap<LpmKey, unknown>;

/** One row's writes in a batch, and its outcome so far. */
interface Plan {
  row: ServicePolicyRow;
  slot: number;
  error?: unknown;
}

export class PolicyMapOps implements ReconcilerOps<ServicePolicyRow> {
  private readonly applied = new Map<string, Applied>();
  /** What the svc maps hold: service IP → slot (mirrors the kernel, including adopted entries). */
  private readonly live = new Map<string, SvcValue>();
  /** How many IPs point at each slot. */
  private readonly refs = new Map<number, number>();
  /** LPM keys present per slot (this run's writes and adopted ones). */
  private readonly slotKeys = new Map<number, LpmKey[]>();
  /** The next generation to hand out, and the high-water mark written to gen_hw (every generation handed out is below it). */
  private nextGen: bigint;
  private reservedGen: bigint;

  constructor(
    private readonly maps: PolicyMaps,
    private readonly events: PolicyOpsEvents = {},
  ) {
    // Generations start above every one an earlier run handed out (gen_hw is pinned with the maps); 0 is never used.
    const hw = maps.genHw.lookup(0) ?? 0n;
    this.nextGen = hw > 0n ? hw : 1n;
    this.reservedGen = this.nextGen;
  }

  /**
   * `n` fresh generations: the high-water mark is raised in the kernel before
   * any of them is used, so a restart (even kill -9) never hands one out again.
   */
  private takeGens(n: number): bigint {
    const first = this.nextGen;
    this.nextGen += BigInt(n);
    if (this.nextGen > this.reservedGen) {
      this.reservedGen = this.nextGen + 4096n;
      this.maps.genHw.update(0, this.reservedGen);
    }
    return first;
  }

  /**
   * Learns what pinned maps already hold (a previous run's entries), so new
   * writes go around the slots still in force and prune() removes what no
   * row wants. Call once, before the first write.
   */
  adopt(): { ips: number; prefixes: number } {
    let prefixes = 0;
    for (const svc of [this.maps.svc4, this.maps.svc6]) for (const [ip, v] of svc.entries()) this.setLive(ip, v);
    for (const lpm of [this.maps.lpm4, this.maps.lpm6]) {
      for (const k of (lpm as Lpm).keys()) {
        this.keysOf(k.slot).push(k);
        prefixes++;
      }
    }
    return { ips: this.live.size, prefixes };
  }

  /** The revision enforced per service (what `herald policy` shows as realized). */
  realized(): ReadonlyMap<string, number> {
    return new Map([...this.applied].map(([k, a]) => [k, a.revision]));
  }

  update(row: ServicePolicyRow): void {
    const r = this.updateBatch([row])[0];
    if (r !== undefined) throw r;
  }

  updateBatch(rows: readonly ServicePolicyRow[]): unknown[] {
    // A service whose id changed: its old slots go first (as a delete).
    const moved = rows.filter((r) => {
      const a = this.applied.get(r.service);
      return a !== undefined && a.svcId !== r.svcId;
    });
    if (moved.length > 0) this.deleteBatch(moved.map((r) => ({ ...r, svcId: this.applied.get(r.service)!.svcId })));
    const plans: Plan[] = rows.map((row) => {
      const slot = this.idleSlot(row);
      return typeof slot === 'number' ? { row, slot } : { row, slot: -1, error: slot };
    });
    const ok = () => plans.filter((p) => p.error === undefined);
    // 1. Clear what an older revision (or a previous run) left in the idle slots.
    const stale: LpmKey[] = [];
    for (const p of ok()) {
      stale.push(...(this.slotKeys.get(p.slot) ?? []));
      this.slotKeys.delete(p.slot);
    }
    this.lpmDelete(stale);
    // 2. Write each new revision, complete, into its idle slot.
    for (const family of [4, 6] as const) {
      const lpm = this.lpm(family);
      const owners: Plan[] = [];
      let count = 0;
      for (const p of ok()) for (const x of p.row.prefixes) if (x.family === family) count++;
      if (count === 0) continue;
      const keys = Buffer.alloc(count * lpm.keySize);
      const values = Buffer.alloc(count * lpm.valueSize);
      let i = 0;
      for (const p of ok()) {
        const written = this.keysOf(p.slot);
        for (const x of p.row.prefixes) {
          if (x.family !== family) continue;
          const key: LpmKey = { slot: p.slot, family, addr: x.addr, len: x.len };
          try {
            writeLpmKey(key, keys, i * lpm.keySize);
            writeLpmValue(x.entries, values, i * lpm.valueSize);
          } catch (e) {
            p.error = e;
            break;
          }
          written.push(key); // cleared before the slot is reused, even if this write fails
          owners[i++] = p;
        }
      }
      const results = lpm.updateBatchRaw(keys, values, i);
      results.forEach((r, j) => {
        if (r !== undefined && owners[j]!.error === undefined) owners[j]!.error = r;
      });
    }
    // 3. Flip every service IP of the rows written completely (one map update each), then drop the IPs they lost.
    const flips: Array<[string, SvcValue, Plan]> = [];
    const gone: Array<[string, Plan]> = [];
    // Each revision flipped gets a generation never used before: the program's verdict cache answers only under the current one.
    let gen = this.takeGens(ok().length);
    for (const p of ok()) {
      const ips = new Set(p.row.ips);
      const v: SvcValue = { slot: p.slot, svcId: p.row.svcId, gen: gen++ };
      for (const ip of ips) flips.push([ip, v, p]);
      for (const ip of this.applied.get(p.row.service)?.ips ?? []) if (!ips.has(ip)) gone.push([ip, p]);
    }
    for (const family of [4, 6] as const) {
      const mine = flips.filter(([ip]) => familyOfIp(ip) === family);
      if (mine.length === 0) continue;
      const results = this.svcMap(family).updateMany(mine.map(([ip, v]) => [ip, v] as const));
      results.forEach((r, j) => {
        const [ip, v, p] = mine[j]!;
        if (r === undefined) this.setLive(ip, v);
        else p.error ??= r;
      });
    }
    // An IP the row lost may already point at another row's slot (an IP that became shared moves to its own row): not ours to delete.
    this.svcDelete(gone.filter(([ip, p]) => p.error === undefined && this.live.get(ip)?.svcId === this.applied.get(p.row.service)?.svcId).map(([ip]) => ip));
    const out: unknown[] = [];
    for (const p of plans) {
      if (p.error !== undefined) {
        out.push(p.error);
        continue;
      }
      this.applied.set(p.row.service, { svcId: p.row.svcId, slot: p.slot, ips: new Set(p.row.ips), revision: p.row.revision });
      this.events.onEnforced?.(p.row.service, p.row.revision);
      out.push(undefined);
    }
    return out;
  }

  delete(row: ServicePolicyRow): void {
    const r = this.deleteBatch([row])[0];
    if (r !== undefined) throw r;
  }

  deleteBatch(rows: readonly ServicePolicyRow[]): unknown[] {
    const ips = new Set<string>();
    const slots = new Set<number>();
    for (const row of rows) {
      const a = this.applied.get(row.service);
      for (const ip of [...row.ips, ...(a?.ips ?? [])]) if (this.ownedBy(ip, row.svcId, a)) ips.add(ip);
      const id = a?.svcId ?? row.svcId;
      slots.add(id * 2).add(id * 2 + 1);
    }
    // The IPs first (the service is open from then on), then its slots.
    this.svcDelete([...ips]);
    const keys: LpmKey[] = [];
    for (const s of slots) {
      if ((this.refs.get(s) ?? 0) > 0) continue; // another service's IP still points here (adopted): not ours to clear
      keys.push(...(this.slotKeys.get(s) ?? []));
      this.slotKeys.delete(s);
    }
    this.lpmDelete(keys);
    for (const row of rows) this.applied.delete(row.service);
    return rows.map(() => undefined);
  }

  /** Removes what no row wants: services gone, adopted IPs and slots of a previous run. */
  prune(desired: readonly ServicePolicyRow[]): void {
    const wanted = new Set(desired.map((r) => r.service));
    const gone: ServicePolicyRow[] = [];
    for (const [service, a] of this.applied) {
      if (!wanted.has(service)) gone.push({ service, svcId: a.svcId, ips: [...a.ips], revision: 0, prefixes: [], rules: [] });
    }
    if (gone.length > 0) this.deleteBatch(gone);
    // Only rows the reconciler has applied are known here: an adopted IP no applied row holds, and a slot nobody points at, go.
    const held = new Set<string>();
    for (const a of this.applied.values()) for (const ip of a.ips) held.add(ip);
    this.svcDelete([...this.live.keys()].filter((ip) => !held.has(ip)));
    const inUse = new Set<number>();
    for (const a of this.applied.values()) inUse.add(a.slot);
    const keys: LpmKey[] = [];
    for (const [slot, list] of this.slotKeys) {
      if (inUse.has(slot) || (this.refs.get(slot) ?? 0) > 0) continue;
      keys.push(...list);
      this.slotKeys.delete(slot);
    }
    this.lpmDelete(keys);
  }

  /** The slot of the row's pair to write next: one no IP points at (prefer the one its IPs do not use). */
  private idleSlot(row: ServicePolicyRow): number | HeraldError {
    const a = this.applied.get(row.service);
    const base = row.svcId * 2;
    const order = a && a.svcId === row.svcId && a.slot === base ? [base + 1, base] : [base, base + 1];
    for (const s of order) if ((this.refs.get(s) ?? 0) === 0) return s;
    return new HeraldError('HERALD_POLICY_SLOT_BUSY', `${row.service}: both datapath slots of service id ${row.svcId} are in force (a previous run's service still uses one); retried once that service is rewritten`);
  }

  /** Whether deleting `ip` removes this service's entry (not another service's that took the IP over). */
  private ownedBy(ip: string, svcId: number, a: Applied | undefined): boolean {
    const v = this.live.get(ip);
    if (!v) return false;
    return v.svcId === (a?.svcId ?? svcId);
  }

  private setLive(ip: string, v: SvcValue): void {
    const before = this.live.get(ip);
    if (before) this.unref(before.slot);
    this.live.set(ip, v);
    this.refs.set(v.slot, (this.refs.get(v.slot) ?? 0) + 1);
  }

  private unref(slot: number): void {
    const n = (this.refs.get(slot) ?? 0) - 1;
    if (n > 0) this.refs.set(slot, n);
    else this.refs.delete(slot);
  }

  private keysOf(slot: number): LpmKey[] {
    let list = this.slotKeys.get(slot);
    if (!list) this.slotKeys.set(slot, (list = []));
    return list;
  }

  private svcDelete(ips: readonly string[]): void {
    for (const family of [4, 6] as const) {
      const mine = ips.filter((ip) => familyOfIp(ip) === family);
      if (mine.length === 0) continue;
      const results = this.svcMap(family).deleteMany(mine);
      results.forEach((r, j) => {
        throwUnlessGone(r);
        const ip = mine[j]!;
        const v = this.live.get(ip);
        if (v) this.unref(v.slot);
        this.live.delete(ip);
      });
    }
  }

  private lpmDelete(keys: readonly LpmKey[]): void {
    for (const family of [4, 6] as const) {
      const mine = keys.filter((k) => k.family === family);
      if (mine.length === 0) continue;
      const lpm = this.lpm(family);
      const buf = Buffer.alloc(mine.length * lpm.keySize);
      mine.forEach((k, i) => writeLpmKey(k, buf, i * lpm.keySize));
      for (const r of lpm.deleteBatchRaw(buf, mine.length)) throwUnlessGone(r);
    }
  }

  private svcMap(family: 4 | 6) {
    return family === 4 ? this.maps.svc4 : this.maps.svc6;
  }

  private lpm(family: 4 | 6): Lpm {
    return (family === 4 ? this.maps.lpm4 : this.maps.lpm6) as Lpm;
  }
}

/** A delete of something already gone is what was wanted. */
function throwUnlessGone(r: BatchResult): void {
  if (r !== undefined && batchErrno(r) !== 'ENOENT') throw r;
}
