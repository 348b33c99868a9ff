/**
 * The BGP peers this node should have, from intent: every peer of every BGP
 * instance whose CiliumBGPClusterConfig selects this node, with its
 * CiliumBGPPeerConfig (timers, port, multihop, families), and the prefixes it
 * is owed when it selects fewer than the node advertises. Pure.
 */
import type { BgpRouteRow } from '../../datapath/tables/bgp-routes.js';
import type { AttributeGroup, BirdPeer } from '../../datapath/tables/bird-config.js';
import { bgpTimerDefaults, isUnicastIp } from '../../intent/bgp.js';
import type { NodeIdentity } from '../../intent/node-labels.js';
import { matchesSelector } from '../../intent/selector.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';

export interface SkippedPeer {
  readonly peer: string;
  readonly message: string;
}

/** Prefixes come from the desired state (validated addresses): a colon is IPv6. */
const afiOf = (prefix: string): 'ipv4' | 'ipv6' => (prefix.includes(':') ? 'ipv6' : 'ipv4');

/**
 * What birdPeers needs of the advertised routes, kept up to date row by row
 * (add / remove as the bgp-routes table changes), so that a readiness change
 * among 10,000 routes costs no pass over all of them: per family how many
 * routes there are, per peer and family how many are exported to that peer,
 * and — only for a peer owed fewer than all — their prefixes.
 */
export class AdvertisedRoutes {
  private readonly perFamily = new Map<string, number>();
  private readonly perPeer = new Map<string, number>();

  /** `rows`: every advertised route now (read only to list a partial peer's prefixes). */
  constructor(private readonly rows: () => Iterable<BgpRouteRow>) {}

  static of(routes: readonly BgpRouteRow[]): AdvertisedRoutes {
    const a = new AdvertisedRoutes(() => routes);
    for (const r of routes) a.add(r);
    return a;
  }

  add(r: BgpRouteRow): void {
    this.adjust(r, 1);
  }

  remove(r: BgpRouteRow): void {
    this.adjust(r, -1);
  }

  /** Routes of these families. */
  count(families: readonly string[]): number {
    return families.reduce((n, f) => n + (this.perFamily.get(f) ?? 0), 0);
  }

  /** Routes of these families exported to `peer`. */
  countFor(peer: string, families: readonly string[]): number {
    return families.reduce((n, f) => n + (this.perPeer.get(`${peer}\u0000${f}`) ?? 0), 0);
  }

  /** The prefixes of these families exported to `peer`, sorted. */
  prefixesFor(peer: string, families: readonly string[]): string[] {
    const out: string[] = [];
    for (const r of this.rows()) if (families.includes(afiOf(r.prefix)) && r.peers.includes(peer)) out.push(r.prefix);
    return out.sort();
  }

  private adjust(r: BgpRouteRow, d: number): void {
    const afi = afiOf(r.prefix);
    this.perFamily.set(afi, (this.perFamily.get(afi) ?? 0) + d);
    for (const p of r.peers) {
      const k = `${p}\u0000${afi}`;
      this.perPeer.set(k, (this.perPeer.get(k) ?? 0) + d);
    }
  }
}

export function birdPeers(
  snapshot: IntentSnapshot,
  node: NodeIdentity,
  routeRows: readonly BgpRouteRow[] | AdvertisedRoutes = [],
  attributes: ReadonlyMap<string, readonly AttributeGroup[]> = new Map(),
): { peers: BirdPeer[]; skipped: SkippedPeer[] } {
  const peers: BirdPeer[] = [];
  const skipped: SkippedPeer[] = [];
  const routes = routeRows instanceof AdvertisedRoutes ? routeRows : AdvertisedRoutes.of(routeRows);
  const override = snapshot.bgpNodeOverrides.get(node.name);
  const configs = [...snapshot.bgpClusterConfigs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (const [configName, config] of configs) {
    if (!matchesSelector(config.spec.nodeSelector, node.labels)) continue;
    for (const instance of config.spec.bgpInstances) {
      // CiliumBGPNodeConfigOverride: this node's router ID, local ASN and peers' local addresses, per instance name.
      const o = override?.spec.bgpInstances.find((b) => b.name === instance.name);
      for (const peer of instance.peers) {
        const localAddress = o?.peers.find((p) => p.name === peer.name)?.localAddress;
        const id = `${configName}/${instance.name}/${peer.name}`;
        if (peer.peerAddress === undefined) {
          skipped.push({ peer: id, message: 'no peerAddress (auto-discovery is not implemented)' });
          continue;
        }
        const pc = peer.peerConfigRef ? snapshot.bgpPeerConfigs.get(peer.peerConfigRef.name) : undefined;
        const families = [...new Set((pc?.spec.families ?? [{ afi: 'ipv4', safi: 'unicast' }, { afi: 'ipv6', safi: 'unicast' }]).filter(isUnicastIp).map((f) => f.afi))].sort();
        // Routes of its families it is owed, against all the node advertises in them (counted as the table
        // changes): the list is built (and sorted) only for a peer owed fewer than all.
        const ofFamilies = routes.count(families);
        const owed = routes.countFor(id, families);
        const own = owed !== ofFamilies ? routes.prefixesFor(id, families) : [];
        peers.push({
          id,
          protocol: `herald_peer${peers.length + 1}`,
          localAsn: o?.localASN ?? instance.localASN,
          ...(o?.routerID !== undefined ? { routerId: o.routerID } : {}),
          ...(localAddress !== undefined ? { localAddress } : {}),
          address: peer.peerAddress,
          asn: peer.peerASN,
          port: pc?.spec.transport.peerPort ?? 179,
          holdSeconds: pc?.spec.timers.holdTimeSeconds ?? bgpTimerDefaults.holdTimeSeconds,
          keepaliveSeconds: pc?.spec.timers.keepAliveTimeSeconds ?? bgpTimerDefaults.keepAliveTimeSeconds,
          connectRetrySeconds: pc?.spec.timers.connectRetryTimeSeconds ?? bgpTimerDefaults.connectRetryTimeSeconds,
          multihop: pc?.spec.ebgpMultihop ?? 1,
          families,
          ...(attributes.has(id) ? { attributes: attributes.get(id)! } : {}),
          ...(pc?.spec.gracefulRestart?.enabled ? { gracefulRestart: { restartSeconds: pc.spec.gracefulRestart.restartTimeSeconds } } : {}),
          ...(owed !== ofFamilies ? { prefixes: own } : {}),
        });
      }
    }
  }
  return { peers, skipped };
}
