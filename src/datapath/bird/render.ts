/**
 * bird.conf from the bird-config row (written by the BGP control plane from
 * intent): a pure function.
 *
 * - `protocol kernel` (one per family) *learns* the host routes herald writes
 *   (their protocol number, `krt_source`) and exports nothing back: herald
 *   owns the kernel, BIRD only speaks BGP about it. A route change therefore
 *   never needs a reload: BIRD learns it from the kernel within milliseconds.
 * - One `protocol bgp` per peer: local ASN, neighbor address/ASN/port, hold,
 *   keepalive and connect-retry timers, eBGP multihop, BFD when enabled. The
 *   export filter accepts herald's routes of the peer's families; a peer that
 *   selects fewer prefixes than the node advertises also gets its own prefix
 *   set (then, and only then, a route change rewrites the config).
 *
 * Every value written is checked again here (addresses parsed, numbers in
 * range, protocol names plain identifiers), so no intent can inject
 * configuration text (flock found a `}` in a peer address).
 */
import { familyOf, parseIp } from '../../core/addr.js';
import { HeraldError } from '../../core/errors.js';
import { HERALD_ROUTE_PROTO } from '../../os/local-routes.js';
import type { BirdConfigRow } from '../tables/bird-config.js';

const int = (n: number, min: number, max: number, what: string): string => {
  if (!Number.isInteger(n) || n < min || n > max) throw new HeraldError('HERALD_INTERNAL', `bird.conf: ${what} ${n} out of range ${min}..${max}`);
  return String(n);
};
const addr = (s: string, what: string): string => {
  const ip = parseIp(s);
  if (!ip) throw new HeraldError('HERALD_INTERNAL', `bird.conf: ${what} ${JSON.stringify(s)} is not an IP address`);
  return ip.text;
};

export function renderBirdConfig(row: BirdConfigRow): string {
  const { peers } = row;
  const options = row;
  const routerId = addr(options.routerId, 'router id');
  if (familyOf(routerId) !== 'IPv4') throw new HeraldError('HERALD_INTERNAL', `bird.conf: router id ${routerId} must be an IPv4 address`);
  const proto = String(HERALD_ROUTE_PROTO);
  const fragment = row.fragment;
  const lines: string[] = [];
  if (fragment === undefined) {
    lines.push('# Written by herald from the BGP intent; edits are overwritten.', `router id ${routerId};`, '', 'protocol device { scan time 10; }', '');
    for (const fam of ['ipv4', 'ipv6'] as const) {
      lines.push(
        `# Learn herald's host routes (protocol ${proto}); never write the kernel.`,
        `protocol kernel herald_kernel_${fam.slice(-1)} {`,
        '  learn;',
        '  scan time 10;',
        // Thousands of routes written at once overflow the default netlink buffer; BIRD then only sees them at the next scan.
        '  netlink rx buffer 8388608;',
        `  ${fam} { import where krt_source = ${proto}; export none; };`,
        '}',
        '',
      );
    }
  } else {
    // An include fragment for the operator's BIRD (--bird-socket): the kernel tables
    // are the operator's kernel protocols' (BIRD allows one per kernel table), so the
    // advertised prefixes are static routes in herald's own BIRD tables, exported to
    // the peers only (nothing of herald's reaches the kernel through this BIRD).
    lines.push('# Written by herald from the BGP intent for an operator-run BIRD (include it from bird.conf); edits are overwritten.', '');
    for (const fam of ['ipv4', 'ipv6'] as const) {
      const bits = fam === 'ipv4' ? 32 : 128;
      const table = `herald${fam.slice(-1)}`;
      const mine = fragment.prefixes.map(hostPrefix).filter((x) => x.endsWith(`/${bits}`));
      lines.push(`${fam} table ${table};`, `protocol static herald_static_${fam.slice(-1)} {`, `  ${fam} { table ${table}; };`, ...mine.map((x) => `  route ${x} blackhole;`), '}', '');
    }
  }
  if (options.bfd) {
    const ms = int(options.bfd.intervalMs, 1, 60_000, 'BFD interval');
    lines.push('protocol bfd herald_bfd {', `  interface "*" { min rx interval ${ms} ms; min tx interval ${ms} ms; multiplier ${int(options.bfd.multiplier, 1, 255, 'BFD multiplier')}; };`, '}', '');
  }
  for (const p of peers) {
    lines.push(`# ${JSON.stringify(p.id).replace(/[^\x20-\x7e]/g, '?')}`, `protocol bgp ${protocolName(p.protocol)} {`);
    // With a fragment the global router ID is the operator's: each session carries ours.
    if (p.routerId !== undefined || fragment !== undefined) lines.push(`  router id ${addr(p.routerId ?? routerId, 'router id')};`);
    lines.push(`  local ${p.localAddress !== undefined ? `${addr(p.localAddress, 'local address')} ` : ''}as ${int(p.localAsn, 1, 4294967295, 'local ASN')};`);
    // peerASN 0 (Cilium: take the AS from the peer's OPEN): BIRD's `external` accepts any AS but our own.
    const remote = p.asn === 0 ? 'external' : `as ${int(p.asn, 1, 4294967295, 'peer ASN')}`;
    lines.push(`  neighbor ${addr(p.address, 'peer address')} port ${int(p.port, 1, 65535, 'peer port')} ${remote};`);
    lines.push(`  hold time ${int(p.holdSeconds, 3, 65535, 'hold time')};`, `  keepalive time ${int(p.keepaliveSeconds, 1, 65535, 'keepalive time')};`);
    lines.push(`  connect retry time ${int(p.connectRetrySeconds, 1, 2147483647, 'connect retry time')};`);
    if (options.connectDelaySeconds !== undefined) lines.push(`  connect delay time ${int(options.connectDelaySeconds, 1, 65535, 'connect delay')};`);
    if (options.errorWaitSeconds !== undefined) lines.push(`  error wait time ${int(options.errorWaitSeconds[0], 1, 65535, 'error wait')},${int(options.errorWaitSeconds[1], 1, 65535, 'error wait')};`);
    if (p.multihop > 1) lines.push(`  multihop ${int(p.multihop, 1, 255, 'multihop')};`);
    // BIRD needs a fixed local address for multihop BFD (CiliumBGPNodeConfigOverride's localAddress).
    if (options.bfd && (p.multihop <= 1 || p.localAddress !== undefined)) lines.push('  bfd on;');
    // RFC 4724: the peer keeps our routes (stale) while herald and its BIRD restart.
    if (p.gracefulRestart) lines.push('  graceful restart on;', `  graceful restart time ${int(p.gracefulRestart.restartSeconds, 1, 4095, 'graceful restart time')};`);
    for (const fam of p.families) {
      const bits = fam === 'ipv4' ? 32 : 128;
      const mine = (p.prefixes ?? []).map(hostPrefix).filter((x) => x.endsWith(`/${bits}`));
      const set = p.prefixes === undefined ? '' : mine.length > 0 ? ` && net ~ [ ${mine.join(', ')} ]` : ' && false';
      const accept = fragment === undefined ? `source = RTS_INHERIT && krt_source = ${proto}${set}` : `source = RTS_STATIC${set}`;
      const table = fragment === undefined ? '' : ` table herald${fam.slice(-1)};`;
      const groups = (p.attributes ?? []).map((g) => ({ ...g, prefixes: g.prefixes.map(hostPrefix).filter((x) => x.endsWith(`/${bits}`)) })).filter((g) => g.prefixes.length > 0);
      if (groups.length === 0) {
        lines.push(`  ${fam} {${table} import none; next hop self; export where ${accept}; };`);
        continue;
      }
      // Path attributes per group of prefixes (the sets follow the selection, not readiness: no reload per readiness change).
      lines.push(`  ${fam} {`, ...(table ? [`   ${table}`] : []), '    import none;', '    next hop self;', '    export filter {', `      if !(${accept}) then reject;`);
      for (const g of groups) {
        const actions = [
          ...g.communities.map(([a, b]) => `bgp_community.add((${int(a, 0, 65535, 'community')}, ${int(b, 0, 65535, 'community')}));`),
          ...g.largeCommunities.map(([a, b, c]) => `bgp_large_community.add((${int(a, 0, 4294967295, 'large community')}, ${int(b, 0, 4294967295, 'large community')}, ${int(c, 0, 4294967295, 'large community')}));`),
          ...(g.localPreference !== undefined ? [`bgp_local_pref = ${int(g.localPreference, 0, 4294967295, 'local preference')};`] : []),
        ];
        lines.push(`      if net ~ [ ${g.prefixes.join(', ')} ] then { ${actions.join(' ')} }`);
      }
      lines.push('      accept;', '    };', '  };');
    }
    lines.push('}', '');
  }
  return lines.join('\n');
}

/** `ip/32` or `ip/128`, re-checked and canonical. */
function hostPrefix(text: string): string {
  const m = /^([^/]+)\/(32|128)$/.exec(text);
  const ip = m ? parseIp(m[1]!) : undefined;
  if (!m || !ip || (ip.family === 'IPv4') !== (m[2] === '32')) throw new HeraldError('HERALD_INTERNAL', `bird.conf: prefix ${JSON.stringify(text)} is not an IP address with a host prefix length`);
  return `${ip.text}/${m[2]}`;
}

function protocolName(name: string): string {
  if (!/^[a-z][a-z0-9_]{0,63}$/.test(name)) throw new HeraldError('HERALD_INTERNAL', `bird.conf: protocol name ${JSON.stringify(name)} is not a plain identifier`);
  return name;
}
