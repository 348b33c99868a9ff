/**
 * statedb benchmark: bulk insert, point lookups, change iteration and memory
 * per row on a 100k-row table shaped like herald's address table, next to a
 * mutable Map as the baseline (the Map has no snapshots, revisions, indexes or
 * change tracking, so the ratio is the price of those).
 *
 *   node --import tsx bench/tables/main.ts [--json]
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { defineTable, StateDB } from '../../src/core/statedb/index.js';

interface Address {
  readonly ip: string;
  readonly iface: string;
  readonly origins: readonly string[];
}

const ROWS = 100_000;
const CHANGES = 1_000;
const RUNS = 5;
const WARMUP_ROUNDS = 5;

const addresses = defineTable({
  name: 'addresses',
  primaryKey: (a: Address) => `${a.ip}|${a.iface}`,
  indexes: { origin: (a) => a.origins },
});

function makeRows(count: number): Address[] {
  const rows: Address[] = [];
  for (let i = 0; i < count; i++) {
    rows.push({
      ip: `198.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
      iface: `eth${i % 4}`,
      origins: [`ns${i % 100}/svc-${i % 1000}`],
    });
  }
  return rows;
}

function shuffledKeys(rows: readonly Address[]): string[] {
  const keys = rows.map((row) => `${row.ip}|${row.iface}`);
  let seed = 42;
  for (let i = keys.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    const j = seed % (i + 1);
    [keys[i], keys[j]] = [keys[j] as string, keys[i] as string];
  }
  return keys;
}

function timeMs(fn: () => void): number {
  const start = performance.now();
  fn();
  return performance.now() - start;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

function filledDB(rows: readonly Address[]): StateDB {
  const db = new StateDB([addresses]);
  db.update([addresses], (txn) => {
    for (const row of rows) txn.insert(addresses, row);
  });
  return db;
}

// Memory figures need a full GC between samples: use global.gc when run with
// --expose-gc, otherwise enable it at runtime (a fresh context picks up the flag).
function findGc(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}
const gc = findGc();

function heapUsed(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/** Bytes retained per row by whatever `build` returns (rows included). */
function bytesPerRow(build: () => unknown): number {
  const before = heapUsed();
  const kept = build();
  const after = heapUsed();
  if (kept === undefined) throw new Error('unreachable: keeps `kept` alive across the measurement');
  return (after - before) / ROWS;
}

// Rows are built once and reused: insert timings then exclude object construction.
const rows = makeRows(ROWS);
const keys = shuffledKeys(rows);
let sink = 0;

// Warm-up so the JIT has compiled the paths before anything is timed.
filledDB(rows.slice(0, 10_000));

const insertMs = median(Array.from({ length: RUNS }, () => timeMs(() => filledDB(rows))));

const db = filledDB(rows);
const read = db.readTxn();
const lookupNs =
  (median(
    Array.from({ length: RUNS }, () =>
      timeMs(() => {
        for (const key of keys) if (read.get(addresses, key)) sink++;
      }),
    ),
  ) *
    1e6) /
  ROWS;

const iterator = db.changes(addresses);
const fullSyncMs = timeMs(() => (sink += iterator.next().changes.length));

/** 1k changes in 10 commits: 800 updates and 200 deletes (of rows re-inserted first, so each round deletes). */
function churn(round: number): void {
  for (let batch = 0; batch < 10; batch++) {
    db.update([addresses], (txn) => {
      for (let i = 0; i < CHANGES / 10; i++) {
        const row = rows[(round * 10_007 + batch * 7_919 + i * 97) % ROWS] as Address;
        if (i % 5 === 4) txn.delete(addresses, row);
        else txn.insert(addresses, { ...row, origins: [...row.origins, `bench/round-${round}`] });
      }
    });
  }
}
let deltaCount = 0;
for (let round = 0; round < WARMUP_ROUNDS; round++) {
  churn(round);
  iterator.next();
}
const deltaMs = median(
  Array.from({ length: RUNS }, (_, round) => {
    churn(WARMUP_ROUNDS + round);
    return timeMs(() => (deltaCount = iterator.next().changes.length));
  }),
);
iterator.close();

const mapInsertMs = median(
  Array.from({ length: RUNS }, () =>
    timeMs(() => {
      const map = new Map<string, Address>();
      for (const row of rows) map.set(`${row.ip}|${row.iface}`, row);
    }),
  ),
);
const map = new Map<string, Address>(rows.map((row) => [`${row.ip}|${row.iface}`, row]));
const mapLookupNs =
  (median(
    Array.from({ length: RUNS }, () =>
      timeMs(() => {
        for (const key of keys) if (map.get(key)) sink++;
      }),
    ),
  ) *
    1e6) /
  ROWS;

const statedbBytes = bytesPerRow(() => filledDB(makeRows(ROWS)));
const mapBytes = bytesPerRow(() => new Map(makeRows(ROWS).map((row) => [`${row.ip}|${row.iface}`, row])));

const results = {
  rows: ROWS,
  insert: { ms: insertMs, rowsPerSec: (ROWS / insertMs) * 1000 },
  lookup: { nsPerOp: lookupNs },
  changes: { fullSyncMs, deltaMs, deltaChanges: deltaCount },
  memory: { bytesPerRow: statedbBytes },
  baselineMap: {
    insertMs: mapInsertMs,
    lookupNsPerOp: mapLookupNs,
    bytesPerRow: mapBytes,
    insertRatio: insertMs / mapInsertMs,
    lookupRatio: lookupNs / mapLookupNs,
    memoryRatio: statedbBytes / mapBytes,
  },
};

if (process.argv.includes('--json')) {
  console.log(JSON.stringify(results, null, 2));
} else {
  const fmt = (n: number, digits = 1): string => n.toFixed(digits);
  const table: string[][] = [
    ['measure', 'statedb', 'mutable Map (baseline)', 'ratio'],
    [`insert ${ROWS} rows, one txn (ms)`, fmt(insertMs), fmt(mapInsertMs), `${fmt(results.baselineMap.insertRatio)}x`],
    ['insert rate (rows/s)', fmt(results.insert.rowsPerSec, 0), fmt((ROWS / mapInsertMs) * 1000, 0), ''],
    [`point lookup by primary key (ns/op)`, fmt(lookupNs), fmt(mapLookupNs), `${fmt(results.baselineMap.lookupRatio)}x`],
    [`change iterator: full sync of ${ROWS} (ms)`, fmt(fullSyncMs), '-', ''],
    [`change iterator: ${deltaCount} changes after ${ROWS} (ms)`, fmt(deltaMs, 3), '-', ''],
    ['memory per row, row included (bytes)', fmt(statedbBytes, 0), fmt(mapBytes, 0), `${fmt(results.baselineMap.memoryRatio)}x`],
  ];
  const widths = table[0]!.map((_, c) => Math.max(...table.map((line) => line[c]!.length)));
  for (const line of table) console.log(line.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  '));
  console.log(`\nstatedb table has one multi-valued secondary index (origin); median of ${RUNS} runs.`);
}
if (sink < 0) console.log(sink);
