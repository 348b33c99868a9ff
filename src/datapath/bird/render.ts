/**
 * bird.conf from the BGP intent: a pure function (text in, text out).
 *
 * - `protocol kernel` (one per family) *learns* the host routes herald writes
 *   (their protocol number, `krt_source`) and exports nothing back: herald
 *   owns the kernel, BIRD only speaks BGP about it. A route change therefore
 *   never needs a reload: BIRD learns it from the kernel within milliseconds.
 * - One `protocol bgp` per peer of every BGP instance whose cluster config
 *   selects this node: local ASN, neighbor address/ASN/port, hold, keepalive
 *   and connect-retry timers, eBGP multihop, BFD when enabled. The export
 *   filter accepts herald's routes of the peer's families; when a peer selects
 *   fewer prefixes than the node advertises (different advertisement
 *   selectors), its filter also lists its own prefixes.
 *
 * Every value written is validated or generated here (addresses parsed,
 * numbers checked, names replaced by generated identifiers), so no intent
 * can inject configuration text (flock found a `}` in a peer address).
 */
import { familyOf, parseIp } from '../../core/addr.js';
import { HeraldError } from '../../core/errors.js';
import { isUnicastIp } from '../../intent/bgp.js';
import type { NodeIdentity } from '../../intent/node-labels.js';
import { matchesSelector } from '../../intent/selector.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import { HERALD_ROUTE_PROTO } from '../../os/local-routes.js';
import type { BgpRouteRow } from '../tables/bgp-routes.js';

export interface BfdOptions {
  readonly intervalMs: number;
  readonly multiplier: number;
}

export interface BirdRenderOptions {
  /** BGP router ID (an IPv4 address). */
  readonly routerId: string;
  /** BFD on every session (BIRD's `bfd` protocol); unset = off. */
  readonly bfd?: BfdOptions;
  /** BIRD's session retry knobs (defaults 5 s and 60,300 s; labs lower them). */
  readonly connectDelaySeconds?: number;
  readonly errorWaitSeconds?: readonly [number, number];
}

export interface BirdPeer {
  /** "clusterConfig/instance/peer". */
  readonly id: string;
  /** The generated BIRD protocol name. */
  readonly protocol: string;
  readonly localAsn: number;
  readonly address: string;
  readonly asn: number;
  readonly port: number;
  readonly holdSeconds: number;
  readonly keepaliveSeconds: number;
  readonly connectRetrySeconds: number;
  readonly multihop: number;
  readonly families: readonly ('ipv4' | 'ipv6')[];
}

/** The peers BIRD should have on this node, with the reasons some are left out. */
export function birdPeers(snapshot: IntentSnapshot, node: NodeIdentity): { peers: BirdPeer[]; skipped: { peer: string; message: string }[] } {
  const peers: BirdPeer[] = [];
  const skipped: { peer: string; message: string }[] = [];
  const configs = [...snapshot.bgpClusterConfigs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (const [configName, config] of configs) {
    if (!matchesSelector(config.spec.nodeSelector, node.labels)) continue;
    for (const instance of config.spec.bgpInstances) {
      for (const peer of instance.peers) {
        const id = `${configName}/${instance.name}/${peer.name}`;
        if (peer.peerAddress === undefined) {
          skipped.push({ peer: id, message: 'no peerAddress (auto-discovery is not implemented)' });
          continue;
        }
        if (peer.peerASN === 0) {
          skipped.push({ peer: id, message: 'peerASN 0 (learn the ASN from the peer) is not implemented: give the peer ASN' });
          continue;
        }
        const pc = peer.peerConfigRef ? snapshot.bgpPeerConfigs.get(peer.peerConfigRef.name) : undefined;
        const families = (pc?.spec.families ?? [{ afi: 'ipv4', safi: 'unicast' }, { afi: 'ipv6', safi: 'unicast' }])
          .filter(isUnicastIp)
          .map((f) => f.afi);
        peers.push({
          id,
          protocol: `herald_peer${peers.length + 1}`,
          localAsn: instance.localASN,
          address: peer.peerAddress,
          asn: peer.peerASN,
          port: pc?.spec.transport.peerPort ?? 179,
          holdSeconds: pc?.spec.timers.holdTimeSeconds ?? 90,
          keepaliveSeconds: pc?.spec.timers.keepAliveTimeSeconds ?? 30,
          connectRetrySeconds: pc?.spec.timers.connectRetryTimeSeconds ?? 120,
          multihop: pc?.spec.ebgpMultihop ?? 1,
          families: [...new Set(families)].sort(),
        });
      }
    }
  }
  return { peers, skipped };
}

const int = (n: number, min: number, max: number, what: string): string => {
  if (!Number.isInteger(n) || n < min || n > max) throw new HeraldError('HERALD_INTERNAL', `bird.conf: ${what} ${n} out of range ${min}..${max}`);
  return String(n);
};
const addr = (s: string, what: string): string => {
  const ip = parseIp(s);
  if (!ip) throw new HeraldError('HERALD_INTERNAL', `bird.conf: ${what} ${JSON.stringify(s)} is not an IP address`);
  return ip.text;
};

export function renderBirdConfig(input: { peers: readonly BirdPeer[]; routes: readonly BgpRouteRow[]; options: BirdRenderOptions }): string {
  const { peers, routes, options } = input;
  const routerId = addr(options.routerId, 'router id');
  if (familyOf(routerId) !== 'IPv4') throw new HeraldError('HERALD_INTERNAL', `bird.conf: router id ${routerId} must be an IPv4 address`);
  const proto = String(HERALD_ROUTE_PROTO);
  const lines: string[] = [
    '# Written by herald from the BGP intent; edits are overwritten.',
    `router id ${routerId};`,
    '',
    'protocol device { scan time 10; }',
    '',
  ];
  for (const fam of ['ipv4', 'ipv6'] as const) {
    lines.push(
      `# Learn herald's host routes (protocol ${proto}); never write the kernel.`,
      `protocol kernel herald_kernel_${fam.slice(-1)} {`,
      '  learn;',
      '  scan time 10;',
      `  ${fam} { import where krt_source = ${proto}; export none; };`,
      '}',
      '',
    );
  }
  if (options.bfd) {
    const ms = int(options.bfd.intervalMs, 1, 60_000, 'BFD interval');
    lines.push('protocol bfd herald_bfd {', `  interface "*" { min rx interval ${ms} ms; min tx interval ${ms} ms; multiplier ${int(options.bfd.multiplier, 1, 255, 'BFD multiplier')}; };`, '}', '');
  }
  // Each peer's prefixes, for peers that select fewer than the node advertises.
  const all = new Set(routes.map((r) => r.prefix));
  for (const p of peers) {
    const own = routes.filter((r) => r.peers.includes(p.id)).map((r) => r.prefix).sort();
    const restrict = own.length !== [...all].filter((x) => p.families.includes(familyOf(x.split('/')[0]!) === 'IPv4' ? 'ipv4' : 'ipv6')).length;
    lines.push(`# ${JSON.stringify(p.id).replace(/[^\x20-\x7e]/g, '?')}`, `protocol bgp ${p.protocol} {`);
    lines.push(`  local as ${int(p.localAsn, 1, 4294967295, 'local ASN')};`);
    lines.push(`  neighbor ${addr(p.address, 'peer address')} port ${int(p.port, 1, 65535, 'peer port')} as ${int(p.asn, 1, 4294967295, 'peer ASN')};`);
    lines.push(`  hold time ${int(p.holdSeconds, 3, 65535, 'hold time')};`, `  keepalive time ${int(p.keepaliveSeconds, 1, 65535, 'keepalive time')};`);
    lines.push(`  connect retry time ${int(p.connectRetrySeconds, 1, 2147483647, 'connect retry time')};`);
    if (options.connectDelaySeconds !== undefined) lines.push(`  connect delay time ${int(options.connectDelaySeconds, 1, 65535, 'connect delay')};`);
    if (options.errorWaitSeconds !== undefined) lines.push(`  error wait time ${int(options.errorWaitSeconds[0], 1, 65535, 'error wait')},${int(options.errorWaitSeconds[1], 1, 65535, 'error wait')};`);
    if (p.multihop > 1) lines.push(`  multihop ${int(p.multihop, 1, 255, 'multihop')};`);
    // BIRD needs a fixed local address for multihop BFD, which herald does not configure yet.
    if (options.bfd && p.multihop <= 1) lines.push('  bfd on;');
    for (const fam of p.families) {
      const bits = fam === 'ipv4' ? 32 : 128;
      const mine = own.filter((x) => x.endsWith(`/${bits}`));
      const set = restrict ? (mine.length > 0 ? ` && net ~ [ ${mine.map((x) => addr(x.split('/')[0]!, 'prefix') + `/${bits}`).join(', ')} ]` : ' && false') : '';
      lines.push(`  ${fam} { import none; next hop self; export where source = RTS_INHERIT && krt_source = ${proto}${set}; };`);
    }
    lines.push('}', '');
  }
  return lines.join('\n');
}
