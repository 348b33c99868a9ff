/**
 * bench/ipam — LB-IPAM at scale: allocate N services from one pool (cold and
 * warm), and re-import them all after a restart (the never-reshuffle path),
 * next to Cilium's published figure (50k services in about 3 minutes,
 * cilium/cilium #39276 and #46865).
 *
 *   node --import tsx bench/ipam/main.ts [--sizes 10000,50000] [--json]
 */
import { allocate } from '../../src/controlplane/ipam/allocator.js';
import { IncrementalAllocator } from '../../src/controlplane/ipam/incremental.js';
import { parseManifests } from '../../src/intent/parse.js';
import { buildSnapshot, type IntentSnapshot } from '../../src/intent/snapshot.js';
import type { IntentObject } from '../../src/intent/index.js';

const args = process.argv.slice(2);
const i = args.indexOf('--sizes');
const SIZES = (i >= 0 ? args[i + 1]! : '10000,50000').split(',').map(Number);
const CILIUM_50K_MS = 180_000;

/** Parsed and validated in files of at most 5,000 documents (one file may hold 10,000). */
function loadServices(n: number): { snapshot: IntentSnapshot; objects: IntentObject[] } {
  const docs = manifests(n);
  const objects: IntentObject[] = [];
  for (let i = 0; i < docs.length; i += 5000) {
    const part = parseManifests(docs.slice(i, i + 5000).join('\n---\n'), `bench-${i}.yaml`);
    if (part.errors.length) throw new Error(String(part.errors[0]?.message));
    objects.push(...part.objects);
  }
  return { snapshot: buildSnapshot(objects), objects };
}

/** One more Service, as the Kubernetes source adds it: every other object stays the same. */
function withService(snapshot: IntentSnapshot, i: number): IntentSnapshot {
  const extra = parseManifests(service(`new-${i}`, 0, '2025-01-01T00:00:00.000Z'), 'new.yaml').snapshot!;
  return { ...snapshot, services: new Map([...snapshot.services, ...extra.services]) };
}

function service(name: string, k: number, created: string): string {
  return `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: ns-${k % 50}, creationTimestamp: '${created}' }
spec:
  type: LoadBalancer
  ipFamilies: [IPv6]
  ipFamilyPolicy: SingleStack
  ports: [{ port: 80 }]`;
}

function manifests(n: number): string[] {
  // No IPv4 documentation prefix holds 50k addresses; 2001:db8::/112 (65,536) does.
  const docs = [`apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: big }
spec:
  blocks: [{ cidr: '2001:db8::/112' }]`];
  for (let k = 0; k < n; k++) docs.push(service(`svc-${k}`, k, new Date(Date.UTC(2024, 0, 1) + k * 1000).toISOString()));
  return docs;
}

const ms = (t0: number) => performance.now() - t0;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const rows: Array<{ services: number; parseMs: number; coldMs: number; warmMs: number; restartMs: number; satisfied: number; unchangedMs: number; addedFullMs: number; addedIncMs: number }> = [];
for (const n of SIZES) {
  let t0 = performance.now();
  const load0 = loadServices(n);
  const load = { snapshot: load0.snapshot };
  const parseMs = ms(t0);
  t0 = performance.now();
  const first = allocate(load.snapshot!);
  const coldMs = ms(t0);
  t0 = performance.now();
  allocate(load.snapshot!);
  const warmMs = ms(t0);
  const persisted = JSON.parse(JSON.stringify(first.state));
  t0 = performance.now();
  const again = allocate(load.snapshot!, persisted);
  const restartMs = ms(t0);
  if (JSON.stringify(again.state) !== JSON.stringify(first.state)) throw new Error('a restart moved an allocation');
  const satisfied = [...first.services.values()].filter((s) => s.condition.status === 'True').length;
  // A control-plane pass as the IPAM leader makes it: fed its own last state.
  // Unchanged intent, and one Service added per pass (the create phase): the
  // full run every pass took before, against the incremental allocator.
  const inc = new IncrementalAllocator();
  let snap = load.snapshot!;
  let state = inc.allocate(snap, inc.allocate(snap).state).state;
  const unchanged: number[] = [];
  for (let i = 0; i < 5; i++) {
    t0 = performance.now();
    state = inc.allocate(snap, state).state;
    unchanged.push(ms(t0));
  }
  const addedFull: number[] = [];
  const addedInc: number[] = [];
  let fullState = state;
  for (let i = 0; i < 9; i++) {
    snap = withService(snap, i);
    t0 = performance.now();
    const full = allocate(snap, fullState);
    addedFull.push(ms(t0));
    t0 = performance.now();
    const got = inc.allocate(snap, state);
    addedInc.push(ms(t0));
    if (JSON.stringify(got.state) !== JSON.stringify(full.state)) throw new Error('incremental and full runs differ');
    state = got.state;
    fullState = full.state;
  }
  rows.push({ services: n, parseMs, coldMs, warmMs, restartMs, satisfied, unchangedMs: median(unchanged), addedFullMs: median(addedFull), addedIncMs: median(addedInc) });
}
if (args.includes('--json')) {
  console.log(JSON.stringify(rows, null, 2));
} else {
  console.log('services  parse+validate  allocate (cold)  allocate (warm)  restart import  satisfied');
  for (const r of rows) {
    console.log(
      `${String(r.services).padEnd(9)} ${`${r.parseMs.toFixed(0)} ms`.padEnd(15)} ${`${r.coldMs.toFixed(0)} ms`.padEnd(16)} ${`${r.warmMs.toFixed(0)} ms`.padEnd(16)} ${`${r.restartMs.toFixed(0)} ms`.padEnd(15)} ${r.satisfied}`,
    );
  }
  console.log('\nper control-plane pass (median): one Service added — full run vs incremental; nothing changed — incremental');
  for (const r of rows) {
    console.log(`${String(r.services).padEnd(9)} added: full ${r.addedFullMs.toFixed(1)} ms vs incremental ${r.addedIncMs.toFixed(1)} ms (${(r.addedFullMs / r.addedIncMs).toFixed(1)}x) · unchanged: ${r.unchangedMs.toFixed(2)} ms`);
  }
  const r50 = rows.find((r) => r.services === 50_000);
  if (r50) console.log(`\nvs Cilium LB-IPAM, 50k services in ~3 min (c#39276, c#46865): herald allocates them ${(CILIUM_50K_MS / r50.coldMs).toFixed(0)}x faster (cold), all kept on restart.`);
}
