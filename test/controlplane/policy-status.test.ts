/**
 * What a valid policy that announces nothing here looks like from outside
 * (issue 18): a nodeSelector matching no known node and an `interfaces` regex
 * matching no interface of this node are warnings in the log (once per change)
 * and in `herald status` (JSON and text); IPv6 IPs are not contended for nor
 * listed as owned until NDP exists, and status says so.
 */
import { MemoryIpam } from '../helpers/memory-ipam.js';
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { buildStatus, renderStatus } from '../../src/api/status.js';
import type { Logger } from '../../src/core/logger.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { ControlPlane } from '../../src/controlplane/controller.js';
import type { OwnershipBackend, OwnershipView } from '../../src/controlplane/ownership/backend.js';
import type { L2Datapath } from '../../src/datapath/l2-responder/datapath.js';
import { l2AnnounceTable } from '../../src/datapath/tables/l2-announce.js';
import { formatErrors, parseManifests } from '../../src/intent/index.js';
import { FakeLinks } from '../../src/os/fake/links.js';
import { ManualClock } from '../helpers/manual-clock.js';

const POOL = `
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: pool }
spec:
  blocks: [{ cidr: 198.51.100.16/28 }, { cidr: "2001:db8::/120" }]
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default, annotations: { lbipam.cilium.io/ips: "198.51.100.20" } }
spec: { type: LoadBalancer, ports: [{ port: 80 }] }
`;

const policy = (name: string, spec: string) => `
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: ${name} }
spec:
  loadBalancerIPs: true
${spec}`;

/** Takes every IP it is offered: whatever is a candidate ends up owned. */
class GreedyOwnership implements OwnershipBackend {
  readonly kind = 'etcd' as const;
  candidates: ReadonlyMap<string, readonly string[]> = new Map();
  private onChange: (view: OwnershipView) => void | Promise<void> = () => {};
  async start(onChange: (view: OwnershipView) => void | Promise<void>): Promise<void> {
    this.onChange = onChange;
  }
  setCandidates(candidates: ReadonlyMap<string, readonly string[]>): void {
    this.candidates = new Map(candidates);
    void this.onChange(this.view());
  }
  view(): OwnershipView {
    return { owned: new Set(this.candidates.keys()), owners: new Map([...this.candidates.keys()].map((ip) => [ip, 'node-a'])) };
  }
  async release(): Promise<void> {}
  dispose(): void {}
}


interface Line {
  level: string;
  obj: Record<string, unknown>;
  msg: string;
}

function recordingLogger(lines: Line[]): Logger {
  const at = (level: string) => (obj: object, msg?: string) => lines.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
  const log: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => log };
  return log;
}

const disposers: Array<() => void> = [];
afterEach(() => {
  for (const d of disposers.splice(0)) d();
});

async function setup(manifests: string, opts: { links?: string[] } = {}) {
  const lines: Line[] = [];
  const db = new StateDB([l2AnnounceTable]);
  const links = new FakeLinks();
  for (const name of opts.links ?? ['eth0']) links.add(name);
  const ownership = new GreedyOwnership();
  const clock = new ManualClock();
  const cp = new ControlPlane({
    db,
    nodeName: 'node-a',
    links,
    ownership,
    ipam: new MemoryIpam(),
    staticAnnouncements: [],
    clock,
    log: recordingLogger(lines),
  });
  disposers.push(() => cp.dispose());
  await cp.start();
  const load = (text: string) => {
    const l = parseManifests(text, 'test.yaml');
    assert.equal(formatErrors(l.errors), '');
    return cp.setSnapshot(l.snapshot!);
  };
  await load(manifests);
  /** Links changed: the controller re-reads them after its debounce. */
  const relink = async (change: () => void) => {
    change();
    cp.linksChanged();
    clock.advance(100);
    await cp.idle();
  };
  const warns = (fragment: string) => lines.filter((l) => l.level === 'warn' && l.msg.includes(fragment));
  return { cp, db, links, ownership, lines, load, relink, warns };
}

/** buildStatus over the control plane's status, with a datapath that has no entries (no BPF needed). */
function agentStatus(cp: ControlPlane) {
  const emptyMap = { lookup: () => undefined, entries: () => [] };
  const datapath = { maps: { responders: emptyMap, config: emptyMap }, map: { capacity: 16 } } as unknown as L2Datapath;
  return buildStatus({
    config: { node: 'node-a', store: 'local', manifests: 'test.yaml', datapath: { pinDir: '/sys/fs/bpf/test' } },
    startedAt: 0,
    controlPlane: cp.status(),
    reconciler: undefined,
    rowsNotDone: [],
    table: [],
    datapath,
    garp: { sent: 0, failed: 0 },
    now: 0n,
  });
}

test('an interfaces regex matching no interface here is a warning in status (JSON and text) naming the interfaces seen', async () => {
  const s = await setup(POOL + policy('uplink', '  interfaces: ["^bond[0-9]+$"]'), { links: ['eth0', 'eth1'] });
  const st = agentStatus(s.cp);
  assert.equal(st.warnings.length, 1, JSON.stringify(st.warnings));
  const w = st.warnings[0]!;
  assert.equal(w.policy, 'uplink');
  assert.equal(w.kind, 'interfaces');
  assert.deepEqual(w.seen, ['eth0', 'eth1']);
  assert.match(w.message, /match no interface/);
  assert.match(w.message, /seen: eth0, eth1/);
  assert.match(w.message, /"\^bond\[0-9\]\+\$"/);
  const text = renderStatus(st);
  assert.match(text, /^warning: policy uplink: .*match no interface.*seen: eth0, eth1/m);
  assert.deepEqual(st.candidates, [], 'nothing is a candidate: the warning explains why');
});

test('the interfaces warning is logged once per change of what it was checked against, and leaves status once fixed', async () => {
  const s = await setup(POOL + policy('uplink', '  interfaces: ["^bond0$"]'));
  const logged = () => s.warns('match no interface').length;
  assert.equal(logged(), 1);
  assert.deepEqual(s.warns('match no interface')[0]!.obj.seen, ['eth0']);

  // Recomputes that change nothing it depends on: no new line.
  await s.load(POOL + policy('uplink', '  interfaces: ["^bond0$"]') + '\n# unrelated edit\n');
  await s.relink(() => s.links.add('eth2', { carrier: false })); // not eligible: the eligible set is unchanged
  assert.equal(logged(), 1, 'same policy, same eligible interfaces: logged once');
  assert.equal(agentStatus(s.cp).warnings.length, 1, 'status still shows it');

  // The interface appears: the warning is gone from status, and no new line.
  await s.relink(() => s.links.add('bond0'));
  assert.equal(logged(), 1);
  assert.deepEqual(agentStatus(s.cp).warnings, []);
  assert.deepEqual(agentStatus(s.cp).candidates.map((c) => c.interfaces), [['bond0']]);

  // It goes away again: that is a change, so it is logged again.
  await s.relink(() => s.links.remove('bond0'));
  assert.equal(logged(), 2);
  assert.equal(agentStatus(s.cp).warnings.length, 1);
});

test('a nodeSelector matching no known node is a warning in status and the log', async () => {
  const s = await setup(POOL + policy('gpu', '  nodeSelector: { matchLabels: { example.com/gpu: "true" } }'));
  const st = agentStatus(s.cp);
  assert.deepEqual(st.warnings.map((w) => [w.policy, w.kind]), [['gpu', 'node-selector']]);
  assert.match(st.warnings[0]!.message, /nodeSelector matches no node known \(1: node-a\)/);
  assert.match(renderStatus(st), /^warning: policy gpu: nodeSelector matches no node known/m);
  assert.equal(s.warns('nodeSelector matches no node').length, 1);
});

test('a traffic policy naming a CiliumCIDRGroup that does not exist is a warning in status and the log (policy, rule, group); gone once the group exists', async () => {
  const CNP = `---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDRSet: [{cidrGroupRef: office}]
`;
  const s = await setup(POOL + CNP);
  const st = agentStatus(s.cp);
  assert.deepEqual(st.warnings.map((w) => [w.policy, w.kind, w.message]), [
    ['CiliumNetworkPolicy shop/web-in', 'cidr-group', 'spec.ingress[0].fromCIDRSet[0].cidrGroupRef: CiliumCIDRGroup "office" does not exist: this rule allows from none of its CIDRs until it is created (as Cilium)'],
  ]);
  assert.match(renderStatus(st), /^warning: policy CiliumNetworkPolicy shop\/web-in: spec.ingress\[0\].fromCIDRSet\[0\].cidrGroupRef: CiliumCIDRGroup "office" does not exist/m);
  assert.equal(s.warns('CiliumCIDRGroup "office" does not exist').length, 1);
  assert.deepEqual(s.warns('CiliumCIDRGroup "office" does not exist')[0]!.obj.group, 'office');
  await s.load(POOL + CNP + '---\napiVersion: cilium.io/v2alpha1\nkind: CiliumCIDRGroup\nmetadata: {name: office}\nspec:\n  externalCIDRs: [192.0.2.0/29]\n');
  assert.deepEqual(agentStatus(s.cp).warnings, []);
});

test('a policy that selects this node has no warning', async () => {
  const s = await setup(POOL + policy('linux', '  nodeSelector: { matchLabels: { kubernetes.io/os: linux } }\n  interfaces: ["^eth"]'));
  assert.deepEqual(agentStatus(s.cp).warnings, []);
  assert.equal(s.lines.filter((l) => l.level === 'warn').length, 0);
});

test('IPv6 ingress IPs are contended for and owned like IPv4 ones (issue 11); a dual-stack service\'s addresses move together', async () => {
  const v6 = `
---
apiVersion: v1
kind: Service
metadata: { name: v6, namespace: default, annotations: { lbipam.cilium.io/ips: "2001:db8::10" } }
spec: { type: LoadBalancer, ipFamilies: [IPv6], ipFamilyPolicy: SingleStack, ports: [{ port: 80 }] }
`;
  const s = await setup(POOL + v6 + policy('all', ''));
  assert.deepEqual(s.cp.status().ipam?.services.get('default/v6')?.ingress, ['2001:db8::10'], 'LB-IPAM allocates it');
  assert.deepEqual([...s.ownership.candidates.keys()].sort(), ['198.51.100.20', '2001:db8::10'], 'both families are contended for');
  assert.deepEqual(s.db.readTxn().list(l2AnnounceTable).map((r) => r.ip).sort(), ['198.51.100.20', '2001:db8::10']);
  const st = agentStatus(s.cp);
  assert.deepEqual(st.owned.map((o) => o.ip), ['198.51.100.20', '2001:db8::10']);
  assert.deepEqual(st.candidates.map((c) => c.ip).sort(), ['198.51.100.20', '2001:db8::10']);
  assert.doesNotMatch(renderStatus(st), /not announced/);
});
