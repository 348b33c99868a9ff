/**
 * The BIRD configuration table: one row saying what BIRD should run (router
 * ID, BFD, the peers with their timers and exports). Written by the BGP
 * control plane from intent; rendered into bird.conf and applied by the BIRD
 * reconciler, whose status on the row says whether BIRD took it.
 */
import { defineTable } from '../../core/statedb/index.js';

export interface BfdOptions {
  readonly intervalMs: number;
  readonly multiplier: number;
}

/**
 * Path attributes some of a peer's routes carry (CiliumBGPAdvertisement
 * `attributes`), one group per identical set. Computed from the selection,
 * not from readiness, so a readiness change never rewrites bird.conf.
 */
export interface AttributeGroup {
  /** Host prefixes (ip/32, ip/128) of the IPs this set applies to. */
  readonly prefixes: readonly string[];
  /** Standard communities as [high 16 bits, low 16 bits] (well-known names resolved). */
  readonly communities: readonly (readonly [number, number])[];
  readonly largeCommunities: readonly (readonly [number, number, number])[];
  readonly localPreference?: number;
}

export interface BirdPeer {
  /** "clusterConfig/instance/peer". */
  readonly id: string;
  /** The generated BIRD protocol name (never intent text). */
  readonly protocol: string;
  readonly localAsn: number;
  /** The instance's router ID for this node (CiliumBGPNodeConfigOverride); unset = the global one. */
  readonly routerId?: string;
  /** Source address of the session (CiliumBGPNodeConfigOverride peers[].localAddress). */
  readonly localAddress?: string;
  readonly address: string;
  readonly asn: number;
  readonly port: number;
  readonly holdSeconds: number;
  readonly keepaliveSeconds: number;
  readonly connectRetrySeconds: number;
  readonly multihop: number;
  readonly families: readonly ('ipv4' | 'ipv6')[];
  /**
   * BGP graceful restart (RFC 4724; CiliumBGPPeerConfig spec.gracefulRestart):
   * the peer keeps this node's routes for `restartSeconds` while herald and its
   * BIRD restart. Unset = off: a stop withdraws at once.
   */
  readonly gracefulRestart?: { readonly restartSeconds: number };
  /** Communities / local preference set on export, per group of prefixes; unset = none. */
  readonly attributes?: readonly AttributeGroup[];
  /**
   * Unset: every herald route of its families (the filter matches the routes'
   * protocol only, so a route change needs no reload). Set: only these
   * prefixes (a peer selecting fewer advertisements than the node advertises).
   */
  readonly prefixes?: readonly string[];
}

export interface BirdConfigRow {
  readonly name: 'bird';
  /** BGP router ID (an IPv4 address). */
  readonly routerId: string;
  /** BFD on every session (BIRD's `bfd` protocol); unset = off. */
  readonly bfd?: BfdOptions;
  /** BIRD's session retry knobs (defaults 5 s and 60,300 s; labs lower them). */
  readonly connectDelaySeconds?: number;
  readonly errorWaitSeconds?: readonly [number, number];
  readonly peers: readonly BirdPeer[];
  /**
   * Set when the BIRD is the operator's (`--bird-socket`): the configuration is
   * an include fragment in herald's own BIRD tables (herald4/herald6), no
   * kernel protocol (the operator's owns the kernel tables), and the advertised
   * prefixes are static routes there — so here, unlike with herald's own BIRD,
   * a change of the advertised set rewrites the fragment.
   */
  readonly fragment?: { readonly prefixes: readonly string[] };
}

export const birdConfigTable = defineTable<BirdConfigRow>({
  name: 'bird-config',
  primaryKey: (r) => r.name,
  columns: ['NAME', 'ROUTER ID', 'PEERS'],
  toColumns: (r) => [r.name, r.routerId, r.peers.map((p) => p.id).join(',')],
});
