/**
 * bench/arp — who answers ARP fastest, in one lab and one run:
 *   herald       the eBPF responder at tc ingress (the IP is not on the node)
 *   kernel       the Linux stack, the IP configured on the interface (keepalived's way)
 *   proxy_arp    the Linux stack answering for a routed IP with proxy_arp=1
 * Reply latency (median, p99) from a client in another namespace, and replies
 * per second under a flood. Printed side by side with ratios; --json for machines.
 *
 *   node --import tsx bench/arp/main.ts [--samples 2000] [--flood-seconds 3] [--json]
 */
import { Lab, type Host } from '../../lab/lab.js';
import { HERALD, startAgentReady } from '../../test/helpers/lab-tools.js';
import { fileURLToPath } from 'node:url';

const PROBER = fileURLToPath(new URL('../lib/arp-prober.ts', import.meta.url));
const args = process.argv.slice(2);
const opt = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const SAMPLES = opt('samples', 2000);
const FLOOD_S = opt('flood-seconds', 3);
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

function probe<T>(client: Host, mode: string, target: string, extra: string[] = []): T {
  const r = client.exec(process.execPath, [
    '--import', 'tsx', PROBER,
    '--mode', mode, '--iface', 'eth0', '--src-ip', client.ip, '--target', target, ...extra,
  ]);
  if (r.code !== 0) throw new Error(`prober failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim()) as T;
}

const log = (s: string) => {
  if (!JSON_OUT) process.stderr.write(s + '\n');
};

async function main(): Promise<void> {
  const lab = Lab.create({ nodes: 1, secondSegment: true, tag: 'ba' });
  try {
    const { client } = lab;
    const node = lab.nodes[0]!;
    const cases = [
      { name: 'herald', ip: '198.51.100.10' },
      { name: 'kernel', ip: '198.51.100.11' },
      { name: 'proxy_arp', ip: '198.51.100.12' },
    ];
    log('bench/arp: starting herald on n1');
    const agent = await startAgentReady(node, ['--announce', '198.51.100.10@eth0', '--garp-count', '0']);
    // kernel: the address lives on the interface, as keepalived puts a VIP there.
    node.must('ip', ['addr', 'add', '198.51.100.11/32', 'dev', 'eth0']);
    // proxy_arp: the node routes the IP out of another interface and answers for it.
    node.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv4.conf.eth0.proxy_arp=1']);
    node.must('ip', ['route', 'add', '198.51.100.12/32', 'dev', 'eth1']);

    const results: Record<string, { latency: Latency; flood: Flood }> = {};
    for (const c of cases) {
      log(`bench/arp: ${c.name}: latency (${SAMPLES} requests, one at a time)`);
      const latency = probe<Latency>(client, 'latency', c.ip, ['--count', String(SAMPLES), '--budget-ms', '25000']);
      log(`bench/arp: ${c.name}: flood (${FLOOD_S} s)`);
      const flood = probe<Flood>(client, 'flood', c.ip, ['--budget-ms', String(FLOOD_S * 1000)]);
      results[c.name] = { latency, flood };
    }
    const replies = JSON.parse(node.must(HERALD, ['map', 'dump', '--json', '--bpf-pin-dir', node.pinDir])) as {
      entries: Array<{ replies: number }>;
    };
    await agent.stop();

    const h = results.herald!;
    const out = {
      samples: SAMPLES,
      floodSeconds: FLOOD_S,
      results,
      heraldRepliesCounted: replies.entries[0]?.replies ?? 0,
      ratios: Object.fromEntries(
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
    const rows = cases.map((c) => {
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
    const headers = ['responder', 'median', 'p99', 'answered', 'offered req/s', 'replies/s'];
    const widths = headers.map((hd, i) => Math.max(hd.length, ...rows.map((r) => r[i]!.length)));
    const line = (cells: string[]) => cells.map((x, i) => x.padEnd(widths[i]!)).join('  ');
    console.log(line(headers));
    for (const r of rows) console.log(line(r));
    console.log('');
    for (const [p, r] of Object.entries(out.ratios)) {
      console.log(
        `herald vs ${p}: median latency ${r.medianLatency.toFixed(2)}x lower, p99 ${r.p99Latency.toFixed(2)}x lower, ` +
          `replies/s ${r.repliesPerSec.toFixed(2)}x`,
      );
    }
  } finally {
    await lab.destroy();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
