import { rmSync } from 'node:fs';
import { Command } from 'commander';
import { detach, openPinnedMaps } from '../../datapath/l2-responder/program.js';
import { detachLb, detachLbXdp, lbAttachedProgramId } from '../../datapath/lb/program.js';
import { NetlinkLinks } from '../../os/links.js';
import { defaultNodeName, parseNodeName, pinDirFor } from '../options.js';

export function datapathCommand(): Command {
  const dp = new Command('datapath').description('manage the kernel side of the datapath');
  dp.command('remove')
    .description('detach the L2 responder from every interface it serves and the load balancer from every interface here, and remove their pinned maps')
    .option('--node <name>', 'the node whose datapath to remove', parseNodeName, defaultNodeName())
    .option('--bpf-pin-dir <dir>', 'pin directory (default /sys/fs/bpf/herald/<node>)')
    .action(async (opts: { node: string; bpfPinDir?: string }) => {
      const pinDir = pinDirFor(opts);
      const links = new NetlinkLinks();
      try {
        const names = new Map((await links.list()).map((l) => [l.ifindex, l.name]));
        let detached = 0;
        // The load balancer (priority 3, ingress and egress) wherever it is attached in this namespace.
        for (const [ifindex, name] of names) {
          if (lbAttachedProgramId(ifindex) === undefined) continue;
          detachLb(ifindex, name, pinDir);
          detachLbXdp(ifindex, name); // --lb-xdp's program (by name: another XDP program stays)
          detached++;
        }
        try {
          const maps = openPinnedMaps(pinDir);
          for (const ifindex of maps.interfaces.keys()) {
            if (detach(ifindex, names.get(ifindex), pinDir)) detached++;
          }
          maps.responders.dispose();
          maps.interfaces.dispose();
          maps.config.dispose();
        } catch (e) {
          if ((e as { code?: string }).code !== 'HERALD_BPF_MAP') throw e;
        }
        rmSync(pinDir, { recursive: true, force: true });
        process.stdout.write(`detached from ${detached} interface(s); removed ${pinDir}\n`);
      } finally {
        links.dispose();
      }
    });
  return dp;
}
