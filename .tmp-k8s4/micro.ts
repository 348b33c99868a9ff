import { allocate } from '../src/controlplane/ipam/allocator.js';
import { IncrementalAllocator } from '../src/controlplane/ipam/incremental.js';
import { parseManifests } from '../src/intent/parse.js';
const n = Number(process.argv[2] ?? 10000);
const docs = [`apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: big }
spec:
  blocks: [{ cidr: '2001:db8::/112' }]`];
for (let k = 0; k < n - 1; k++) docs.push(`apiVersion: v1
kind: Service
metadata: { name: svc-${k}, namespace: ns-${k % 50}, creationTimestamp: '${new Date(Date.UTC(2024, 0, 1) + k * 1000).toISOString()}' }
spec:
  type: LoadBalancer
  ipFamilies: [IPv6]
  ipFamilyPolicy: SingleStack
  ports: [{ port: 80 }]`);
const load = parseManifests(docs.join('\n---\n'), 'x.yaml');
let snap = load.snapshot!;
const inc = new IncrementalAllocator();
let t = performance.now();
const r1 = inc.allocate(snap); console.log('first', (performance.now() - t).toFixed(1));
t = performance.now(); const r2 = inc.allocate(snap, r1.state); console.log('second (re-import)', (performance.now() - t).toFixed(1));
let st = r2.state; for (let i = 0; i < Number(process.argv[3] ?? 5); i++) { t = performance.now(); st = inc.allocate(snap, st).state; console.log('steady', (performance.now() - t).toFixed(1)); }
t = performance.now(); allocate(snap, r2.state); console.log('full', (performance.now() - t).toFixed(1));
// one Service added per pass (the create phase)
{
  const { parseManifests: pm } = await import('../src/intent/parse.js');
  let state = inc.allocate(snap, r2.state).state;
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    const extra = pm(`apiVersion: v1
kind: Service
metadata: { name: new-${i}, namespace: ns-0, creationTimestamp: '2025-01-01T00:00:00Z' }
spec:
  type: LoadBalancer
  ipFamilies: [IPv6]
  ports: [{ port: 80 }]`, 'y.yaml').snapshot!;
    const services = new Map(snap.services);
    for (const [k, v] of extra.services) services.set(k, v);
    (snap as any) = { ...snap, services };
    const t0 = performance.now();
    state = inc.allocate(snap, state).state;
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  console.log('one added per pass: median', times[10]!.toFixed(1), 'ms; reconsidered', inc.stats.reconsidered);
}
