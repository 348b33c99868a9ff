/**
 * bench/failover/standby-cost — what preparing candidates costs (the standby
 * of src/datapath/l2-responder/standby.ts): N IPv6 candidates on one veth,
 * real solicited-node memberships (PacketMulticastGroups), frames built by
 * the real GarpAnnouncer (sending nothing). Prints the time to prepare them
 * all, the longest event-loop stall meanwhile (it works in slices of 256),
 * and the cost of the same set given again (what every control-plane pass
 * pays). Root; runs itself in a namespace of its own, removed afterwards.
 *
 *   node --import tsx bench/failover/standby-cost.ts
 */
import { execFileSync, execSync } from 'node:child_process';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger, type Logger } from '../../src/core/logger.js';
import { GarpAnnouncer } from '../../src/datapath/garp.js';
import { CandidateStandby } from '../../src/datapath/l2-responder/standby.js';
import { PacketMulticastGroups } from '../../src/os/multicast-groups.js';

if (!process.env.HERALD_STANDBY_COST_NS) {
  const ns = `hsb-${process.pid}`;
  execFileSync('ip', ['netns', 'add', ns]);
  try {
    execFileSync('ip', ['link', 'add', 'eth0', 'netns', ns, 'type', 'veth', 'peer', 'name', 'eth1', 'netns', ns]);
    for (const l of ['eth0', 'eth1']) execFileSync('ip', ['-n', ns, 'link', 'set', l, 'up']);
    execFileSync('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', process.argv[1]!], { stdio: 'inherit', env: { ...process.env, HERALD_STANDBY_COST_NS: ns } });
  } finally {
    execFileSync('ip', ['netns', 'del', ns]);
  }
  process.exit(0);
}
const log: Logger = silentLogger;
const ifindex = Number(execSync('cat /sys/class/net/eth0/ifindex').toString());
const mac = execSync('cat /sys/class/net/eth0/address').toString().trim();
for (const n of [1000, 10000]) await measure(n);

async function measure(n: number): Promise<void> {
  const groups = new PacketMulticastGroups();
  const garp = new GarpAnnouncer({ sender: { send: () => true }, clock: systemClock, log }, { count: 5, intervalMs: 1000 });
  const link = { name: 'eth0', ifindex, mac, ethernet: true, up: true, carrier: true, arp: true };
  const standby = new CandidateStandby({ resolve: async () => link, groups, garp, log });
  // Distinct low 24 bits: one solicited-node group each.
  const wanted = new Map(Array.from({ length: n }, (_, i) => [`2001:db8:100::${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}`, ['eth0']] as [string, string[]]));
  let longest = 0;
  let last = performance.now();
  const tick = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  const t0 = performance.now();
  await standby.set(wanted);
  const t1 = performance.now();
  clearInterval(tick);
  await standby.set(new Map(wanted));
  const t2 = performance.now();
  console.log(`${n} IPv6 candidates: prepared in ${(t1 - t0).toFixed(0)} ms (longest event-loop stall ${longest.toFixed(1)} ms), the same set again ${(t2 - t1).toFixed(1)} ms; groups held ${groups.held().size}`);
  await standby.set(new Map());
  groups.dispose();
  garp.dispose();
}
