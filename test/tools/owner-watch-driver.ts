/**
 * Test driver: the real wire watch (PacketOwnerWatch, AF_PACKET, socket
 * filters) watching one owner. Prints one JSON line per event, times in
 * monotonic ms: {"ev":"reply"} for each answer read, {"ev":"silent",...}
 * when it reports the owner silent, {"ev":"probes","n":…} every 10 ms.
 *   nsenter --net=/run/netns/NS node --import tsx test/tools/owner-watch-driver.ts IP IFACE SILENCE_MS
 */
import { systemClock, monotonicMs } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { PacketOwnerWatch, ownerWatchDefaults } from '../../src/datapath/owner-watch.js';
import { NetlinkLinks } from '../../src/os/links.js';

const [ip, iface, silence] = process.argv.slice(2);
const watch = new PacketOwnerWatch({ links: new NetlinkLinks(), clock: systemClock, log: silentLogger }, { ...ownerWatchDefaults, silenceMs: Number(silence) });
const out = (o: object) => process.stdout.write(JSON.stringify({ t: monotonicMs(systemClock), ...o }) + '\n');
watch.onSilent((node) => out({ ev: 'silent', node, probes: watch.probesSent }));
watch.setTargets([{ node: 'owner', ip: ip!, iface: iface! }]);
setInterval(() => out({ ev: 'probes', n: watch.probesSent }), 10);
out({ ev: 'ready' });
