/**
 * The ownership backend's edges to the datapath, declared here so both sides
 * see them without the store importing the datapath: the datapath implements
 * OwnerWatch (ARP probes of other owners) and consumes LivenessGate (its
 * heartbeat asks the backend whether this node may answer at all); the
 * ownership backends consume the one and implement the other.
 */

/** One owner to watch on the wire. */
export interface WatchTarget {
  /** The owner node (what is reported). */
  node: string;
  /** One IP it owns. */
  ip: string;
  /** Our interface to probe from (a candidate interface for that IP). */
  iface: string;
}

/** Reports owners that went quiet on the wire (a fake in unit tests). */
export interface OwnerWatch {
  /** Replaces the set of watched owners. */
  setTargets(targets: readonly WatchTarget[]): void;
  /** `ip`: the watched address that went unanswered (the owner's key for it is checked before fencing). */
  onSilent(cb: (node: string, ip: string) => void): void;
  /** Still silent since it was reported (no answer heard from `node` about `ip` since); undefined: not known. */
  stillSilent?(node: string, ip: string): boolean;
}

/**
 * Whether this node may answer at all, decided by whoever holds its authority
 * (the store session). The heartbeat is written only while the gate is open,
 * and after a late wake-up only once the gate has re-checked ownership: a
 * resumed owner never answers beside the node that took over meanwhile.
 */
export interface LivenessGate {
  /**
   * Monotonic ms until which our own lease is valid by our own clock: the
   * datapath may answer until then (Infinity: no limit; 0: not at all). The
   * heartbeat, on a thread of its own, stops at it by itself.
   */
  answerUntilMs(): number;
  /**
   * We could not be seen for a while (asleep past the liveness limit, a link
   * without carrier, a foreign claim of our IP): others may have fenced us
   * out. Resolves once ownership is re-verified with the store and every IP
   * we no longer own is withdrawn from the datapath.
   */
  recheck(why: string): Promise<void>;
}

/** The local store: no one else can take over, the gate is always open. */
export const openGate: LivenessGate = { answerUntilMs: () => Infinity, recheck: async () => {} };
