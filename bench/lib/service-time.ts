/**
 * On-node service time from a capture on the responder's interface: request
 * in → reply out, both stamped by the kernel at the packet taps (`tcpdump -tt
 * --time-stamp-precision=nano`), so the client's stack and scheduling drop
 * out. Shared by bench/arp and bench/ndp.
 */
import { rmSync } from 'node:fs';

export interface ServiceTimes {
  pairs: number;
  p10Us: number;
  p50Us: number;
  p90Us: number;
  p99Us: number;
}

/**
 * Request → reply gaps (µs) for `target` from tcpdump -tt lines: each request
 * (a line containing `request`) paired with the next reply (`reply`); a
 * request left unanswered is replaced by the next one, so a lost reply never
 * pairs with a later request's answer.
 */
export function serviceGaps(text: string, target: string, request: string, reply: string): number[] {
  const gaps: number[] = [];
  let asked: number | undefined;
  for (const line of text.split('\n')) {
    if (!/^\d/.test(line) || !line.includes(target)) continue;
    const t = Number(line.split(' ')[0]);
    if (line.includes(request)) asked = t;
    else if (line.includes(reply) && asked !== undefined) {
      gaps.push((t - asked) * 1e6);
      asked = undefined;
    }
  }
  return gaps;
}

export function summarize(gaps: number[]): ServiceTimes {
  const s = [...gaps].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
  return { pairs: s.length, p10Us: q(0.1), p50Us: q(0.5), p90Us: q(0.9), p99Us: q(0.99) };
}

/** What a capture needs from a lab host (lab/lab.ts Host). */
export interface CaptureHost {
  spawn(label: string, cmd: string, args: string[]): { waitForOutput(p: RegExp | string, timeoutMs?: number): Promise<void>; stop(sig?: NodeJS.Signals): Promise<void> };
  must(cmd: string, args: string[]): string;
}

/**
 * Runs `drive` (which sends the requests) under a capture on `host`'s `iface`
 * and returns the request → reply gaps for `target`. The capture is written
 * to a pcap file with nanosecond stamps and read back at the end: a pipe's
 * line-by-line output is kept only in part by the lab's process wrapper.
 */
export async function captureGaps(
  host: CaptureHost,
  opts: { iface: string; filter: string; target: string; request: string; reply: string; file: string },
  drive: () => void | Promise<void>,
): Promise<number[]> {
  const cap = host.spawn('tcpdump', 'tcpdump', ['-i', opts.iface, '-n', '-U', '--time-stamp-precision=nano', '-w', opts.file, opts.filter]);
  try {
    await cap.waitForOutput('listening on', 10_000);
    await drive();
    // Not --immediate-mode (a wake-up of tcpdump per packet would run inside
    // the interval measured): packets reach tcpdump when the kernel retires a
    // TPACKET_V3 block, at the latest after libpcap's 1 s block timeout. Wait
    // for that, or the last second of packets is lost at SIGINT.
    await new Promise((r) => setTimeout(r, 1500));
  } finally {
    await cap.stop('SIGINT');
  }
  try {
    const text = host.must('tcpdump', ['-r', opts.file, '-n', '-tt', '--time-stamp-precision=nano']);
    return serviceGaps(text, opts.target, opts.request, opts.reply);
  } finally {
    if (!process.env.KEEP_PCAP) rmSync(opts.file, { force: true });
  }
}
