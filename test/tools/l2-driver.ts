/**
 * Test driver: a real agent (real BPF program, maps, reconciler, AF_PACKET)
 * whose l2-announce table is written from stdin, one command per line:
 *   add IP IFACE ORIGIN | del IP IFACE ORIGIN | health
 * Prints "ok <cmd>" once the reconciler has applied the change. Run inside a
 * lab host: nsenter --net=/run/netns/NS node --import tsx test/tools/l2-driver.ts PIN_DIR
 */
import { createInterface } from 'node:readline';
import { Agent } from '../../src/agent.js';
import { reconcilerDefaults } from '../../src/core/reconciler/reconciler.js';
import { silentLogger } from '../../src/core/logger.js';
import { l2AnnounceKey, l2AnnounceTable, withOrigin, withoutOrigin } from '../../src/datapath/tables/l2-announce.js';

const pinDir = process.argv[2]!;
const agent = new Agent(
  {
    node: 'driver',
    announcements: [],
    datapath: { pinDir, responderMapSize: 1024, liveness: { intervalMs: 250, maxAgeMs: 3000 } },
    garp: { count: 1, intervalMs: 1000 },
    reconciler: reconcilerDefaults,
  },
  silentLogger,
);
await agent.start();
process.stdout.write('ready\n');

const settle = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 5));
};

for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, ip, iface, origin] = line.trim().split(/\s+/);
  if (cmd === 'add' || cmd === 'del') {
    agent.db.update([l2AnnounceTable], (t) => {
      const row = t.get(l2AnnounceTable, l2AnnounceKey(ip!, iface!));
      if (cmd === 'add') t.insert(l2AnnounceTable, withOrigin(row, ip!, iface!, origin!));
      else if (row) {
        const rest = withoutOrigin(row, origin!);
        if (rest) t.insert(l2AnnounceTable, rest);
        else t.delete(l2AnnounceTable, row);
      }
    });
    await settle();
    process.stdout.write(`ok ${line.trim()}\n`);
  } else if (cmd === 'health') {
    process.stdout.write(`health ${JSON.stringify(agent.health())}\n`);
  }
}
agent.dispose();
process.exit(0);
