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

export function birdPeers(
  snapshot: IntentSnapshot,
  node: NodeIdentity,
  routes: readonly BgpRouteRow[] = [],
  attributes: ReadonlyMap<string, readonly AttributeGroup[]> = new Map(),
): { peers: BirdPeer[]; skipped: SkippedPeer[] } {
  const peers: BirdPeer[] = [];
  const skipped: SkippedPeer[] = [];
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
        // Routes of its families it is owed, against all the node advertises in them.
        // Counted first: the list is built (and sorted) only for a peer owed fewer than all (10,000 routes per change otherwise).
        let ofFamilies = 0;
        let owed = 0;
        for (const r of routes) {
          if (!families.includes(afiOf(r.prefix))) continue;
          ofFamilies++;
          if (r.peers.includes(id)) owed++;
        }
        const own = owed !== ofFamilies ? routes.filter((r) => families.includes(afiOf(r.prefix)) && r.peers.includes(id)).map((r) => r.prefix).sort() : [];
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
