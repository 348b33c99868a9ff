/**
 * NDP measurement client, run inside a lab host (nsenter --net): sends
 * Neighbor Solicitations for one IPv6 address over an AF_PACKET socket (the
 * form ndisc6 sends: to the solicited-node group, with the source link-layer
 * option) and times the Neighbor Advertisements that answer it.
 *
 *   latency: one solicitation at a time, waits for its advertisement (busy-poll)
 *   flood:   solicitations back to back for a fixed time, counts advertisements per second
 *
 * Prints one JSON line, in the same shape as arp-prober.
 */
import { ND_NEIGHBOR_ADVERT, neighborSolicitation, parseNdFrame } from '../../src/net/ndp.js';
import { ETH_P_IPV6, PACKET_OUTGOING, PacketSocket } from '../../src/os/packet-socket.js';
import { NetlinkLinks } from '../../src/os/links.js';

interface Args {
  mode: 'latency' | 'flood';
  iface: string;
  srcIp: string;
  target: string;
  count: number;
  budgetMs: number;
  timeoutMs: number;
  batch: number;
  /** Idle gap between latency requests (ms): 0 = back to back. */
  intervalMs: number;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, def?: string) => {
    const i = argv.indexOf(`--${name}`);
    const v = i >= 0 ? argv[i + 1] : def;
    if (v === undefined) throw new Error(`--${name} is required`);
    return v;
  };
  return {
    mode: get('mode') as Args['mode'],
    iface: get('iface', 'eth0'),
    srcIp: get('src-ip'),
    target: get('target'),
    count: Number(get('count', '1000')),
    budgetMs: Number(get('budget-ms', '20000')),
    timeoutMs: Number(get('timeout-ms', '2000')),
    batch: Number(get('batch', '32')),
    intervalMs: Number(get('interval-ms', '0')),
  };
}

/** A valid solicited advertisement for the target (the codec checks hop limit, checksum and options). */
function isAnswer(frame: Buffer, target: string): boolean {
  if (frame.length < 62 || frame[54] !== ND_NEIGHBOR_ADVERT) return false; // cheap pre-filter: ICMPv6 type
  const p = parseNdFrame(frame);
  return p !== undefined && p.type === ND_NEIGHBOR_ADVERT && p.target === target && p.solicited && p.checksumOk;
}

function drain(sock: PacketSocket, target: string): number {
  let n = 0;
  for (;;) {
    const rx = sock.tryReceive();
    if (!rx) return n;
    if (rx.packetType !== PACKET_OUTGOING && isAnswer(rx.frame, target)) n++;
  }
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const links = new NetlinkLinks();
  const link = await links.byName(a.iface);
  links.dispose();
  if (!link) throw new Error(`no interface ${a.iface}`);
  const sock = PacketSocket.open(link.ifindex, ETH_P_IPV6);
  const solicitation = neighborSolicitation({ srcMac: link.mac, srcIp: a.srcIp, target: a.target });
  drain(sock, a.target);

  if (a.mode === 'latency') {
    const samples: number[] = [];
    let lost = 0;
    const end = Date.now() + a.budgetMs;
    const nap = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < a.count && Date.now() < end; i++) {
      // Idle mode: the thread sleeps in the kernel between requests, so the CPUs go idle.
      if (a.intervalMs > 0 && i > 0) Atomics.wait(nap, 0, 0, a.intervalMs);
      drain(sock, a.target);
      const t0 = process.hrtime.bigint();
      sock.send(solicitation);
      const deadline = t0 + BigInt(a.timeoutMs) * 1_000_000n;
      let got = false;
      while (!got && process.hrtime.bigint() < deadline) {
        const rx = sock.tryReceive();
        if (rx && rx.packetType !== PACKET_OUTGOING && isAnswer(rx.frame, a.target)) got = true;
      }
      if (got) samples.push(Number(process.hrtime.bigint() - t0) / 1000);
      else lost++;
    }
    samples.sort((x, y) => x - y);
    const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))] ?? NaN;
    process.stdout.write(
      JSON.stringify({ mode: 'latency', samples: samples.length, lost, medianUs: q(0.5), p99Us: q(0.99), minUs: samples[0] ?? NaN, allUs: samples }) + '\n',
    );
  } else {
    let sent = 0;
    let received = 0;
    const t0 = process.hrtime.bigint();
    const end = t0 + BigInt(a.budgetMs) * 1_000_000n;
    while (process.hrtime.bigint() < end) {
      for (let i = 0; i < a.batch; i++) {
        try {
          sock.send(solicitation);
          sent++;
        } catch {
          break; // ENOBUFS: the qdisc is full; drain and retry
        }
      }
      received += drain(sock, a.target);
    }
    const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
    const settle = Date.now() + 300;
    while (Date.now() < settle) received += drain(sock, a.target);
    process.stdout.write(
      JSON.stringify({ mode: 'flood', seconds: elapsed, sent, received, sentPerSec: sent / elapsed, repliesPerSec: received / elapsed }) + '\n',
    );
  }
  sock.dispose();
}

main().catch((e) => {
  process.stderr.write(String(e?.stack ?? e) + '\n');
  process.exit(1);
});
