/**
 * Issue 17: the incremental BGP desired-state engine gives exactly the pure
 * function's result after every change — random readiness flips, ingress IP
 * changes (shared IPs included), label and traffic-policy changes, slices
 * added and removed, policy changes — and reports only the prefixes it
 * re-evaluated, which must cover every prefix whose row changed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BgpDesiredEngine, computeBgpDesired, type BgpDesiredInput } from '../../../src/controlplane/bgp/desired.js';
import { parseManifests, type IntentSnapshot } from '../../../src/intent/index.js';
import { peersAB } from './fixtures.js';

const N = 12;
const text = `${peersAB()}---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: lb, labels: { advertise: bgp } }
spec:
  advertisements: [{ advertisementType: Service, service: { addresses: [LoadBalancerIP, ExternalIP] }, selector: { matchLabels: { anycast: "yes" } } }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: gold, labels: { advertise: gold } }
spec:
  advertisements: [{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { tier: gold } }, attributes: { communities: { standard: ["65000:7"] }, localPreference: 200 } }]
${Array.from({ length: N }, (_, i) => `---
apiVersion: v1
kind: Service
metadata: { name: s${i}, namespace: default, labels: { anycast: "yes"${i % 3 === 0 ? ', tier: gold' : ''} } }
spec: { type: LoadBalancer, externalTrafficPolicy: ${i % 2 ? 'Local' : 'Cluster'}, ports: [{ port: 80 }]${i === 5 ? ', externalIPs: ["198.51.100.200"]' : ''} }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: s${i}-a, namespace: default, labels: { kubernetes.io/service-name: s${i} } }
addressType: IPv4
endpoints: [{ addresses: ["198.51.100.${10 + i}"], nodeName: node-${i % 2 ? 'a' : 'b'}, conditions: { ready: true } }]`).join('\n')}
`;

function rng(seed: number) {
  let x = seed;
  return (n: number) => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % n);
}

test('the incremental engine equals the pure function after every random change, and names every changed prefix', () => {
  const base = parseManifests(text, 'f.yaml').snapshot!;
  const rand = rng(42);
  const ipFor = (i: number) => (i % 4 === 3 ? `2001:db8::${i}` : `203.0.113.${i % 7}`); // shared IPs among services
  let snapshot: IntentSnapshot = base;
  let ingress = new Map<string, string[]>(Array.from({ length: N }, (_, i) => [`default/s${i}`, [ipFor(i)]]));
  const node = { name: 'node-a', labels: {} };
  const engine = new BgpDesiredEngine();
  let previous = new Map<string, string>();
  let incremental = 0;
  for (let step = 0; step < 400; step++) {
    const i = rand(N);
    const kind = rand(7);
    const slices = new Map(snapshot.endpointSlices);
    const services = new Map(snapshot.services);
    const key = [...base.endpointSlices.keys()].find((k) => k.endsWith(`/s${i}-a`))!;
    if (kind <= 2) {
      const slice = slices.get(key) ?? base.endpointSlices.get(key)!;
      slices.set(key, { ...slice, endpoints: slice.endpoints.map((e) => ({ ...e, conditions: { ...e.conditions, ready: !(e.conditions.ready ?? true) } })) });
    } else if (kind === 3) {
      if (slices.has(key)) slices.delete(key);
      else slices.set(key, base.endpointSlices.get(key)!);
    } else if (kind === 4) {
      ingress = new Map(ingress).set(`default/s${i}`, rand(3) === 0 ? [] : [ipFor(rand(N))]);
    } else if (kind === 5) {
      const svc = services.get(`default/s${i}`)!;
      services.set(`default/s${i}`, { ...svc, metadata: { ...svc.metadata, labels: rand(2) ? { anycast: 'yes' } : { anycast: 'yes', tier: 'gold' } } });
    } else {
      const svc = services.get(`default/s${i}`)!;
      services.set(`default/s${i}`, { ...svc, spec: { ...svc.spec, externalTrafficPolicy: svc.spec.externalTrafficPolicy === 'Local' ? 'Cluster' : 'Local' } });
    }
    snapshot = { ...snapshot, endpointSlices: slices, services };
    if (step % 97 === 50) snapshot = { ...snapshot, bgpAdvertisements: new Map(snapshot.bgpAdvertisements) }; // same entries: still incremental
    const input: BgpDesiredInput = { snapshot, ingress, node };
    const got = engine.compute(input);
    const want = computeBgpDesired(input);
    const rows = (m: ReadonlyMap<string, unknown>) => [...m].sort(([a], [b]) => (a < b ? -1 : 1));
    assert.deepEqual(rows(got.routes), rows(want.routes), `routes at step ${step} (change ${kind} on s${i})`);
    assert.deepEqual(got.withheld, want.withheld, `withheld at step ${step}`);
    assert.deepEqual(got.attributes, want.attributes, `attributes at step ${step}`);
    const now = new Map([...want.routes].map(([p, r]) => [p, JSON.stringify(r)]));
    if (got.changed) {
      incremental++;
      assert.ok(got.changed.size <= 2 * N, 'only re-evaluated prefixes');
      for (const p of new Set([...now.keys(), ...previous.keys()])) {
        if (now.get(p) !== previous.get(p)) assert.ok(got.changed.has(p), `step ${step}: ${p} changed but was not reported`);
      }
    }
    previous = now;
  }
  assert.ok(incremental > 390, `incremental passes: ${incremental} of 400`);
});
