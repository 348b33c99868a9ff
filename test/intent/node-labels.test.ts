/**
 * A plain host's node labels (issue 18): the ones the kubelet would set
 * (kubernetes.io/os, arch, hostname), `--node-labels` on top, a Node manifest
 * on top of both; policies written for Kubernetes select such a host as they
 * would select a kubelet-registered node.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeCandidates } from '../../src/controlplane/announce/candidates.js';
import { HeraldError } from '../../src/core/errors.js';
import { formatErrors, parseManifests, type IntentSnapshot } from '../../src/intent/index.js';
import {
  ARCH_LABEL,
  HOSTNAME_LABEL,
  OS_LABEL,
  goArch,
  knownNodes,
  nodeIdentity,
  parseNodeLabels,
  unmatchedNodeSelectors,
  wellKnownNodeLabels,
} from '../../src/intent/node-labels.js';
import type { LinkInfo } from '../../src/os/links.js';
import { runHerald } from '../helpers/herald-cli.js';

function snapshot(text: string): IntentSnapshot {
  const load = parseManifests(text, 'test.yaml');
  assert.equal(formatErrors(load.errors), '');
  return load.snapshot!;
}

const EMPTY = snapshot('');

test('the kubelet-set labels: os linux, arch in GOARCH spelling, hostname the node name', () => {
  assert.deepEqual(wellKnownNodeLabels('node-a', 'x64'), { [OS_LABEL]: 'linux', [ARCH_LABEL]: 'amd64', [HOSTNAME_LABEL]: 'node-a' });
  assert.equal(OS_LABEL, 'kubernetes.io/os');
  assert.equal(ARCH_LABEL, 'kubernetes.io/arch');
  assert.equal(HOSTNAME_LABEL, 'kubernetes.io/hostname');
  assert.equal(goArch('arm64'), 'arm64');
  assert.equal(goArch('ia32'), '386');
  assert.equal(goArch('ppc64'), 'ppc64le');
  assert.equal(goArch('mipsel'), 'mipsle');
  // This host, as nodeIdentity sees it without any other source.
  assert.deepEqual(nodeIdentity(EMPTY, 'node-a').labels, wellKnownNodeLabels('node-a'));
});

test('--node-labels: k=v pairs, empty values and stray commas allowed, as the kubelet', () => {
  assert.deepEqual(parseNodeLabels('node-role.kubernetes.io/worker=,example.com/rack=r1'), {
    'node-role.kubernetes.io/worker': '',
    'example.com/rack': 'r1',
  });
  assert.deepEqual(parseNodeLabels(' zone=a , ,'), { zone: 'a' });
});

test('--node-labels: bad input is a precise HERALD_BAD_ARGUMENT naming the item', () => {
  const cases: [string, string][] = [
    ['rack', '--node-labels: "rack" is not key=value'],
    ['=x', '--node-labels: invalid label key "": the name part must not be empty'],
    ['bad key=x', `--node-labels: invalid label key "bad key": the name part must consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`],
    ['a/b/c=1', '--node-labels: invalid label key "a/b/c": at most one "/" is allowed'],
    ['k=bad value', `--node-labels: invalid label value "bad value": must be empty or consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`],
    [`k=${'v'.repeat(64)}`, `--node-labels: invalid label value "${'v'.repeat(64)}": must be at most 63 characters`],
  ];
  for (const [input, message] of cases) {
    assert.throws(() => parseNodeLabels(input), (e: unknown) => {
      assert.ok(e instanceof HeraldError, `${input}: a HeraldError`);
      assert.equal(e.code, 'HERALD_BAD_ARGUMENT');
      assert.equal(e.message, message);
      return true;
    });
  }
});

test('the CLI refuses bad --node-labels before reading anything, with the same message', async () => {
  const r = await runHerald(['validate', 'test/fixtures/manifests/l2-policy.yaml', '--node-labels', 'rack']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--node-labels: "rack" is not key=value/);
  assert.equal(r.stdout, '', 'nothing was validated');
});

test('precedence: well-known < --node-labels < the Node manifest', () => {
  const snap = snapshot(`
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: { example.com/rack: from-manifest, kubernetes.io/arch: arm64 }
`);
  const me = nodeIdentity(snap, 'node-a', { 'example.com/rack': 'from-flag', 'example.com/zone': 'z1', [OS_LABEL]: 'from-flag' });
  assert.deepEqual(me.labels, {
    [OS_LABEL]: 'from-flag', // the flag overrides the kubelet's
    [ARCH_LABEL]: 'arm64', // the manifest overrides the kubelet's
    [HOSTNAME_LABEL]: 'node-a',
    'example.com/rack': 'from-manifest', // the manifest overrides the flag
    'example.com/zone': 'z1',
  });
  // Another node's manifest is seen with the labels its kubelet would add.
  const other = snapshot(`
apiVersion: v1
kind: Node
metadata: { name: node-b, labels: { example.com/rack: r2 } }
`);
  const nodes = knownNodes(other, nodeIdentity(other, 'node-a'));
  assert.deepEqual(nodes.map((n) => [n.name, n.labels[HOSTNAME_LABEL], n.labels['example.com/rack']]), [
    ['node-a', 'node-a', undefined],
    ['node-b', 'node-b', 'r2'],
  ]);
});

const eth0: LinkInfo = { name: 'eth0', ifindex: 2, mac: '02:00:5e:00:53:01', ethernet: true, up: true, carrier: true, arp: true };

const NOT_CONTROL_PLANE = `
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: workers }
spec:
  externalIPs: true
  nodeSelector:
    matchExpressions:
    - { key: node-role.kubernetes.io/control-plane, operator: DoesNotExist }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec: { type: ClusterIP, externalIPs: [198.51.100.40], ports: [{ port: 80 }] }
`;

test('a policy selecting node-role.kubernetes.io/control-plane DoesNotExist matches a plain host', () => {
  const snap = snapshot(NOT_CONTROL_PLANE);
  const plain = nodeIdentity(snap, 'node-a');
  const got = computeCandidates({ snapshot: snap, ingress: new Map(), node: plain, links: [eth0] });
  assert.deepEqual([...got.keys()], ['198.51.100.40']);
  assert.deepEqual(unmatchedNodeSelectors(snap, knownNodes(snap, plain)), [], 'no warning either');

  // The same host labelled a control plane (as kubeadm labels it, empty value) is not selected, and that is warned.
  const cp = nodeIdentity(snap, 'node-a', parseNodeLabels('node-role.kubernetes.io/control-plane='));
  assert.deepEqual([...computeCandidates({ snapshot: snap, ingress: new Map(), node: cp, links: [eth0] }).keys()], []);
  assert.deepEqual(unmatchedNodeSelectors(snap, knownNodes(snap, cp)).map((u) => u.policy), ['workers']);
});

test('a policy selecting by kubernetes.io/hostname and kubernetes.io/os matches without any Node manifest', () => {
  const snap = snapshot(
    NOT_CONTROL_PLANE.replace(
      /nodeSelector:[\s\S]*?DoesNotExist \}\n/,
      'nodeSelector: { matchLabels: { kubernetes.io/hostname: node-a, kubernetes.io/os: linux } }\n',
    ),
  );
  assert.deepEqual([...computeCandidates({ snapshot: snap, ingress: new Map(), node: nodeIdentity(snap, 'node-a'), links: [eth0] }).keys()], ['198.51.100.40']);
  assert.deepEqual([...computeCandidates({ snapshot: snap, ingress: new Map(), node: nodeIdentity(snap, 'node-b'), links: [eth0] }).keys()], []);
});
