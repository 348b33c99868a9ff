/** The wire watch's options and defaults, apart from its sockets (the CLI reads them without loading koffi). */
export interface OwnerWatchOptions {
  probeIntervalMs: number;
  /** No reply for this long (while watched this long) ⇒ silent. */
  silenceMs: number;
  /**
   * Two probes further apart than this mean our own timer ran late: the
   * evidence so far is void and the window starts again. Default: half the
   * silence window (so at least two on-time probes span any verdict).
   */
  maxProbeGapMs?: number;
  /**
   * Let the kernel drop every frame but ARP replies from a watched IPv4 and
   * Neighbor Advertisements for a watched IPv6 (classic BPF socket filters),
   * so a flood of other hosts' ARP or NDP costs no JavaScript. Default true; false only to measure the difference (bench/wire-filter).
   */
  wireFilter?: boolean;
  /**
   * An owner heard before that has left `suspectAfterProbes` probes in a row
   * unanswered is overdue: it is probed this often from then on (default 10
   * ms), so the verdict is taken on dense evidence and the moment the window
   * ends, not up to a probe interval later. 0 turns this off.
   */
  suspectProbeIntervalMs?: number;
  /** Unanswered probes in a row that make an owner overdue (default 2). */
  suspectAfterProbes?: number;
}

export const ownerWatchDefaults: OwnerWatchOptions = { probeIntervalMs: 50, silenceMs: 200, suspectProbeIntervalMs: 10, suspectAfterProbes: 2 };
