/**
 * Runs herald's wire watch (src/datapath/owner-watch.ts) inside a lab host
 * (nsenter --net) against one owner, for lab tests: prints "watching" once
 * started and "silent <node>" when the owner goes quiet on the wire.
 *
 *   node --import tsx lab/owner-watch-run.ts --node n1 --ip 2001:db8:100::10 --iface eth0
 */
import { systemClock } from '../src/core/clock.js';
import { silentLogger } from '../src/core/logger.js';
import { PacketOwnerWatch } from '../src/datapath/owner-watch.js';
import { NetlinkLinks } from '../src/os/links.js';

const argv = process.argv.slice(2);
const get = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  if (i < 0 || argv[i + 1] === undefined) throw new Error(`--${name} is required`);
  return argv[i + 1]!;
};
const links = new NetlinkLinks();
const watch = new PacketOwnerWatch({ links, clock: systemClock, log: silentLogger });
watch.onSilent((node) => process.stdout.write(`silent ${node}\n`));
watch.setTargets([{ node: get('node'), ip: get('ip'), iface: get('iface') }]);
process.stdout.write('watching\n');
const stop = () => {
  watch.dispose();
  links.dispose();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
