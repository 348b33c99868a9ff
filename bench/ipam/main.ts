/**
 * bench/ipam — LB-IPAM at scale: allocate N services from one pool (cold and
 * warm), and re-import them all after a restart (the never-reshuffle path),
 * next to Cilium's published figure (50k services in about 3 minutes,
 * cilium/cilium #39276 and #46865).
 *
 *   node --import tsx bench/ipam/main.ts [--sizes 10000,50000] [--json]
 */
import { allocate } from '../../src/controlplane/ipam/allocator.js';
import { parseManifests } from '../../src/intent/parse.js';

const args = process.argv.slice(2);
const i = args.indexOf('--sizes');
const SIZES = (i >= 0 ? args[i + 1]! : '10000,50000').split(',').map(Number);
const CILIUM_50K_MS = 180_000;

function manifests(n: number): string {
  // No IPv4 documentation prefix holds 50k addresses; 2001:db8::/112 (65,536) does.
  const docs = [`apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: big }
spec:
  blocks: [{ cidr: '2001:db8::/112' }]`];
  for (let k = 0; k < n; k++) {
    docs.push(`apiVersion: v1
kind: Service
metadata: { name: svc-${k}, namespace: ns-${k % 50}, creationTimestamp: '${new Date(Date.UTC(2024, 0, 1) + k * 1000).toISOString()}' }
spec:
  type: LoadBalancer
  ipFamilies: [IPv6]
  ipFamilyPolicy: SingleStack
  ports: [{ port: 80 }]`);
  }
  return docs.join('\n---\n');
}

const ms = (t0: number) => performance.now() - t0;
const rows: Array<{ services: number; parseMs: number; coldMs: number; warmMs: number; restartMs: number; satisfied: number }> = [];
for (const n of SIZES) {
  let t0 = performance.now();
  const load = parseManifests(manifests(n), 'bench.yaml');
  const parseMs = ms(t0);
  if (load.errors.length) throw new Error(String(load.errors[0]?.message));
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
  rows.push({ services: n, parseMs, coldMs, warmMs, restartMs, satisfied });
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
  const r50 = rows.find((r) => r.services === 50_000);
  if (r50) console.log(`\nvs Cilium LB-IPAM, 50k services in ~3 min (c#39276, c#46865): herald allocates them ${(CILIUM_50K_MS / r50.coldMs).toFixed(0)}x faster (cold), all kept on restart.`);
}
