/**
 * The conntrack GC (ConntrackGc, connectionsByVip) against real kernel hash
 * maps laid out as ct4 / ct6 (root): expiry by the injected CLOCK_MONOTONIC,
 * batched walks, flushes by service / backend / filter, GC events, serialized
 * passes, the eviction count, and an SNAT connection taking its NAT entry.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { BpfMap } from '../../src/os/bpf-map.js';
import { libbpf } from '../../src/os/libbpf.js';
import { ConntrackGc, connectionsByVip, gcIntervalDefaults, nextGcInterval, type GcPassResult } from '../../src/datapath/lb/ct-gc.js';
import { CT_EGRESS, CT_ENTRY_SIZE, CT_SERVICE, CT_SNAT, ct4Codec, ct6Codec, type CtEntry, type CtKey } from '../../src/datapath/lb/layout.js';

const BPF_MAP_TYPE_HASH = 1;
const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

function ctMap(family: 4 | 6 = 4, maxEntries = 256): BpfMap<CtKey, CtEntry> {
  const codec = family === 4 ? ct4Codec : ct6Codec;
  const fd = libbpf().mapCreate(BPF_MAP_TYPE_HASH, `ct${family}_gc_test`, codec.keySize, CT_ENTRY_SIZE, maxEntries);
  assert.ok(fd >= 0, `bpf_map_create: ${fd}`);
  const map = BpfMap.fromOwnedFd(`ct${family} (test)`, fd, codec);
  cleanup.push(() => map.dispose());
  return map;
}

const FAR = 1n << 62n;

/** An entry with every field set (so a misplaced offset reads something else). */
function entry(p: Partial<CtEntry> = {}): CtEntry {
  return {
    expiresNs: FAR,
    packetsFwd: 3n,
    bytesFwd: 0x0102030405n,
    packetsRev: 7n,
    bytesRev: 0x0a0b0c0d0e0fn,
    backendId: 1,
    serviceId: 1,
    natAddr: '10.96.0.1',
    natPort: 80,
    flags: 3,
    createdS: 1234,
    snatPort: 0,
    ...p,
  };
}

function key(i: number, p: Partial<CtKey> = {}): CtKey {
  return { saddr: `192.168.1.${i + 1}`, daddr: '10.96.0.1', sport: 30000 + i, dport: 80, proto: 6, dir: CT_SERVICE, ...p };
}

const keyId = (k: CtKey) => `${k.saddr}|${k.daddr}|${k.sport}|${k.dport}|${k.proto}|${k.dir}`;
const ids = (ks: CtKey[]) => ks.map(keyId).sort();
const remainingIds = (map: BpfMap<CtKey, CtEntry>) => ids(map.keys());

function fill(map: BpfMap<CtKey, CtEntry>, rows: Array<[CtKey, CtEntry]>): void {
  for (const [k, v] of rows) map.update(k, v);
}

function sane(r: GcPassResult, wallMs: number): void {
  assert.ok(Number.isFinite(r.durationMs) && r.durationMs >= 0 && r.durationMs <= wallMs + 1, `durationMs ${r.durationMs} within the call's ${wallMs}`);
  assert.ok(r.maxBlockMs >= 0 && r.maxBlockMs <= r.durationMs, `maxBlockMs ${r.maxBlockMs} <= durationMs ${r.durationMs}`);
  assert.ok(Number.isFinite(r.cpuMs) && r.cpuMs >= 0 && r.cpuMs < 60_000, `cpuMs ${r.cpuMs} in ms`);
  assert.ok(r.maxBlockCpuMs >= 0 && r.maxBlockCpuMs < 60_000, `maxBlockCpuMs ${r.maxBlockCpuMs} in ms`);
}

async function timed<T>(p: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const r = await p();
  return [r, performance.now() - t0];
}

test('collect deletes exactly the entries that expired before now (expires_ns < now, compared across both 32-bit halves)', async () => {
  const map = ctMap();
  const now = (5n << 32n) | 100n;
  const rows: Array<[CtKey, CtEntry]> = [
    [key(0), entry({ expiresNs: (4n << 32n) | 0xffffffffn })], // high half lower, low half higher: expired
    [key(1), entry({ expiresNs: (5n << 32n) | 99n })], // same high half, one less: expired
    [key(2), entry({ expiresNs: now })], // exactly now: kept
    [key(3), entry({ expiresNs: (5n << 32n) | 101n })], // kept
    [key(4), entry({ expiresNs: 6n << 32n })], // high half higher, low half lower: kept
    [key(5), entry({ expiresNs: 0n })], // expired
  ];
  fill(map, rows);
  const recorded: number[] = [];
  const gc = new ConntrackGc(map, { monotonicNs: () => now, recordDeleted: (n) => recorded.push(n) });
  const [r, wall] = await timed(() => gc.collect());
  assert.equal(r.reason, 'expiry');
  assert.equal(r.scanned, 6);
  assert.equal(r.deleted, 3);
  assert.equal(r.remaining, 3);
  sane(r, wall);
  assert.deepEqual(recorded, [3]);
  assert.deepEqual(remainingIds(map), ids([key(2), key(3), key(4)]));
  // A second pass finds nothing more to delete and does not report zero deletions.
  const again = await gc.collect();
  assert.deepEqual([again.scanned, again.deleted, again.remaining], [3, 0, 3]);
  assert.deepEqual(recorded, [3]);
});

test('collect walks the table in batches smaller than the table and deletes across all of them', async () => {
  const map = ctMap();
  const rows: Array<[CtKey, CtEntry]> = [];
  for (let i = 0; i < 40; i++) rows.push([key(i), entry({ expiresNs: i % 2 === 0 ? 10n : FAR })]);
  fill(map, rows);
  const recorded: number[] = [];
  const gc = new ConntrackGc(map, { batchSize: 3, monotonicNs: () => 1000n, recordDeleted: (n) => recorded.push(n) });
  const [r, wall] = await timed(() => gc.collect());
  assert.deepEqual([r.scanned, r.deleted, r.remaining], [40, 20, 20]);
  sane(r, wall);
  assert.ok(recorded.length > 1, `deletions reported per batch (${recorded.length})`);
  assert.ok(recorded.every((n) => n > 0));
  assert.equal(recorded.reduce((a, b) => a + b, 0), 20);
  assert.deepEqual(remainingIds(map), ids(rows.filter((_, i) => i % 2 === 1).map(([k]) => k)));
});

test('with no clock given, collect uses CLOCK_MONOTONIC (the kernel clock of bpf_ktime_get_ns) and the default batch size', async () => {
  const map = ctMap();
  fill(map, [
    [key(0), entry({ expiresNs: 1n })],
    [key(1), entry({ expiresNs: process.hrtime.bigint() + 3_600_000_000_000n })],
  ]);
  const r = await new ConntrackGc(map).collect();
  assert.deepEqual([r.scanned, r.deleted, r.remaining], [2, 1, 1]);
  assert.deepEqual(remainingIds(map), ids([key(1)]));
});

test('flush by service id removes every entry of that service (live or not) and nothing else; expired ones go on the way', async () => {
  const map = ctMap();
  fill(map, [
    [key(0), entry({ serviceId: 7, backendId: 1 })],
    [key(1), entry({ serviceId: 7, backendId: 2 })],
    [key(2), entry({ serviceId: 8, backendId: 7 })], // backend id equal to the service id: kept
    [key(3), entry({ serviceId: 9, backendId: 1 })],
    [key(4), entry({ serviceId: 9, backendId: 2, expiresNs: 5n })], // expired: goes too
  ]);
  const recorded: number[] = [];
  const gc = new ConntrackGc(map, { monotonicNs: () => 1000n, recordDeleted: (n) => recorded.push(n) });
  const [r, wall] = await timed(() => gc.flush({ serviceId: 7 }));
  assert.equal(r.reason, 'flush');
  assert.deepEqual([r.scanned, r.deleted, r.remaining], [5, 3, 2]);
  sane(r, wall);
  assert.deepEqual(recorded, [3]);
  assert.deepEqual(remainingIds(map), ids([key(2), key(3)]));
});

test('flush by service and backend set removes only that service\'s entries toward those backends', async () => {
  const map = ctMap();
  fill(map, [
    [key(0), entry({ serviceId: 7, backendId: 10 })],
    [key(1), entry({ serviceId: 7, backendId: 11 })],
    [key(2), entry({ serviceId: 7, backendId: 12 })],
    [key(3), entry({ serviceId: 8, backendId: 10 })],
    [key(4), entry({ serviceId: 10, backendId: 7 })],
  ]);
  const gc = new ConntrackGc(map, { monotonicNs: () => 1000n });
  const r = await gc.flush({ serviceId: 7, backendIds: [10, 12] });
  assert.deepEqual([r.scanned, r.deleted, r.remaining, r.reason], [5, 2, 3, 'flush']);
  assert.deepEqual(remainingIds(map), ids([key(1), key(3), key(4)]));
  const none = await gc.flush({ serviceId: 7, backendIds: [] });
  assert.equal(none.deleted, 0);
  assert.deepEqual(remainingIds(map), ids([key(1), key(3), key(4)]));
});

test('flushWhere hands the filter every decoded key and entry and removes the ones it selects', async () => {
  const map = ctMap();
  const rows: Array<[CtKey, CtEntry]> = [];
  for (let i = 0; i < 7; i++) rows.push([key(i, { dport: i % 3 === 0 ? 443 : 80 }), entry({ serviceId: 20 + i, natPort: 1000 + i })]);
  fill(map, rows);
  const seen: Array<[CtKey, CtEntry]> = [];
  const gc = new ConntrackGc(map, { batchSize: 2, monotonicNs: () => 1000n });
  const r = await gc.flushWhere((k, v) => {
    seen.push([k, v]);
    return k.dport === 443;
  });
  assert.deepEqual([r.scanned, r.deleted, r.remaining, r.reason], [7, 3, 4, 'flush']);
  const byId = (xs: Array<[CtKey, CtEntry]>) => [...xs].sort((a, b) => keyId(a[0]).localeCompare(keyId(b[0])));
  assert.deepEqual(byId(seen), byId(rows));
  assert.deepEqual(remainingIds(map), ids(rows.filter(([k]) => k.dport !== 443).map(([k]) => k)));
});

test('observe reports each pass to every subscriber until it unsubscribes', async () => {
  const map = ctMap();
  fill(map, [[key(0), entry({ expiresNs: 1n })], [key(1), entry()]]);
  const gc = new ConntrackGc(map, { monotonicNs: () => 1000n });
  const a: GcPassResult[] = [];
  const b: GcPassResult[] = [];
  const offA = gc.observe((r) => a.push(r));
  gc.observe((r) => b.push(r));
  const r1 = await gc.collect();
  assert.deepEqual(a, [r1]);
  assert.deepEqual(b, [r1]);
  offA();
  const r2 = await gc.flush({ serviceId: 1 });
  assert.deepEqual(a, [r1], 'no events after unsubscribing');
  assert.deepEqual(b, [r1, r2]);
  assert.equal(r2.reason, 'flush');
});

test('passes run one at a time: a pass requested during another starts after it ends, even when the first one fails', async () => {
  const map = ctMap();
  const rows: Array<[CtKey, CtEntry]> = [];
  for (let i = 0; i < 12; i++) rows.push([key(i), entry()]);
  fill(map, rows);
  const gc = new ConntrackGc(map, { batchSize: 2, monotonicNs: () => 1000n });
  const log: string[] = [];
  gc.observe((r) => log.push(`done:${r.deleted}`));
  const p1 = gc.flushWhere(() => {
    log.push('A');
    return false;
  });
  const p2 = gc.flushWhere(() => {
    log.push('B');
    return true;
  });
  const [r1, r2] = await Promise.all([p1, p2]);
  assert.deepEqual(log, [...Array(12).fill('A'), 'done:0', ...Array(12).fill('B'), 'done:12']);
  assert.equal(r1.deleted, 0);
  assert.equal(r2.deleted, 12);

  fill(map, [[key(0), entry({ expiresNs: 1n })], [key(1), entry()]]);
  const failing = gc.flushWhere(() => {
    throw new Error('filter failed');
  });
  const after = gc.collect();
  await assert.rejects(failing, /filter failed/);
  const r3 = await after;
  assert.deepEqual([r3.scanned, r3.deleted], [2, 1]);
});

function snatRows(family: 4 | 6) {
  const v4 = family === 4;
  const client = v4 ? '192.168.1.5' : 'fd01::5';
  const backend = v4 ? '10.1.0.7' : 'fd02::7';
  const vip = v4 ? '10.96.0.9' : 'fd03::9';
  const node = v4 ? '10.0.0.100' : 'fd00::100';
  const other = v4 ? '10.0.0.101' : 'fd00::101';
  const egress = { saddr: client, daddr: backend, sport: 40000, dport: 8080, proto: 6, dir: CT_EGRESS };
  const nat = { saddr: backend, daddr: node, sport: 8080, dport: 33333, proto: 6, dir: CT_SNAT };
  // Near misses of the NAT entry, one field each: none of them belongs to the connection.
  const misses: CtKey[] = [
    { ...nat, saddr: client },
    { ...nat, daddr: other },
    { ...nat, sport: 40000 },
    { ...nat, dport: 33334 },
    { ...nat, proto: 17 },
    { ...nat, dir: CT_EGRESS },
  ];
  // Expired entries that take no NAT entry: no SNAT port, or not the egress direction.
  const plainEgress = { ...egress, sport: 40001 };
  const plainNat = { ...nat, dport: 33335 };
  const service = { saddr: client, daddr: vip, sport: 40002, dport: 80, proto: 6, dir: CT_SERVICE };
  // What a CT_SERVICE entry with an SNAT port would wrongly take, and what an egress entry without one would.
  const serviceNat = { saddr: vip, daddr: node, sport: 80, dport: 33336, proto: 6, dir: CT_SNAT };
  const portZeroNat = { ...nat, dport: 0 };
  const e = (p: Partial<CtEntry> = {}) => entry({ natAddr: vip, ...p });
  const rows: Array<[CtKey, CtEntry]> = [
    [egress, e({ expiresNs: 1n, natAddr: vip, snatPort: 33333 })],
    [nat, e()],
    ...misses.map((k): [CtKey, CtEntry] => [k, e()]),
    [plainEgress, e({ expiresNs: 1n, natAddr: vip, snatPort: 0 })],
    [plainNat, e()],
    [service, e({ expiresNs: 1n, natAddr: backend, snatPort: 33336 })],
    [serviceNat, e()],
    [portZeroNat, e()],
  ];
  return { rows, node, kept: [...misses, plainNat, serviceNat, portZeroNat] };
}

for (const family of [4, 6] as const) {
  test(`IPv${family}: a deleted SNAT egress connection takes its NAT entry with it; nothing else is taken`, async () => {
    const map = ctMap(family);
    const { rows, node, kept } = snatRows(family);
    fill(map, rows);
    const recorded: number[] = [];
    const gc = new ConntrackGc(map, { monotonicNs: () => 1000n, snatAddress: () => node, recordDeleted: (n) => recorded.push(n) });
    const r = await gc.collect();
    assert.equal(r.scanned, rows.length);
    assert.equal(r.deleted, 4, 'three expired entries and the NAT entry of the SNAT one');
    assert.deepEqual(recorded, [4]);
    assert.deepEqual(remainingIds(map), ids(kept));
  });

  test(`IPv${family}: without an SNAT address the NAT entry stays`, async () => {
    const map = ctMap(family);
    const { rows, kept } = snatRows(family);
    fill(map, rows);
    const gc = new ConntrackGc(map, { monotonicNs: () => 1000n });
    const r = await gc.collect();
    assert.equal(r.deleted, 3);
    assert.equal(r.remaining, rows.length - 3);
    assert.equal(remainingIds(map).length, kept.length + 1);
  });
}

test('connectionsByVip counts the unexpired client → VIP entries per VIP (IPv4)', async () => {
  const map = ctMap(4);
  const now = (5n << 32n) | 100n;
  const vipA = '10.96.0.1';
  const vipB = '10.96.0.2';
  fill(map, [
    [key(0, { daddr: vipA }), entry({ expiresNs: now })], // expires exactly now: live
    [key(1, { daddr: vipA }), entry({ expiresNs: 6n << 32n })],
    [key(2, { daddr: vipA }), entry({ expiresNs: (5n << 32n) | 99n })], // expired
    [key(3, { daddr: vipA }), entry({ expiresNs: (4n << 32n) | 0xffffffffn })], // expired
    [key(4, { daddr: vipB }), entry({ expiresNs: (5n << 32n) | 101n })],
    [key(5, { daddr: '10.1.0.7', dir: CT_EGRESS }), entry()], // the egress entry of a connection: not counted
    [key(6, { daddr: '10.0.0.100', dir: CT_SNAT }), entry()],
  ]);
  const byVip = await connectionsByVip(map, now);
  assert.deepEqual([...byVip].sort(), [
    [vipA, 2],
    [vipB, 1],
  ]);
  assert.equal(map.keys().length, 7, 'read only');
});

test('connectionsByVip counts per VIP (IPv6)', async () => {
  const map = ctMap(6);
  fill(map, [
    [{ saddr: 'fd01::1', daddr: 'fd03::9', sport: 1, dport: 80, proto: 6, dir: CT_SERVICE }, entry({ natAddr: 'fd02::7' })],
    [{ saddr: 'fd01::2', daddr: 'fd03::9', sport: 2, dport: 80, proto: 6, dir: CT_SERVICE }, entry({ natAddr: 'fd02::7' })],
    [{ saddr: 'fd01::3', daddr: 'fd03::a', sport: 3, dport: 80, proto: 17, dir: CT_SERVICE }, entry({ natAddr: 'fd02::7' })],
    [{ saddr: 'fd01::4', daddr: 'fd03::a', sport: 4, dport: 80, proto: 17, dir: CT_SERVICE }, entry({ natAddr: 'fd02::7', expiresNs: 5n })],
    [{ saddr: 'fd01::1', daddr: 'fd02::7', sport: 1, dport: 8080, proto: 6, dir: CT_EGRESS }, entry({ natAddr: 'fd03::9' })],
  ]);
  const byVip = await connectionsByVip(map, 1000n);
  assert.deepEqual([...byVip].sort(), [
    ['fd03::9', 2],
    ['fd03::a', 1],
  ]);
});

/**
 * A ct4 map of two buckets whose two SNAT egress entries share one bucket (the
 * hash seed is random per map: retried until they do), so a walk of one entry
 * per batch gets a batch of two.
 */
function collidingMap(): BpfMap<CtKey, CtEntry> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const map = ctMap(4, 2);
    fill(map, [0, 1].map((i): [CtKey, CtEntry] => [key(i, { daddr: '10.1.0.7', dport: 8080, dir: CT_EGRESS }), entry({ expiresNs: 1n, snatPort: 33333 + i })]));
    let biggest = 0;
    map.forEachBatch((b) => (biggest = Math.max(biggest, b.count)), 1);
    if (biggest === 2) return map;
    map.dispose();
    cleanup.pop();
  }
  assert.fail('no two keys shared a bucket in 200 maps');
}

test('a hash bucket larger than the batch comes as one larger batch and is collected whole, NAT entries included', async () => {
  const map = collidingMap();
  const gc = new ConntrackGc(map, { batchSize: 1, monotonicNs: () => 1000n, snatAddress: () => '10.0.0.100' });
  const r = await gc.collect();
  assert.deepEqual([r.scanned, r.deleted, r.remaining], [2, 2, 0]);
  assert.equal(map.keys().length, 0);
});

test('nextGcInterval default bounds: 10 s to 5 min', () => {
  assert.deepEqual(gcIntervalDefaults, { minMs: 10_000, maxMs: 300_000 });
  assert.equal(nextGcInterval(60_000, 60_000, 0), 90_000);
  assert.equal(nextGcInterval(250_000, 250_000, 0), 300_000);
  assert.equal(nextGcInterval(12_000, 12_000, 0.9), 10_000);
});

test('nextGcInterval thresholds: exactly 25 % and exactly 5 % keep the interval', () => {
  const b = { minMs: 10_000, maxMs: 300_000 };
  assert.equal(nextGcInterval(60_000, 60_000, 0.25, b), 60_000);
  assert.equal(nextGcInterval(60_000, 60_000, 0.05, b), 60_000);
});

test('nextGcInterval scales the ratio only for a pass that came early: not for a late one, nor for an unknown actual interval', () => {
  const b = { minMs: 10_000, maxMs: 300_000 };
  assert.equal(nextGcInterval(60_000, 120_000, 0.08, b), 60_000, 'late: 8 % stays 8 %');
  assert.equal(nextGcInterval(60_000, 0, 0.1, b), 60_000, 'no actual interval: 10 % stays 10 %');
});
