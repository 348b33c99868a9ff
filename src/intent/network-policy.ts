/**
 * CiliumNetworkPolicy (namespaced) and CiliumClusterwideNetworkPolicy
 * (cluster-scoped), cilium.io/v2: the part that governs traffic to service
 * IPs, which herald enforces in its policy datapath.
 *
 * Read: spec / specs[] → endpointSelector (matched against the Service's
 * labels plus io.kubernetes.service.{namespace,name}; a `k8s:` or `any:` key
 * prefix is ignored), ingress[] and ingressDeny[] with fromCIDR,
 * fromCIDRSet (cidr, or cidrGroupRef / cidrGroupSelector naming CiliumCIDRGroups,
 * + except), fromEntities world/all, toPorts[].ports
 * (port — a number, or a name resolved per selected service against its
 * ports' targetPort names —, endPort, protocol), icmps[].fields (family, type: a number or
 * Cilium's CamelCase name; not together with toPorts, as Cilium). Everything else is accepted (real policies carry
 * egress, fromEndpoints, L7 rules …) and reported as a warning naming the
 * field, never dropped silently. Bad values are coded errors.
 */
import { z } from 'zod';
import { parseCidr, type ParsedCidr } from '../core/addr.js';
import { formatPath } from './diagnostics.js';
import { clusterMetadata, namespacedMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';
import { quote } from './quote.js';
import { SELECTOR_OPERATORS } from './selector.js';
import { checkPortName } from './service.js';

export const NETWORK_POLICY_API_VERSIONS = ['cilium.io/v2'] as const;

/** Codes a program can tell apart (ManifestDiagnostic.code). */
export type PolicyIssueCode =
  | 'HERALD_POLICY_INVALID_CIDR'
  | 'HERALD_POLICY_EXCEPT_OUTSIDE_CIDR'
  | 'HERALD_POLICY_UNKNOWN_PROTOCOL'
  | 'HERALD_POLICY_PORT_RANGE'
  | 'HERALD_POLICY_NAMED_PORT'
  | 'HERALD_POLICY_ICMP_TYPE'
  | 'HERALD_POLICY_ICMP_WITH_PORTS'
  | 'HERALD_POLICY_NO_SELECTOR';

const coded = (code: PolicyIssueCode) => ({ heraldCode: code });

const cidrText = z.string().transform((s, ctx) => {
  const r = parseCidr(s);
  if (r.ok) return r.cidr.text;
  ctx.issues.push({ code: 'custom', message: `invalid CIDR ${quote(s)}: ${r.reason}`, input: s, params: coded('HERALD_POLICY_INVALID_CIDR') });
  return z.NEVER;
});

function mustCidr(text: string): ParsedCidr {
  const r = parseCidr(text);
  if (!r.ok) throw new Error(`not a CIDR: ${text}`);
  return r.cidr;
}

/** `inner` lies inside `outer` (same family, at least as long, same leading bits). */
export function cidrWithin(inner: string, outer: string): boolean {
  const a = mustCidr(inner);
  const b = mustCidr(outer);
  if (a.family !== b.family || a.prefix < b.prefix) return false;
  const bits = b.prefix;
  for (let i = 0; i < bits; i++) {
    const byte = i >> 3;
    const mask = 0x80 >> (i & 7);
    if (((a.network.bytes[byte] ?? 0) & mask) !== ((b.network.bytes[byte] ?? 0) & mask)) return false;
  }
  return true;
}

const cidrRule = z
  .looseObject({
    cidr: cidrText.optional(),
    except: z.array(cidrText).default([]),
    cidrGroupRef: z.string().min(1).optional(),
    cidrGroupSelector: z
      .strictObject({
        matchLabels: z.record(z.string(), z.string()).default({}),
        matchExpressions: z
          .array(z.strictObject({ key: z.string(), operator: z.enum(SELECTOR_OPERATORS), values: z.array(z.string()).optional() }))
          .default([]),
      })
      .optional(),
  })
  .check((ctx) => {
    const { cidr, except, cidrGroupRef, cidrGroupSelector } = ctx.value;
    const given = [cidr, cidrGroupRef, cidrGroupSelector].filter((x) => x !== undefined).length;
    if (given !== 1) {
      ctx.issues.push({
        code: 'custom',
        message: given === 0 ? 'required: one of cidr, cidrGroupRef, cidrGroupSelector' : 'only one of cidr, cidrGroupRef, cidrGroupSelector (as Cilium)',
        input: undefined,
        path: ['cidr'],
        params: coded('HERALD_POLICY_INVALID_CIDR'),
      });
      return;
    }
    // With a CIDR group, each except applies to the group's CIDRs that contain it (checked when the group is known).
    if (cidr === undefined) return;
    except.forEach((e, i) => {
      if (!cidrWithin(e, cidr)) {
        ctx.issues.push({
          code: 'custom',
          message: `except ${quote(e)} is not inside cidr ${quote(cidr)}`,
          input: e,
          path: ['except', i],
          params: coded('HERALD_POLICY_EXCEPT_OUTSIDE_CIDR'),
        });
      }
    });
  });

export const POLICY_PROTOCOLS = ['TCP', 'UDP', 'SCTP', 'ANY'] as const;

/** The key a named port is kept under in a parsed port entry (a symbol: no manifest field can collide with it). */
export const NAMED_PORT: unique symbol = Symbol('namedPort');

const portProtocol = z
  .looseObject({
    port: z.union([z.string(), z.number()]).optional(),
    endPort: z.number().optional(),
    protocol: z.unknown().optional(),
  })
  .transform((v, ctx) => {
    const protocol = v.protocol ?? 'ANY';
    if (typeof protocol !== 'string' || !(POLICY_PROTOCOLS as readonly string[]).includes(protocol)) {
      ctx.issues.push({
        code: 'custom',
        message: `unknown protocol ${typeof protocol === 'string' ? quote(protocol) : String(protocol)}: expected TCP, UDP, SCTP or ANY`,
        input: protocol,
        path: ['protocol'],
        params: coded('HERALD_POLICY_UNKNOWN_PROTOCOL'),
      });
      return z.NEVER;
    }
    let port = 0;
    if (v.port !== undefined) {
      const text = String(v.port);
      if (!/^[0-9]+$/.test(text)) {
        // A named port: resolved per selected service, against its ports' targetPort names.
        const problem = checkPortName(text) ?? (v.endPort !== undefined && v.endPort !== 0 ? 'endPort needs a numeric port' : undefined);
        if (problem !== undefined) {
          ctx.issues.push({ code: 'custom', message: problem, input: v.port, path: [problem.startsWith('endPort') ? 'endPort' : 'port'], params: coded('HERALD_POLICY_NAMED_PORT') });
          return z.NEVER;
        }
        const { port: _p, endPort: _e, protocol: _pr, ...rest } = v;
        return { ...rest, port: 0, [NAMED_PORT]: text, protocol: protocol as (typeof POLICY_PROTOCOLS)[number] };
      }
      port = Number(text);
      if (port > 65535) {
        ctx.issues.push({ code: 'custom', message: `port ${text} is out of range 0-65535`, input: v.port, path: ['port'], params: coded('HERALD_POLICY_PORT_RANGE') });
        return z.NEVER;
      }
    }
    let endPort: number | undefined;
    if (v.endPort !== undefined) {
      endPort = v.endPort;
      const problem = !Number.isInteger(endPort) || endPort > 65535 || endPort < 0
        ? `endPort ${endPort} is out of range 0-65535`
        : port === 0 && endPort !== 0
          ? 'endPort needs a port (port 0 already means every port)'
          : endPort < port
            ? `endPort ${endPort} is below port ${port}`
            : undefined;
      if (problem !== undefined) {
        ctx.issues.push({ code: 'custom', message: problem, input: endPort, path: ['endPort'], params: coded('HERALD_POLICY_PORT_RANGE') });
        return z.NEVER;
      }
    }
    const { port: _p, endPort: _e, protocol: _pr, ...rest } = v;
    return { ...rest, port, ...(endPort !== undefined && endPort !== 0 ? { endPort } : {}), protocol: protocol as (typeof POLICY_PROTOCOLS)[number] } as {
      port: number;
      endPort?: number;
      /** A named port (port is 0 then). */
      [NAMED_PORT]?: string;
      protocol: (typeof POLICY_PROTOCOLS)[number];
    };
  });

const portRule = z.looseObject({ ports: z.array(portProtocol).default([]) });

/** Cilium's ICMP type names (pkg/policy/api/icmp.go), per family. */
export const ICMP_TYPE_NAMES: Readonly<Record<'IPv4' | 'IPv6', Readonly<Record<string, number>>>> = {
  IPv4: {
    EchoReply: 0, DestinationUnreachable: 3, Redirect: 5, Echo: 8, EchoRequest: 8, RouterAdvertisement: 9, RouterSelection: 10,
    TimeExceeded: 11, ParameterProblem: 12, Timestamp: 13, TimestampReply: 14, Photuris: 40, ExtendedEchoRequest: 42, ExtendedEchoReply: 43,
  },
  IPv6: {
    DestinationUnreachable: 1, PacketTooBig: 2, TimeExceeded: 3, ParameterProblem: 4, EchoRequest: 128, EchoReply: 129,
    MulticastListenerQuery: 130, MulticastListenerReport: 131, MulticastListenerDone: 132, RouterSolicitation: 133, RouterAdvertisement: 134,
    NeighborSolicitation: 135, NeighborAdvertisement: 136, RedirectMessage: 137, RouterRenumbering: 138, ICMPNodeInformationQuery: 139,
    ICMPNodeInformationResponse: 140, InverseNeighborDiscoverySolicitation: 141, InverseNeighborDiscoveryAdvertisement: 142,
    HomeAgentAddressDiscoveryRequest: 144, HomeAgentAddressDiscoveryReply: 145, MobilePrefixSolicitation: 146, MobilePrefixAdvertisement: 147,
    DuplicateAddressRequestCodeSuffix: 157, DuplicateAddressConfirmationCodeSuffix: 158, ExtendedEchoRequest: 160, ExtendedEchoReply: 161,
  },
};

/** An ICMP field → { family, type } (type resolved to its number). */
const icmpField = z
  .looseObject({ family: z.unknown().optional(), type: z.unknown().optional() })
  .transform((v, ctx) => {
    const family = v.family ?? 'IPv4';
    const bad = (path: string, message: string, input: unknown) => {
      ctx.issues.push({ code: 'custom', message, input, path: [path], params: coded('HERALD_POLICY_ICMP_TYPE') });
      return z.NEVER;
    };
    if (family !== 'IPv4' && family !== 'IPv6') return bad('family', `unknown ICMP family ${typeof family === 'string' ? quote(family) : String(family)}: expected IPv4 or IPv6`, family);
    const t = v.type;
    if (t === undefined) return bad('type', 'required: an ICMP type (0-255 or a name such as EchoRequest)', t);
    let type: number;
    if (typeof t === 'number' || (typeof t === 'string' && /^[0-9]+$/.test(t))) {
      type = Number(t);
      if (!Number.isInteger(type) || type < 0 || type > 255) return bad('type', `ICMP type ${String(t)} is out of range 0-255`, t);
    } else if (typeof t === 'string' && Object.hasOwn(ICMP_TYPE_NAMES[family], t)) {
      type = ICMP_TYPE_NAMES[family][t]!;
    } else {
      return bad('type', `unknown ${family} ICMP type ${typeof t === 'string' ? quote(t) : String(t)}: a number 0-255 or one of Cilium's names (${Object.keys(ICMP_TYPE_NAMES[family]).slice(0, 4).join(', ')} …)`, t);
    }
    const { family: _f, type: _t, ...rest } = v;
    return { ...rest, family: family as 'IPv4' | 'IPv6', type };
  });

const icmpRule = z.looseObject({ fields: z.array(icmpField).max(40).default([]) });

const ingressRule = z
  .looseObject({
    fromCIDR: z.array(cidrText).optional(),
    fromCIDRSet: z.array(cidrRule).optional(),
    fromEntities: z.array(z.string()).optional(),
    toPorts: z.array(portRule).optional(),
    icmps: z.array(icmpRule).optional(),
  })
  .check((ctx) => {
    if ((ctx.value.icmps?.length ?? 0) > 0 && (ctx.value.toPorts?.length ?? 0) > 0) {
      ctx.issues.push({
        code: 'custom',
        message: 'the icmps block may only be present without toPorts (as Cilium): write a separate rule for the ports',
        input: ctx.value.icmps,
        path: ['icmps'],
        params: coded('HERALD_POLICY_ICMP_WITH_PORTS'),
      });
    }
  });

/** As Cilium's EndpointSelector: a LabelSelector whose keys may carry a source prefix (`k8s:app`). */
const endpointSelector = z.strictObject({
  matchLabels: z.record(z.string(), z.string()).default({}),
  matchExpressions: z
    .array(z.strictObject({ key: z.string(), operator: z.enum(SELECTOR_OPERATORS), values: z.array(z.string()).optional() }))
    .default([]),
});

const policyRule = z
  .looseObject({
    endpointSelector: endpointSelector.optional(),
    ingress: z.array(ingressRule).optional(),
    ingressDeny: z.array(ingressRule).optional(),
    description: z.string().optional(),
    // Cilium's default-deny switch per direction (absent: on for a direction with rules); herald polices ingress.
    enableDefaultDeny: z.looseObject({ ingress: z.boolean().optional(), egress: z.boolean().optional() }).optional(),
  })
  .check((ctx) => {
    const v = ctx.value as Record<string, unknown>;
    if (v.endpointSelector === undefined && v.nodeSelector === undefined) {
      ctx.issues.push({ code: 'custom', message: 'required: a rule selects what it applies to (herald matches it against services)', input: undefined, path: ['endpointSelector'], params: coded('HERALD_POLICY_NO_SELECTOR') });
    }
  });

function networkPolicySchema<K extends string, M extends z.ZodType>(kind: K, metadata: M) {
  return z
    .object({
      apiVersion: z.enum(NETWORK_POLICY_API_VERSIONS),
      kind: z.literal(kind),
      metadata,
      spec: policyRule.optional(),
      specs: z.array(policyRule).optional(),
      status: z.unknown().optional(),
    })
    .check((ctx) => {
      if (ctx.value.spec === undefined && (ctx.value.specs === undefined || ctx.value.specs.length === 0)) {
        ctx.issues.push({ code: 'custom', message: 'required: spec or specs', input: undefined, path: ['spec'] });
      }
    })
    .transform(({ status: _status, ...p }) => p);
}

export const ciliumNetworkPolicySchema = networkPolicySchema('CiliumNetworkPolicy', namespacedMetadata((s) => checkDns1123Subdomain(s)));
export const ciliumClusterwideNetworkPolicySchema = networkPolicySchema('CiliumClusterwideNetworkPolicy', clusterMetadata((s) => checkDns1123Subdomain(s)));

export type CiliumNetworkPolicyManifest = z.output<typeof ciliumNetworkPolicySchema>;
export type CiliumClusterwideNetworkPolicyManifest = z.output<typeof ciliumClusterwideNetworkPolicySchema>;
export type NetworkPolicyManifest = CiliumNetworkPolicyManifest | CiliumClusterwideNetworkPolicyManifest;
export type PolicyRuleSpec = z.output<typeof policyRule>;
export type IngressRuleSpec = z.output<typeof ingressRule>;
export type PortProtocolSpec = z.output<typeof portProtocol>;

/** Entities that mean "any source address" for traffic to a service. */
export const WORLD_ENTITIES = new Set(['world', 'all']);

const KNOWN_RULE = new Set(['endpointSelector', 'ingress', 'ingressDeny', 'description', 'enableDefaultDeny']);
const KNOWN_DEFAULT_DENY = new Set(['ingress']);
const KNOWN_INGRESS = new Set(['fromCIDR', 'fromCIDRSet', 'fromEntities', 'toPorts', 'icmps']);
const KNOWN_ICMP_RULE = new Set(['fields']);
const KNOWN_ICMP_FIELD = new Set(['family', 'type']);
const KNOWN_CIDR_SET = new Set(['cidr', 'except', 'cidrGroupRef', 'cidrGroupSelector']);
const KNOWN_PORT_RULE = new Set(['ports']);
const KNOWN_PORT = new Set(['port', 'endPort', 'protocol']);

/** Every field herald does not enforce, as a warning naming it (the object is still applied). */
export function networkPolicyWarnings(obj: NetworkPolicyManifest): { path: string; message: string }[] {
  const out: { path: string; message: string }[] = [];
  const warnExtra = (value: object, known: Set<string>, path: (string | number)[], what: string) => {
    for (const key of Object.keys(value)) {
      if (!known.has(key)) out.push({ path: formatPath([...path, key]), message: `ignored by herald (${what})` });
    }
  };
  const rules: [PolicyRuleSpec, (string | number)[]][] = [];
  if (obj.spec) rules.push([obj.spec, ['spec']]);
  (obj.specs ?? []).forEach((r, i) => rules.push([r, ['specs', i]]));
  for (const [rule, path] of rules) {
    warnExtra(rule, KNOWN_RULE, path, 'it polices traffic to service IPs: ingress and ingressDeny only');
    if (rule.enableDefaultDeny !== undefined) warnExtra(rule.enableDefaultDeny, KNOWN_DEFAULT_DENY, [...path, 'enableDefaultDeny'], 'herald polices ingress to service IPs only');
    if (rule.endpointSelector === undefined) out.push({ path: formatPath([...path, 'nodeSelector']), message: 'a rule selecting nodes selects no service: this rule has no effect in herald' });
    for (const section of ['ingress', 'ingressDeny'] as const) {
      (rule[section] ?? []).forEach((ing, i) => {
        const p = [...path, section, i];
        const deny = section === 'ingressDeny' ? ': this deny rule denies less than written' : ': this rule allows less than written';
        warnExtra(ing, KNOWN_INGRESS, p, `only source CIDRs and ports apply to service traffic${deny}`);
        (ing.fromEntities ?? []).forEach((e, j) => {
          if (!WORLD_ENTITIES.has(e)) out.push({ path: formatPath([...p, 'fromEntities', j]), message: `entity ${quote(e)} ignored by herald (only "world" and "all" name sources of service traffic)${deny}` });
        });
        (ing.fromCIDRSet ?? []).forEach((s, j) => warnExtra(s, KNOWN_CIDR_SET, [...p, 'fromCIDRSet', j], `unknown CIDR rule field${deny}`));
        if ((ing.icmps ?? []).length > 0 && (ing.icmps ?? []).every((ir) => ir.fields.length === 0)) {
          out.push({ path: formatPath([...p, 'icmps']), message: `no ICMP entry names a type: this rule matches no packet (as Cilium), it ${section === 'ingressDeny' ? 'denies' : 'allows'} nothing` });
        }
        (ing.icmps ?? []).forEach((ir, j) => {
          warnExtra(ir, KNOWN_ICMP_RULE, [...p, 'icmps', j], 'unknown ICMP rule field');
          ir.fields.forEach((f, k) => warnExtra(f, KNOWN_ICMP_FIELD, [...p, 'icmps', j, 'fields', k], 'unknown ICMP field'));
        });
        (ing.toPorts ?? []).forEach((tp, j) => {
          warnExtra(tp, KNOWN_PORT_RULE, [...p, 'toPorts', j], 'L7 rules and SNI are not enforced: the ports apply at L4');
          tp.ports.forEach((pp, k) => warnExtra(pp, KNOWN_PORT, [...p, 'toPorts', j, 'ports', k], 'unknown port field'));
        });
      });
    }
  }
  return out;
}
