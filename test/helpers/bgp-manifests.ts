/**
 * The Cilium BGP control-plane manifests the BGP labs and benches share, as a
 * user would write them: one instance (`i65000`, ASN 65000) with one peer, a
 * peer config for one address family, and an advertisement of the
 * LoadBalancer IPs of Services labelled `anycast: "yes"`; plus the anycast
 * Service `web` (or `web-<i>`) with its EndpointSlice.
 *
 * Test tooling: each lab states only what its scenario changes (peer, family,
 * timers, endpoints, annotations), so the scenarios read as their difference.
 */

export interface BgpPeering {
  peer: { name: string; address: string; asn: number };
  family?: 'ipv4' | 'ipv6';
  /** Lab timers (hold 9 s, keepalive 3 s, connect retry 1 s); false keeps Cilium's defaults. Default true. */
  labTimers?: boolean;
  gracefulRestart?: boolean;
  /** Extra attributes of the advertisement, as a YAML flow mapping body, e.g. `communities: { standard: ["65000:100"] }`. */
  attributes?: string;
}

/** CiliumBGPClusterConfig + CiliumBGPPeerConfig + CiliumBGPAdvertisement (no trailing separator). */
export function bgpPeeringManifests(o: BgpPeering): string {
  const timers = o.labTimers === false ? '' : '\n  timers: { holdTimeSeconds: 9, keepAliveTimeSeconds: 3, connectRetryTimeSeconds: 1 }';
  const restart = o.gracefulRestart ? '\n  gracefulRestart: { enabled: true, restartTimeSeconds: 60 }' : '';
  const attributes = o.attributes ? `, attributes: { ${o.attributes} }` : '';
  return `apiVersion: cilium.io/v2
kind: CiliumBGPClusterConfig
metadata: { name: bgp }
spec:
  bgpInstances:
  - name: i65000
    localASN: 65000
    peers: [{ name: ${o.peer.name}, peerAddress: "${o.peer.address}", peerASN: ${o.peer.asn}, peerConfigRef: { name: fast } }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata: { name: fast }
spec:${timers}${restart}
  families: [{ afi: ${o.family ?? 'ipv4'}, safi: unicast, advertisements: { matchLabels: { advertise: bgp } } }]
---
apiVersion: cilium.io/v2
kind: CiliumBGPAdvertisement
metadata: { name: lb, labels: { advertise: bgp } }
spec:
  advertisements:
  - { advertisementType: Service, service: { addresses: [LoadBalancerIP] }, selector: { matchLabels: { anycast: "yes" } }${attributes} }`;
}

export interface AnycastEndpoint {
  address: string;
  /** The node the backend runs on; omitted: a backend on no node (ready everywhere for Cluster policy). */
  node?: string;
  ready: boolean;
}

export interface AnycastService {
  /** Default `web`. */
  name?: string;
  externalTrafficPolicy?: 'Local' | 'Cluster';
  /** Service annotations, as a YAML flow mapping body. */
  annotations?: string;
  family?: 'ipv4' | 'ipv6';
  endpoints: AnycastEndpoint[];
}

/** A LoadBalancer Service labelled `anycast: "yes"` and its EndpointSlice (no trailing separator). */
export function anycastServiceManifests(s: AnycastService): string {
  const name = s.name ?? 'web';
  const annotations = s.annotations ? `, annotations: { ${s.annotations} }` : '';
  const endpoints = s.endpoints
    .map((e) => `- { addresses: ["${e.address}"],${e.node ? ` nodeName: ${e.node},` : ''} conditions: { ready: ${e.ready} } }`)
    .join('\n');
  return `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, labels: { anycast: "yes" }${annotations} }
spec: { type: LoadBalancer, externalTrafficPolicy: ${s.externalTrafficPolicy ?? 'Local'}, ports: [{ port: 80 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}-1, namespace: default, labels: { kubernetes.io/service-name: ${name} } }
addressType: ${s.family === 'ipv6' ? 'IPv6' : 'IPv4'}
endpoints:${endpoints ? `\n${endpoints}` : ' []'}`;
}

/** A CiliumLoadBalancerIPPool of one address (no trailing separator). */
export function singleIpPool(name: string, ip: string): string {
  return `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: ${name} }
spec: { blocks: [{ start: "${ip}" }] }`;
}

/** The peering and one anycast Service, joined as one manifest file. */
export function anycastBgpManifests(peering: BgpPeering, service: AnycastService, pool?: { name: string; ip: string }): string {
  return [pool ? singleIpPool(pool.name, pool.ip) : '', bgpPeeringManifests(peering), anycastServiceManifests(service)].filter(Boolean).join('\n---\n') + '\n';
}

export interface UpstreamBird {
  /** The herald nodes it peers with (AS 65000); its own AS is 65100. */
  neighbors: string[];
  family?: 'ipv4' | 'ipv6';
  /** ECMP: install every node's path in the kernel. */
  mergePaths?: boolean;
  /** BFD at 100 ms × 3 on every session. */
  bfd?: boolean;
}

/** The upstream router's BIRD 2 configuration (router ID 192.0.2.1), with the lab timers the platform notes give. */
export function upstreamBirdConfig(o: UpstreamBird): string {
  const af = o.family ?? 'ipv4';
  const sessions = o.neighbors.map(
    (ip, i) => `protocol bgp node${i + 1} {
  local as 65100; neighbor ${ip} as 65000;
  hold time 9; keepalive time 3; connect delay time 1; error wait time 1,5; connect retry time 1;${o.bfd ? ' bfd on;' : ''}
  ${af} { import all; export none; };
}`,
  );
  return `router id 192.0.2.1;
protocol device {}
protocol kernel {${o.mergePaths ? ' merge paths on;' : ''} ${af} { import none; export all; }; }
${o.bfd ? 'protocol bfd { interface "*" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }\n' : ''}${sessions.join('\n')}
`;
}
