/**
 * Connection-tracking garbage collection (after Cilium's pkg/maps/ctmap GC):
 * a pass walks the map with BPF_MAP_LOOKUP_BATCH, picks the expired entries
 * (by the kernel's clock: expires_ns < CLOCK_MONOTONIC now) and, on request,
 * every entry of a removed service or backend, and deletes them with
 * BPF_MAP_DELETE_BATCH — never one syscall per entry. It yields to the event
 * loop between batches, so the agent is never blocked for long. Each pass is
 * reported to subscribers (GC events, as Cilium's Observe4).
 */
import type { BpfMap } from '../../os/bpf-map.js';
import type { FlushRequest } from './services.js';
import { bytesToIpv4, bytesToIpv6, ipv4ToBytes, ipv6ToBytes } from '../../net/addr.js';
import { CT_EGRESS, CT_SERVICE, CT_ENTRY_BACKEND_OFF, CT_ENTRY_EXPIRES_OFF, CT_ENTRY_SNAT_PORT_OFF, CT_KEY4_SIZE, CT_SNAT, type CtEntry, type CtKey } from './layout.js';
import { performance } from 'node:perf_hooks';

export interface GcPassResult {
  scanned: number;
  deleted: number;
  /** Entries left after the pass. */
  remaining: number;
  durationMs: number;
  /** Longest synchronous stretch (one batch) in ms, wall clock (includes time the process was not scheduled). */
  maxBlockMs: number;
  /** CPU time (user + system) of the pass, and of its most expensive batch, in ms. */
  cpuMs: number;
  maxBlockCpuMs: number;
  reason: 'expiry' | 'flush';
}

export interface CtGcOptions {
  /** Entries per batch (default 1024: one batch stays well under 20 ms even on a loaded machine). */
  batchSize?: number;
  /** CLOCK_MONOTONIC ns (the clock of bpf_ktime_get_ns). */
  monotonicNs?: () => bigint;
  /** The node's SNAT address of this table's family: a deleted SNAT connection takes its NAT entry with it. */
  snatAddress?: () => string | undefined;
  /** Told how many entries each pass deleted (the datapath's eviction count needs every deletion). */
  recordDeleted?: (n: number) => void;
}

const SERVICE_OFF = CT_ENTRY_BACKEND_OFF + 4;

export class ConntrackGc {
  private readonly batchSize: number;
  private readonly now: () => bigint;
  private readonly snatAddress: () => string | undefined;
  private readonly recordDeleted: (n: number) => void;
  private readonly subscribers = new Set<(r: GcPassResult) => void>();
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly map: BpfMap<CtKey, CtEntry>,
    opts: CtGcOptions = {},
  ) {
    this.batchSize = opts.batchSize ?? 1024;
    this.now = opts.monotonicNs ?? (() => process.hrtime.bigint());
    this.snatAddress = opts.snatAddress ?? (() => undefined);
    this.recordDeleted = opts.recordDeleted ?? (() => {});
  }

  /** GC events: one per pass. Returns the unsubscribe function. */
  observe(fn: (r: GcPassResult) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  /** Removes expired entries. Passes run one at a time. */
  collect(): Promise<GcPassResult> {
    return this.serial(() => this.pass('expiry', undefined));
  }

  /** Removes every entry of a removed service or backend (and expired ones on the way). */
  flush(req: FlushRequest): Promise<GcPassResult> {
    const backends = req.backendIds ? new Set(req.backendIds) : undefined;
    return this.serial(() =>
      this.pass('flush', (svc, backend) => svc === req.serviceId && (backends === undefined || backends.has(backend))),
    );
  }

  /** Removes the entries `match` selects (ct flush by filter). */
  flushWhere(match: (key: CtKey, entry: CtEntry) => boolean): Promise<GcPassResult> {
    const codec = this.map.rawCodec;
    return this.serial(() =>
      this.pass('flush', undefined, (k, v) => match(codec.decodeKey(k), codec.decodeValue(v))),
    );
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn, fn);
    this.chain = next.catch(() => undefined);
    return next;
  }

  private async pass(
    reason: GcPassResult['reason'],
    match?: (serviceId: number, backendId: number) => boolean,
    matchRaw?: (key: Buffer, value: Buffer) => boolean,
  ): Promise<GcPassResult> {
    const started = performance.now();
    const cpuStart = process.cpuUsage();
    let maxBlockCpuMs = 0;
    const { keySize, valueSize } = this.map.rawCodec;
    let scanned = 0;
    let deleted = 0;
    let maxBlockMs = 0;
    // Room for each doomed entry and, for an SNAT connection, its NAT entry (GC feeds the NAT purge).
    let doomed = Buffer.alloc(keySize * this.batchSize * 2);
    // ct_key4 / ct_key6: {saddr, daddr, sport, dport, proto, dir}, addresses of 4 or 16 bytes.
    const w = keySize === CT_KEY4_SIZE ? 4 : 16;
    const snat = this.snatAddress();
    const snatBytes = snat ? (w === 4 ? ipv4ToBytes(snat) : ipv6ToBytes(snat)) : undefined;
    let t0 = performance.now();
    let c0 = process.cpuUsage();
    await this.map.forEachBatchAsync(async ({ keys, values, count }) => {
      const now = this.now();
      // Compare as two 32-bit halves: no BigInt per entry.
      const nowHi = Number(now >> 32n);
      const nowLo = Number(now & 0xffffffffn);
      // A bucket larger than the batch comes as one larger batch.
      if (doomed.length < keySize * count * 2) doomed = Buffer.alloc(keySize * count * 2);
      let n = 0;
      for (let i = 0; i < count; i++) {
        const v = i * valueSize;
        const hi = values.readUInt32LE(v + CT_ENTRY_EXPIRES_OFF + 4);
        const expired = hi < nowHi || (hi === nowHi && values.readUInt32LE(v + CT_ENTRY_EXPIRES_OFF) < nowLo);
        const hit =
          expired ||
          (match !== undefined && match(values.readUInt32LE(v + SERVICE_OFF), values.readUInt32LE(v + CT_ENTRY_BACKEND_OFF))) ||
          (matchRaw !== undefined && matchRaw(keys.subarray(i * keySize, (i + 1) * keySize), values.subarray(v, v + valueSize)));
        if (!hit) continue;
        const k = i * keySize;
        keys.copy(doomed, n++ * keySize, k, k + keySize);
        const snatPort = values.readUInt16BE(v + CT_ENTRY_SNAT_PORT_OFF);
        if (snatBytes && snatPort !== 0 && keys[k + 2 * w + 5] === CT_EGRESS) {
          // {backend, node, backend port, node port, proto, CT_SNAT}: the reply's key.
          const o = n++ * keySize;
          doomed.fill(0, o, o + keySize);
          keys.copy(doomed, o, k + w, k + 2 * w);
          snatBytes.copy(doomed, o + w);
          keys.copy(doomed, o + 2 * w, k + 2 * w + 2, k + 2 * w + 4);
          doomed.writeUInt16BE(snatPort, o + 2 * w + 2);
          doomed[o + 2 * w + 4] = keys[k + 2 * w + 4]!;
          doomed[o + 2 * w + 5] = CT_SNAT;
        }
      }
      scanned += count;
      if (n > 0) {
        const d = this.map.deleteBatch(doomed, n);
        deleted += d;
        this.recordDeleted(d);
      }
      maxBlockMs = Math.max(maxBlockMs, performance.now() - t0);
      const c1 = process.cpuUsage(c0);
      maxBlockCpuMs = Math.max(maxBlockCpuMs, (c1.user + c1.system) / 1000);
      // Yield between batches: the agent's event loop is never blocked for more than one.
      await new Promise<void>((r) => setImmediate(r));
      t0 = performance.now();
      c0 = process.cpuUsage();
    }, this.batchSize);
    const result: GcPassResult = {
      scanned,
      deleted,
      remaining: scanned - deleted,
      durationMs: performance.now() - started,
      maxBlockMs,
      cpuMs: ((u) => (u.user + u.system) / 1000)(process.cpuUsage(cpuStart)),
      maxBlockCpuMs,
      reason,
    };
    for (const s of this.subscribers) s(result);
    return result;
  }
}

export interface GcIntervalBounds {
  minMs: number;
  maxMs: number;
}

export const gcIntervalDefaults: GcIntervalBounds = { minMs: 10_000, maxMs: 5 * 60_000 };

/**
 * The next GC interval from the last one and how much it deleted (after
 * Cilium's GetInterval(actualPrevInterval, maxDeleteRatio)): when a pass
 * deleted more than a quarter of what it scanned, entries expire faster than
 * we collect, so the interval shrinks in proportion (at most 10×); under 5 %,
 * it grows by half; in between it stays. If the last pass came earlier than
 * planned (it was triggered), the ratio is scaled up to what a full interval
 * would have deleted. Always within the bounds.
 */
export function nextGcInterval(
  expectedPrevMs: number,
  actualPrevMs: number,
  deleteRatio: number,
  bounds: GcIntervalBounds = gcIntervalDefaults,
): number {
  const clamp = (ms: number) => Math.min(bounds.maxMs, Math.max(bounds.minMs, Math.round(ms)));
  const expected = expectedPrevMs > 0 ? expectedPrevMs : bounds.maxMs;
  if (!(deleteRatio > 0)) return clamp(expected * 1.5);
  let ratio = deleteRatio;
  if (actualPrevMs > 0 && actualPrevMs < expected) ratio *= expected / actualPrevMs;
  if (ratio > 0.25) return clamp(expected * (1 - Math.min(ratio, 0.9)));
  if (ratio < 0.05) return clamp(expected * 1.5);
  return clamp(expected);
}

/**
 * Live load-balanced connections per VIP in one conntrack table: its
 * unexpired client → VIP entries (dir CT_SERVICE; one per connection — the
 * egress and SNAT entries of the same connection are not counted again).
 * Read only, the same batched walk as a GC pass (yielding between batches),
 * never a syscall per entry. What the cluster view shows per IP.
 */
export async function connectionsByVip(map: BpfMap<CtKey, CtEntry>, nowNs: bigint): Promise<Map<string, number>> {
  const { keySize, valueSize } = map.rawCodec;
  const w = keySize === CT_KEY4_SIZE ? 4 : 16;
  const dirOff = 2 * w + 5;
  const nowHi = Number(nowNs >> 32n);
  const nowLo = Number(nowNs & 0xffffffffn);
  const byAddr = new Map<string, number>();
  await map.forEachBatchAsync(async ({ keys, values, count }) => {
    for (let i = 0; i < count; i++) {
      const k = i * keySize;
      if (keys[k + dirOff] !== CT_SERVICE) continue;
      const v = i * valueSize;
      const hi = values.readUInt32LE(v + CT_ENTRY_EXPIRES_OFF + 4);
      if (hi < nowHi || (hi === nowHi && values.readUInt32LE(v + CT_ENTRY_EXPIRES_OFF) < nowLo)) continue;
      const addr = keys.toString('hex', k + w, k + 2 * w);
      byAddr.set(addr, (byAddr.get(addr) ?? 0) + 1);
    }
    await new Promise((r) => setImmediate(r));
  });
  const out = new Map<string, number>();
  for (const [hex, n] of byAddr) {
    const b = Buffer.from(hex, 'hex');
    out.set(w === 4 ? bytesToIpv4(b) : bytesToIpv6(b), n);
  }
  return out;
}
