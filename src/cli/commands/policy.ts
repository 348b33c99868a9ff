/**
 * `herald policy`: the running agent's service traffic policy — repository
 * revision and the revision the datapath enforces, each policed service's
 * effective rules and drop counters (read live from the kernel) — and
 * `herald policy trace SRC DST:PORT/PROTO`, the verdict with the rule that
 * decides it, computed from the agent's realized tables as the datapath does.
 */
import { Command, InvalidArgumentError } from 'commander';
import { STATUS_SOCKET_DIR, fetchStatus } from '../../api/status-server.js';
import { parseIp } from '../../core/addr.js';
import { formatAddress, PROTO, type Packet } from '../../controlplane/policy/model.js';
import { trace } from '../../controlplane/policy/trace.js';
import type { PolicyPrefixEntry, ServicePolicyRow } from '../../datapath/tables/service-policy.js';
import { discoverStatusSocket } from '../discover.js';
import { defaultNodeName, parseNodeName } from '../options.js';
import { printTable } from '../table.js';

interface Detail {
  revision: number;
  realizedRevision: number;
  rules: number;
  prefixes: number;
  interfaces: string[];
  services: Array<{ service: string; svcId: number; ips: string[]; revision: number; realized?: number; rules: ServicePolicyRow['rules'] }>;
  tables: Array<Omit<ServicePolicyRow, 'prefixes'> & { prefixes: Array<Omit<PolicyPrefixEntry, 'addr'> & { addr: string }> }>;
  drops: Array<{ service: string; rule: number; packets: string }>;
  lastError?: string;
}

type Opts = { node?: string; statusSocket?: string; json?: boolean };

async function fetchDetail(opts: Opts): Promise<Detail> {
  const socket = discoverStatusSocket(opts, STATUS_SOCKET_DIR, defaultNodeName());
  return (await fetchStatus(socket.path, 5000, '/v1/policy')) as Detail;
}

const PROTOS: Record<string, number> = { tcp: PROTO.TCP, udp: PROTO.UDP, sctp: PROTO.SCTP, icmp: 1, icmpv6: 58 };

/** `198.51.100.10:443/tcp`, `[2001:db8::10]:53/udp`, `198.51.100.10/icmp`, `198.51.100.10:8/icmp` (ICMP type 8). */
export function parseTarget(text: string): { dst: string; proto: number; dport?: number } {
  const m = /^(?:\[([^\]]+)\]|([^:/[\]]+))(?::(\d{1,5}))?\/([a-zA-Z0-9]+)$/.exec(text);
  const dst = m ? parseIp(m[1] ?? m[2] ?? '') : undefined;
  const proto = m ? (PROTOS[m[4]!.toLowerCase()] ?? (/^\d+$/.test(m[4]!) ? Number(m[4]) : undefined)) : undefined;
  if (!m || !dst || proto === undefined || proto > 255) throw new InvalidArgumentError(`expected DST:PORT/PROTO, e.g. 198.51.100.10:443/tcp or [2001:db8::10]:53/udp or 198.51.100.10/icmp; got "${text}"`);
  const l4 = proto === PROTO.TCP || proto === PROTO.UDP || proto === PROTO.SCTP;
  if (l4 && m[3] === undefined) throw new InvalidArgumentError(`${m[4]} needs a port: DST:PORT/${m[4]}`);
  const dport = m[3] !== undefined ? Number(m[3]) : undefined;
  // ICMP: the "port" is the ICMP type (`198.51.100.10:8/icmp`, an echo request), the L4 key icmps rules match.
  const icmp = proto === PROTO.ICMP || proto === PROTO.ICMPV6;
  if (icmp && dport !== undefined && dport > 255) throw new InvalidArgumentError(`ICMP type ${dport} is out of range 0-255`);
  if (l4 && dport !== undefined && (dport < 1 || dport > 65535)) throw new InvalidArgumentError(`port ${dport} is out of range 1-65535`);
  return { dst: dst.text, proto, ...((l4 || icmp) && dport !== undefined ? { dport } : {}) };
}

function toBig(text: string): bigint {
  const ip = parseIp(text);
  if (!ip) throw new InvalidArgumentError(`not an IP address: "${text}"`);
  let v = 0n;
  for (const b of ip.bytes) v = (v << 8n) | BigInt(b);
  return v;
}

export function policyCommand(): Command {
  const cmd = new Command('policy')
    .description('service traffic policy: repository and realized revision, each service\'s effective rules, drop counters; trace a packet')
    .option('--node <name>', 'the node whose agent to ask (default: the only agent running here, else the hostname)', parseNodeName)
    .option('--status-socket <path>', "the agent's status socket (default /run/herald/<node>.sock)")
    .option('--json', 'machine-readable output')
    .action(async (opts: Opts) => {
      const d = await fetchDetail(opts);
      if (opts.json) {
        const { tables: _t, ...rest } = d;
        process.stdout.write(JSON.stringify(rest, null, 2) + '\n');
        return;
      }
      process.stdout.write(`repository revision ${d.revision}, realized in the datapath ${d.realizedRevision}; ${d.rules} rules, ${d.prefixes} distinct prefixes; attached on ${d.interfaces.join(', ') || 'no interface'}\n`);
      if (d.lastError) process.stdout.write(`last error: ${d.lastError}\n`);
      process.stdout.write(d.services.length === 0 ? 'no service is selected by a policy: every service is open\n' : '\n');
      for (const s of d.services) {
        process.stdout.write(`${s.service} (${s.ips.join(', ') || 'not announced here'}): revision ${s.revision}, realized ${s.realized ?? '-'}\n`);
        const drops = new Map(d.drops.filter((x) => x.service === s.service).map((x) => [x.rule, x.packets]));
        printTable(
          ['RULE', 'VERDICT', 'DROPPED', 'RULE TEXT', 'FROM'],
          [
            ...s.rules.map((r) => [String(r.id), r.verdict, r.verdict === 'deny' ? (drops.get(r.id) ?? '0') : '-', r.text, r.origin]),
            ['0', 'deny', drops.get(0) ?? '0', 'default deny (selected, nothing allows it)', '-'],
          ],
        );
      }
    });
  cmd
    .command('trace')
    .description('the verdict for a packet from SRC to DST:PORT/PROTO, and the rule that decides it')
    .argument('<src>', 'source address')
    .argument('<target>', 'DST:PORT/PROTO, e.g. 198.51.100.10:443/tcp, [2001:db8::10]:53/udp, 198.51.100.10:8/icmp (ICMP type 8)')
    .action(async (srcText: string, target: string, _o: unknown, c: Command) => {
      const opts = c.parent!.opts<Opts>();
      const t = parseTarget(target);
      const src = parseIp(srcText);
      if (!src) throw new InvalidArgumentError(`not an IP address: "${srcText}"`);
      const family = src.family === 'IPv4' ? 4 : 6;
      if ((parseIp(t.dst)!.family === 'IPv4' ? 4 : 6) !== family) throw new InvalidArgumentError('source and destination must be of the same family');
      const d = await fetchDetail(opts);
      const rows = d.tables.map((r) => ({ ...r, prefixes: r.prefixes.map((p) => ({ ...p, addr: BigInt(p.addr) })) }));
      const packet: Packet = { family, src: toBig(srcText), proto: t.proto, ...(t.dport !== undefined ? { dport: t.dport } : {}) };
      const r = trace(rows, t.dst, packet);
      if (opts.json) {
        process.stdout.write(JSON.stringify({ ...r, prefix: r.prefix ? `${formatAddress(r.prefix.family, r.prefix.addr)}/${r.prefix.len}` : undefined }, null, 2) + '\n');
        return;
      }
      if (r.verdict === 'open') {
        process.stdout.write(`ALLOW (open): ${r.text}\n`);
        return;
      }
      const via = r.prefix ? ` (longest matching source prefix ${formatAddress(r.prefix.family, r.prefix.addr)}/${r.prefix.len})` : ' (no source prefix matches)';
      process.stdout.write(`${r.verdict.toUpperCase()} ${r.service}: rule ${r.rule}: ${r.text}${r.origin ? ` — ${r.origin}` : ''}${via}\n`);
    });
  return cmd;
}
