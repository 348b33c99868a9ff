/**
 * herald's tc programs in the order they run on an interface (their legacy
 * cls_bpf priorities: 1 the L2 responder, 2 the service policy, 3 the L4
 * load balancer, ingress and egress). With tcx the same order is kept by
 * placing each link relative to the others (os/tc-attach).
 */
import { kernelName, type TcProgramSpec } from '../os/tc-attach.js';
import type { TcSlot } from '../os/tc.js';

const HANDLE = 0x4852; // 'HR'

const RANKS: Record<string, number> = {
  herald_l2_ingress: 1,
  herald_policy: 2,
  herald_lb_ingress: 3,
  herald_lb_egress: 3,
};

export function tcProgram(progName: keyof typeof RANKS & string, opts: { egress?: boolean; pinDir?: string } = {}): TcProgramSpec {
  const slot: TcSlot = { handle: HANDLE, priority: RANKS[progName]! };
  return {
    progName,
    slot,
    ...(opts.egress ? { egress: true } : {}),
    ...(opts.pinDir !== undefined ? { pinDir: opts.pinDir } : {}),
    // The kernel reports names cut to 15 characters.
    rankOf: (name) => Object.entries(RANKS).find(([n]) => kernelName(n) === name)?.[1],
  };
}
