/**
 * `herald ct list|flush|stats`: the load balancer's connection tracking, read
 * live from the pinned maps. Remaining lifetimes are computed against
 * CLOCK_MONOTONIC now — the clock bpf_ktime_get_ns() stamps — not a cache.
 */
import { Command, InvalidArgumentError } from 'commander';
import { HeraldError } from '../../core/errors.js';
import { parseIp } from '../../core/addr.js';
import { ConntrackGc } from '../../datapath/lb/ct-gc.js';
import { CT_EGRESS, CT_F_ESTABLISHED, CT_F_RX_CLOSING, CT_F_SYN_SEEN, CT_F_TX_CLOSING, ctEvictions, protoName, type CtEntry, type CtKey } from '../../datapath/lb/layout.js';
import { openPinnedLbMaps } from '../../datapath/lb/program.js';
import { discoverPinDir } from '../discover.js';
import { DEFAULT_PIN_ROOT, defaultNodeName, parseNodeName } from '../options.js';
import { printTable } from '../table.js';

interface Filter {
  ip?: string;
  port?: number;
  proto?: number;
}

interface CommonOpts extends Filter {
  node?: string;
  bpfPinDir?: string;
  json?: boolean;
}

function parseFilterIp(v: string): string {
  const ip = parseIp(v);
  if (!ip) throw new InvalidArgumentError(`--ip ${v}: not an IP address`);
  return ip.text;
}
function parsePort(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`--port ${v}: expected 0..65535`);
  return n;
}
function parseProto(v: string): number {
  const p = v.toLowerCase();
  if (p === 'tcp') return 6;
  if (p === 'udp') return 17;
  throw new InvalidArgumentError(`--proto ${v}: expected tcp or udp`);
}

/** An entry matches when every given filter matches one of its addresses/ports (either side, or the NAT side). */
export function matches(f: Filter, k: CtKey, e: CtEntry): boolean {
  if (f.proto !== undefined && k.proto !== f.proto) return false;
  if (f.ip !== undefined && k.saddr !== f.ip && k.daddr !== f.ip && e.natAddr !== f.ip) return false;
  if (f.port !== undefined && k.sport !== f.port && k.dport !== f.port && e.natPort !== f.port) return false;
  return true;
}

function flagText(flags: number): string {
  const out: string[] = [];
  if (flags & CT_F_SYN_SEEN) out.push('syn');
  if (flags & CT_F_ESTABLISHED) out.push('established');
  if (flags & CT_F_TX_CLOSING) out.push('tx-closing');
  if (flags & CT_F_RX_CLOSING) out.push('rx-closing');
  return out.join(',') || '-';
}

function withFilters(cmd: Command): Command {
  return cmd
    .option('--node <name>', 'the node whose maps to read (default: the only agent running here, else the hostname)', parseNodeName)
    .option('--bpf-pin-dir <dir>', 'pin directory (default /sys/fs/bpf/herald/<node>)')
    .option('--ip <ip>', 'only entries with this address (client, service or backend)', parseFilterIp)
    .option('--port <port>', 'only entries with this port (client, service or backend)', parsePort)
    .option('--proto <tcp|udp>', 'only this protocol', parseProto)
    .option('--json', 'machine-readable output');
}

export function ctCommand(): Command {
  const ct = new Command('ct').description('load balancer connection tracking: list (remaining lifetimes by the kernel clock), flush, stats');
  withFilters(ct.command('list').description('entries with their remaining lifetime (kernel clock), backend and counters')).action((opts: CommonOpts) => {
    const maps = openPinnedLbMaps(discoverPinDir(opts, DEFAULT_PIN_ROOT, defaultNodeName()).path);
    try {
      const now = process.hrtime.bigint(); // CLOCK_MONOTONIC, as bpf_ktime_get_ns()
      const ep = (ip: string, port: number) => (ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`);
      const rows = [...maps.ct4.entries(), ...maps.ct6.entries()]
        .filter(([k, e]) => matches(opts, k, e))
        .map(([k, e]) => ({
          dir: k.dir === CT_EGRESS ? 'egress' : 'service',
          proto: protoName(k.proto),
          src: ep(k.saddr, k.sport),
          dst: ep(k.daddr, k.dport),
          nat: ep(e.natAddr, e.natPort),
          backendId: e.backendId,
          serviceId: e.serviceId,
          remainingS: Number(e.expiresNs - now) / 1e9,
          flags: flagText(e.flags),
          packets: { fwd: Number(e.packetsFwd), rev: Number(e.packetsRev) },
          bytes: { fwd: Number(e.bytesFwd), rev: Number(e.bytesRev) },
        }))
        .sort((a, b) => a.src.localeCompare(b.src) || a.dir.localeCompare(b.dir));
      if (opts.json) {
        process.stdout.write(JSON.stringify({ entries: rows }, null, 2) + '\n');
        return;
      }
      printTable(
        ['DIR', 'PROTO', 'SOURCE', 'DESTINATION', 'NAT', 'BACKEND', 'REMAINING', 'FLAGS', 'PKTS FWD/REV'],
        rows.map((r) => [r.dir, r.proto, r.src, r.dst, r.nat, String(r.backendId), r.remainingS > 0 ? `${r.remainingS.toFixed(1)}s` : 'expired', r.flags, `${r.packets.fwd}/${r.packets.rev}`]),
      );
    } finally {
      maps.dispose();
    }
  });
  withFilters(ct.command('flush').description('delete the entries matching the filters (all without filters)'))
    .option('--all', 'required to flush without any filter')
    .action(async (opts: CommonOpts & { all?: boolean }) => {
      if (opts.ip === undefined && opts.port === undefined && opts.proto === undefined && !opts.all) {
        throw new HeraldError('HERALD_BAD_ARGUMENT', 'ct flush: give --ip, --port or --proto, or --all to flush everything');
      }
      const maps = openPinnedLbMaps(discoverPinDir(opts, DEFAULT_PIN_ROOT, defaultNodeName()).path);
      try {
        const r4 = await new ConntrackGc(maps.ct4, { recordDeleted: maps.recordDeleted }).flushWhere((k, e) => matches(opts, k, e));
        const r6 = await new ConntrackGc(maps.ct6, { recordDeleted: maps.recordDeleted }).flushWhere((k, e) => matches(opts, k, e));
        const r = { scanned: r4.scanned + r6.scanned, deleted: r4.deleted + r6.deleted };
        if (opts.json) process.stdout.write(JSON.stringify({ scanned: r.scanned, deleted: r.deleted }) + '\n');
        else process.stdout.write(`flushed ${r.deleted} of ${r.scanned} entries\n`);
      } finally {
        maps.dispose();
      }
    });
  withFilters(ct.command('stats').description('entries by protocol and state, map pressure, datapath counters')).action((opts: CommonOpts) => {
    const maps = openPinnedLbMaps(discoverPinDir(opts, DEFAULT_PIN_ROOT, defaultNodeName()).path);
    try {
      const now = process.hrtime.bigint();
      const max = maps.ct4.info().maxEntries;
      const byProto: Record<string, number> = {};
      let total = 0;
      let expired = 0;
      let live = 0;
      const live6 = maps.ct6.keys().length;
      for (const [k, e] of [...maps.ct4.entries(), ...maps.ct6.entries()]) {
        live++;
        if (!matches(opts, k, e)) continue;
        total++;
        if (e.expiresNs < now) expired++;
        const p = protoName(k.proto);
        byProto[p] = (byProto[p] ?? 0) + 1;
      }
      const raw = maps.stats();
      const counters = Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, Number(v)]));
      // Evictions concern the whole table (the filters select entries, not the LRU's choices).
      const evicted = ctEvictions(raw, live);
      const live4 = live - live6;
      const pressure = max > 0 ? Math.max(live4, live6) / max : 0;
      const out = { entries: total, entries4: live4, entries6: live6, capacity: max, pressure, evicted, expiredNotYetCollected: expired, byProto, counters };
      if (opts.json) {
        process.stdout.write(JSON.stringify(out, null, 2) + '\n');
        return;
      }
      process.stdout.write(`ct4: ${live4} entries, ct6: ${live6}, of ${max} each (fullest ${(pressure * 100).toFixed(2)}%); ${total} match, ${expired} expired awaiting GC\n`);
      process.stdout.write(`evicted by the LRU (table full): ${evicted}${evicted > 0 ? ' — the table is too small for the flows (--lb-ct-size)' : ''}\n`);
      printTable(['PROTO', 'ENTRIES'], Object.entries(byProto).map(([p, n]) => [p, String(n)]));
      printTable(['COUNTER', 'VALUE'], Object.entries(counters).map(([k, v]) => [k, String(v)]));
    } finally {
      maps.dispose();
    }
  });
  return ct;
}
