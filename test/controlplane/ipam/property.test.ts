/**
 * Property test: random sequences of pool and Service changes and restarts,
 * with the invariants checked after every step by an oracle written
 * independently of the allocator (ipaddr.js for containment, the Services'
 * raw manifests for compatibility):
 *   - no IP is held by two incompatible Services;
 *   - every IP lies in a pool whose selector matches its Service;
 *   - a new IP comes from a pool that is neither disabled nor conflicting;
 *   - a Service whose manifest and whose IPs' pools did not change keeps its
 *     IPs (exactly, if it was satisfied), across restarts and other changes;
 *   - same inputs give the same output, also through a JSON round trip.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import { IncrementalAllocator, type IncrementalStats } from '../../../src/controlplane/ipam/incremental.js';
import type { AllocationState } from '../../../src/controlplane/ipam/state.js';
import type { IpamResult } from '../../../src/controlplane/ipam/types.js';
import { matchesSelector, serviceSelectorLabels, type IntentSnapshot, type ServiceManifest } from '../../../src/intent/index.js';
import { pool, service, snapshot, type BlockSpec, type PoolSpec, type ServiceSpec } from './fixtures.js';

const BLOCKS: readonly BlockSpec[] = [
  '192.0.2.0/29',
  '192.0.2.8/29',
  '192.0.2.16/28',
  { start: '192.0.2.40', stop: '192.0.2.49' },
  '192.0.2.0/28', // overlaps the first two: PoolConflict
  '198.51.100.0/30',
  { start: '203.0.113.1' },
  '2001:db8::/126',
  { start: '2001:db8::10', stop: '2001:db8::15' },
  '2001:db8::/124', // overlaps both IPv6 blocks
];
const IPS = ['192.0.2.1', '192.0.2.9', '192.0.2.17', '192.0.2.45', '198.51.100.2', '203.0.113.1', '203.0.113.200', '2001:db8::1', '2001:db8::14'];
const time = (i: number | undefined): string | undefined => (i === undefined ? undefined : `2024-01-0${i + 1}T00:00:00Z`);

const poolArb = fc
  .record({
    blocks: fc.uniqueArray(fc.integer({ min: 0, max: BLOCKS.length - 1 }), { minLength: 1, maxLength: 3 }),
    tier: fc.constantFrom(undefined, undefined, undefined, 'web', 'db'),
    disabled: fc.constantFrom(false, false, false, false, true),
    no: fc.boolean(),
    created: fc.option(fc.integer({ min: 0, max: 4 }), { nil: undefined }),
  })
  .map(
    (r): PoolSpec => ({
      blocks: r.blocks.map((i) => BLOCKS[i] as BlockSpec),
      ...(r.tier ? { selector: { matchLabels: { tier: r.tier } } } : {}),
      ...(r.disabled ? { disabled: true } : {}),
      ...(r.no ? { allowFirstLastIPs: 'No' as const } : {}),
      ...(time(r.created) ? { created: time(r.created) } : {}),
    }),
  );

const familyArb = fc.constantFrom<Pick<ServiceSpec, 'families' | 'policy'>>(
  {},
  {},
  {},
  { families: ['IPv6'], policy: 'SingleStack' },
  { policy: 'PreferDualStack' },
  { policy: 'RequireDualStack' },
);

const serviceArb = fc
  .record({
    namespace: fc.constantFrom('a', 'a', 'a', 'b'),
    tier: fc.constantFrom(undefined, 'web', 'db'),
    ports: fc.uniqueArray(fc.constantFrom(53, 80, 443), { minLength: 1, maxLength: 2 }),
    udp: fc.boolean(),
    sharingKey: fc.constantFrom(undefined, 'k1', 'k1', 'k2'),
    crossNamespace: fc.option(fc.constantFrom('*', 'a', 'b'), { nil: undefined }),
    ips: fc.oneof(
      { arbitrary: fc.constant(undefined), weight: 2 },
      { arbitrary: fc.uniqueArray(fc.constantFrom(...IPS), { minLength: 1, maxLength: 2 }), weight: 1 },
    ),
    family: familyArb,
    etp: fc.constantFrom<'Cluster' | 'Local'>('Cluster', 'Cluster', 'Cluster', 'Local'),
    podSelector: fc.constantFrom(undefined, 'x', 'y'),
    lbClass: fc.constantFrom(undefined, undefined, undefined, 'io.cilium/l2-announcer', 'example.com/other'),
    created: fc.option(fc.integer({ min: 0, max: 4 }), { nil: undefined }),
    ingress: fc.option(fc.uniqueArray(fc.constantFrom(...IPS), { maxLength: 2 }), { freq: 2, nil: undefined }),
  })
  .map(
    (r): ServiceSpec => ({
      namespace: r.namespace,
      ...(r.tier ? { labels: { tier: r.tier } } : {}),
      ports: r.ports.map((port) => ({ port, protocol: r.udp ? 'UDP' : 'TCP' })),
      ...(r.sharingKey ? { sharingKey: r.sharingKey } : {}),
      ...(r.crossNamespace ? { crossNamespace: r.crossNamespace } : {}),
      ...(r.ips ? { ips: r.ips.join(',') } : {}),
      ...r.family,
      etp: r.etp,
      ...(r.podSelector ? { selector: { app: r.podSelector } } : {}),
      ...(r.lbClass ? { lbClass: r.lbClass } : {}),
      ...(time(r.created) ? { created: time(r.created) } : {}),
      ...(r.ingress ? { ingress: r.ingress } : {}),
    }),
  );

type Op =
  | { op: 'putPool'; name: string; spec: PoolSpec }
  | { op: 'removePool'; name: string }
  | { op: 'disablePool'; name: string; disabled: boolean }
  | { op: 'putService'; name: string; spec: ServiceSpec }
  | { op: 'editService'; name: string; patch: Partial<ServiceSpec> }
  | { op: 'removeService'; name: string }
  | { op: 'restart' };

const poolName = fc.constantFrom('p0', 'p1', 'p2');
const svcName = fc.constantFrom('s0', 's1', 's2', 's3', 's4');
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ op: fc.constant('putPool' as const), name: poolName, spec: poolArb }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('removePool' as const), name: poolName }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('disablePool' as const), name: poolName, disabled: fc.boolean() }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('putService' as const), name: svcName, spec: serviceArb }), weight: 5 },
  {
    arbitrary: fc.record({
      op: fc.constant('editService' as const),
      name: svcName,
      patch: serviceArb.chain((s) => fc.subarray(Object.keys(s) as (keyof ServiceSpec)[], { minLength: 1 }).map((keys) => Object.fromEntries(keys.map((k) => [k, s[k]])))),
    }),
    weight: 2,
  },
  { arbitrary: fc.record({ op: fc.constant('removeService' as const), name: svcName }), weight: 1 },
  { arbitrary: fc.constant({ op: 'restart' as const }), weight: 2 },
);

// ---- the oracle, independent of the allocator -------------------------------------------

function blockContains(block: BlockSpec, ip: string): boolean {
  const addr = ipaddr.parse(ip);
  if (typeof block === 'string') {
    const [net, bits] = ipaddr.parseCIDR(block);
    return addr.kind() === net.kind() && addr.match(net, bits);
  }
  const start = ipaddr.parse(block.start);
  const stop = ipaddr.parse(block.stop ?? block.start);
  if (addr.kind() !== start.kind()) return false;
  const cmp = (a: number[], b: number[]): number => a.reduce((acc, x, i) => acc || x - (b[i] ?? 0), 0);
  const bytes = addr.toByteArray();
  return cmp(bytes, start.toByteArray()) >= 0 && cmp(bytes, stop.toByteArray()) <= 0;
}

function poolsContaining(snap: IntentSnapshot, ip: string): string[] {
  return [...snap.pools.values()]
    .filter((p) => p.spec.blocks.some((b) => blockContains(b.type === 'cidr' ? b.cidr : { start: b.start, stop: b.stop }, ip)))
    .map((p) => p.metadata.name);
}

function compatible(a: ServiceManifest, b: ServiceManifest): boolean {
  const key = (s: ServiceManifest): string | undefined => s.metadata.annotations['lbipam.cilium.io/sharing-key'];
  const cross = (s: ServiceManifest): string[] => (s.metadata.annotations['lbipam.cilium.io/sharing-cross-namespace'] ?? '').split(',');
  if (!key(a) || key(a) !== key(b)) return false;
  const na = a.metadata.namespace;
  const nb = b.metadata.namespace;
  if (na !== nb && !((cross(a).includes(nb) || cross(a).includes('*')) && (cross(b).includes(na) || cross(b).includes('*')))) return false;
  // Same port and protocol conflicts; the same port with another protocol may share (Cilium ≥ 1.17).
  if (a.spec.ports.some((p) => b.spec.ports.some((q) => q.port === p.port && q.protocol === p.protocol))) return false;
  if (a.spec.externalTrafficPolicy !== b.spec.externalTrafficPolicy) return false;
  if (a.spec.externalTrafficPolicy === 'Local') {
    const sa = JSON.stringify(a.spec.selector);
    const sb = JSON.stringify(b.spec.selector);
    const permit = (s: ServiceManifest): boolean => s.metadata.annotations['lbipam.cilium.io/sharing-permit-different-pods'] === 'true';
    if (sa === '{}' || sb === '{}' || (sa !== sb && !(permit(a) && permit(b)))) return false;
  }
  return true;
}

interface World {
  pools: Map<string, PoolSpec>;
  services: Map<string, ServiceSpec>;
}

function build(world: World, reversed = false): IntentSnapshot {
  const objects = [...[...world.pools].map(([n, s]) => pool(n, s)), ...[...world.services].map(([n, s]) => service(n, s))];
  return snapshot(...(reversed ? objects.reverse() : objects));
}

interface Step {
  readonly world: World;
  readonly snap: IntentSnapshot;
  readonly result: IpamResult;
}

/**
 * `fed` is the state the run started from; `prev` the previous step, when it
 * allocated (was not dormant).
 */
function checkStep(snap: IntentSnapshot, r: IpamResult, fed: AllocationState | undefined, prev: Step | undefined, world: World): void {
  const holders = new Map<string, string[]>();
  for (const [key, svc] of r.services) {
    const manifest = snap.services.get(key);
    assert.ok(manifest);
    assert.equal(svc.condition.status === 'True', svc.condition.reason === 'satisfied');
    if (svc.condition.status === 'True') assert.ok(svc.ingress.length > 0, `${key} satisfied without an IP`);
    assert.deepEqual(r.state.allocations[key], svc.ingress);
    for (const ip of svc.ingress) {
      holders.set(ip, [...(holders.get(ip) ?? []), key]);
      const labels = serviceSelectorLabels(manifest);
      const matching = poolsContaining(snap, ip).filter((n) => matchesSelector(snap.pools.get(n)?.spec.serviceSelector, labels));
      assert.ok(matching.length > 0, `${key} holds ${ip} outside every pool that selects it`);
      // What the allocator was told the Service had: the state, else its status.
      const had = fed && key in fed.allocations ? fed.allocations[key] : manifest.status.loadBalancer.ingress.map((i) => i.ip);
      if (!had?.includes(ip)) {
        const usable = matching.some((n) => !r.pools.get(n)?.disabled && !r.pools.get(n)?.conflicting);
        assert.ok(usable, `${key} got new IP ${ip} from a disabled or conflicting pool`);
      }
    }
  }
  assert.deepEqual(new Map([...holders].map(([ip, ks]) => [ip, ks.sort()])), new Map(r.ipOwners));
  for (const [ip, keys] of holders) {
    for (let i = 0; i < keys.length; i++) {
      for (let j = i + 1; j < keys.length; j++) {
        const a = snap.services.get(keys[i] as string);
        const b = snap.services.get(keys[j] as string);
        assert.ok(a && b && compatible(a, b), `${ip} held by incompatible ${keys[i]} and ${keys[j]}`);
      }
    }
  }
  for (const [, p] of r.pools) {
    assert.equal(p.used + p.available, p.total);
    assert.deepEqual(p.conditions.slice(1).map((c) => c.message), [p.total, p.available, p.used].map(String));
  }
  if (!prev) return;
  // Stability: same manifest, and every pool that contained its IPs is unchanged.
  for (const [key, before] of prev.result.services) {
    const name = key.split('/')[1] as string;
    const spec = world.services.get(name);
    if (!spec || JSON.stringify(spec) !== JSON.stringify(prev.world.services.get(name))) continue;
    const pools = new Set(before.ingress.flatMap((ip) => poolsContaining(prev.snap, ip)));
    if ([...pools].some((n) => JSON.stringify(world.pools.get(n)) !== JSON.stringify(prev.world.pools.get(n)))) continue;
    const after = r.services.get(key)?.ingress ?? [];
    for (const ip of before.ingress) assert.ok(after.includes(ip), `${key} lost ${ip}: ${JSON.stringify(before.ingress)} → ${JSON.stringify(after)}`);
    if (before.condition.status === 'True' && spec.policy !== 'PreferDualStack') assert.deepEqual(after, before.ingress, `${key} changed`);
  }
}

const jsonState = (s: AllocationState | undefined): AllocationState | undefined =>
  s === undefined ? undefined : (JSON.parse(JSON.stringify(s)) as AllocationState);

function apply(world: World, op: Op): void {
  switch (op.op) {
    case 'putPool':
      world.pools.set(op.name, op.spec);
      break;
    case 'removePool':
      world.pools.delete(op.name);
      break;
    case 'disablePool': {
      const p = world.pools.get(op.name);
      if (p) world.pools.set(op.name, { ...p, disabled: op.disabled });
      break;
    }
    case 'putService':
      world.services.set(op.name, op.spec);
      break;
    case 'editService': {
      const s = world.services.get(op.name);
      if (s) world.services.set(op.name, { ...s, ...op.patch });
      break;
    }
    case 'removeService':
      world.services.delete(op.name);
      break;
    case 'restart':
      break;
  }
}

const copy = (w: World): World => ({ pools: new Map(w.pools), services: new Map(w.services) });

/** Runs the operations, each followed by an allocation from the state persisted (as JSON) by the one before. */
function run(world: World, ops: readonly Op[]): void {
  let state: AllocationState | undefined;
  let prev: Step | undefined;
  // The first step allocates the initial world from scratch.
  for (const op of [{ op: 'restart' } as const, ...ops]) {
    apply(world, op);
    const snap = build(world);
    const r = allocate(snap, jsonState(state));
    // Deterministic: the same inputs give the same output, whatever the manifest order.
    assert.deepEqual(allocate(build(world, true), jsonState(state)), r);
    if (op.op === 'restart' && prev && !prev.result.dormant) assert.deepEqual(r, prev.result, 'a restart changed the result');
    if (r.dormant) assert.equal(r.services.size, 0);
    else checkStep(snap, r, state, prev && !prev.result.dormant ? prev : undefined, world);
    state = r.state;
    prev = { world: copy(world), snap, result: r };
  }
}

describe('LB-IPAM property: random operation sequences', () => {
  it('keeps its invariants after every step', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.tuple(poolName, poolArb), { selector: ([n]) => n, minLength: 1, maxLength: 3 }),
        fc.uniqueArray(fc.tuple(svcName, serviceArb), { selector: ([n]) => n, minLength: 2, maxLength: 5 }),
        fc.array(opArb, { maxLength: 20 }),
        (pools, services, ops) => run({ pools: new Map(pools), services: new Map(services) }, ops),
      ),
      { numRuns: 200 },
    );
  });
});

// ---- incremental = full ------------------------------------------------------------------

/** A result as plain data, Maps as entry lists in iteration order (so order differences count too). */
function plain(r: IpamResult): unknown {
  return JSON.parse(JSON.stringify(r, (_, v: unknown) => (v instanceof Map ? [...v] : typeof v === 'bigint' ? `${v}n` : v)));
}

type FeedOp =
  | Op
  /** A status write: the Service's status ingress becomes what the last result gave it (or nothing). */
  | { op: 'status'; name: string; clear: boolean }
  /** What the next run is fed: the last state as it is (the leader), through JSON (a store), the statuses (a follower: no fingerprints), or nothing. */
  | { op: 'feed'; how: 'same' | 'json' | 'status' | 'empty' }
  | { op: 'classes'; lbClasses: readonly string[] | undefined };

const feedOpArb: fc.Arbitrary<FeedOp> = fc.oneof(
  { arbitrary: opArb, weight: 10 },
  { arbitrary: fc.record({ op: fc.constant('status' as const), name: svcName, clear: fc.boolean() }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('feed' as const), how: fc.constantFrom('same' as const, 'same' as const, 'json' as const, 'status' as const, 'empty' as const) }), weight: 2 },
  { arbitrary: fc.record({ op: fc.constant('classes' as const), lbClasses: fc.constantFrom(undefined, ['io.cilium/l2-announcer'], ['example.com/other', 'io.cilium/l2-announcer']) }), weight: 1 },
);

/**
 * The snapshot of `world`, reusing the previous snapshot's manifest objects
 * for Services and pools whose spec did not change (as the Kubernetes
 * source does), so the incremental allocator meets both the same objects
 * and re-parsed equal ones.
 */
function buildReusing(world: World, before: { snap: IntentSnapshot; world: World } | undefined, reuse: boolean): IntentSnapshot {
  const snap = build(world);
  if (!before || !reuse) return snap;
  const keep = <T>(fresh: ReadonlyMap<string, T>, old: ReadonlyMap<string, T>, same: (key: string) => boolean): Map<string, T> =>
    new Map([...fresh].map(([k, v]) => [k, same(k) && old.has(k) ? (old.get(k) as T) : v]));
  const nameOf = (key: string): string => key.split('/').pop() as string;
  return {
    ...snap,
    services: keep(snap.services, before.snap.services, (k) => JSON.stringify(world.services.get(nameOf(k))) === JSON.stringify(before.world.services.get(nameOf(k)))),
    pools: keep(snap.pools, before.snap.pools, (k) => JSON.stringify(world.pools.get(nameOf(k))) === JSON.stringify(before.world.pools.get(nameOf(k)))),
  };
}

function runIncremental(world: World, ops: readonly FeedOp[], reuse: boolean, stats: IncrementalStats): void {
  const inc = new IncrementalAllocator();
  let state: AllocationState | undefined;
  let last: IpamResult | undefined;
  let before: { snap: IntentSnapshot; world: World } | undefined;
  let feed: 'same' | 'json' | 'status' | 'empty' = 'same';
  let classes: { lbClasses?: readonly string[] } = {};
  for (const op of [{ op: 'restart' } as const, ...ops]) {
    if (op.op === 'feed') feed = op.how;
    else if (op.op === 'classes') classes = op.lbClasses ? { lbClasses: op.lbClasses } : {};
    else if (op.op === 'status') {
      const spec = world.services.get(op.name);
      const got = last?.services.get(`${spec?.namespace ?? 'default'}/${op.name}`)?.ingress;
      if (spec) world.services.set(op.name, { ...spec, ingress: op.clear || !got ? [] : [...got] });
    } else apply(world, op);
    const snap = buildReusing(world, before, reuse);
    let fed: AllocationState | undefined;
    if (state !== undefined) {
      if (feed === 'same') fed = state;
      else if (feed === 'json') fed = jsonState(state);
      else if (feed === 'status') fed = { version: 1, allocations: Object.fromEntries(Object.entries(state.allocations).filter(([, ips]) => ips.length > 0)) };
      else fed = undefined;
    }
    const full = allocate(snap, fed, classes);
    const got = inc.allocate(snap, fed, classes);
    assert.deepEqual(plain(got), plain(full), `incremental ≠ full after ${JSON.stringify(op)} (fed ${feed})`);
    state = got.state;
    last = got;
    before = { snap, world: copy(world) };
  }
  stats.full += inc.stats.full;
  stats.incremental += inc.stats.incremental;
  stats.reconsidered += inc.stats.reconsidered;
}

describe('LB-IPAM incremental: the same result as a full run', () => {
  it('on random sequences of Service, status, state, class and pool changes', () => {
    const stats: IncrementalStats = { full: 0, incremental: 0, reconsidered: 0 };
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.tuple(poolName, poolArb), { selector: ([n]) => n, minLength: 1, maxLength: 3 }),
        fc.uniqueArray(fc.tuple(svcName, serviceArb), { selector: ([n]) => n, minLength: 2, maxLength: 5 }),
        fc.array(feedOpArb, { maxLength: 30 }),
        fc.constantFrom(true, true, true, false),
        (pools, services, ops, reuse) => runIncremental({ pools: new Map(pools), services: new Map(services) }, ops, reuse, stats),
      ),
      { numRuns: 300 },
    );
    // The incremental path really ran (not only full runs: the first run, pool and class changes, re-parsed pools).
    assert.ok(stats.incremental >= 300, JSON.stringify(stats));
  });
});
