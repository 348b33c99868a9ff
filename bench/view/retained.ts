/**
 * What the view keeps, without the garbage collector's noise: the real view
 * server (model, compact snapshot, SSE, counters deltas) over a synthetic
 * source of 10,000 IPs on one node, in this process, run with --expose-gc.
 * V8 heap in use after a full collection: with no client, then with five
 * clients that each loaded the snapshot and follow the stream (counters every
 * second, the answers changing on 1,000 IPs each time).
 *
 *   node --expose-gc --import tsx bench/view/retained.ts [--ips 10000] [--clients 5]
 */
import { request } from 'node:http';
import { EventRing } from '../../src/core/events.js';
import { buildView, type CountersPush, type ViewInput } from '../../src/api/view/model.js';
import { ViewHandler, ViewServer, type ViewSource } from '../../src/api/view/server.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const N = arg('--ips', 10_000);
const CLIENTS = arg('--clients', 5);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');

const services = new Map<string, string[]>();
const owners = new Map<string, string>();
const replies = new Map<string, number>();
for (let k = 1; k <= N; k++) {
  const ip = `2001:db8::${k.toString(16)}`;
  services.set(`ns-${k % 50}/svc-${k}`, [ip]);
  owners.set(ip, 'n1');
  replies.set(ip, 0);
}
const input = (): ViewInput => ({ node: 'n1', version: '0.0.0', store: 'local', startedAt: new Date(0).toISOString(), lease: 'local', lastError: null, interfaces: ['eth0'], services, owners, bgpAdvertised: new Set(), replies, peers: new Map(), pools: [], rejected: null, conflicts: [], garp: { sent: 0, failed: 0 }, events: [], lastEventId: 0 });
let tick = 0;
const src: ViewSource = {
  ring: new EventRing(),
  snapshot: () => buildView(input()),
  onOwners: () => () => {},
  onNodes: () => () => {},
  pools: () => [],
  onPools: () => () => {},
  counters: (): CountersPush => {
    tick++;
    let k = 0;
    for (const ip of replies.keys()) if (k++ % 10 === tick % 10) replies.set(ip, (replies.get(ip) ?? 0) + 1);
    return { answers: { n1: Object.fromEntries(replies) }, health: { n1: 'ok' }, reconcile: {} };
  },
  nodeReport: () => ({ node: 'n1', at: 0, replies: {}, notDone: [], health: 'ok' }),
  details: () => new Map(),
};
const server = new ViewServer({ host: '127.0.0.1', port: 0 }, new ViewHandler(src));
await server.start();
const port = server.address!.port;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const heapMB = async () => {
  for (let k = 0; k < 3; k++) {
    gc();
    await sleep(50);
  }
  return process.memoryUsage().heapUsed / 1e6;
};
const get = (path: string) =>
  new Promise<number>((resolve, reject) => {
    request({ host: '127.0.0.1', port, path }, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => (n += c.length)).on('end', () => resolve(n));
    })
      .on('error', reject)
      .end();
  });
// A warm-up snapshot (the parse cache and JIT), then the baseline.
await get('/v1/view?compact=1');
const base = await heapMB();
const streams: Array<{ destroy: () => void }> = [];
let pushed = 0;
for (let c = 0; c < CLIENTS; c++) {
  await get('/v1/view?compact=1');
  const req = request({ host: '127.0.0.1', port, path: '/v1/events' }, (res) => res.on('data', (b: Buffer) => (pushed += b.length)));
  req.end();
  streams.push(req);
}
await sleep(5000);
const open = await heapMB();
for (const s of streams) s.destroy();
await sleep(500);
const closed = await heapMB();
console.log(`bench/view retained — ${N} IPs, ${CLIENTS} clients following for 5 s (${(pushed / 1e6).toFixed(2)} MB pushed to them)`);
console.log(`  V8 heap in use after a full GC: no client ${base.toFixed(1)} MB, ${CLIENTS} clients ${open.toFixed(1)} MB (+${(open - base).toFixed(1)}), after they left ${closed.toFixed(1)} MB (+${(closed - base).toFixed(1)})`);
server.dispose();
