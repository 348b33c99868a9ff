/**
 * On-node service time from a capture on the responder's interface: request
 * in → reply out, both stamped by the kernel at the packet taps (`tcpdump -tt
 * --time-stamp-precision=nano`), so the client's stack and scheduling drop
 * out. Shared by bench/arp and bench/ndp.
 */
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
