/**
 * Lab helper for socket-filter.lab.test.ts, run inside a lab host:
 *   listen <ifindex> <filter-json|none>   prints one JSON line per frame read; SIGUSR2 swaps to the
 *                                       filter in $SWAP_FILTER (prints "swapped")
 *   reopen <ifindex> <filter-json>      opens filtered sockets under a flood; prints {opens, drained, unfiltered}
 *   send <ifindex> <frames-json>        sends ARP frames (ArpFields, optional ethType override)
 * A filter is {ops?, sender?, target?} with prefixes as text.
 */
import { buildArpFrame, parseArpFrame, type ArpFields } from '../../src/net/arp.js';
import { arpBlock, ipv4Prefix, socketFilter } from '../../src/net/socket-filter.js';
import { ETH_P_ALL, PacketSocket } from '../../src/os/packet-socket.js';

interface FilterSpec { ops?: number[]; sender?: string[]; target?: string[] }
const [mode, ifindexText, arg] = process.argv.slice(2) as [string, string, string];
const ifindex = Number(ifindexText);
const program = (spec: FilterSpec) =>
  socketFilter([arpBlock({ ...(spec.ops ? { ops: spec.ops } : {}), sender: (spec.sender ?? []).map(ipv4Prefix), target: (spec.target ?? []).map(ipv4Prefix) })]);

if (mode === 'listen') {
  // ETH_P_ALL, so the filter's own ethertype test is what keeps other traffic out.
  const sock = PacketSocket.open(ifindex, ETH_P_ALL, arg === 'none' ? {} : { filter: program(JSON.parse(arg) as FilterSpec) });
  sock.onFrames(({ frame, packetType }) => {
    if (packetType === 4) return; // our own
    const arp = parseArpFrame(frame);
    process.stdout.write(JSON.stringify({ src: [...frame.subarray(6, 12)].map((x) => x.toString(16).padStart(2, '0')).join(':'), ethType: frame.readUInt16BE(12), op: arp?.op, sha: arp?.sha, spa: arp?.spa, tpa: arp?.tpa }) + '\n');
  });
  process.on('SIGUSR2', () => {
    sock.setFilter(program(JSON.parse(process.env['SWAP_FILTER']!) as FilterSpec));
    process.stdout.write('swapped\n');
  });
  process.on('SIGTERM', () => {
    sock.dispose();
    process.exit(0);
  });
  process.stdout.write(`ready drained=${sock.drained}\n`);
} else if (mode === 'reopen') {
  // Opens filtered sockets again and again while a flood runs: whatever the
  // first read returns must have passed the filter (frames queued between
  // socket() and the filter were drained), and some must have been drained,
  // or the race was never exercised.
  const spec = JSON.parse(arg) as FilterSpec;
  const allowed = new Set(spec.sender ?? []);
  let opens = 0, drained = 0, unfiltered = 0;
  const deadline = Date.now() + 20_000;
  while ((drained < 5 || opens < 200) && Date.now() < deadline) {
    const sock = PacketSocket.open(ifindex, ETH_P_ALL, { filter: program(spec) });
    opens++;
    drained += sock.drained;
    for (let rx = sock.tryReceive(); rx; rx = sock.tryReceive()) {
      const arp = parseArpFrame(rx.frame);
      if (!arp || !allowed.has(arp.spa)) unfiltered++;
    }
    sock.dispose();
  }
  process.stdout.write(JSON.stringify({ opens, drained, unfiltered }) + '\n');
} else if (mode === 'send') {
  const sock = PacketSocket.open(ifindex, ETH_P_ALL);
  for (const f of JSON.parse(arg) as Array<ArpFields & { ethType?: number }>) {
    const b = buildArpFrame(f);
    if (f.ethType) b.writeUInt16BE(f.ethType, 12);
    sock.send(b);
  }
  sock.dispose();
} else {
  throw new Error(`unknown mode ${mode}`);
}
