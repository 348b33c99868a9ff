/**
 * The control plane's edges, beyond the happy path of controller.test.ts:
 * before the first snapshot (the pinned table is left alone, not marked
 * initialized), a node that is not (or no longer) the LB-IPAM allocator,
 * --lb-classes, the pacing of recomputes, failed updates, dispose, what the
 * callbacks and status are given, merged origins and minimal table writes,
 * and what is logged (and re-logged) for operators.
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { StateDB } from '../../src/core/statedb/index.js';
import { ControlPlane, type ControlPlaneDeps } from '../../src/controlplane/controller.js';
import type { IpamCoordinator, IpamStateStatus } from '../../src/controlplane/ipam/coordinator.js';
import { EMPTY_ALLOCATION_STATE, type AllocationState } from '../../src/controlplane/ipam/state.js';
import type { StaticAnnouncement } from '../../src/controlplane/static-announcements.js';
import { l2AnnounceTable } from '../../src/datapath/tables/l2-announce.js';
import { formatErrors, parseManifests, type IntentSnapshot } from '../../src/intent/index.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger, type LogLine } from '../helpers/recording-logger.js';
import { ScriptedOwnership } from '../helpers/scripted-ownership.js';

const WEB = '198.51.100.20';
const OTHER = '198.51.100.25';

const POOL = `
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: pool }
spec:
  blocks: [{ cidr: 198.51.100.16/28 }, { cidr: "2001:db8:100::/124" }]
`;

const service = (name: string, ip?: string, extra = '') => `---
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default${ip ? `, annotations: { lbipam.cilium.io/ips: "${ip}" }` : ''} }
spec: { type: LoadBalancer, ports: [{ port: 80 }]${extra} }
`;

const policy = (name: string, spec = '') => `---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: ${name} }
spec:
  loadBalancerIPs: true
${spec}
`;

const BASE = POOL + policy('all') + service('web', WEB);

function snapshot(manifests: string): IntentSnapshot {
  const load = parseManifests(manifests, 'test.yaml');
  assert.equal(formatErrors(load.errors), '');
  return load.snapshot!;
}


/** An allocation store whose role the test sets: the allocator, a follower of node-b, or an allocator fenced off (saves refused). */
class ScriptedIpam implements IpamCoordinator {
  readonly kind = 'local' as const;
  role: 'allocator' | 'follower' | 'fenced' = 'allocator';
  state: AllocationState = EMPTY_ALLOCATION_STATE;
  saves = 0;
  private onChange: () => void = () => {};
  async start(onChange: () => void): Promise<void> {
    this.onChange = onChange;
  }
  isAllocator(): boolean {
    return this.role !== 'follower';
  }
  current(): AllocationState {
    return this.state;
  }
  async save(state: AllocationState): Promise<boolean> {
    this.saves++;
    if (this.role === 'fenced') return false;
    this.state = state;
    return true;
  }
  allocator(): string {
    return this.role === 'allocator' ? 'node-a' : 'node-b';
  }
  status(): IpamStateStatus {
    return { allocator: this.allocator(), generation: this.state.generation ?? 0, source: 'file' };
  }
  /** Another node persisted `allocations`: the coordinator tells the control plane. */
  persistedElsewhere(allocations: Record<string, string[]>): void {
    this.state = { ...this.state, allocations };
    this.onChange();
  }
  dispose(): void {}
}

const disposers: Array<() => void> = [];
afterEach(() => {
  for (const d of disposers.splice(0)) d();
});

/** Lets promise chains and queued updates run out (no timers: the clock is manual). */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

interface Options {
  db?: StateDB;
  links?: string[];
  statics?: StaticAnnouncement[];
  role?: ScriptedIpam['role'];
  start?: boolean;
  extra?: Partial<ControlPlaneDeps>;
}

function build(opts: Options = {}) {
  const clock = new ManualClock();
  const db = opts.db ?? new StateDB([l2AnnounceTable]);
  const links = new FakeLinks();
  for (const name of opts.links ?? ['eth0']) links.add(name);
  const ownership = new ScriptedOwnership(clock);
  const ipam = new ScriptedIpam();
  ipam.role = opts.role ?? 'allocator';
  const lines: LogLine[] = [];
  const cp = new ControlPlane({
    db,
    nodeName: 'node-a',
    links,
    ownership,
    ipam,
    staticAnnouncements: opts.statics ?? [],
    clock,
    log: recordingLogger(lines),
    ...opts.extra,
  });
  disposers.push(() => cp.dispose());
  const rows = () => db.readTxn().list(l2AnnounceTable).map((r) => `${r.ip}@${r.iface} ${r.origins.join(',')}`).sort();
  const logged = (level: LogLine['level'], fragment: string) => lines.filter((l) => l.level === level && l.msg.includes(fragment));
  return { clock, db, links, ownership, ipam, lines, cp, rows, logged, load: (m: string) => cp.setSnapshot(snapshot(m)) };
}

async function setup(manifests = BASE, opts: Options = {}) {
  const s = build(opts);
  await s.cp.start();
  await s.load(manifests);
  return s;
}

test('before the first snapshot the pinned table is left alone: not loaded, no warnings, rows kept on an ownership change, table not marked initialized', async () => {
  const db = new StateDB([l2AnnounceTable]);
  db.update([l2AnnounceTable], (txn) => txn.insert(l2AnnounceTable, { ip: WEB, iface: 'eth0', origins: ['service:default/web'] }));
  const s = build({ db });
  assert.deepEqual(db.pendingInitializers(l2AnnounceTable), ['control-plane'], 'registered by name at construction, before any reconciler reads the table');
  await s.cp.start();
  const st = s.cp.status();
  assert.equal(st.snapshotLoaded, false);
  assert.deepEqual(st.policyWarnings, []);
  assert.deepEqual(st.candidates, []);
  await s.ownership.own(); // the backend reports it owns nothing (yet)
  await s.cp.idle();
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web`], 'the previous run\'s row stays until intent is in');
  assert.deepEqual(db.pendingInitializers(l2AnnounceTable), ['control-plane'], 'not initialized: the reconciler must not prune yet');
  assert.equal(s.cp.status().lastError, undefined);
});

test('the first table write marks the table initialized (the reconciler may prune from then on)', async () => {
  const s = await setup();
  assert.deepEqual(s.db.pendingInitializers(l2AnnounceTable), []);
  assert.equal(s.db.isInitialized(l2AnnounceTable), true);
  assert.equal(s.cp.status().snapshotLoaded, true);
});

test('a snapshot given before start() is computed with no links known: nothing is a candidate yet', async () => {
  const s = build();
  await s.load(POOL + policy('uplink', '  interfaces: ["^eth0$"]') + service('web', WEB));
  assert.equal(s.cp.status().lastError, undefined);
  assert.deepEqual(s.cp.status().candidates, []);
  assert.deepEqual([...s.ownership.candidates.keys()], []);
  assert.deepEqual(s.cp.status().policyWarnings.map((w) => [w.policy, w.seen]), [['uplink', []]], 'no interface seen yet');
});

test('links changing before the first snapshot: candidates are recomputed from nothing, without error and without touching the table', async () => {
  const told: Array<ReadonlyMap<string, readonly string[]>> = [];
  const s = build({ statics: [{ ip: OTHER, interface: 'eth0' }], extra: { onCandidates: (w) => told.push(w) } });
  await s.cp.start();
  s.cp.linksChanged();
  s.clock.advance(50);
  await s.cp.idle();
  assert.equal(s.cp.status().lastError, undefined);
  assert.deepEqual(told.map((w) => [...w]), [[[OTHER, ['eth0']]]], 'the static announcement is a candidate on its own');
  assert.deepEqual(s.rows(), []);
  assert.deepEqual(s.db.pendingInitializers(l2AnnounceTable), ['control-plane']);
});

test('idle() resolves only once a queued update (a links re-read) has been applied', async () => {
  const s = await setup(POOL + policy('all', '  interfaces: ["^eth1$"]') + service('web', WEB), { links: ['eth0'] });
  assert.deepEqual(s.cp.status().candidates, []);
  s.links.add('eth1');
  s.cp.linksChanged();
  s.cp.linksChanged(); // debounced: the first timer is replaced
  s.clock.advance(50);
  await s.cp.idle();
  assert.deepEqual(s.cp.status().candidates.map((c) => [c.ip, c.interfaces]), [[WEB, ['eth1']]]);
});

test('status reports the allocator and the candidates', async () => {
  const s = await setup();
  const st = s.cp.status();
  assert.equal(st.allocator, 'node-a');
  assert.deepEqual(st.candidates.map((c) => [c.ip, c.interfaces, c.services]), [[WEB, ['eth0'], ['default/web']]]);
  assert.deepEqual(st.policyWarnings, []);
  assert.equal('lastError' in st, false);
});

test('a node that is not the allocator saves nothing and announces only what the allocator persisted; a change of the persisted state recomputes with the snapshot in force', async () => {
  const s = await setup(BASE, { role: 'follower' });
  assert.equal(s.ipam.saves, 0, 'only the allocator persists');
  assert.deepEqual(s.cp.status().candidates, [], 'not persisted yet: not announced');
  assert.equal(s.cp.status().ipam!.services.get('default/web')!.condition.reason, 'waiting_for_allocator');
  assert.equal(s.cp.status().allocator, 'node-b');
  const before = s.cp.stats.recomputes;

  s.ipam.persistedElsewhere({ 'default/web': [WEB] });
  await flush();
  await s.cp.idle();
  assert.equal(s.cp.stats.recomputes, before + 1, 'the state change recomputed');
  assert.equal(s.cp.status().lastError, undefined);
  assert.deepEqual(s.cp.status().candidates.map((c) => c.ip), [WEB], 'now persisted: a candidate, from the same snapshot');
  assert.equal(s.ipam.saves, 0);
});

test('an IPAM state change before the first snapshot runs no update at all (no recompute; a reported error stays)', async () => {
  const s = build({ role: 'follower' });
  await s.cp.start();
  s.links.list = () => Promise.reject(new Error('netlink dump failed'));
  s.cp.linksChanged();
  s.clock.advance(50);
  await s.cp.idle();
  assert.match(s.cp.status().lastError ?? '', /netlink dump failed/);
  s.ipam.persistedElsewhere({ 'default/web': [WEB] });
  await flush();
  await s.cp.idle();
  assert.equal(s.cp.stats.recomputes, 0);
  assert.match(s.cp.status().lastError ?? '', /netlink dump failed/, 'no update ran, so the error reported stays');
  assert.equal(s.cp.status().snapshotLoaded, false);
});

test('an allocator fenced off by its successor (save refused) announces only what is persisted', async () => {
  const s = await setup(BASE, { role: 'fenced' });
  assert.equal(s.ipam.saves, 1, 'it tried to persist');
  assert.deepEqual(s.cp.status().candidates, [], 'the unsaved allocation is not announced');
  assert.equal(s.cp.status().ipam!.services.get('default/web')!.condition.status, 'False');
});

test('--lb-classes: LB-IPAM serves only the listed classes, so a class-less Service gets no IP', async () => {
  const manifests = POOL + policy('all') + service('web', WEB) + service('l2', OTHER, ', loadBalancerClass: io.cilium/l2-announcer');
  const s = await setup(manifests, { extra: { lbClasses: ['io.cilium/l2-announcer'] } });
  assert.deepEqual(s.cp.status().candidates.map((c) => [c.ip, c.services]), [[OTHER, ['default/l2']]]);
  assert.deepEqual(s.ipam.state.allocations, { 'default/l2': [OTHER] });
});

test('a pass that took d ms is followed by 3 × d ms without one; ownership changes are not held up meanwhile', async () => {
  const s = await setup();
  s.clock.advance(1000);
  s.ownership.passMs = 10; // every pass from now on takes 10 ms
  await s.load(BASE); // starts at once (the first pass took no time), ends 10 ms later
  assert.equal(s.clock.now(), 1010);
  const before = s.cp.stats.recomputes;
  let done = false;
  const next = s.load(BASE + service('api', OTHER)).then(() => (done = true));
  await flush();
  assert.equal(done, false, 'waits 30 ms after the 10 ms pass');
  await s.ownership.own(WEB);
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web`], 'ownership is applied while the recompute waits');
  s.clock.advance(29);
  await flush();
  assert.equal(done, false, 'not before 30 ms');
  assert.equal(s.cp.stats.recomputes, before);
  s.clock.advance(1);
  await next;
  assert.equal(s.cp.stats.recomputes, before + 1);
  assert.deepEqual(s.cp.status().candidates.map((c) => c.ip).sort(), [WEB, OTHER].sort());
});

test('a failed update is in status and the log; the previous table stays in force; the next good update clears the error', async () => {
  const s = await setup();
  await s.ownership.own(WEB);
  s.ownership.failNext = new Error('backend unreachable');
  await s.load(POOL + policy('all'));
  assert.match(s.cp.status().lastError ?? '', /backend unreachable/);
  const err = s.logged('error', 'control plane update failed; the previous state stays in force');
  assert.equal(err.length, 1);
  assert.match(String(err[0]!.obj.err), /backend unreachable/);
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web`]);
  await s.load(BASE);
  assert.equal('lastError' in s.cp.status(), false);
});

test('after dispose nothing is applied: neither ownership changes nor snapshots', async () => {
  const s = await setup();
  s.cp.dispose();
  await s.ownership.own(WEB);
  await s.load(BASE + service('api', OTHER));
  assert.deepEqual(s.rows(), []);
  assert.deepEqual(s.cp.status().candidates.map((c) => c.ip), [WEB]);
  assert.equal(s.cp.stats.ownershipChanges, 0);
});

test('ownership changes are counted', async () => {
  const s = await setup();
  await s.ownership.own(WEB);
  await s.ownership.own();
  assert.equal(s.cp.stats.ownershipChanges, 2);
});

test('an LB-IPAM request that cannot be satisfied is logged at debug with the Service, reason and message; satisfied ones are not', async () => {
  const s = await setup(BASE + service('bad', '203.0.113.5'));
  const lines = s.logged('debug', 'LB-IPAM request not satisfied');
  assert.equal(lines.length, 1);
  const cond = s.cp.status().ipam!.services.get('default/bad')!.condition;
  assert.deepEqual(lines[0]!.obj, { service: 'default/bad', reason: cond.reason, message: cond.message });
  assert.equal(lines[0]!.msg, 'LB-IPAM request not satisfied');
});

test('onServiceIps is told the snapshot, the ingress IPs, this node and the LB-IPAM result', async () => {
  const seen: Array<Parameters<NonNullable<ControlPlaneDeps['onServiceIps']>>[0]> = [];
  const s = build({ extra: { onServiceIps: (i) => seen.push(i) } });
  await s.cp.start();
  const snap = snapshot(BASE);
  await s.cp.setSnapshot(snap);
  const last = seen.at(-1)!;
  assert.equal(last.snapshot, snap);
  assert.deepEqual([...last.ingress], [['default/web', [WEB]]]);
  assert.equal(last.node.name, 'node-a');
  assert.equal(last.ipam, s.cp.status().ipam);
  assert.ok(last.ipam);
});

test('a dual-stack Service\'s affinity key is its lowest address, whatever order LB-IPAM lists them in', async () => {
  const dual = POOL + policy('all') + service('dual', undefined, ', ipFamilyPolicy: RequireDualStack, ipFamilies: [IPv6, IPv4]');
  const s = await setup(dual);
  const ips = s.cp.status().ipam!.services.get('default/dual')!.ingress;
  assert.equal(ips.length, 2);
  const lowest = [...ips].sort()[0]!;
  for (const ip of ips) assert.equal(s.ownership.affinity.get(ip), lowest);
});

test('the affinity key of a Service with several addresses is the first in string order (198.51.100.100 before 198.51.100.20), not LB-IPAM\'s numeric order', async () => {
  const wide = POOL.replace('198.51.100.16/28', '198.51.100.0/24') + policy('all') + service('two', '198.51.100.20,198.51.100.100');
  const s = await setup(wide);
  assert.deepEqual(s.cp.status().ipam!.services.get('default/two')!.ingress, ['198.51.100.20', '198.51.100.100'], 'LB-IPAM lists them numerically');
  assert.equal(s.ownership.affinity.get('198.51.100.20'), '198.51.100.100');
  assert.equal(s.ownership.affinity.get('198.51.100.100'), '198.51.100.100');
});

test('without an onCandidates callback the table is still written', async () => {
  const s = await setup(BASE, { extra: { onCandidates: undefined } });
  await s.ownership.own(WEB);
  assert.equal(s.cp.status().lastError, undefined);
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web`]);
});

test('a static announcement on a Service IP and interface: one row with both origins, sorted', async () => {
  const s = await setup(BASE, { statics: [{ ip: WEB, interface: 'eth0' }] });
  await s.ownership.own(WEB);
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web,static`]);
});

test('a Service gone whose IP is still announced statically: its row on another interface goes at once (the IP keeps answering on the static one)', async () => {
  const s = await setup(BASE, { links: ['eth0', 'eth1'], statics: [{ ip: WEB, interface: 'eth1' }] });
  await s.ownership.own(WEB);
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web`, `${WEB}@eth1 service:default/web,static`]);
  await s.load(POOL + policy('all'));
  assert.deepEqual(s.rows(), [`${WEB}@eth1 static`]);
});

test('a static announcement of another IP does not make a deleted Service\'s still-owned IP drop its row before its release', async () => {
  const s = await setup(BASE, { statics: [{ ip: OTHER, interface: 'eth0' }] });
  await s.ownership.own(WEB, OTHER);
  await s.load(POOL + policy('all'));
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/web`, `${OTHER}@eth0 static`]);
  await s.ownership.own(OTHER);
  assert.deepEqual(s.rows(), [`${OTHER}@eth0 static`]);
});

test('a row whose origins change is rewritten (same IP and interface, another Service)', async () => {
  const s = await setup();
  await s.ownership.own(WEB);
  await s.load(POOL + policy('all') + service('shop', WEB));
  assert.deepEqual(s.rows(), [`${WEB}@eth0 service:default/shop`]);
});

test('a pass that changes no row writes nothing: the table revision stays (rows with several origins too)', async () => {
  const s = await setup(BASE, { statics: [{ ip: WEB, interface: 'eth0' }] });
  await s.ownership.own(WEB);
  const rev = s.db.readTxn().revision(l2AnnounceTable);
  await s.ownership.own(WEB);
  await s.load(BASE + '\n# unrelated edit\n');
  assert.equal(s.db.readTxn().revision(l2AnnounceTable), rev);
});

test('each table write is traced at debug with the rows desired, the rows written and how long it took', async () => {
  const s = await setup(BASE + service('api', OTHER), { statics: [{ ip: WEB, interface: 'eth0' }] });
  s.clock.advance(1000);
  await s.ownership.own(WEB, OTHER);
  await s.ownership.own(WEB);
  const traces = s.logged('debug', 'trace: l2-announce table written').map((l) => l.obj);
  assert.deepEqual(traces.slice(-2), [
    { rows: 2, written: 2, ms: 0 },
    { rows: 1, written: 0, ms: 0 },
  ]);
});

test('a nodeSelector warning names the policy and the known nodes, and is logged again when the known nodes change', async () => {
  const gpu = POOL + service('web', WEB) + policy('gpu', '  nodeSelector: { matchLabels: { example.com/gpu: "true" } }');
  const s = await setup(gpu);
  const warned = () => s.logged('warn', 'nodeSelector matches no node');
  assert.equal(warned().length, 1);
  assert.deepEqual(warned()[0]!.obj, { policy: 'gpu', nodes: ['node-a'] });
  await s.load(gpu + '\n# unrelated edit\n');
  assert.equal(warned().length, 1, 'nothing it depends on changed');
  await s.load(gpu + '---\napiVersion: v1\nkind: Node\nmetadata: { name: node-b }\n');
  assert.equal(warned().length, 2, 'another node is known: checked again');
  assert.deepEqual(warned()[1]!.obj.nodes, ['node-a', 'node-b']);
});

test('an interfaces warning says "none" when no interface is seen or eligible, and names them when there are', async () => {
  const up = POOL + service('web', WEB) + policy('uplink', '  interfaces: ["^bond0$", "^bond1$"]');
  const s = await setup(up, { links: [] });
  const w = () => s.cp.status().policyWarnings;
  assert.ok(w()[0]!.message.endsWith('(interfaces "^bond0$", "^bond1$"; seen: none; eligible: none)'), w()[0]!.message);
  s.links.add('eth0');
  s.links.add('eth1');
  s.links.add('eth2', { carrier: false });
  s.cp.linksChanged();
  s.clock.advance(50);
  await s.cp.idle();
  assert.ok(w()[0]!.message.endsWith('(interfaces "^bond0$", "^bond1$"; seen: eth0, eth1, eth2; eligible: eth0, eth1)'), w()[0]!.message);
});

test('the interfaces warning is logged again when the patterns change or the eligible set changes (a set, not a concatenation)', async () => {
  const up = (re: string) => POOL + service('web', WEB) + policy('uplink', `  interfaces: ["${re}"]`);
  const s = await setup(up('^bond0$'), { links: ['eth0', 'eth1'] });
  const warned = () => s.logged('warn', 'match no interface');
  assert.equal(warned().length, 1);
  await s.load(up('^bond1$'));
  assert.equal(warned().length, 2, 'other patterns: checked again');
  s.links.remove('eth0');
  s.links.remove('eth1');
  s.links.add('eth0eth1');
  s.cp.linksChanged();
  s.clock.advance(50);
  await s.cp.idle();
  assert.equal(warned().length, 3, 'eligible eth0eth1 is not eligible eth0, eth1');
});

const CNP = (name: string, group: string) => `---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: ${name}, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDRSet: [{cidrGroupRef: ${group}}]
`;

const CCNP = `---
apiVersion: cilium.io/v2
kind: CiliumClusterwideNetworkPolicy
metadata: {name: edge}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDRSet: [{cidrGroupRef: lab}]
`;

test('a missing CIDR group: each new one is logged (once), and every pass tells onIntentWarning the object (with its namespace when it has one)', async () => {
  const events: Array<{ kind: string; name: string; namespace?: string; message: string }> = [];
  const s = build({ extra: { onIntentWarning: (w) => events.push(w) } });
  await s.cp.start();
  await s.load(BASE + CNP('web-in', 'office'));
  const warned = () => s.logged('warn', 'does not exist');
  assert.equal(warned().length, 1);
  assert.deepEqual(events, [
    {
      kind: 'CiliumNetworkPolicy',
      name: 'web-in',
      namespace: 'shop',
      message: 'spec.ingress[0].fromCIDRSet[0].cidrGroupRef: CiliumCIDRGroup "office" does not exist: this rule allows from none of its CIDRs until it is created (as Cilium)',
    },
  ]);
  await s.load(BASE + CNP('web-in', 'office') + CNP('api-in', 'partners') + CCNP);
  assert.equal(warned().length, 3, 'the two new ones are logged, the known one is not');
  assert.deepEqual(
    warned().slice(1).map((l) => l.obj.group).sort(),
    ['lab', 'partners'],
  );
  const last = events.slice(1);
  assert.equal(last.length, 3, 'told on every pass');
  const edge = last.find((e) => e.name === 'edge')!;
  assert.equal(edge.kind, 'CiliumClusterwideNetworkPolicy');
  assert.equal('namespace' in edge, false, 'a clusterwide policy has no namespace');
  assert.equal(last.find((e) => e.name === 'api-in')!.namespace, 'shop');
});
