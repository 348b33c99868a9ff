/**
 * The lab set-up the Kubernetes lab tests share: a real kube-apiserver
 * (test/helpers/kube.ts) with herald's CRDs and RBAC (the test's agents
 * authenticate as herald:<node> in group herald:agents), N nodes in
 * namespaces, a Node object per node and, in each node, a bridge to the API
 * server on the node's own 127.0.0.1 (lab/unix-bridge.ts) — one process per
 * node, so a test can cut one node off the API server (SIGSTOP its bridge:
 * connections stall, as over a lost link). Lab tooling: test-side only.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { startRootBridge } from '../../lab/unix-bridge.js';
import { applyObject, applyYaml, startKube, type KubeServer } from './kube.js';
import { startAgentReady } from './lab-tools.js';

const ROOT = new URL('../../', import.meta.url);
const BRIDGE = fileURLToPath(new URL('lab/unix-bridge.ts', ROOT));
export const KUBE_LEASE_NS = 'herald-system';

export interface KubeLabOptions {
  nodes: number;
  /** The lab's short tag (namespaces hl<tag>…). */
  tag: string;
  /** Agent arguments after `--kubernetes --kubeconfig <file>`. */
  agentArgs?: (n: Host) => string[];
  /** For the API server (e.g. an IPv6 Service range for many Services). */
  kube?: Parameters<typeof startKube>[0];
}

export class KubeLab {
  readonly agents = new Map<Host, LabProcess>();
  /** node → its bridge to the API server. */
  readonly bridges = new Map<Host, LabProcess>();

  private constructor(
    readonly kube: KubeServer,
    readonly lab: Lab,
    private readonly bridge: { close(): void },
    private readonly socket: string,
    private readonly agentArgs: (n: Host) => string[],
  ) {}

  /** API server, CRDs, RBAC, the lab, Node objects and bridges (no agent yet). */
  static async create(opts: KubeLabOptions): Promise<KubeLab> {
    const kube = await startKube(opts.kube);
    let lab: Lab | undefined;
    let bridge: { close(): void } | undefined;
    const socket = join(kube.dir, 'api.sock');
    try {
      await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/crds.yaml', ROOT), 'utf8'));
      await applyYaml(kube, readFileSync(new URL('deploy/kubernetes/rbac.yaml', ROOT), 'utf8'));
      const subjects = [{ kind: 'Group', name: 'herald:agents', apiGroup: 'rbac.authorization.k8s.io' }];
      await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'herald-agent-test' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'herald-agent' }, subjects });
      await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'herald-leases-test', namespace: KUBE_LEASE_NS }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'herald-leases' }, subjects });
      const port = Number(new URL(kube.server).port);
      bridge = await startRootBridge(socket, port);
      lab = Lab.create({ nodes: opts.nodes, tag: opts.tag });
      const k = new KubeLab(kube, lab, bridge, socket, opts.agentArgs ?? (() => []));
      for (const n of lab.nodes) {
        await applyObject(kube, { apiVersion: 'v1', kind: 'Node', metadata: { name: n.netns, labels: { 'kubernetes.io/hostname': n.netns } } });
        const b = n.spawn('bridge', process.execPath, ['--import', 'tsx', BRIDGE, '--port', String(port), '--socket', socket]);
        await b.waitForOutput('bridge listening', 15_000);
        k.bridges.set(n, b);
      }
      return k;
    } catch (e) {
      await lab?.destroy();
      bridge?.close();
      rmSync(socket, { force: true });
      await kube.stop();
      throw e;
    }
  }

  get nodes(): readonly Host[] {
    return this.lab.nodes;
  }

  /** The node whose netns (its Node name) is `netns`. */
  byName(netns: string): Host | undefined {
    return this.lab.nodes.find((n) => n.netns === netns);
  }

  /** GET of a Lease in herald's namespace (status 404 when absent). */
  lease(name: string) {
    return this.kube.api('GET', `/apis/coordination.k8s.io/v1/namespaces/${KUBE_LEASE_NS}/leases/${name}`);
  }

  /** Starts (or restarts) node `n`'s agent (`extra` for this start) and waits until it runs. */
  async start(n: Host, extra: string[] = []): Promise<LabProcess> {
    const kubeconfig = this.kube.kubeconfig(`herald:${n.netns}`, ['herald:agents']);
    const p = await startAgentReady(n, ['--kubernetes', '--kubeconfig', kubeconfig, ...this.agentArgs(n), ...extra], `agent-${Date.now()}`);
    this.agents.set(n, p);
    return p;
  }

  /** Removes the lab (every process it started), the bridge and the API server. */
  async destroy(): Promise<void> {
    for (const p of [...this.agents.values(), ...this.bridges.values()]) p.signal('SIGCONT');
    await this.lab.destroy();
    this.bridge.close();
    rmSync(this.socket, { force: true });
    await this.kube.stop();
  }
}
