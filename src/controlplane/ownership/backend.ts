/**
 * Ownership: exactly one node answers for each IP at a time. Ownership is per
 * IP, not per service, so an IP shared by several services can never be
 * answered by two nodes (Cilium #48419). Backends: local (one node owns all it
 * qualifies for), etcd (leases; next), Kubernetes Leases (later).
 */
import type { Disposable } from '../../core/disposable.js';

export interface OwnershipView {
  /** IPs this node owns now. */
  owned: ReadonlySet<string>;
  /** Known owner per IP (this node or others), for status. */
  owners: ReadonlyMap<string, string>;
}

export interface OwnershipBackend extends Disposable {
  readonly kind: 'local' | 'etcd' | 'kubernetes';
  /**
   * `onChange` may return a promise that resolves once the datapath has applied
   * the view; a backend giving an IP away waits for it before letting go, so
   * the next owner never answers while this node still does.
   */
  start(onChange: (view: OwnershipView) => void | Promise<void>): Promise<void>;
  /**
   * The IPs this node qualifies for, with the interfaces it would announce each
   * on; the backend contends for them and gives up the rest. `affinity` maps
   * an IP to the key its node preference is computed from (default: the IP
   * itself): a dual-stack service's addresses share one, so the same node is
   * preferred for both families and they move together.
   */
  setCandidates(candidates: ReadonlyMap<string, readonly string[]>, affinity?: ReadonlyMap<string, string>): void;
  /**
   * Graceful stop: give up every IP at once so another node can take over
   * without waiting. `silenced`: the datapath already answers nothing (the
   * liveness stamp is cleared), so a backend may hand IPs straight to their
   * successors without waiting for the local withdrawal.
   */
  release(opts?: { silenced?: boolean }): Promise<void>;
  view(): OwnershipView;
}
