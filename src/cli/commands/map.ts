import { Command } from 'commander';
import { compareIps, mustParseIp } from '../../core/addr.js';
import { livenessAge } from '../../datapath/l2-responder/liveness.js';
import { openPinnedMaps } from '../../datapath/l2-responder/program.js';
import { NetlinkLinks } from '../../os/links.js';
import { discoverPinDir } from '../discover.js';
import { DEFAULT_PIN_ROOT, defaultNodeName, parseNodeName } from '../options.js';
import { printTable } from '../table.js';

export function mapCommand(): Command {
  const map = new Command('map').description('inspect the datapath maps (read live from the pinned maps)');
  map
    .command('dump')
    .description('print the responder maps (IPv4 ARP and IPv6 NDP entries): IP, interface, replies, conflicts')
    .option('--node <name>', 'the node whose maps to read (default: the only agent running here, else the hostname)', parseNodeName)
    .option('--bpf-pin-dir <dir>', 'pin directory (default /sys/fs/bpf/herald/<node>)')
    .option('--json', 'machine-readable output')
    .action(async (opts: { node?: string; bpfPinDir?: string; json?: boolean }) => {
      const pinDir = discoverPinDir(opts, DEFAULT_PIN_ROOT, defaultNodeName()).path;
      const maps = openPinnedMaps(pinDir);
      const links = new NetlinkLinks();
      try {
        // Names are resolved in the caller's network namespace: run it where the agent runs.
        const names = new Map((await links.list()).map((l) => [l.ifindex, l.name]));
        const entries = maps.responders
          .entries()
          .map(([k, v]) => ({
            ip: k.ip,
            interface: names.get(k.ifindex) ?? `ifindex ${k.ifindex}`,
            ifindex: k.ifindex,
            replies: Number(v.replies),
            conflicts: Number(v.conflicts),
          }))
          .sort((a, b) => compareIps(mustParseIp(a.ip), mustParseIp(b.ip)) || a.ifindex - b.ifindex);
        const live = livenessAge(maps.config, process.hrtime.bigint());
        const capacity = maps.responders.info().maxEntries;
        if (opts.json) {
          process.stdout.write(JSON.stringify({ pinDir, capacity, liveness: live, entries }, null, 2) + '\n');
          return;
        }
        const age = live.ageMs === undefined ? 'never written' : `${(live.ageMs / 1000).toFixed(1)}s ago`;
        const state = live.ageMs !== undefined && live.ageMs <= live.maxAgeMs ? 'answering' : 'SILENT';
        process.stdout.write(`responder map ${pinDir}: ${entries.length} entries (capacity ${capacity} per family); liveness ${age} (limit ${live.maxAgeMs / 1000}s): ${state}\n`);
        printTable(['IP', 'INTERFACE', 'REPLIES', 'CONFLICTS'], entries.map((e) => [e.ip, e.interface, String(e.replies), String(e.conflicts)]));
      } finally {
        links.dispose();
        maps.responders.dispose();
        maps.interfaces.dispose();
        maps.config.dispose();
      }
    });
  return map;
}
