import { Command } from 'commander';
import { systemClock } from '../../core/clock.js';
import { GarpAnnouncer, garpDefaults } from '../../datapath/garp.js';
import { PacketFrameSender } from '../../datapath/packet-sender.js';
import { isIp } from '../../core/addr.js';
import { NetlinkLinks, requireEthernetLink } from '../../os/links.js';
import { createLogger } from '../logging.js';
import { durationOption, parseCount } from '../options.js';

export function garpCommand(): Command {
  return new Command('garp')
    .description('send a gratuitous ARP burst (IPv4) or unsolicited Neighbor Advertisements (IPv6) for an IP from an interface (works without an address on it)')
    .argument('<interface>', 'interface to send from')
    .argument('<ip>', 'IPv4 or IPv6 address to announce')
    .option('--count <n>', 'rounds (IPv4: the request and the reply form; IPv6: one NA to ff02::1)', parseCount, garpDefaults.count)
    .addOption(durationOption('--interval <duration>', 'time between rounds', garpDefaults.intervalMs))
    .action(async (ifname: string, ip: string, opts: { count: number; interval: number }) => {
      if (!isIp(ip)) throw new Error(`"${ip}" is not an IP address`);
      const links = new NetlinkLinks();
      const link = await requireEthernetLink(links, ifname);
      links.dispose();
      const sender = new PacketFrameSender();
      const log = createLogger({ format: 'text', level: 'info' });
      const garp = new GarpAnnouncer({ sender, clock: systemClock, log }, { count: opts.count, intervalMs: opts.interval });
      garp.announce({ ip, ifindex: link.ifindex, mac: link.mac });
      const waitMs = Math.max(0, opts.count - 1) * opts.interval;
      await new Promise((r) => setTimeout(r, waitMs + 10));
      garp.dispose();
      sender.dispose();
      process.stdout.write(`sent ${garp.stats.sent} frame(s), ${garp.stats.failed} failed\n`);
      if (garp.stats.failed > 0) process.exitCode = 1;
    });
}
