/** Real tools run inside lab hosts: iputils arping, scapy, tcpdump, herald itself. */
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import type { Host, LabProcess } from '../../lab/lab.js';
import { waitFor } from '../../lab/lab.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const HERALD = `${ROOT}bin/herald`;
const ARP_CRAFT = `${ROOT}test/tools/arp_craft.py`;
const NDP_CRAFT = `${ROOT}test/tools/ndp_craft.py`;

/** Root, network namespaces and the built agent are all needed for lab tests. */
export function labSkipReason(): string | false {
  if (process.getuid?.() !== 0) return 'needs root';
  const probe = `hlprobe${process.pid}`;
  const add = spawnSync('ip', ['netns', 'add', probe]);
  if (add.status !== 0) return 'cannot create network namespaces';
  spawnSync('ip', ['netns', 'del', probe]);
  return false;
}

export interface ArpingResult {
  sent: number;
  received: number;
  /** Upper-case MACs as arping prints them, lower-cased here, one per reply. */
  macs: string[];
  code: number;
  output: string;
}

export function parseArping(output: string, code: number): ArpingResult {
  const macs = [...output.matchAll(/reply from \S+ \[([0-9A-Fa-f:]{17})\]/g)].map((m) => m[1]!.toLowerCase());
  const sent = Number(/Sent (\d+) probe/.exec(output)?.[1] ?? 0);
  const received = Number(/Received (\d+) response/.exec(output)?.[1] ?? 0);
  return { sent, received, macs, code, output };
}

export function arping(
  host: Host,
  ip: string,
  opts: { count?: number; iface?: string; source?: string; timeoutS?: number; dad?: boolean } = {},
): ArpingResult {
  const count = opts.count ?? 3;
  const args = ['-c', String(count), '-w', String(opts.timeoutS ?? count + 1), '-I', opts.iface ?? 'eth0'];
  if (opts.source) args.push('-s', opts.source);
  if (opts.dad) args.push('-D');
  args.push(ip);
  const r = host.exec('arping', args);
  return parseArping(r.stdout + r.stderr, r.code);
}

export interface CraftResult {
  variant: string;
  sent: number;
  replies: Array<{ mac: string; tpa: string; tha: string }>;
}

export function craftAsync(
  host: Host,
  target: string,
  variant: string,
  opts: { iface?: string; count?: number; wait?: number; interval?: number } = {},
): Promise<CraftResult> {
  const args = [ARP_CRAFT, opts.iface ?? 'eth0', target, variant, '--count', String(opts.count ?? 3), '--wait', String(opts.wait ?? 0.5)];
  if (opts.interval !== undefined) args.push('--interval', String(opts.interval));
  return host.execAsync('/usr/bin/python3', args).then((r) => {
    if (r.code !== 0) throw new Error(`arp_craft ${variant} failed: ${r.stdout}`);
    return JSON.parse(r.stdout.trim().split('\n').pop()!) as CraftResult;
  });
}

export function craft(
  host: Host,
  target: string,
  variant: string,
  opts: { iface?: string; count?: number; wait?: number; interval?: number; spa?: string; dstMac?: string } = {},
): CraftResult {
  const args = [ARP_CRAFT, opts.iface ?? 'eth0', target, variant, '--count', String(opts.count ?? 3), '--wait', String(opts.wait ?? 0.5)];
  if (opts.interval !== undefined) args.push('--interval', String(opts.interval));
  if (opts.spa) args.push('--spa', opts.spa);
  if (opts.dstMac) args.push('--dst-mac', opts.dstMac);
  const r = host.exec('/usr/bin/python3', args);
  if (r.code !== 0) throw new Error(`arp_craft ${variant} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as CraftResult;
}

export interface MapDump {
  pinDir: string;
  capacity: number;
  liveness: { ageMs?: number; maxAgeMs: number };
  entries: Array<{ ip: string; interface: string; ifindex: number; replies: number; conflicts: number }>;
}

export function mapDump(host: Host, pinDir = host.pinDir): MapDump {
  return JSON.parse(host.must(HERALD, ['map', 'dump', '--json', '--bpf-pin-dir', pinDir])) as MapDump;
}

export function entry(dump: MapDump, ip: string, iface = 'eth0') {
  return dump.entries.find((e) => e.ip === ip && e.interface === iface);
}

export function startAgent(host: Host, args: string[], label = 'agent', env: NodeJS.ProcessEnv = {}): LabProcess {
  return host.spawn(label, HERALD, [
    'agent', '--node', host.netns, '--bpf-pin-dir', host.pinDir, '--state-dir', host.stateDir, '--status-socket', host.statusSocket, ...args,
  ], env);
}

export async function startAgentReady(host: Host, args: string[], label = 'agent', env: NodeJS.ProcessEnv = {}): Promise<LabProcess> {
  const p = startAgent(host, args, label, env);
  await p.waitForOutput('agent running', 20_000);
  return p;
}

/** tcpdump in a host, printing link-level headers, one line per packet. */
export async function startCapture(host: Host, filter: string, iface = 'eth0'): Promise<LabProcess> {
  const p = host.spawn('tcpdump', 'tcpdump', ['-i', iface, '-n', '-e', '-l', '--immediate-mode', filter]);
  await p.waitForOutput('listening on', 10_000);
  return p;
}

export async function stopCapture(p: LabProcess): Promise<string[]> {
  await p.stop('SIGINT');
  return p
    .text()
    .split('\n')
    .filter((l) => /^\d\d:\d\d/.test(l));
}

export { waitFor };

/** IPv6 on a lab host's interface (no DAD on the host address: the lab is fresh). */
export function addIpv6(host: Host, cidr: string, iface = 'eth0'): void {
  // No DAD on the lab's fresh links: a link-local address still tentative
  // cannot source the node's own Neighbor Solicitations (Linux then waits a
  // retransmit, 1 s), which made the first ping of a new lab flaky.
  host.must('sysctl', ['-q', '-w', `net.ipv6.conf.${iface}.accept_dad=0`]);
  host.must('sysctl', ['-q', '-w', `net.ipv6.conf.${iface}.disable_ipv6=0`]);
  // A link-local made when the link came up may still be in DAD: recreate it without (only before any other address).
  const tentative = host.exec('ip', ['-6', 'addr', 'show', 'dev', iface, 'tentative']).stdout.trim() !== '';
  const global = host.exec('ip', ['-6', 'addr', 'show', 'dev', iface, 'scope', 'global']).stdout.trim() !== '';
  if (tentative && !global) {
    host.must('sysctl', ['-q', '-w', `net.ipv6.conf.${iface}.disable_ipv6=1`]);
    host.must('sysctl', ['-q', '-w', `net.ipv6.conf.${iface}.disable_ipv6=0`]);
  }
  host.must('ip', ['-6', 'addr', 'add', cidr, 'dev', iface, 'nodad']);
}

export interface Ndisc6Result {
  /** Lower-case MAC of the first answer, '' when none. */
  mac: string;
  code: number;
  output: string;
}

/** ndisc6 (Debian ndisc6): one Neighbor Solicitation exchange for `ip` on `iface`. */
export function ndisc6(host: Host, ip: string, opts: { iface?: string; retries?: number; waitMs?: number } = {}): Ndisc6Result {
  const r = host.exec('ndisc6', ['-n', '-1', '-r', String(opts.retries ?? 2), '-w', String(opts.waitMs ?? 500), ip, opts.iface ?? 'eth0']);
  const out = r.stdout + r.stderr;
  const mac = /Target link-layer address:\s*([0-9A-Fa-f:]{17})/.exec(out)?.[1]?.toLowerCase() ?? '';
  return { mac, code: r.code, output: out };
}

export interface NdReply {
  ethSrc: string;
  ethDst: string;
  src: string;
  dst: string;
  hlim: number;
  code: number;
  R: number;
  S: number;
  O: number;
  tgt: string;
  tlla: string | null;
  checksumOk: boolean;
  plen: number;
}

/** Crafted Neighbor Solicitations from scapy (test/tools/ndp_craft.py), with the advertisements seen for the target. */
export function ndpCraft(
  host: Host,
  target: string,
  variant: string,
  opts: { src: string; iface?: string; count?: number; wait?: number; interval?: number; dstMac?: string },
): { variant: string; sent: number; replies: NdReply[] } {
  const args = [NDP_CRAFT, opts.iface ?? 'eth0', target, variant, '--src', opts.src, '--count', String(opts.count ?? 3), '--wait', String(opts.wait ?? 0.5)];
  if (opts.interval !== undefined) args.push('--interval', String(opts.interval));
  if (opts.dstMac) args.push('--dst-mac', opts.dstMac);
  const r = host.exec('/usr/bin/python3', args);
  if (r.code !== 0) throw new Error(`ndp_craft ${variant} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as { variant: string; sent: number; replies: NdReply[] };
}

/** The neighbour entry for an IPv6 address on a host: MAC and state, or undefined. */
export function neigh6(host: Host, ip: string, iface = 'eth0'): { lladdr?: string; state: string[] } | undefined {
  const out = JSON.parse(host.must('ip', ['-6', '-j', 'neigh', 'show', ip, 'dev', iface]) || '[]') as Array<{ lladdr?: string; state: string[] }>;
  return out[0];
}

const TC_ATTACHED = `${ROOT}lab/tc-attached.py`;

export interface TcProgramSeen {
  progId: number;
  /** tcx: the link holding it (0: attached without a link). */
  linkId?: number;
  /** cls_bpf: the filter priority. */
  pref?: number;
  /** As the kernel keeps it (15 characters). */
  name: string | null;
}
export interface TcHookSeen {
  /** tcx programs in the order they run (they run before any cls_bpf filter). */
  tcx: TcProgramSeen[];
  clsBpf: TcProgramSeen[];
}

/**
 * What runs at `iface`'s tc hooks inside `host`, read from the kernel by
 * lab/tc-attached.py (its own bpf(2) calls and `tc filter show`, not herald's code).
 */
export function tcAttached(host: Host, iface = 'eth0'): { ingress: TcHookSeen; egress: TcHookSeen } {
  const raw = JSON.parse(host.must('/usr/bin/python3', [TC_ATTACHED, iface])) as Record<
    'ingress' | 'egress',
    { tcx: Array<{ prog_id: number; link_id: number; name: string | null }> | { error: number }; cls_bpf: Array<{ pref: number; prog_id: number; name: string | null }> }
  >;
  const hook = (h: (typeof raw)['ingress']): TcHookSeen => ({
    tcx: Array.isArray(h.tcx) ? h.tcx.map((t) => ({ progId: t.prog_id, linkId: t.link_id, name: t.name })) : [],
    clsBpf: h.cls_bpf.map((f) => ({ progId: f.prog_id, pref: f.pref, name: f.name })),
  });
  return { ingress: hook(raw.ingress), egress: hook(raw.egress) };
}

/** Every program at the hook, in the order the kernel runs them (tcx first, then the cls_bpf filters). */
export function tcPrograms(hook: TcHookSeen): TcProgramSeen[] {
  return [...hook.tcx, ...hook.clsBpf];
}
