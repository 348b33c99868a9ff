/**
 * A real etcd (Debian's etcd-server) inside a lab host, listening on that
 * host's lab address, with a temporary data directory. Used by tests, the
 * failover benchmark and the demo; stopped and removed with the lab or stop().
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor, type Host, type LabProcess } from './lab.js';

export const ETCD_BINARY = '/usr/bin/etcd';

export class LabEtcd {
  private proc: LabProcess | undefined;
  readonly dataDir: string;
  readonly endpoint: string;

  constructor(
    readonly host: Host,
    readonly port = 2379,
  ) {
    this.dataDir = mkdtempSync(join(tmpdir(), 'herald-lab-etcd-'));
    this.endpoint = `http://${host.ip}:${port}`;
  }

  async start(): Promise<void> {
    const peer = `http://${this.host.ip}:${this.port + 1}`;
    this.proc = this.host.spawn('etcd', ETCD_BINARY, [
      '--name', 'lab',
      '--data-dir', this.dataDir,
      '--listen-client-urls', this.endpoint,
      '--advertise-client-urls', this.endpoint,
      '--listen-peer-urls', peer,
      '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `lab=${peer}`,
      '--initial-cluster-state', 'new',
      '--heartbeat-interval', '50',
      '--election-timeout', '250',
      '--log-level', 'warn',
    ], { ETCD_UNSUPPORTED_ARCH: process.arch === 'x64' ? '' : process.arch });
    await waitFor(() => this.host.exec('curl', ['-s', '-m', '1', `${this.endpoint}/health`]).stdout.includes('"health":"true"'), {
      timeoutMs: 20_000,
      what: 'etcd to become healthy',
      onTimeout: () => this.proc?.text() ?? '',
      abortIf: () => (this.proc && !this.proc.running ? `etcd exited:\n${this.proc.text()}` : undefined),
    });
  }

  async kill(): Promise<void> {
    await this.proc?.stop('SIGKILL');
  }

  async restart(): Promise<void> {
    await this.proc?.stop('SIGTERM');
    await this.start();
  }

  /** Stops etcd, empties its data directory and starts it again: a store that lost everything. */
  async wipe(): Promise<void> {
    await this.proc?.stop('SIGTERM');
    rmSync(this.dataDir, { recursive: true, force: true });
    mkdirSync(this.dataDir, { recursive: true, mode: 0o700 });
    await this.start();
  }

  async stop(): Promise<void> {
    await this.proc?.stop('SIGTERM');
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
