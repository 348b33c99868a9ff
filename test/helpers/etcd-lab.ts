/**
 * The lab set-up several tests repeat: N nodes and a store host running a
 * real etcd, manifests applied to the store with `herald apply`, and one
 * agent per node on `--store etcd` (started, restarted, followed by name).
 * Lab tooling: test-side only.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LabEtcd } from '../../lab/etcd.js';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, startAgentReady } from './lab-tools.js';

export interface EtcdLabOptions {
  nodes: number;
  /** The lab's short tag (namespaces hl<tag>…). */
  tag: string;
  /** Agent arguments after `--store etcd --etcd <endpoint>`. */
  agentArgs?: (n: Host) => string[];
  /** See LabOptions.acceptId. */
  acceptId?: (id: string) => boolean;
}

export class EtcdLab {
  readonly agents = new Map<Host, LabProcess>();

  private constructor(
    readonly lab: Lab,
    readonly etcd: LabEtcd,
    /** A scratch directory for manifests and the like (removed by destroy()). */
    readonly dir: string,
    private readonly agentArgs: (n: Host) => string[],
  ) {}

  /** Creates the lab and starts etcd (no agent yet). */
  static async create(opts: EtcdLabOptions): Promise<EtcdLab> {
    const lab = Lab.create({ nodes: opts.nodes, storeHost: true, tag: opts.tag, ...(opts.acceptId ? { acceptId: opts.acceptId } : {}) });
    const etcd = new LabEtcd(lab.store!);
    const dir = mkdtempSync(join(tmpdir(), `herald-${opts.tag}-`));
    const e = new EtcdLab(lab, etcd, dir, opts.agentArgs ?? (() => []));
    try {
      await etcd.start();
    } catch (err) {
      await e.destroy();
      throw err;
    }
    return e;
  }

  get nodes(): readonly Host[] {
    return this.lab.nodes;
  }

  /** Writes a file into the scratch directory; returns its path. */
  write(name: string, text: string, mode?: number): string {
    const path = join(this.dir, name);
    writeFileSync(path, text, mode === undefined ? undefined : { mode });
    return path;
  }

  /** `herald apply -f <file>` to the store (a name in the scratch directory); fails the test when refused. Returns its output. */
  apply(name: string): string {
    const r = this.lab.nodes[0]!.exec(HERALD, ['apply', '-f', join(this.dir, name), '--etcd', this.etcd.endpoint]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    return r.stdout;
  }

  /** Starts (or restarts) node `n`'s agent (with `extra` arguments for this start) and waits until it runs. */
  async start(n: Host, extra: string[] = []): Promise<LabProcess> {
    const p = await startAgentReady(n, ['--store', 'etcd', '--etcd', this.etcd.endpoint, ...this.agentArgs(n), ...extra], `agent-${Date.now()}`);
    this.agents.set(n, p);
    return p;
  }

  /** Removes the lab (every process it started), stops etcd, removes the scratch directory. */
  async destroy(): Promise<void> {
    await this.lab.destroy();
    await this.etcd.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
