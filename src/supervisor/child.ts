/**
 * The supervised agent's end of fd 3: reports each etcd lease as it is
 * granted (and the crash hand-over plan as it changes), and notices the supervisor's death (the channel closes) so the
 * agent can stop cleanly instead of running on unwatched.
 */
import { Socket } from 'node:net';
import type { EtcdSession } from '../store/etcd/session.js';
import type { CrashHandoverPlan } from '../store/etcd/handover-record.js';
import { SUPERVISED_ENV, handoverPlanReport, journalReport, kubeLeaseReport, leaseReport, type KubeLeaseReport } from './protocol.js';

export class SupervisorLink {
  private readonly channel: Socket;
  private gone: () => void = () => process.exit(1); // before the agent runs: nothing to release
  private closed = false;
  private lastPlan = 'handover-plan -\n';

  private constructor(fd: number) {
    this.channel = new Socket({ fd, readable: true, writable: true });
    this.channel.on('error', () => {});
    this.channel.on('close', () => {
      if (this.closed) return;
      this.closed = true;
      this.gone();
    });
    this.channel.resume(); // the supervisor writes nothing: read only to see the end
    this.channel.unref();
  }

  /** The link when this process runs under `herald agent`'s supervisor, else undefined. */
  static fromEnv(): SupervisorLink | undefined {
    const fd = Number(process.env[SUPERVISED_ENV]);
    delete process.env[SUPERVISED_ENV]; // not inherited by what the agent runs
    return Number.isInteger(fd) && fd > 2 ? new SupervisorLink(fd) : undefined;
  }

  /** Reports every lease the session is granted, as it is granted (before any key is put on it). */
  reportLeases(session: EtcdSession | undefined): void {
    if (!session) return;
    const report = () => {
      const id = session.leaseId;
      if (id && !this.closed) this.channel.write(leaseReport(id));
    };
    session.onState((s) => s === 'live' && report());
    report();
  }

  /** Tells where this agent's timeline events go in the store (the supervisor records a crash there). */
  reportJournal(prefix: string | undefined): void {
    if (prefix && !this.closed) this.channel.write(journalReport(prefix));
  }

  /** Kubernetes store: our node Lease and the incarnation stamped on it (the supervisor deletes it if we crash). */
  reportKubeLease(lease: KubeLeaseReport | undefined): void {
    if (lease && !this.closed) this.channel.write(kubeLeaseReport(lease));
  }

  /** etcd store: the hand-over our supervisor makes if we die without releasing; written only when it changed. */
  reportHandoverPlan(plan: CrashHandoverPlan | undefined): void {
    const line = handoverPlanReport(plan);
    if (line === this.lastPlan || this.closed) return;
    this.lastPlan = line;
    this.channel.write(line);
  }

  /** What to do when the supervisor dies (default: exit). */
  onSupervisorGone(fn: () => void): void {
    this.gone = fn;
    if (this.closed) fn();
  }
}
