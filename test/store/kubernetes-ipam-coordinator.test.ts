/**
 * KubeIpamCoordinator's own logic, in memory: an election stand-in with the
 * LeaderElection semantics (`isLeader()` / `leader()`, listeners told after a
 * change) and Service objects as the informer hands them over (raw, with
 * `status.loadBalancer.ingress`). Followers follow the statuses, a new leader
 * imports exactly what they show, `save` is fenced by `isLeader()` and bumps
 * a generation only when the allocations change, and `status()` says who
 * allocates. The same coordinator against a real kube-apiserver, three
 * control planes and a leader killed dead, is kubernetes-ipam.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allocate } from '../../src/controlplane/ipam/allocator.js';
import type { IpamCoordinator } from '../../src/controlplane/ipam/coordinator.js';
import { sameState, type AllocationState } from '../../src/controlplane/ipam/state.js';
import type { KubeObject } from '../../src/intent/sources/kube-client.js';
import { IPAM_ELECTION, KubeIpamCoordinator, statusAllocations } from '../../src/store/kubernetes/ipam.js';
import type { LeaderElection } from '../../src/store/kubernetes/lease-ownership.js';
import { ingressOf, pool, service, snapshot } from '../controlplane/ipam/fixtures.js';

/**
 * The election as one node sees it. `leader()` is the live holder (us
 * included); `isLeader()` is whether that is us and our node Lease is still
 * valid on our own clock. Listeners hear of every change of either, after it.
 * `lapse()` / `renew()` flip our own validity without telling anyone yet, as
 * LeaseOwnership does between two passes.
 */
class MemoryElection implements LeaderElection {
  private holder: string | undefined;
  private valid = true;
  private readonly listeners: (() => void)[] = [];
  notified = 0;

  constructor(
    readonly node: string,
    readonly name = IPAM_ELECTION,
  ) {}

  isLeader(): boolean {
    return this.holder === this.node && this.valid;
  }

  leader(): string | undefined {
    return this.holder === this.node && !this.valid ? undefined : this.holder;
  }

  onChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  /** The election Lease now names `holder` (undefined: free); listeners hear of it when anything changed. */
  set(holder: string | undefined): void {
    const before = this.seen();
    this.holder = holder;
    if (this.seen() !== before) this.notify();
  }

  /** Our node Lease may have lapsed: isLeader() false at once, nobody told yet. */
  lapse(): void {
    this.valid = false;
  }

  renew(): void {
    this.valid = true;
  }

  /** Tells the listeners: a pass announcing a lapse, or a call with nothing changed (LeaderElection promises a call after every change, not only then). */
  notify(): void {
    this.notified++;
    for (const fn of this.listeners) fn();
  }

  private seen(): string {
    return `${this.leader() ?? ''}|${this.isLeader()}`;
  }
}

type Ingress = { ip?: unknown; hostname?: string; ipMode?: string }[];

/** A Service as the informer hands it over; `namespace: null` leaves metadata.namespace out. */
function svc(name: string, ingress: Ingress | undefined, namespace: string | null = 'default'): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, ...(namespace !== null ? { namespace } : {}) },
    spec: { type: 'LoadBalancer' },
    ...(ingress ? { status: { loadBalancer: { ingress } } } : {}),
  };
}

const ips = (...list: string[]): Ingress => list.map((ip) => ({ ip, ipMode: 'VIP' }));

/** A coordinator on node `node` over a mutable list of Services (the informer cache). */
async function setup(node = 'node-a', services: KubeObject[] = []) {
  const election = new MemoryElection(node);
  const cache = { services };
  let reads = 0;
  const coordinator: IpamCoordinator = new KubeIpamCoordinator(election, () => {
    reads++;
    return cache.services;
  });
  const changes: { isLeader: boolean; current: AllocationState }[] = [];
  await coordinator.start(() => changes.push({ isLeader: coordinator.isAllocator(), current: coordinator.current() }));
  return { election, cache, coordinator, changes, reads: () => reads };
}

const state = (allocations: Record<string, string[]>, extra: Partial<AllocationState> = {}): AllocationState => ({ version: 1, allocations, ...extra });

// ---- statusAllocations ----

test('statusAllocations: namespace/name → the ingress IPs in the order the status lists them; nothing else in the state', () => {
  const got = statusAllocations([
    svc('web', ips('192.0.2.10', '2001:db8::10')),
    svc('api', ips('198.51.100.7'), 'shop'),
    // The allocator writes IPv4 first; a status listing IPv6 first is taken as written (the allocator sorts again on import).
    svc('dual', ips('2001:db8::20', '192.0.2.20'), 'shop'),
  ]);
  assert.deepEqual(got, {
    version: 1,
    allocations: { 'default/web': ['192.0.2.10', '2001:db8::10'], 'shop/api': ['198.51.100.7'], 'shop/dual': ['2001:db8::20', '192.0.2.20'] },
  });
  assert.equal(got.generation, undefined, 'statuses carry no generation (0)');
  assert.equal(got.fingerprints, undefined);
  assert.equal(got.held, undefined);
});

test('statusAllocations: a Service without a namespace is in `default`', () => {
  const bare = svc('web', ips('192.0.2.10'), null);
  assert.equal(Object.hasOwn(bare.metadata, 'namespace'), false);
  assert.deepEqual(statusAllocations([bare]).allocations, { 'default/web': ['192.0.2.10'] });
  // The same name in another namespace is another key.
  assert.deepEqual(statusAllocations([bare, svc('web', ips('192.0.2.11'), 'other')]).allocations, {
    'default/web': ['192.0.2.10'],
    'other/web': ['192.0.2.11'],
  });
});

test('statusAllocations: no status, no loadBalancer, no or empty ingress → no entry (not an empty one)', () => {
  const got = statusAllocations([
    svc('none', undefined),
    { ...svc('nolb', undefined), status: {} },
    { ...svc('noingress', undefined), status: { loadBalancer: {} } },
    svc('empty', []),
    svc('web', ips('192.0.2.10')),
  ]);
  assert.deepEqual(got, { version: 1, allocations: { 'default/web': ['192.0.2.10'] } });
  assert.deepEqual(statusAllocations([]), { version: 1, allocations: {} });
  assert.deepEqual(statusAllocations([svc('none', undefined)]), { version: 1, allocations: {} });
});

test('statusAllocations: hostname-only, empty and non-string ips are dropped; a Service left with none has no entry', () => {
  const got = statusAllocations([
    svc('mixed', [{ hostname: 'lb.example' }, { ip: '192.0.2.10' }, { ip: '' }, { ip: 42 }, { ip: null }, { ip: '2001:db8::10' }]),
    svc('hostonly', [{ hostname: 'lb.example' }]),
    svc('blank', [{ ip: '' }]),
    svc('numeric', [{ ip: 7 }]),
  ]);
  assert.deepEqual(got, { version: 1, allocations: { 'default/mixed': ['192.0.2.10', '2001:db8::10'] } });
});

test('statusAllocations reads any iterable once, in order (a generator too)', () => {
  function* gen() {
    yield svc('a', ips('192.0.2.1'));
    yield svc('b', ips('192.0.2.2'));
  }
  assert.deepEqual(Object.keys(statusAllocations(gen()).allocations), ['default/a', 'default/b']);
});

// ---- the coordinator ----

test('the IpamCoordinator surface: kind kubernetes, dispose is harmless', async () => {
  const { coordinator } = await setup();
  assert.equal(coordinator.kind, 'kubernetes');
  coordinator.dispose();
  coordinator.dispose();
});

test('no leader elected: not the allocator, no allocator named, status waits for the election Lease by its name', async () => {
  const { coordinator } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  assert.equal(coordinator.isAllocator(), false);
  assert.equal(coordinator.allocator(), undefined);
  assert.deepEqual(coordinator.status(), { generation: 0, source: 'store', waiting: 'no node holds the herald-ipam Lease yet' });
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'] }));
  assert.equal(await coordinator.save(state({ 'default/web': ['192.0.2.99'] })), false);

  const other = new KubeIpamCoordinator(new MemoryElection('node-a', 'herald-other'), () => []);
  assert.equal(other.status().waiting, 'no node holds the herald-other Lease yet');
});

test('a follower: the state in force is what the statuses say right now, save is refused and changes nothing', async () => {
  const { election, cache, coordinator, changes } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-b');
  assert.equal(changes.length, 1, 'told of the new leader');
  assert.equal(coordinator.isAllocator(), false);
  assert.equal(coordinator.allocator(), 'node-b');
  assert.deepEqual(coordinator.status(), { allocator: 'node-b', generation: 0, source: 'store' });
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'] }));

  // The leader writes a status: the follower's state follows at once (no notification needed: the cache is read each time).
  cache.services = [svc('web', ips('192.0.2.10')), svc('api', ips('192.0.2.11'))];
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] }));

  assert.equal(await coordinator.save(state({ 'default/web': ['192.0.2.99'] })), false, 'fenced: not the leader');
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] }));
  assert.equal(coordinator.status().generation, 0);

  // Another node takes over: still a follower, told, still the statuses.
  election.set('node-c');
  assert.equal(changes.length, 2);
  assert.equal(coordinator.allocator(), 'node-c');
  assert.deepEqual(changes[1], { isLeader: false, current: state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] }) });
});

test('a new leader imports exactly the statuses: the first save of the same allocations is generation 1 and moves nothing', async () => {
  const statuses = [svc('web', ips('192.0.2.10', '2001:db8::10')), svc('api', ips('198.51.100.7'), 'shop')];
  const { election, coordinator, changes } = await setup('node-a', statuses);
  election.set('node-a');
  assert.equal(coordinator.isAllocator(), true);
  assert.equal(coordinator.allocator(), 'node-a');
  assert.deepEqual(changes, [{ isLeader: true, current: statusAllocations(statuses) }], 'told after the change, the statuses already in force');
  assert.deepEqual(coordinator.status(), { allocator: 'node-a', generation: 0, source: 'store' });

  const imported = coordinator.current();
  assert.equal(await coordinator.save({ ...imported, fingerprints: { 'default/web': 'f1', 'shop/api': 'f2' } }), true);
  assert.deepEqual(coordinator.current(), {
    version: 1,
    allocations: { 'default/web': ['192.0.2.10', '2001:db8::10'], 'shop/api': ['198.51.100.7'] },
    fingerprints: { 'default/web': 'f1', 'shop/api': 'f2' },
    generation: 1,
  });
  assert.deepEqual(coordinator.status(), { allocator: 'node-a', generation: 1, source: 'store' });
});

test('the leader: what it saved is in force, whatever the statuses show meanwhile (the status writer lags behind)', async () => {
  const { election, cache, coordinator } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-a');
  const mine = state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] });
  assert.equal(await coordinator.save(mine), true);
  assert.deepEqual(coordinator.current(), { ...mine, generation: 1 });
  // Statuses not written yet, or written by someone else: the leader's own state stays in force.
  cache.services = [svc('web', ips('192.0.2.77'))];
  assert.deepEqual(coordinator.current(), { ...mine, generation: 1 });
  cache.services = [];
  assert.deepEqual(coordinator.current(), { ...mine, generation: 1 });
});

test('save: the generation is the coordinator\'s, bumped only when allocations or fingerprints change', async () => {
  const { election, coordinator } = await setup();
  election.set('node-a');
  const a = state({ 'default/web': ['192.0.2.10'] }, { fingerprints: { 'default/web': 'f1' } });
  // A caller's own generation is not taken: the coordinator numbers what it saves.
  assert.equal(await coordinator.save({ ...a, generation: 41 }), true);
  assert.equal(coordinator.current().generation, 1);
  // The same allocations again (generation and holds aside): nothing to persist, generation stays.
  assert.equal(await coordinator.save({ ...a, generation: 7, held: ['default/web'] }), true);
  assert.deepEqual(coordinator.current(), { ...a, generation: 1 });
  assert.equal(coordinator.status().generation, 1);
  // A fingerprint alone changes: saved, generation 2.
  const b = state({ 'default/web': ['192.0.2.10'] }, { fingerprints: { 'default/web': 'f2' } });
  assert.equal(await coordinator.save(b), true);
  assert.deepEqual(coordinator.current(), { ...b, generation: 2 });
  // An IP changes: generation 3, and the new state replaces the old one whole.
  const c = state({ 'default/api': ['192.0.2.11'] });
  assert.equal(await coordinator.save(c), true);
  assert.deepEqual(coordinator.current(), { ...c, generation: 3 });
  assert.deepEqual(coordinator.status(), { allocator: 'node-a', generation: 3, source: 'store' });
});

test('save does not keep the caller\'s object: a state mutated after saving does not change what is in force', async () => {
  const { election, coordinator } = await setup();
  election.set('node-a');
  const s = { version: 1 as const, allocations: { 'default/web': ['192.0.2.10'] }, generation: 0 };
  await coordinator.save(s);
  s.generation = 99;
  assert.equal(coordinator.current().generation, 1);
});

test('save is fenced by isLeader() on our own clock: a lapsed node Lease refuses at once, before anyone is told', async () => {
  const { election, cache, coordinator, changes } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-a');
  const mine = state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] });
  assert.equal(await coordinator.save(mine), true);
  const told = changes.length;

  election.lapse();
  assert.equal(coordinator.isAllocator(), false);
  assert.equal(await coordinator.save(state({ 'default/web': ['192.0.2.12'] })), false, 'fenced off');
  // Not the allocator by our own clock: the statuses are in force, not what we saved.
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'] }));
  assert.equal(changes.length, told, 'nobody told yet');

  // Renewed in time (no change was ever announced): we lead on, with what we had saved (the refused save numbered nothing).
  election.renew();
  assert.equal(coordinator.isAllocator(), true);
  assert.deepEqual(coordinator.current(), { ...mine, generation: 1 });
  cache.services = [];
  assert.equal(await coordinator.save(mine), true, 'the same allocations: nothing to persist');
  assert.equal(coordinator.status().generation, 1);
});

test('leadership lost: what we saved is dropped, the statuses (the successor\'s) are in force, told after the reset', async () => {
  const { election, cache, coordinator, changes } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-a');
  await coordinator.save(state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] }));
  cache.services = [svc('web', ips('192.0.2.10')), svc('api', ips('192.0.2.11'))];

  election.set('node-b');
  assert.equal(coordinator.isAllocator(), false);
  assert.equal(coordinator.allocator(), 'node-b');
  assert.deepEqual(changes.at(-1), { isLeader: false, current: state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] }) });
  cache.services = [svc('web', ips('192.0.2.10'))];
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'] }), 'the successor deleted api: we follow');
  assert.equal(await coordinator.save(state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] })), false);
  // status() reports the generation of the state in force: the statuses carry none.
  assert.deepEqual(coordinator.status(), { allocator: 'node-b', generation: 0, source: 'store' });
});

test('leadership regained: the old saved state is not revived, the statuses are imported again; generations keep counting up', async () => {
  const { election, cache, coordinator } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-a');
  const first = state({ 'default/web': ['192.0.2.10'], 'default/old': ['192.0.2.11'] });
  await coordinator.save(first);
  election.set('node-b');
  // Meanwhile node-b allocated differently and wrote it.
  cache.services = [svc('web', ips('192.0.2.10')), svc('new', ips('192.0.2.11'))];
  election.set('node-a');
  assert.equal(coordinator.isAllocator(), true);
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'], 'default/new': ['192.0.2.11'] }), 'node-b\'s allocation, not our old one');
  assert.equal(coordinator.status().generation, 0, 'regained, nothing saved yet: the statuses are in force');
  // Saving the very allocation we saved before is a change again (it is not what is in force): a new generation.
  assert.equal(await coordinator.save(first), true);
  assert.deepEqual(coordinator.current(), { ...first, generation: 2 });
  assert.equal(coordinator.status().generation, 2);
});

test('leadership lost with nobody else elected yet: status waits, the statuses are in force', async () => {
  const { election, coordinator } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-a');
  await coordinator.save(state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] }));
  election.set(undefined);
  assert.equal(coordinator.isAllocator(), false);
  assert.equal(coordinator.allocator(), undefined);
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'] }));
  const { generation: _g, ...rest } = coordinator.status();
  assert.deepEqual(rest, { source: 'store', waiting: 'no node holds the herald-ipam Lease yet' });
});

test('a notification that leaves us leader keeps what we saved; a lapse announced later drops it', async () => {
  const { election, coordinator, changes } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-a');
  const mine = state({ 'default/web': ['192.0.2.10'], 'default/api': ['192.0.2.11'] });
  await coordinator.save(mine);
  // Told again with nothing changed for us (the interface promises a call after every change, not only then): still ours.
  election.notify();
  election.notify();
  assert.equal(changes.length, 3);
  assert.deepEqual(coordinator.current(), { ...mine, generation: 1 });
  assert.deepEqual(changes.at(-1), { isLeader: true, current: { ...mine, generation: 1 } });

  // Our node Lease lapsed and the next pass announced it: dropped, even if we renew right after.
  election.lapse();
  election.notify();
  assert.equal(coordinator.isAllocator(), false);
  assert.equal(coordinator.allocator(), undefined);
  election.renew();
  election.notify();
  assert.deepEqual(coordinator.current(), state({ 'default/web': ['192.0.2.10'] }), 're-imported from the statuses');
});

test('a follower is told of every leader change; its callback runs after isAllocator() already says so', async () => {
  const { election, changes } = await setup('node-a');
  election.set('node-b');
  election.set('node-a');
  election.set(undefined);
  election.set('node-c');
  assert.deepEqual(
    changes.map((c) => c.isLeader),
    [false, true, false, false],
  );
});

test('start registers once: a callback per notification, none before start', async () => {
  const election = new MemoryElection('node-a');
  const coordinator = new KubeIpamCoordinator(election, () => []);
  election.set('node-b');
  let calls = 0;
  await coordinator.start(() => calls++);
  assert.equal(calls, 0, 'no callback for what happened before start');
  election.set('node-a');
  assert.equal(calls, 1);
});

test('the informer cache is read for each current() that needs it, not copied once', async () => {
  const { election, coordinator, reads } = await setup('node-a', [svc('web', ips('192.0.2.10'))]);
  election.set('node-b');
  const before = reads();
  coordinator.current();
  coordinator.current();
  assert.equal(reads() - before, 2);
  election.set('node-a');
  await coordinator.save(state({ 'default/web': ['192.0.2.10'] }));
  const leading = reads();
  coordinator.current();
  assert.equal(reads(), leading, 'a leader with a saved state does not read the statuses');
});

// ---- with the real allocator, as the control plane drives it ----

/** One control-plane pass (controller.ts runIpam): allocate from current(), the allocator saves what changed. */
async function pass(coordinator: IpamCoordinator, objects: object[]): Promise<{ ingress: Record<string, readonly string[]>; saved: boolean | undefined }> {
  const persisted = coordinator.current();
  const result = allocate(snapshot(pool('p', { blocks: ['192.0.2.0/24', '2001:db8::/120'] }), ...objects), persisted);
  let saved: boolean | undefined;
  if (coordinator.isAllocator() && !sameState(result.state, persisted)) saved = await coordinator.save(result.state);
  return { ingress: ingressOf(result), saved };
}

test('with the allocator: a new leader keeps every IP its predecessor wrote, even listed IPv6 first, and allocates only the new Service', async () => {
  // What the predecessor wrote (one status listed IPv6 first: written by hand, or by an older writer).
  const written = [
    service('web', { ingress: ['192.0.2.77'] }),
    service('dual', { families: ['IPv4', 'IPv6'], policy: 'RequireDualStack', ingress: ['2001:db8::9', '192.0.2.9'] }),
    service('api', { namespace: 'shop', ingress: ['192.0.2.200'] }),
  ];
  const fresh = service('new');
  const objects = [...written, fresh];
  const { election, coordinator } = await setup('node-a', objects as KubeObject[]);
  election.set('node-a');
  const r = await pass(coordinator, objects);
  assert.equal(r.saved, true);
  assert.deepEqual(r.ingress, {
    'default/web': ['192.0.2.77'],
    'default/dual': ['192.0.2.9', '2001:db8::9'],
    'shop/api': ['192.0.2.200'],
    'default/new': ['192.0.2.0'],
  });
  assert.deepEqual(coordinator.current().allocations, r.ingress);
  assert.equal(coordinator.current().generation, 1);
  // The next pass changes no IP: the allocator's state has no generation, so the control plane saves again,
  // and the coordinator finds nothing to persist (the same generation).
  const again = await pass(coordinator, objects);
  assert.equal(again.saved, true);
  assert.deepEqual(again.ingress, r.ingress);
  assert.equal(coordinator.status().generation, 1);
});

test('with the allocator: a follower announces only what the statuses show (a Service without one has no IP yet)', async () => {
  const objects = [service('web', { ingress: ['192.0.2.77'] }), service('new')];
  const { election, coordinator } = await setup('node-a', objects as KubeObject[]);
  election.set('node-b');
  const persisted = coordinator.current();
  assert.deepEqual(persisted.allocations, { 'default/web': ['192.0.2.77'] });
  const r = await pass(coordinator, objects);
  assert.equal(r.saved, undefined, 'a follower never saves');
});
