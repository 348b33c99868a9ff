/**
 * ARP measurement client, run inside a lab host (nsenter --net): sends ARP
 * requests for one IP over an AF_PACKET socket and times the replies.
 *
 *   latency: one broadcast request at a time, waits for its reply (busy-poll);
 *            --interval-ms N sleeps N ms between requests (idle CPUs)
 *   flood:   requests back to back for a fixed time, counts replies per second
 *
 * Prints one JSON line. Shared by bench/arp and later benchmarks.
 */
import { arpRequest, parseArpFrame } from '../../src/net/arp.js';
import { ETH_P_ARP, PACKET_OUTGOING, PacketSocket } from '../../src/os/packet-socket.js';
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

function isReply(frame: Buffer, target: string): boolean {
  const p = parseArpFrame(frame);
  return p !== undefined && p.op === 2 && p.spa === target;
}

function drain(sock: PacketSocket, target: string): number {
  let n = 0;
  for (;;) {
    const rx = sock.tryReceive();
    if (!rx) return n;
    if (rx.packetType !== PACKET_OUTGOING && isReply(rx.frame, target)) n++;
  }
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const links = new NetlinkLinks();
  const link = await links.byName(a.iface);
  links.dispose();
  if (!link) throw new Error(`no interface ${a.iface}`);
  const sock = PacketSocket.open(link.ifindex, ETH_P_ARP);
  const request = arpRequest({ srcMac: link.mac, srcIp: a.srcIp, targetIp: a.target });
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
      sock.send(request);
      const deadline = t0 + BigInt(a.timeoutMs) * 1_000_000n;
      let got = false;
      while (!got && process.hrtime.bigint() < deadline) {
        const rx = sock.tryReceive();
        if (rx && rx.packetType !== PACKET_OUTGOING && isReply(rx.frame, a.target)) got = true;
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
          sock.send(request);
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
