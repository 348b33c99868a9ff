/**
 * Test driver: a real agent (real BPF program, maps, reconciler, AF_PACKET)
 * whose l2-announce table is written from stdin, one command per line:
 *   add IP IFACE ORIGIN | del IP IFACE ORIGIN | health
 * Prints "ok <cmd> <op>" once the reconciler has applied the change (waitForRow). Run inside a
 * lab host: nsenter --net=/run/netns/NS node --import tsx test/tools/l2-driver.ts PIN_DIR
 */
import { createInterface } from 'node:readline';
import { systemClock } from '../../src/core/clock.js';
import { StateDB } from '../../src/core/statedb/index.js';
import { L2Stack } from '../../src/datapath/l2-responder/stack.js';
import { PacketFrameSender } from '../../src/datapath/packet-sender.js';
import { NetlinkLinks } from '../../src/os/links.js';
import { reconcilerDefaults } from '../../src/core/reconciler/reconciler.js';
import { silentLogger } from '../../src/core/logger.js';
import { l2AnnounceKey, l2AnnounceTable, withOrigin, withoutOrigin } from '../../src/datapath/tables/l2-announce.js';

const pinDir = process.argv[2]!;
const db = new StateDB([l2AnnounceTable]);
const stackLinks = new NetlinkLinks();
const agent = new L2Stack(
  { db, links: stackLinks, sender: new PacketFrameSender(), clock: systemClock, log: silentLogger },
  {
    datapath: { pinDir, responderMapSize: 1024, liveness: { intervalMs: 250, maxAgeMs: 3000 } },
    garp: { count: 1, intervalMs: 1000 },
    reconciler: reconcilerDefaults,
  },
);
db.registerInitializer(l2AnnounceTable, 'driver').done();
stackLinks.subscribe(() => agent.linksChanged());
agent.start();
process.stdout.write('ready\n');

for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, ip, iface, origin] = line.trim().split(/\s+/);
  if (cmd === 'add' || cmd === 'del') {
    const key = l2AnnounceKey(ip!, iface!);
    db.update([l2AnnounceTable], (t) => {
      const row = t.get(l2AnnounceTable, key);
      if (cmd === 'add') t.insert(l2AnnounceTable, withOrigin(row, ip!, iface!, origin!));
      else if (row) {
        const rest = withoutOrigin(row, origin!);
        if (rest) t.insert(l2AnnounceTable, rest);
        else t.delete(l2AnnounceTable, row);
      }
    });
    // This revision of the row (or its deletion) has reached the BPF map, as the reconcile-status table says.
    const done = await agent.reconciler.waitForRow(key, db.readTxn().revision(l2AnnounceTable), { untilDone: true });
    process.stdout.write(`ok ${line.trim()} ${done.op}\n`);
  } else if (cmd === 'health') {
    process.stdout.write(`health ${JSON.stringify(agent.reconciler.health())}\n`);
  }
}
agent.dispose();
process.exit(0);
