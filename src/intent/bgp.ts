/**
 * Cilium's BGP control plane v2 kinds (cilium.io/v2, and v2alpha1 which
 * Cilium still serves), cluster-scoped and read strictly like the CRDs:
 *
 *   CiliumBGPClusterConfig  node selector → BGP instances (local ASN) → peers
 *   CiliumBGPPeerConfig     timers, transport, families → advertisement selectors
 *   CiliumBGPAdvertisement  what to advertise (Service LoadBalancerIP/ExternalIP)
 *
 * Field semantics and bounds follow Cilium's CRDs. Fields herald accepts but
 * does not implement yet are reported as warnings (see `bgpWarnings`), never
 * silently dropped.
 */
import { z } from 'zod';
import { quote } from './quote.js';
import { parseIp } from '../core/addr.js';
import { checkedString } from './fields.js';
import { clusterMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';
import { labelSelectorSchema } from './selector.js';

export const BGP_API_VERSIONS = ['cilium.io/v2', 'cilium.io/v2alpha1'] as const;

const q = quote;
const MAX_ASN = 4294967295;

/** A 4-byte ASN; `min` is 1 for a local ASN, 0 for a peer ("learn it from the OPEN"). */
const asn = (min: 0 | 1) =>
  z.unknown().transform((v, ctx): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > MAX_ASN) {
      const got = typeof v === 'number' ? String(v) : typeof v === 'string' ? `string ${q(v)}` : typeof v;
      ctx.issues.push({ code: 'custom', message: `invalid ASN ${got}: must be an integer between ${min} and ${MAX_ASN}`, input: v });
      return z.NEVER;
    }
    return v;
  });

/** A number of seconds within Cilium's bounds. */
const seconds = (min: number, max: number) => z.number().int().min(min).max(max);

const bgpName = z.string().min(1).max(255);

const peerAddress = z.string().transform((s, ctx) => {
  const ip = parseIp(s);
  if (!ip) {
    ctx.issues.push({ code: 'custom', message: `invalid peer address ${q(s)}: expected an IP address (no prefix length)`, input: s });
    return z.NEVER;
  }
  return ip.text;
});

// ---- CiliumBGPClusterConfig ------------------------------------------------

const peerConfigRefSchema = z.strictObject({
  name: checkedString((s) => checkDns1123Subdomain(s)),
  // v2alpha1 carries group and kind; only these values make sense.
  group: z.literal('cilium.io').optional(),
  kind: z.literal('CiliumBGPPeerConfig').optional(),
});

const clusterPeerSchema = z.strictObject({
  name: bgpName,
  peerAddress: peerAddress.optional(),
  peerASN: asn(0).default(0),
  autoDiscovery: z.unknown().optional(),
  peerConfigRef: peerConfigRefSchema.optional(),
});

const bgpInstanceSchema = z
  .strictObject({
    name: bgpName,
    localASN: asn(1),
    localPort: z.number().int().min(1).max(65535).optional(),
    peers: z.array(clusterPeerSchema).default([]),
  })
  .check((ctx) => {
    const seen = new Map<string, number>();
    ctx.value.peers.forEach((p, i) => {
      const first = seen.get(p.name);
      if (first !== undefined) ctx.issues.push({ code: 'custom', message: `duplicate peer name ${q(p.name)} (also peers[${first}])`, input: p.name, path: ['peers', i, 'name'] });
      else seen.set(p.name, i);
      if (p.peerAddress === undefined && p.autoDiscovery === undefined) {
        ctx.issues.push({ code: 'custom', message: 'required (or autoDiscovery)', input: undefined, path: ['peers', i, 'peerAddress'] });
      }
    });
  });

export const bgpClusterConfigSchema = z
  .strictObject({
    apiVersion: z.enum(BGP_API_VERSIONS),
    kind: z.literal('CiliumBGPClusterConfig'),
    metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
    spec: z
      .strictObject({
        nodeSelector: labelSelectorSchema.optional(),
        bgpInstances: z.array(bgpInstanceSchema).min(1).max(16),
      })
      .check((ctx) => {
        const seen = new Map<string, number>();
        ctx.value.bgpInstances.forEach((b, i) => {
          const first = seen.get(b.name);
          if (first !== undefined) ctx.issues.push({ code: 'custom', message: `duplicate instance name ${q(b.name)} (also bgpInstances[${first}])`, input: b.name, path: ['bgpInstances', i, 'name'] });
          else seen.set(b.name, i);
        });
      }),
    status: z.unknown().optional(),
  })
  .transform(({ status: _status, ...o }) => o);

// ---- CiliumBGPPeerConfig ---------------------------------------------------

export const BGP_AFIS = ['ipv4', 'ipv6', 'l2vpn', 'ls', 'opaque'] as const;
export const BGP_SAFIS = [
  'unicast', 'multicast', 'mpls_label', 'encapsulation', 'vpls', 'evpn', 'ls', 'sr_policy', 'mup', 'mpls_vpn',
  'mpls_vpn_multicast', 'route_target_constraints', 'flowspec_unicast', 'flowspec_vpn', 'key_value',
] as const;

const familySchema = z.strictObject({
  afi: z.enum(BGP_AFIS),
  safi: z.enum(BGP_SAFIS),
  advertisements: labelSelectorSchema.optional(),
});

export const bgpTimerDefaults = { connectRetryTimeSeconds: 120, holdTimeSeconds: 90, keepAliveTimeSeconds: 30 } as const;

const timersSchema = z
  .strictObject({
    connectRetryTimeSeconds: seconds(1, 2147483647).default(bgpTimerDefaults.connectRetryTimeSeconds),
    holdTimeSeconds: seconds(3, 65535).default(bgpTimerDefaults.holdTimeSeconds),
    keepAliveTimeSeconds: seconds(1, 65535).default(bgpTimerDefaults.keepAliveTimeSeconds),
  })
  .check((ctx) => {
    const { holdTimeSeconds: hold, keepAliveTimeSeconds: keep } = ctx.value;
    const inRange = hold >= 3 && hold <= 65535 && keep >= 1 && keep <= 65535; // else already an error
    if (inRange && keep > hold) {
      ctx.issues.push({ code: 'custom', message: `keepAliveTimeSeconds ${keep} is above holdTimeSeconds ${hold}: the session would expire between keepalives`, input: keep, path: ['keepAliveTimeSeconds'] });
    }
  });

export const bgpPeerConfigSchema = z
  .strictObject({
    apiVersion: z.enum(BGP_API_VERSIONS),
    kind: z.literal('CiliumBGPPeerConfig'),
    metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
    spec: z
      .strictObject({
        transport: z
          .strictObject({
            localPort: z.number().int().min(1).max(65535).optional(),
            peerPort: z.number().int().min(1).max(65535).default(179),
            sourceInterface: z.string().optional(),
          })
          .prefault({}),
        timers: timersSchema.prefault({}),
        authSecretRef: z.string().optional(),
        gracefulRestart: z
          .strictObject({ enabled: z.boolean(), restartTimeSeconds: seconds(1, 4095).default(120) })
          .optional(),
        ebgpMultihop: z.number().int().min(1).max(255).default(1),
        // Cilium's default when unset: IPv4 and IPv6 unicast, advertising nothing.
        families: z.array(familySchema).optional(),
      })
      .prefault({}),
    status: z.unknown().optional(),
  })
  .transform(({ status: _status, ...o }) => ({
    ...o,
    spec: {
      ...o.spec,
      families: o.spec.families ?? [{ afi: 'ipv4' as const, safi: 'unicast' as const }, { afi: 'ipv6' as const, safi: 'unicast' as const }],
    },
  }));

// ---- CiliumBGPAdvertisement ------------------------------------------------

export const ADVERTISEMENT_TYPES = ['PodCIDR', 'CiliumPodIPPool', 'Service', 'Interface'] as const;
export const SERVICE_ADDRESS_TYPES = ['LoadBalancerIP', 'ClusterIP', 'ExternalIP'] as const;
const WELL_KNOWN_COMMUNITIES = ['internet', 'planned-shut', 'accept-own', 'route-filter-translated-v4', 'route-filter-v4', 'route-filter-translated-v6', 'route-filter-v6', 'llgr-stale', 'no-llgr', 'blackhole', 'no-export', 'no-advertise', 'no-export-subconfed', 'no-peer'] as const;

const standardCommunity = z.string().check((ctx) => {
  const m = /^(\d+):(\d+)$/.exec(ctx.value);
  const n = /^\d+$/.test(ctx.value) ? Number(ctx.value) : undefined;
  const ok = m ? Number(m[1]) <= 65535 && Number(m[2]) <= 65535 : n !== undefined && n <= 4294967295;
  if (!ok) ctx.issues.push({ code: 'custom', message: `invalid standard community ${q(ctx.value)}: expected <0-65535>:<0-65535> or a 32-bit decimal`, input: ctx.value });
});
const largeCommunity = z.string().check((ctx) => {
  const m = /^(\d+):(\d+):(\d+)$/.exec(ctx.value);
  if (!m || m.slice(1).some((x) => Number(x) > 4294967295)) {
    ctx.issues.push({ code: 'custom', message: `invalid large community ${q(ctx.value)}: expected <u32>:<u32>:<u32>`, input: ctx.value });
  }
});

const advertisementSchema = z
  .strictObject({
    advertisementType: z.enum(ADVERTISEMENT_TYPES),
    service: z
      .strictObject({
        addresses: z.array(z.enum(SERVICE_ADDRESS_TYPES)).min(1),
        aggregationLengthIPv4: z.number().int().min(0).max(31).optional(),
        aggregationLengthIPv6: z.number().int().min(0).max(127).optional(),
      })
      .optional(),
    interface: z.strictObject({ name: z.string().min(1) }).optional(),
    selector: labelSelectorSchema.optional(),
    attributes: z
      .strictObject({
        communities: z
          .strictObject({
            standard: z.array(standardCommunity).optional(),
            wellKnown: z.array(z.enum(WELL_KNOWN_COMMUNITIES)).optional(),
            large: z.array(largeCommunity).optional(),
          })
          .optional(),
        localPreference: z.number().int().min(0).max(4294967295).optional(),
      })
      .optional(),
  })
  .check((ctx) => {
    const a = ctx.value;
    if (a.advertisementType === 'Service' && a.service === undefined) {
      ctx.issues.push({ code: 'custom', message: 'required when advertisementType is Service', input: undefined, path: ['service'] });
    }
  });

export const bgpAdvertisementSchema = z
  .strictObject({
    apiVersion: z.enum(BGP_API_VERSIONS),
    kind: z.literal('CiliumBGPAdvertisement'),
    metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
    spec: z.strictObject({ advertisements: z.array(advertisementSchema).min(1) }),
    status: z.unknown().optional(),
  })
  .transform(({ status: _status, ...o }) => o);

// ---- CiliumBGPNodeConfigOverride ------------------------------------------

const ipv4RouterId = z.string().transform((s, ctx) => {
  const ip = parseIp(s);
  if (!ip || ip.family !== 'IPv4') {
    ctx.issues.push({ code: 'custom', message: `invalid router ID ${q(s)}: expected an IPv4 address`, input: s });
    return z.NEVER;
  }
  return ip.text;
});

const localAddress = z.string().transform((s, ctx) => {
  const ip = parseIp(s);
  if (!ip) {
    ctx.issues.push({ code: 'custom', message: `invalid local address ${q(s)}: expected an IP address`, input: s });
    return z.NEVER;
  }
  return ip.text;
});

/** Per-node settings; the object's name is the node's name. */
export const bgpNodeConfigOverrideSchema = z
  .strictObject({
    apiVersion: z.enum(BGP_API_VERSIONS),
    kind: z.literal('CiliumBGPNodeConfigOverride'),
    metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
    spec: z.strictObject({
      bgpInstances: z
        .array(
          z.strictObject({
            name: bgpName,
            routerID: ipv4RouterId.optional(),
            localPort: z.number().int().min(1).max(65535).optional(),
            localASN: asn(1).optional(),
            peers: z.array(z.strictObject({ name: bgpName, localAddress: localAddress.optional() })).default([]),
          }),
        )
        .min(1),
    }),
    status: z.unknown().optional(),
  })
  .transform(({ status: _status, ...o }) => o);

export type BgpNodeConfigOverrideManifest = z.output<typeof bgpNodeConfigOverrideSchema>;
export type BgpClusterConfigManifest = z.output<typeof bgpClusterConfigSchema>;
export type BgpInstance = BgpClusterConfigManifest['spec']['bgpInstances'][number];
export type BgpClusterPeer = BgpInstance['peers'][number];
export type BgpPeerConfigManifest = z.output<typeof bgpPeerConfigSchema>;
export type BgpFamily = BgpPeerConfigManifest['spec']['families'][number];
export type BgpAdvertisementManifest = z.output<typeof bgpAdvertisementSchema>;
export type BgpAdvertisement = BgpAdvertisementManifest['spec']['advertisements'][number];

type Warning = { path: string; message: string };
const notYet = (path: string, what: string): Warning => ({ path, message: `${what} is not implemented by herald yet: accepted and not applied` });

/** Fields herald accepts but does not act on, each reported once per object. */
export function bgpWarnings(obj: BgpClusterConfigManifest | BgpPeerConfigManifest | BgpAdvertisementManifest | BgpNodeConfigOverrideManifest): Warning[] {
  const out: Warning[] = [];
  switch (obj.kind) {
    case 'CiliumBGPClusterConfig':
      obj.spec.bgpInstances.forEach((b, i) => {
        if (b.localPort !== undefined) out.push(notYet(`spec.bgpInstances[${i}].localPort`, 'a local BGP listening port'));
        b.peers.forEach((p, j) => {
          const at = `spec.bgpInstances[${i}].peers[${j}]`;
          if (p.autoDiscovery !== undefined) out.push(notYet(`${at}.autoDiscovery`, 'peer auto-discovery'));
          if (p.peerConfigRef === undefined) out.push({ path: `${at}.peerConfigRef`, message: 'no peerConfigRef: the peer gets default timers and families that advertise nothing' });
        });
      });
      break;
    case 'CiliumBGPPeerConfig':
      if (obj.spec.authSecretRef !== undefined) out.push(notYet('spec.authSecretRef', 'TCP MD5 authentication'));
      if (obj.spec.transport.sourceInterface !== undefined) out.push(notYet('spec.transport.sourceInterface', 'a source interface'));
      if (obj.spec.transport.localPort !== undefined) out.push(notYet('spec.transport.localPort', 'a local port (deprecated in Cilium too)'));
      obj.spec.families.forEach((f, i) => {
        if (!isUnicastIp(f)) out.push(notYet(`spec.families[${i}]`, `address family ${f.afi}/${f.safi}`));
      });
      break;
    case 'CiliumBGPNodeConfigOverride':
      obj.spec.bgpInstances.forEach((b, i) => {
        if (b.localPort !== undefined) out.push(notYet(`spec.bgpInstances[${i}].localPort`, 'a local BGP listening port'));
      });
      break;
    case 'CiliumBGPAdvertisement':
      obj.spec.advertisements.forEach((a, i) => {
        const at = `spec.advertisements[${i}]`;
        if (a.advertisementType !== 'Service') out.push(notYet(`${at}.advertisementType`, `advertisementType ${a.advertisementType}`));
        if (a.service?.addresses.includes('ClusterIP')) out.push(notYet(`${at}.service.addresses`, 'advertising ClusterIP'));
        if (a.service?.aggregationLengthIPv4 !== undefined || a.service?.aggregationLengthIPv6 !== undefined) out.push(notYet(`${at}.service`, 'prefix aggregation'));
        if (a.attributes?.communities !== undefined) out.push(notYet(`${at}.attributes.communities`, 'BGP communities'));
        if (a.attributes?.localPreference !== undefined) out.push(notYet(`${at}.attributes.localPreference`, 'local preference'));
      });
      break;
  }
  return out;
}

/** The families herald advertises on: IPv4 and IPv6 unicast. */
export function isUnicastIp<F extends { afi: string; safi: string }>(f: F): f is F & { afi: 'ipv4' | 'ipv6'; safi: 'unicast' } {
  return (f.afi === 'ipv4' || f.afi === 'ipv6') && f.safi === 'unicast';
}
