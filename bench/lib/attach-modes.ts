/**
 * herald's responder measured both ways it can be attached, in one run: the
 * tcx link (the default on Linux ≥ 6.6) and the legacy cls_bpf filter (the
 * fallback, and what herald did before: the "before" of the same run). The
 * agent is restarted with HERALD_TC_ATTACH between the two — the hand-over
 * is atomic, the pinned entries stay — and what is attached is checked from
 * the kernel before any sample counts.
 */
import type { Host, LabProcess } from '../../lab/lab.js';
import { startAgentReady, tcAttached } from '../../test/helpers/lab-tools.js';

export type AttachMode = 'tcx' | 'cls_bpf';

export interface AttachVariant {
  /** The responder's name in the results. */
  name: string;
  mode: AttachMode;
}

export const ATTACH_VARIANTS: AttachVariant[] = [
  { name: 'herald', mode: 'tcx' },
  { name: 'herald_cls_bpf', mode: 'cls_bpf' },
];

export class AttachSwitcher {
  private mode: AttachMode = 'tcx';

  constructor(
    private readonly node: Host,
    private readonly args: string[],
    public agent: LabProcess,
    private readonly log: (s: string) => void,
  ) {}

  /** Restarts the agent attached the other way if needed, and checks the kernel's hook. */
  async use(mode: AttachMode): Promise<void> {
    if (mode !== this.mode) {
      this.log(`  (agent restarted with its responder attached through ${mode})`);
      await this.agent.stop();
      this.agent = await startAgentReady(this.node, this.args, `agent-${mode}`, mode === 'cls_bpf' ? { HERALD_TC_ATTACH: 'cls_bpf' } : {});
      this.mode = mode;
    }
    const seen = tcAttached(this.node, 'eth0').ingress;
    const names = (mode === 'tcx' ? seen.tcx : seen.clsBpf).map((p) => p.name);
    const other = (mode === 'tcx' ? seen.clsBpf : seen.tcx).length;
    if (names.join() !== 'herald_l2_ingre' || other !== 0) throw new Error(`expected the responder alone through ${mode} on eth0: ${JSON.stringify(seen)}`);
  }
}

/** Nothing of anyone's at eth1's tc hooks (the kernel's address lives there). */
export function assertBareHook(node: Host, iface: string): void {
  const seen = tcAttached(node, iface);
  const n = seen.ingress.tcx.length + seen.ingress.clsBpf.length;
  if (n !== 0) throw new Error(`${iface} must carry no tc program: ${JSON.stringify(seen)}`);
}
