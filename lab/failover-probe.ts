/**
 * Failover probe: a measurement client run inside a lab host (nsenter --net)
 * for a fixed time, or until SIGTERM/SIGINT. Every interval it
 *
 *   - sends a fresh broadcast ARP request for the target over AF_PACKET (never
 *     the kernel's neighbour cache) and records every reply: receive time and
 *     the answering MAC, per request, so gaps and split brain (two MACs
 *     answering one request) are measurable;
 *   - starts a TCP connect + `GET / HTTP/1.0` to target:http-port with a short
 *     timeout, asynchronously (a hanging connection never delays the ARP
 *     cadence); each lab node's server answers with its node name. This path
 *     goes through the client kernel's neighbour entry, whose changes are
 *     recorded too (`ip monitor neigh`).
 *
 * The probe must not steer what it measures. Linux updates an existing
 * neighbour entry from ANY ARP reply it receives (arp_process: no check of the
 * target address), so replies to 100 requests/s sent from the client's own
 * MAC would refresh the client kernel's entry for the target every locktime
 * and hide a missing gARP from the HTTP path. So the probe asks from its own
 * identity: `--src-ip` an unassigned documentation address and `--src-mac` a
 * locally administered MAC. Replies then go to that MAC, the client's stack
 * drops them as PACKET_OTHERHOST, and only this socket sees them (a veth
 * delivers every frame to packet sockets; on real NICs use promiscuous mode).
 * Replies to other askers (the kernel's own resolutions) are kept apart as
 * `kernelReplies`. A reply is attributed to the latest request sent before it
 * arrived. A responder's identity is its
 * MAC; when the Ethernet source and the ARP sender MAC differ it is
 * "ETHSRC|SHA", so such a reply never merges with a well-formed one.
 *
 * Times are milliseconds since t0, where t0Ns is process.hrtime.bigint() at
 * start: CLOCK_MONOTONIC, shared by every process on the machine, so the
 * harness can place its own events (the failure trigger) on this timeline.
 *
 * An IPv6 --target is asked with Neighbor Solicitations (to its solicited-node
 * group, SLLA = --src-mac) and the advertisements are read as ARP replies.
 *
 *   node --import tsx lab/failover-probe.ts --iface eth0 --src-ip 192.0.2.250 \
 *     --src-mac 02:00:00:00:02:fa --target 198.51.100.50 [--interval-ms 10] [--duration-ms 10000] [--http-port 8080] \
 *     [--http-timeout-ms 200] [--out-json FILE]
 *
 * Prints "ready t0Ns=<n>" on stderr once probing has started; the result is
 * one JSON document on stdout, or in --out-json.
 *
 * Longer than our ~400-line guideline on purpose: it is one self-contained
 * script run inside the client namespace, and its result types are exported
 * (type-only) for the harness's analysis.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { arpRequest, parseArpFrame } from '../src/net/arp.js';
import { ND_NEIGHBOR_ADVERT, neighborSolicitation, parseNdFrame } from '../src/net/ndp.js';
import { NetlinkLinks } from '../src/os/links.js';
import { ETH_P_ARP, ETH_P_IPV6, PACKET_OUTGOING, PacketSocket, type ReceivedFrame } from '../src/os/packet-socket.js';

interface Args {
  iface: string;
  srcIp: string;
  srcMac: string | undefined;
  target: string;
  intervalMs: number;
  durationMs: number;
  httpPort: number;
  httpTimeoutMs: number;
  outJson: string | undefined;
  neigh: boolean;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, def?: string) => {
    const i = argv.indexOf(`--${name}`);
    const v = i >= 0 ? argv[i + 1] : def;
    if (v === undefined) throw new Error(`--${name} is required`);
    return v;
  };
  const a: Args = {
    iface: get('iface', 'eth0'),
    srcIp: get('src-ip'),
    srcMac: argv.includes('--src-mac') ? get('src-mac').toLowerCase() : undefined,
    target: get('target'),
    intervalMs: Number(get('interval-ms', '10')),
    durationMs: Number(get('duration-ms', '10000')),
    httpPort: Number(get('http-port', '8080')),
    httpTimeoutMs: Number(get('http-timeout-ms', '200')),
    outJson: argv.includes('--out-json') ? get('out-json') : undefined,
    neigh: !argv.includes('--no-neigh'),
  };
  for (const k of ['intervalMs', 'durationMs', 'httpPort', 'httpTimeoutMs'] as const) {
    if (!Number.isFinite(a[k]) || a[k] < 0) throw new Error(`bad --${k}: ${a[k]}`);
  }
  if (a.intervalMs < 1) throw new Error('--interval-ms must be >= 1');
  if (a.srcMac !== undefined && !/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/.test(a.srcMac)) throw new Error(`bad --src-mac ${a.srcMac}`);
  return a;
}

const T0 = process.hrtime.bigint();
/** Milliseconds since T0, to the microsecond. */
const now = () => Math.round(Number(process.hrtime.bigint() - T0) / 1000) / 1000;

export interface Gap {
  startMs: number;
  endMs: number | null;
  ms: number;
  before: string | null;
  after: string | null;
  /** ARP gaps: requests sent inside the gap that got no reply (0: the probe itself stalled). */
  unanswered?: number;
}

export interface ArpSummary {
  /** The probe's own cadence: late ticks are measurement artefacts, not failover gaps. */
  cadence: { maxIntervalMs: number; p99IntervalMs: number; late: number };
  requests: number;
  answered: number;
  /** Requests answered by two or more distinct MACs (split brain). */
  dualAnswer: number;
  /** Runs of consecutive request indexes answered by two or more MACs, [first, last]. */
  dualAnswerRuns: Array<[number, number]>;
  longestGapMs: number;
  openTailMs: number;
  /** Gaps between consecutive answered requests longer than 2 intervals; endMs null = still open at the end. */
  gaps: Gap[];
  malformed: number;
  ethShaMismatch: number;
  sendErrors: number;
  lastSendError: string;
}

export interface HttpSummary {
  attempts: number;
  ok: number;
  failed: number;
  /** Attempts not started because too many were in flight. */
  skipped: number;
  errors: Record<string, number>;
  longestGapMs: number;
  openTailMs: number;
  gaps: Gap[];
  /** Node names in the order they served, run-length encoded. */
  names: Array<{ name: string; fromMs: number; toMs: number; count: number }>;
  nameTable: string[];
  /** [completion time, index in nameTable] of every successful response. */
  successes: Array<[number, number]>;
  /** [completion time, index in errorTable] of every failed attempt. */
  failures: Array<[number, number]>;
  errorTable: string[];
}

export interface ProbeResult {
  version: 1;
  /** process.hrtime.bigint() at the probe's start (CLOCK_MONOTONIC ns), as a decimal string. */
  t0Ns: string;
  iface: string;
  clientMac: string;
  srcMac: string;
  srcIp: string;
  target: string;
  intervalMs: number;
  startedAtMs: number;
  endMs: number;
  /** Responder identities (MAC, or "ETHSRC|SHA" when they differ), indexed by macSet and replies. */
  macs: string[];
  /** One entry per ARP request: send time, first reply time (null: unanswered), indexes of the MACs that replied. */
  requests: { sentAt: number[]; firstReplyAt: Array<number | null>; macSet: number[][] };
  /** [request index, mac index, receive time] of every reply to the probe. */
  replies: Array<[number, number, number]>;
  /** Gratuitous ARP for the target (sender = target address), either opcode. */
  garps: Array<{ t: number; mac: string; op: number }>;
  /** Replies for the target addressed to someone else (the client kernel's own resolutions). */
  kernelReplies: Array<{ t: number; mac: string; tpa: string }>;
  arp: ArpSummary;
  http: HttpSummary | null;
  /** The client kernel's neighbour entry for the target, as `ip monitor neigh` reported it. */
  neigh: Array<{ t: number; mac: string | null; state: string }>;
}

type Resolution = { op: number; ethSrc: string; sha: string; spa: string; tpa: string };

/**
 * An IPv6 target is asked with Neighbor Solicitations instead, and each
 * Neighbor Advertisement is read as the ARP reply it stands for: sender = the
 * advertised target with its TLLA; an unsolicited one (to all-nodes) counts
 * as a gratuitous announcement. null: not an advertisement (all other IPv6
 * traffic reaches this socket too), never counted as malformed.
 */
function advertisementAsArp(frame: Buffer): Resolution | null {
  if (frame.length < 55 || frame[54] !== ND_NEIGHBOR_ADVERT) return null;
  const p = parseNdFrame(frame);
  if (!p || p.type !== ND_NEIGHBOR_ADVERT || !p.checksumOk) return null;
  const unsolicited = !p.solicited || p.ipDst === 'ff02::1';
  return { op: 2, ethSrc: p.ethSrc, sha: p.lladdr ?? p.ethSrc, spa: p.target, tpa: unsolicited ? p.target : p.ipDst };
}

/** Interns strings (MACs, node names) so records can hold small indexes. */
class Table {
  readonly items: string[] = [];
  private readonly index = new Map<string, number>();
  id(s: string): number {
    let i = this.index.get(s);
    if (i === undefined) {
      i = this.items.length;
      this.items.push(s);
      this.index.set(s, i);
    }
    return i;
  }
}

class ArpSide {
  readonly macs = new Table();
  readonly sentAt: number[] = [];
  readonly firstReplyAt: Array<number | null> = [];
  readonly macSet: number[][] = [];
  /** [request index, mac index, receive time] for every reply to the probe. */
  readonly replies: Array<[number, number, number]> = [];
  readonly garps: Array<{ t: number; mac: string; op: number }> = [];
  readonly kernelReplies: Array<{ t: number; mac: string; tpa: string }> = [];
  malformed = 0;
  ethShaMismatch = 0;
  sendErrors = 0;
  lastSendError = '';

  private readonly v6: boolean;

  constructor(
    private readonly target: string,
    private readonly srcIp: string,
  ) {
    this.v6 = target.includes(':');
  }

  sent(t: number): void {
    this.sentAt.push(t);
    this.firstReplyAt.push(null);
    this.macSet.push([]);
  }

  /** Classifies one received frame; never throws. */
  frame(rx: ReceivedFrame, t: number): void {
    if (rx.packetType === PACKET_OUTGOING) return;
    let p: Resolution | undefined;
    try {
      if (this.v6) {
        const nd = advertisementAsArp(rx.frame);
        if (nd === null) return;
        p = nd;
      } else p = parseArpFrame(rx.frame);
    } catch {
      p = undefined;
    }
    if (!p) {
      this.malformed++;
      return;
    }
    if (p.spa !== this.target) return;
    const who = p.ethSrc === p.sha ? p.sha : `${p.ethSrc}|${p.sha}`;
    if (p.ethSrc !== p.sha) this.ethShaMismatch++;
    if (p.tpa === this.target) {
      this.garps.push({ t, mac: who, op: p.op });
      return;
    }
    if (p.op !== 2) return;
    if (p.tpa !== this.srcIp) {
      this.kernelReplies.push({ t, mac: who, tpa: p.tpa });
      return;
    }
    const req = this.sentAt.length - 1;
    if (req < 0) return; // a reply to a request from a previous probe run
    const mac = this.macs.id(who);
    this.replies.push([req, mac, t]);
    if (this.firstReplyAt[req] === null) this.firstReplyAt[req] = t;
    const set = this.macSet[req]!;
    if (!set.includes(mac)) set.push(mac);
  }

  summary(endMs: number, intervalMs: number): ArpSummary {
    const answered: number[] = [];
    for (let i = 0; i < this.sentAt.length; i++) if (this.firstReplyAt[i] !== null) answered.push(i);
    const firstMac = (req: number) => this.macs.items[this.macSet[req]![0]!] ?? null;
    const gaps: Gap[] = [];
    let longestGapMs = 0;
    for (let k = 1; k < answered.length; k++) {
      const a = answered[k - 1]!;
      const b = answered[k]!;
      const ms = this.firstReplyAt[b]! - this.firstReplyAt[a]!;
      longestGapMs = Math.max(longestGapMs, ms);
      if (ms > 2 * intervalMs) {
        gaps.push({ startMs: this.firstReplyAt[a]!, endMs: this.firstReplyAt[b]!, ms: round(ms), before: firstMac(a), after: firstMac(b), unanswered: b - a - 1 });
      }
    }
    const last = answered[answered.length - 1];
    const openTailMs = last === undefined ? endMs : endMs - this.firstReplyAt[last]!;
    if (openTailMs > 2 * intervalMs) {
      const unanswered = this.sentAt.length - 1 - (last ?? -1);
      gaps.push({ startMs: last === undefined ? 0 : this.firstReplyAt[last]!, endMs: null, ms: round(openTailMs), before: last === undefined ? null : firstMac(last), after: null, unanswered });
    }
    const dual = this.macSet.flatMap((s, i) => (s.length >= 2 ? [i] : []));
    // The probe's own cadence: a late tick is a measurement artefact, not a failover gap.
    const steps = this.sentAt.slice(1).map((t, i) => t - this.sentAt[i]!).sort((x, y) => x - y);
    const cadence = {
      maxIntervalMs: round(steps[steps.length - 1] ?? 0),
      p99IntervalMs: round(steps[Math.min(steps.length - 1, Math.floor(steps.length * 0.99))] ?? 0),
      late: steps.filter((x) => x > 2 * intervalMs).length,
    };
    return {
      cadence,
      requests: this.sentAt.length,
      answered: answered.length,
      dualAnswer: dual.length,
      dualAnswerRuns: runsOf(dual).slice(0, 200),
      longestGapMs: round(longestGapMs),
      openTailMs: round(openTailMs),
      gaps,
      malformed: this.malformed,
      ethShaMismatch: this.ethShaMismatch,
      sendErrors: this.sendErrors,
      lastSendError: this.lastSendError,
    };
  }
}

class HttpSide {
  readonly names = new Table();
  readonly errorKinds = new Table();
  /** [completion time, name index] of every successful response, in completion order. */
  readonly successes: Array<[number, number]> = [];
  readonly failures: Array<[number, number]> = [];
  readonly errors: Record<string, number> = {};
  attempts = 0;
  skipped = 0;
  private inFlight = 0;
  private readonly maxInFlight: number;

  constructor(
    private readonly target: string,
    private readonly port: number,
    private readonly timeoutMs: number,
    intervalMs: number,
  ) {
    this.maxInFlight = Math.max(8, Math.ceil((2 * timeoutMs) / intervalMs));
  }

  get pending(): number {
    return this.inFlight;
  }

  private fail(kind: string): void {
    this.errors[kind] = (this.errors[kind] ?? 0) + 1;
    this.failures.push([now(), this.errorKinds.id(kind)]);
  }

  /** One attempt; resolves itself, never throws. */
  attempt(): void {
    if (this.inFlight >= this.maxInFlight) {
      this.skipped++;
      return;
    }
    this.attempts++;
    this.inFlight++;
    const chunks: Buffer[] = [];
    let settled = false;
    const sock = connect({ host: this.target, port: this.port });
    const finish = (kind: string | undefined) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      this.inFlight--;
      sock.destroy();
      if (kind) {
        this.fail(kind);
        return;
      }
      const text = Buffer.concat(chunks).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1];
      const body = split >= 0 ? text.slice(split + 4).trim() : '';
      if (status !== '200' || body === '') this.fail(status ? `http-${status}` : 'bad-response');
      else this.successes.push([now(), this.names.id(body.slice(0, 64))]);
    };
    const timer = setTimeout(() => finish('timeout'), this.timeoutMs);
    sock.setNoDelay(true);
    sock.on('connect', () => sock.write('GET / HTTP/1.0\r\nHost: probe\r\n\r\n'));
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('end', () => finish(undefined));
    sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? 'error'));
    sock.on('close', () => finish(chunks.length ? undefined : 'closed'));
  }

  summary(endMs: number, intervalMs: number): HttpSummary {
    const ok = [...this.successes].sort((x, y) => x[0] - y[0]);
    const gaps: Gap[] = [];
    let longestGapMs = 0;
    const name = (i: number) => this.names.items[i] ?? null;
    for (let k = 1; k < ok.length; k++) {
      const [ta, na] = ok[k - 1]!;
      const [tb, nb] = ok[k]!;
      longestGapMs = Math.max(longestGapMs, tb - ta);
      if (tb - ta > 2 * intervalMs) gaps.push({ startMs: ta, endMs: tb, ms: round(tb - ta), before: name(na), after: name(nb) });
    }
    const last = ok[ok.length - 1];
    const openTailMs = last ? endMs - last[0] : endMs;
    const runs: HttpSummary['names'] = [];
    for (const [t, n] of ok) {
      const r = runs[runs.length - 1];
      if (r && r.name === name(n)) {
        r.toMs = t;
        r.count++;
      } else runs.push({ name: name(n) ?? '?', fromMs: t, toMs: t, count: 1 });
    }
    return {
      attempts: this.attempts,
      ok: ok.length,
      failed: this.attempts - ok.length,
      skipped: this.skipped,
      errors: this.errors,
      longestGapMs: round(longestGapMs),
      openTailMs: round(openTailMs),
      gaps,
      names: runs,
      nameTable: this.names.items,
      successes: this.successes,
      failures: this.failures,
      errorTable: this.errorKinds.items,
    };
  }
}

/** Neighbour-table changes for the target, from `ip monitor neigh` (best effort). */
function watchNeighbours(iface: string, target: string, out: ProbeResult['neigh']): ChildProcess | undefined {
  try {
    const child = spawn('ip', ['monitor', 'neigh', 'dev', iface], { stdio: ['ignore', 'pipe', 'ignore'] });
    let buf = '';
    child.stdout?.on('data', (c: Buffer) => {
      buf += c.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        // "IP dev IF lladdr MAC [router] STATE", "Deleted IP dev IF …", "IP dev IF  FAILED"
        const tok = line.split(/\s+/);
        const deleted = tok[0] === 'Deleted' || tok[0] === 'delete';
        if (deleted || tok[0] === 'Miss') tok.shift();
        if (tok[0] !== target) continue;
        const li = tok.indexOf('lladdr');
        const mac = li >= 0 ? (tok[li + 1] ?? null) : null;
        const last = tok[tok.length - 1] ?? '';
        const state = /^[A-Z_]+$/.test(last) ? last : '';
        out.push({ t: now(), mac: deleted ? null : mac, state: deleted ? 'DELETED' : state });
      }
    });
    child.on('error', () => undefined);
    return child;
  } catch {
    return undefined;
  }
}

/** [[first, last], …] runs of consecutive integers in an ascending list. */
function runsOf(xs: number[]): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  for (const x of xs) {
    const r = runs[runs.length - 1];
    if (r && r[1] === x - 1) r[1] = x;
    else runs.push([x, x]);
  }
  return runs;
}

const round = (x: number) => Math.round(x * 1000) / 1000;

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const links = new NetlinkLinks();
  const link = await links.byName(a.iface);
  links.dispose();
  if (!link) throw new Error(`no interface ${a.iface}`);
  const v6 = a.target.includes(':');
  const sock = PacketSocket.open(link.ifindex, v6 ? ETH_P_IPV6 : ETH_P_ARP);
  const srcMac = a.srcMac ?? link.mac;
  const request = v6 ? neighborSolicitation({ srcMac, srcIp: a.srcIp, target: a.target }) : arpRequest({ srcMac, srcIp: a.srcIp, targetIp: a.target });
  const arp = new ArpSide(a.target, a.srcIp);
  const http = a.httpPort > 0 ? new HttpSide(a.target, a.httpPort, a.httpTimeoutMs, a.intervalMs) : undefined;
  const neigh: ProbeResult['neigh'] = [];
  const monitor = a.neigh ? watchNeighbours(a.iface, a.target, neigh) : undefined;

  const drain = () => {
    for (;;) {
      let rx: ReceivedFrame | undefined;
      try {
        rx = sock.tryReceive();
      } catch {
        return; // a receive error is not worth aborting a measurement for
      }
      if (!rx) return;
      arp.frame(rx, now());
    }
  };
  // Old frames queued before the first request are not ours to count.
  drain();
  sock.onFrames((rx) => arp.frame(rx, now()));

  let stopping = false;
  let timer: NodeJS.Timeout | undefined;
  const startedAt = now();
  let tick = 0;
  const step = () => {
    if (stopping) return;
    drain(); // late replies land on the request they answer
    const t = now();
    arp.sent(t);
    try {
      sock.send(request);
    } catch (e) {
      arp.sendErrors++;
      arp.lastSendError = String((e as Error).message ?? e);
    }
    http?.attempt();
    // Self-correcting cadence aimed at startedAt + tick·interval. After a stall the
    // missed ticks are skipped, not sent as a burst (cadence.late records the stall).
    tick = Math.max(tick + 1, Math.floor((now() - startedAt) / a.intervalMs) + 1);
    const next = startedAt + tick * a.intervalMs;
    if (next - startedAt >= a.durationMs) {
      void finish();
      return;
    }
    timer = setTimeout(step, Math.max(0, next - now()));
  };

  let finished: Promise<void> | undefined;
  const finish = () =>
    (finished ??= (async () => {
      stopping = true;
      if (timer) clearTimeout(timer);
      const endMs = now();
      // Let in-flight HTTP attempts and late ARP replies settle (bounded).
      const settleUntil = Date.now() + a.httpTimeoutMs + 50;
      while ((http?.pending ?? 0) > 0 && Date.now() < settleUntil) await new Promise((r) => setTimeout(r, 5));
      drain();
      sock.dispose();
      monitor?.kill('SIGTERM');
      const result: ProbeResult = {
        version: 1,
        t0Ns: T0.toString(),
        iface: a.iface,
        clientMac: link.mac,
        srcMac,
        srcIp: a.srcIp,
        target: a.target,
        intervalMs: a.intervalMs,
        startedAtMs: startedAt,
        endMs,
        macs: arp.macs.items,
        requests: { sentAt: arp.sentAt, firstReplyAt: arp.firstReplyAt, macSet: arp.macSet },
        replies: arp.replies,
        garps: arp.garps,
        kernelReplies: arp.kernelReplies,
        arp: arp.summary(endMs, a.intervalMs),
        http: http ? http.summary(endMs, a.intervalMs) : null,
        neigh,
      };
      const text = JSON.stringify(result) + '\n';
      if (a.outJson) {
        writeFileSync(a.outJson, text);
        process.exit(0);
      }
      process.stdout.write(text, () => process.exit(0));
    })());

  for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void finish());
  process.stderr.write(`ready t0Ns=${T0}\n`);
  step();
}

main().catch((e) => {
  process.stderr.write(String((e as Error)?.stack ?? e) + '\n');
  process.exit(1);
});
