/**
 * Neighbor Solicitation sweep: a measurement client run inside a lab host
 * (the client) that asks, over AF_PACKET, for every address of a range —
 * `--prefix` + 1 … `--prefix` + `--count` (the low 32 bits, hex) — and
 * records when each was first answered (a solicited Neighbor Advertisement
 * sent to `--src-mac` for that target). Every `--round-ms` it asks again
 * for every address not answered yet, `--batch` solicitations at a time
 * with the event loop let through in between (replies are read as they
 * come). It asks from its own identity (`--src-ip`, `--src-mac`), as
 * lab/failover-probe.ts does, so the client kernel's neighbour cache is
 * never involved.
 *
 * Times are milliseconds since t0 (process.hrtime.bigint() at start:
 * CLOCK_MONOTONIC, shared by every process on the machine), so a harness
 * places its own events on this timeline. Prints "ready t0Ns=<n>" on stderr
 * once asking has started and "answered <k>" whenever the count grows (at
 * most every 200 ms); on SIGTERM (or after --duration-ms) writes
 * { t0Ns, answered: { ip: ms } , rounds, sent } to --out-json.
 *
 *   node --import tsx lab/nd-sweep.ts --iface eth0 --src-ip 2001:db8::fa --src-mac 02:00:00:00:02:fa \
 *     --prefix 2001:db8:1:: --count 10000 --out-json FILE [--round-ms 200] [--batch 500] [--duration-ms 600000]
 *     [--start-file PATH]
 *
 * --start-file: stay idle (booted, socket open) until PATH exists, checked
 * every 5 ms, so a harness can start the sweep at a moment of its choosing
 * without paying the process's start-up then.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { ND_NEIGHBOR_ADVERT, neighborSolicitation, parseNdFrame } from '../src/net/ndp.js';
import { NetlinkLinks } from '../src/os/links.js';
import { ETH_P_IPV6, PACKET_OUTGOING, PacketSocket } from '../src/os/packet-socket.js';
import { parseIp } from '../src/core/addr.js';

const T0 = process.hrtime.bigint();
const now = () => Number(process.hrtime.bigint() - T0) / 1e6;

function arg(name: string, def?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : def;
  if (v === undefined) throw new Error(`nd-sweep: --${name} is required`);
  return v;
}

/** prefix + n, as canonical text (the prefix's last 32 bits replaced). */
function nth(prefix: string, n: number): string {
  const ip = parseIp(prefix);
  if (!ip || ip.family !== 'IPv6') throw new Error(`nd-sweep: --prefix ${prefix}: not IPv6`);
  const words = prefix.endsWith('::') ? prefix.slice(0, -2) : prefix;
  return parseIp(`${words}::${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`)!.text;
}

async function main(): Promise<void> {
  const iface = arg('iface');
  const srcIp = arg('src-ip');
  const srcMac = arg('src-mac').toLowerCase();
  const prefix = arg('prefix');
  const count = Number(arg('count'));
  const out = arg('out-json');
  const roundMs = Number(arg('round-ms', '200'));
  const batch = Number(arg('batch', '500'));
  const durationMs = Number(arg('duration-ms', '600000'));
  const links = new NetlinkLinks();
  const link = await links.byName(iface);
  links.dispose();
  if (!link) throw new Error(`nd-sweep: no interface ${iface}`);
  const sock = PacketSocket.open(link.ifindex, ETH_P_IPV6);
  const targets = Array.from({ length: count }, (_, i) => nth(prefix, i));
  const wanted = new Set(targets);
  const frames = new Map(targets.map((t) => [t, neighborSolicitation({ srcMac, srcIp, target: t })]));
  const answered = new Map<string, number>();
  let rounds = 0;
  let sent = 0;
  let reported = 0;
  let lastReport = 0;
  const report = () => {
    const t = now();
    if (answered.size === reported || (t - lastReport < 200 && answered.size < count)) return;
    reported = answered.size;
    lastReport = t;
    process.stderr.write(`answered ${answered.size}\n`);
  };
  sock.onFrames((rx) => {
    if (rx.packetType === PACKET_OUTGOING) return;
    const nd = parseNdFrame(rx.frame);
    if (!nd || nd.type !== ND_NEIGHBOR_ADVERT || !nd.solicited || nd.ethDst !== srcMac) return;
    if (!wanted.has(nd.target) || answered.has(nd.target)) return;
    answered.set(nd.target, Math.round(now() * 1000) / 1000);
  });
  let stopping = false;
  const finish = () => {
    if (stopping) return;
    stopping = true;
    sock.dispose();
    writeFileSync(out, JSON.stringify({ t0Ns: T0.toString(), answered: Object.fromEntries(answered), rounds, sent }));
    process.exit(0);
  };
  process.on('SIGTERM', finish);
  process.on('SIGINT', finish);
  setTimeout(finish, durationMs).unref();
  const startFile = process.argv.includes('--start-file') ? arg('start-file') : undefined;
  process.stderr.write(`ready t0Ns=${T0}\n`);
  while (startFile && !existsSync(startFile) && !stopping) await new Promise((r) => setTimeout(r, 5));
  process.stderr.write('sweeping\n');
  while (!stopping) {
    const started = now();
    rounds++;
    const todo = targets.filter((t) => !answered.has(t));
    for (let i = 0; i < todo.length && !stopping; i += batch) {
      for (const t of todo.slice(i, i + batch)) {
        try {
          sock.send(frames.get(t)!);
          sent++;
        } catch {
          // a full queue: asked again next round
        }
      }
      await new Promise((r) => setImmediate(r));
    }
    report();
    await new Promise((r) => setTimeout(r, Math.max(5, roundMs - (now() - started))));
    report();
  }
}

main().catch((e) => {
  process.stderr.write(`nd-sweep: ${(e as Error).message}\n`);
  process.exit(1);
});
