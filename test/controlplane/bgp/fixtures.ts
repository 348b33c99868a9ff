/**
 * Builders for the BGP control-plane tests: manifests as YAML text (flow
 * style, documentation addresses only) parsed by the real intent parser, the
 * peer policies several test files share, and a control plane on a fresh
 * StateDB with readers for the rows it writes.
 */
import assert from 'node:assert/strict';
import { silentLogger, type Logger } from '../../../src/core/logger.js';
import { StateDB } from '../../../src/core/statedb/index.js';
import { BgpControlPlane, type BirdSettings } from '../../../src/controlplane/bgp/controller.js';
import { birdPeers } from '../../../src/controlplane/bgp/peers.js';
import { birdConfigTable } from '../../../src/datapath/tables/bird-config.js';
import { bgpRoutesTable } from '../../../src/datapath/tables/bgp-routes.js';
import type { NodeIdentity } from '../../../src/intent/node-labels.js';
import { parseManifests, type IntentSnapshot } from '../../../src/intent/index.js';

/** Parses YAML documents (each ending in a newline) joined by `---`; fails the test on any error. */
export function snap(...docs: string[]): IntentSnapshot {
  const load = parseManifests(docs.join('---\n'), 'f.yaml');
  assert.deepEqual(load.errors, []);
  return load.snapshot!;
}

/** `extra` for cluster(): the config selects only nodes labelled bgp=on. */
export const BGP_ON = '\n  nodeSelector: { matchLabels: { bgp: "on" } }';

/** node-a, labelled bgp=on (selected by BGP_ON). */
export const bgpNode: NodeIdentity = { name: 'node-a', labels: { bgp: 'on' } };

/** A CiliumBGPClusterConfig with one instance `i` (local ASN 65000) and the given peers; `extra` goes under spec, before bgpInstances. */
export const cluster = (name: string, peers: string, extra = '') => `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: ${name} }
spec:${extra}
  bgpInstances: [{ name: i, localASN: 65000, peers: [${peers}] }]
`;

/** A CiliumBGPPeerConfig with its spec on one line. */
export const peerConfig = (name: string, spec: string) => `apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: ${name} }
spec: ${spec}
`;

/** A CiliumBGPPeerConfig with IPv4 unicast only, advertising what is labelled advertise=`label`; `lines` are further spec lines, before families. */
export const ipv4PeerConfig = (name: string, label: string, lines = '') => `apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: ${name} }
spec:
${lines}  families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: ${label} } } }]
`;

/** A CiliumBGPAdvertisement labelled advertise=`label`: LoadBalancer IPs of the services matching `matchLabels`, with `attributes` (text after the selector) if any. */
export const lbAdvertisement = (name: string, label: string, matchLabels: string, attributes = '') => `apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: ${name}, labels: { advertise: ${label} } }
spec:
  advertisements: [{ advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { ${matchLabels} } }${attributes} }]
`;

/**
 * Cluster config bgp, instance i: peer a (config p: IPv4 and IPv6, advertisements
 * labelled bgp) and peer b (config q: IPv4 only, advertisements labelled gold).
 * No advertisement objects.
 */
export const peersAB = (extra = '') =>
  [
    cluster('bgp', '{ name: a, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: p } }, { name: b, peerAddress: 192.0.2.2, peerASN: 65101, peerConfigRef: { name: q } }', extra),
    peerConfig('p', '{ families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }, { afi: ipv6, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }] }'),
    peerConfig('q', '{ families: [{ afi: ipv4, safi: unicast, advertisements: { matchLabels: { advertise: gold } } }] }'),
  ].join('---\n');

export interface TorEdgeOptions {
  /** cluster() `extra`, e.g. BGP_ON. */
  nodeSelector?: string;
  /** The label (="yes") the edge advertisement selects services by; edge unless given. */
  edgeLabel?: string;
  /** A standard community the edge advertisement attaches. */
  community?: string;
  /** Text appended to the peer list (starting with a comma). */
  extraPeers?: string;
  /** Documents appended at the end (starting with `---`). */
  override?: string;
}

/**
 * Cluster config bgp, instance i: peer tor (every service labelled anycast=yes,
 * advertisement all) and peer edge (only those labelled edge=yes too,
 * advertisement edge); IPv4 only.
 */
export const torEdgePolicy = (o: TorEdgeOptions = {}) =>
  [
    cluster(
      'bgp',
      `{ name: tor, peerAddress: 192.0.2.1, peerASN: 65100, peerConfigRef: { name: tor } }, { name: edge, peerAddress: 192.0.2.3, peerASN: 65200, peerConfigRef: { name: edge } }${o.extraPeers ?? ''}`,
      o.nodeSelector,
    ),
    ipv4PeerConfig('tor', 'bgp'),
    ipv4PeerConfig('edge', 'edge'),
    lbAdvertisement('all', 'bgp', 'anycast: "yes"'),
    lbAdvertisement('edge', 'edge', `${o.edgeLabel ?? 'edge'}: "yes"`, o.community ? `, attributes: { communities: { standard: ["${o.community}"] } }` : ''),
  ].join('---\n') + (o.override ?? '');

export interface ControlPlaneOptions {
  /** The node and ingress IPs update() uses unless told others. */
  node: NodeIdentity;
  ingress: ReadonlyMap<string, readonly string[]>;
  bird?: BirdSettings;
  log?: Logger;
}

/** A BGP control plane writing to a fresh StateDB, with readers for the tables it writes. */
export function controlPlane({ node, ingress, bird = { routerId: '192.0.2.2' }, log = silentLogger }: ControlPlaneOptions) {
  const db = new StateDB([bgpRoutesTable, birdConfigTable]);
  const control = new BgpControlPlane({ db, bird, log });
  let snapshot: IntentSnapshot | undefined;
  /** Text is parsed with snap(); returns the snapshot given to the control plane. */
  const update = (s: IntentSnapshot | string, n: NodeIdentity = node, ing: ReadonlyMap<string, readonly string[]> = ingress) => {
    snapshot = typeof s === 'string' ? snap(s) : s;
    control.update({ snapshot, ingress: ing, node: n });
    return snapshot;
  };
  const revisions = () => {
    const t = db.readTxn();
    return { routes: t.revision(bgpRoutesTable), bird: t.revision(birdConfigTable) };
  };
  const rows = () => db.readTxn().list(bgpRoutesTable);
  const row = (prefix: string) => db.readTxn().get(bgpRoutesTable, prefix);
  const birdRow = () => db.readTxn().get(birdConfigTable, 'bird');
  const peer = (id: string) => birdRow()?.peers.find((p) => p.id === id);
  /** BIRD's peers as the pure function gives them from the whole table. */
  const reference = () => birdPeers(snapshot!, node, rows()).peers;
  return { db, control, update, revisions, rows, row, birdRow, peer, reference };
}
