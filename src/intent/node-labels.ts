/**
 * A node's labels outside Kubernetes: the ones the kubelet would set
 * (os, arch, hostname), then `--node-labels`, then the Node manifest's, each
 * later source winning (a Node manifest is what an operator edits, as `kubectl
 * label node` edits the Node object after the kubelet registered it).
 */
import { HeraldError } from '../core/errors.js';
import { checkLabelValue, checkQualifiedName } from './names.js';
import { matchesSelector, type LabelSelector, type Labels } from './selector.js';
import type { IntentSnapshot } from './snapshot.js';
import { sortedEntries } from '../core/order.js';

export const OS_LABEL = 'kubernetes.io/os';
export const ARCH_LABEL = 'kubernetes.io/arch';
export const HOSTNAME_LABEL = 'kubernetes.io/hostname';

/** Node's process.arch → GOARCH, the value the kubelet writes. */
const GOARCH: Readonly<Record<string, string>> = {
  x64: 'amd64',
  arm64: 'arm64',
  arm: 'arm',
  ia32: '386',
  ppc64: 'ppc64le',
  s390x: 's390x',
  riscv64: 'riscv64',
  loong64: 'loong64',
  mips: 'mips',
  mipsel: 'mipsle',
};

export function goArch(arch: string = process.arch): string {
  return GOARCH[arch] ?? arch;
}

/** What the kubelet labels every node with (herald runs on Linux only). */
export function wellKnownNodeLabels(nodeName: string, arch: string = process.arch): Labels {
  return { [OS_LABEL]: 'linux', [ARCH_LABEL]: goArch(arch), [HOSTNAME_LABEL]: nodeName };
}

/** `k=v,k2=v2` (the kubelet's --node-labels format); every key and value checked. */
export function parseNodeLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of text.split(',')) {
    const item = part.trim();
    if (item === '') continue;
    const eq = item.indexOf('=');
    if (eq < 0) throw new HeraldError('HERALD_BAD_ARGUMENT', `--node-labels: ${JSON.stringify(item)} is not key=value`);
    const key = item.slice(0, eq);
    const value = item.slice(eq + 1);
    const problem = checkQualifiedName(key) ?? checkLabelValue(value);
    if (problem !== undefined) throw new HeraldError('HERALD_BAD_ARGUMENT', `--node-labels: ${problem}`);
    out[key] = value;
  }
  return out;
}

export interface NodeIdentity {
  name: string;
  labels: Labels;
}

/** This node: well-known labels < `extra` (--node-labels) < its Node manifest's labels. */
export function nodeIdentity(snapshot: IntentSnapshot, nodeName: string, extra: Labels = {}): NodeIdentity {
  const manifest = snapshot.nodes.get(nodeName);
  return { name: nodeName, labels: { ...wellKnownNodeLabels(nodeName), ...extra, ...(manifest?.metadata.labels ?? {}) } };
}

/** Every node known: this one, and each Node manifest (with the labels the kubelet would add). */
export function knownNodes(snapshot: IntentSnapshot, self: NodeIdentity): NodeIdentity[] {
  const out = [self];
  for (const [name, node] of snapshot.nodes) {
    if (name === self.name) continue;
    out.push({ name, labels: { ...wellKnownNodeLabels(name), ...node.metadata.labels } });
  }
  return out;
}

export interface UnmatchedNodeSelector {
  readonly policy: string;
  readonly selector: LabelSelector;
  readonly message: string;
}

/** Policies whose nodeSelector selects none of `nodes`: they announce nothing anywhere. */
export function unmatchedNodeSelectors(snapshot: IntentSnapshot, nodes: readonly NodeIdentity[]): UnmatchedNodeSelector[] {
  const out: UnmatchedNodeSelector[] = [];
  for (const [name, policy] of sortedEntries(snapshot.policies)) {
    const selector = policy.spec.nodeSelector;
    if (selector === undefined) continue;
    if (nodes.some((n) => matchesSelector(selector, n.labels))) continue;
    const names = nodes.map((n) => n.name);
    const shown = names.length > 5 ? `${names.slice(0, 5).join(', ')}, …` : names.join(', ');
    out.push({
      policy: name,
      selector,
      message: `nodeSelector matches no node known (${names.length}: ${shown}), so this policy announces nothing; give the node the labels with --node-labels or a Node manifest`,
    });
  }
  return out;
}
