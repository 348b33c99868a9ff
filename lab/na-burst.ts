/**
 * NA burst: the wire's share of a many-IP hand-over, with no control plane.
 * Run inside a lab host (nsenter --net); builds one unsolicited Neighbor
 * Advertisement per address (the same frames a herald successor sends, through
 * the same AF_PACKET sender), prints "ready", and on SIGUSR1 sends them all as
 * fast as the interface takes them (a full queue is retried at once), then
 * prints "sent N in X ms" and exits. bench/failover/many-ips runs two of
 * these, one per successor, as the floor its hand-overs are measured against.
 *
 *   node --import tsx lab/na-burst.ts --iface eth0 --mac 02:.. --prefix 2001:db8:100:: --from 1 --to 500 [--step 1]
 */
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { PacketFrameSender } from '../src/datapath/packet-sender.js';
import { unsolicitedAdvertisement } from '../src/net/ndp.js';

const args = process.argv.slice(2);
const value = (name: string, fallback?: string): string => {
  const i = args.indexOf(`--${name}`);
  const v = i >= 0 ? args[i + 1] : fallback;
  if (v === undefined) throw new Error(`na-burst: --${name} is required`);
  return v;
};
const iface = value('iface');
const mac = value('mac');
const prefix = value('prefix');
const from = Number(value('from'));
const to = Number(value('to'));
const step = Number(value('step', '1'));
// From this namespace's netlink (sysfs under nsenter --net is still the host's).
const ifindex = (JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'dev', iface], { encoding: 'utf8' })) as Array<{ ifindex: number }>)[0]!.ifindex;

const frames: Buffer[] = [];
for (let i = from; i <= to; i += step) frames.push(unsolicitedAdvertisement(mac, `${prefix}${i.toString(16)}`));
const sender = new PacketFrameSender();

process.on('SIGUSR1', () => {
  const t0 = performance.now();
  let retries = 0;
  for (const frame of frames) {
    while (!sender.send(ifindex, frame)) retries++;
  }
  const ms = performance.now() - t0;
  console.log(`sent ${frames.length} in ${ms.toFixed(1)} ms (${retries} retries on a full queue)`);
  sender.dispose();
  process.exit(0);
});
console.log(`ready: ${frames.length} frames`);
// Kept alive until the signal.
setInterval(() => {}, 1 << 30);
