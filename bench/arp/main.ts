/**
 * bench/arp — who answers ARP fastest, in one lab and one run:
 *   herald       the eBPF responder at tc ingress (the IP is not on the node)
 *   kernel       the Linux stack, the IP configured on the interface (keepalived's way),
 *                on eth1, which herald does not serve (its program is not in the path)
 *   proxy_arp    the Linux stack answering for a routed IP with proxy_arp=1
 * Reply latency (median, p99) from a client in another namespace, and replies
 * per second under a flood. Then the on-node service time of herald and the
 * kernel (request in → reply out on the node's interface, both stamped by the
 * kernel at the packet taps: tcpdump, ns precision), idle (one request every
 * --idle-interval-ms, 10 ms: the CPUs idle in between, caches go cold) and warm
 * (back to back), in --rounds interleaved rounds alternating which responder
 * goes first. Printed side by side with ratios; --json for machines.
 *
 *   node --import tsx bench/arp/main.ts [--samples 2000] [--flood-seconds 3]
 *     [--service-samples 1500] [--rounds 3] [--idle-interval-ms 10] [--service-only] [--no-attach-compare] [--json]
 *
 * The service-time rounds also time herald's responder attached through a
 * legacy cls_bpf filter (herald_cls_bpf: the agent restarted with
 * HERALD_TC_ATTACH=cls_bpf) beside the tcx link, unless --no-attach-compare.
 */
import { Lab, type Host } from '../../lab/lab.js';
import { HERALD, startAgentReady } from '../../test/helpers/lab-tools.js';
import { fileURLToPath } from 'node:url';
import { captureGaps, summarize, type ServiceTimes } from '../lib/service-time.js';
import { ATTACH_VARIANTS, AttachSwitcher, assertBareHook } from '../lib/attach-modes.js';

const PROBER = fileURLToPath(new URL('../lib/arp-prober.ts', import.meta.url));
const args = process.argv.slice(2);
const opt = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const SAMPLES = opt('samples', 2000);
const FLOOD_S = opt('flood-seconds', 3);
const SERVICE_SAMPLES = opt('service-samples', 1500);
const ROUNDS = opt('rounds', 3);
const IDLE_INTERVAL_MS = opt('idle-interval-ms', 10);
const SERVICE_ONLY = args.includes('--service-only');
/** Also time herald's responder attached the legacy way (cls_bpf), in the same rounds. */
const ATTACH_COMPARE = !args.includes('--no-attach-compare');
const JSON_OUT = args.includes('--json');

interface Latency {
  samples: number;
  lost: number;
  medianUs: number;
  p99Us: number;
}
interface Flood {
  sent: number;
  received: number;
  sentPerSec: number;
  repliesPerSec: number;
}

/** A responder under test: the IP asked for and the interface (the same name on the client and the node) the requests travel. */
interface Case {
  name: string;
  ip: string;
  iface: 'eth0' | 'eth1';
}

function probe<T>(client: Host, mode: string, c: Case, extra: string[] = []): T {
  const src = c.iface === 'eth0' ? client.ip : client.ip2!;
  const r = client.exec(process.execPath, [
    '--import', 'tsx', PROBER,
    '--mode', mode, '--iface', c.iface, '--src-ip', src, '--target', c.ip, ...extra,
  ]);
  if (r.code !== 0) throw new Error(`prober failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim()) as T;
}

const log = (s: string) => {
  if (!JSON_OUT) process.stderr.write(s + '\n');
};

/**
 * On-node service time of `ip`'s responder: `count` requests from the client,
 * one at a time (`intervalMs` apart, 0 = back to back), stamped on the node's
 * interface by the kernel (tcpdump, ns): request in → reply out. Also the gaps the
 * client saw.
 */
async function serviceRun(lab: Lab, client: Host, node: Host, c: Case, count: number, intervalMs: number): Promise<{ onNode: number[]; client: number[] }> {
  let clientUs: number[] = [];
  const onNode = await captureGaps(
    node,
    { iface: c.iface, filter: `arp and host ${c.ip}`, target: c.ip, request: 'Request', reply: 'Reply', file: `/tmp/${lab.id}-arp-service.pcap` },
    () => {
      clientUs = probe<Latency & { allUs: number[] }>(client, 'latency', c, ['--count', String(count), '--interval-ms', String(intervalMs), '--budget-ms', String(60_000)]).allUs;
    },
  );
  return { onNode, client: clientUs };
}

interface ServiceMode {
  onNode: ServiceTimes;
  clientMedianUs: number;
}

async function main(): Promise<void> {
  const lab = Lab.create({ nodes: 1, secondSegment: true, tag: 'ba' });
  try {
    const { client } = lab;
    const node = lab.nodes[0]!;
    // The kernel's address lives on eth1, an interface herald does not serve:
    // herald's tc program sees every ARP frame on the interfaces it serves, so
    // an address there would be timed with herald's program in its path too.
    const cases: Case[] = [
      { name: 'herald', ip: '198.51.100.10', iface: 'eth0' },
      { name: 'kernel', ip: '198.51.100.11', iface: 'eth1' },
      { name: 'proxy_arp', ip: '198.51.100.12', iface: 'eth0' },
    ];
    log('bench/arp: starting herald on n1');
    const agentArgs = ['--announce', '198.51.100.10@eth0', '--garp-count', '0'];
    const switcher = new AttachSwitcher(node, agentArgs, await startAgentReady(node, agentArgs), log);
    // kernel: the address lives on the interface, as keepalived puts a VIP there.
    node.must('ip', ['addr', 'add', '198.51.100.11/32', 'dev', 'eth1']);
    assertBareHook(node, 'eth1');
    // proxy_arp: the node routes the IP out of another interface and answers for it.
    node.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv4.conf.eth0.proxy_arp=1']);
    node.must('ip', ['route', 'add', '198.51.100.12/32', 'dev', 'eth1']);

    const results: Record<string, { latency: Latency; flood: Flood }> = {};
    for (const c of SERVICE_ONLY ? [] : cases) {
      log(`bench/arp: ${c.name}: latency (${SAMPLES} requests, one at a time)`);
      const latency = probe<Latency>(client, 'latency', c, ['--count', String(SAMPLES), '--budget-ms', '25000']);
      log(`bench/arp: ${c.name}: flood (${FLOOD_S} s)`);
      const flood = probe<Flood>(client, 'flood', c, ['--budget-ms', String(FLOOD_S * 1000)]);
      results[c.name] = { latency, flood };
    }

    // On-node service time, idle and warm, herald vs the kernel (IP on an
    // interface herald does not serve), in interleaved rounds alternating
    // which responder goes first.
    const variants = ATTACH_COMPARE ? ATTACH_VARIANTS : ATTACH_VARIANTS.slice(0, 1);
    const heraldCase = cases[0]!;
    const pair: Case[] = [...variants.map((v) => ({ ...heraldCase, name: v.name })), cases[1]!];
    const modeOf = new Map(variants.map((v) => [v.name, v.mode]));
    const modes = [
      { name: 'idle', intervalMs: IDLE_INTERVAL_MS },
      { name: 'warm', intervalMs: 0 },
    ];
    const raw: Record<string, Record<string, { onNode: number[]; client: number[] }>> = {};
    const perRound = Math.max(1, Math.ceil(SERVICE_SAMPLES / ROUNDS));
    for (let round = 0; round < ROUNDS; round++) {
      // herald's variants around the kernel: [tcx, kernel, cls_bpf], reversed every other round
      // (an agent restart only when the attach mode changes).
      const order = round % 2 === 0 ? [pair[0]!, pair[pair.length - 1]!, ...pair.slice(1, -1)] : [...pair.slice(1, -1), pair[pair.length - 1]!, pair[0]!];
      for (const c of order) {
        const mode = modeOf.get(c.name);
        if (mode) await switcher.use(mode);
        for (const m of modes) {
          log(`bench/arp: round ${round + 1}/${ROUNDS}: ${c.name}: ${m.name} (${perRound} requests, ${m.intervalMs} ms apart, stamped on the node)`);
          const r = await serviceRun(lab, client, node, c, perRound, m.intervalMs);
          const slot = ((raw[m.name] ??= {})[c.name] ??= { onNode: [], client: [] });
          slot.onNode.push(...r.onNode);
          slot.client.push(...r.client);
        }
      }
    }
    const service: Record<string, Record<string, ServiceMode>> = {};
    for (const m of modes) {
      for (const c of pair) {
        const r = raw[m.name]![c.name]!;
        const cl = [...r.client].sort((x, y) => x - y);
        (service[m.name] ??= {})[c.name] = { onNode: summarize(r.onNode), clientMedianUs: cl[Math.floor(cl.length / 2)] ?? NaN };
      }
    }

    const replies = JSON.parse(node.must(HERALD, ['map', 'dump', '--json', '--bpf-pin-dir', node.pinDir])) as {
      entries: Array<{ replies: number }>;
    };
    await switcher.agent.stop();

    const ratiosFor = (name: string) =>
      Object.fromEntries(
        modes.map((m) => {
          const h = service[m.name]![name]!.onNode;
          const k = service[m.name]!.kernel!.onNode;
          return [m.name, { p50: h.p50Us / k.p50Us, p90: h.p90Us / k.p90Us, p99: h.p99Us / k.p99Us }];
        }),
      );
    const serviceRatios = ratiosFor('herald');
    const attachRatios = Object.fromEntries(variants.map((v) => [v.name, ratiosFor(v.name)]));
    const h = results.herald;
    const out = {
      samples: SAMPLES,
      floodSeconds: FLOOD_S,
      results,
      service: { samples: SERVICE_SAMPLES, rounds: ROUNDS, idleIntervalMs: IDLE_INTERVAL_MS, results: service, heraldOverKernel: serviceRatios, byAttach: attachRatios },
      heraldRepliesCounted: replies.entries[0]?.replies ?? 0,
      ratios: !h ? {} : Object.fromEntries(
        ['kernel', 'proxy_arp'].map((p) => [
          p,
          {
            medianLatency: results[p]!.latency.medianUs / h.latency.medianUs,
            p99Latency: results[p]!.latency.p99Us / h.latency.p99Us,
            repliesPerSec: h.flood.repliesPerSec / Math.max(1, results[p]!.flood.repliesPerSec),
          },
        ]),
      ),
    };
    if (JSON_OUT) {
      process.stdout.write(JSON.stringify(out, null, 2) + '\n');
      return;
    }
    const rows = (SERVICE_ONLY ? [] : cases).map((c) => {
      const r = results[c.name]!;
      return [
        c.name,
        `${r.latency.medianUs.toFixed(1)} µs`,
        `${r.latency.p99Us.toFixed(1)} µs`,
        `${r.latency.samples}/${r.latency.samples + r.latency.lost}`,
        `${Math.round(r.flood.sentPerSec)}`,
        `${Math.round(r.flood.repliesPerSec)}`,
      ];
    });
    const table = (headers: string[], rows: string[][]) => {
      const widths = headers.map((hd, i) => Math.max(hd.length, ...rows.map((r) => r[i]!.length)));
      const line = (cells: string[]) => cells.map((x, i) => x.padEnd(widths[i]!)).join('  ');
      console.log(line(headers));
      for (const r of rows) console.log(line(r));
      console.log('');
    };
    if (rows.length > 0) {
      table(['responder', 'median', 'p99', 'answered', 'offered req/s', 'replies/s'], rows);
      for (const [p, r] of Object.entries(out.ratios)) {
        console.log(
          `herald vs ${p}: median latency ${r.medianLatency.toFixed(2)}x lower, p99 ${r.p99Latency.toFixed(2)}x lower, ` +
            `replies/s ${r.repliesPerSec.toFixed(2)}x`,
        );
      }
      console.log('');
    }
    const us = (x: number) => `${x.toFixed(1)}`;
    table(
      ['responder', 'mode', 'on-node p10 / p50 / p90 / p99 µs', 'pairs', 'client median µs'],
      modes.flatMap((m) =>
        pair.map((c) => {
          const r = service[m.name]![c.name]!;
          const o = r.onNode;
          return [c.name, m.name === 'idle' ? `idle (${IDLE_INTERVAL_MS} ms apart)` : 'warm (back to back)', `${us(o.p10Us)} / ${us(o.p50Us)} / ${us(o.p90Us)} / ${us(o.p99Us)}`, String(o.pairs), us(r.clientMedianUs)];
        }),
      ),
    );
    for (const m of modes) {
      for (const v of variants) {
        const r = attachRatios[v.name]![m.name]!;
        console.log(`on-node service time, ${m.name}: ${v.name} (${v.mode}) / kernel = p50 ${r.p50.toFixed(2)}x, p90 ${r.p90.toFixed(2)}x, p99 ${r.p99.toFixed(2)}x (below 1 = herald faster)`);
      }
    }
  } finally {
    await lab.destroy();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
