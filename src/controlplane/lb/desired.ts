/**
 * Load-balancing desired state, a pure function of
 *   (allocated service IPs × Service ports × EndpointSlices):
 * one lb-services row per (VIP, port, protocol) with its backends.
 *
 *   frontends  every ingress IP LB-IPAM allocated to the Service × every port
 *              of protocol TCP or UDP (SCTP: a warning, not balanced). IPv6
 *              VIPs are balanced like IPv4 ones, every mode and affinity.
 *   backends   the Service's EndpointSlices (label kubernetes.io/service-name),
 *              of the VIP's family (addressType IPv4 or IPv6), the slice port whose name equals the Service
 *              port's name (both unnamed: ''), same protocol; else a numeric
 *              targetPort; else the Service port. Kubernetes' conditions:
 *              serving (nil: ready, nil ready: true) and not terminating →
 *              active; serving and terminating → terminating (keeps its
 *              connections, no new ones); not serving → left out.
 *   mode       annotation `herald.io/lb-mode`: `dnat` (the default: the
 *              service is balanced by this node's datapath to backends it
 *              routes to), `snat` (the node's --lb-snat-address is the source
 *              toward the backends: remote backends on any route), `dsr`
 *              (backends on this segment holding the VIP: only the MAC
 *              changes, the service port is kept, replies bypass the node) or
 *              `none` (not balanced).
 *   algorithm  annotation `service.cilium.io/lb-algorithm` as Cilium reads it
 *              (`maglev` or `random`), or herald's `herald.io/lb-algorithm`
 *              (`maglev`, `random`, `round-robin`; wins when both are set).
 *              Absent: maglev. Another value: a warning, not balanced.
 *   affinity   spec.sessionAffinity / sessionAffinityConfig.clientIP.timeoutSeconds
 *              (either family).
 */
import { isIpv4 } from '../../core/addr.js';
import { lbFrontendKey, type LbAlgorithm, type LbBackendRow, type LbServiceRow } from '../../datapath/tables/lb-services.js';
import { sliceService, type EndpointSliceManifest } from '../../intent/endpoint-slice.js';
import type { ServiceManifest, ServicePort } from '../../intent/service.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';

export const ANNOTATION_LB_MODE = 'herald.io/lb-mode';
/** Cilium's per-service backend selection (values `maglev`, `random`). */
export const ANNOTATION_CILIUM_LB_ALGORITHM = 'service.cilium.io/lb-algorithm';
/** herald's, which also offers `round-robin`; wins over Cilium's when both are set. */
export const ANNOTATION_LB_ALGORITHM = 'herald.io/lb-algorithm';
export type LbMode = 'dnat' | 'none' | 'snat' | 'dsr';

export interface LbWarning {
  readonly service: string;
  readonly message: string;
}

export interface LbDesired {
  readonly rows: ReadonlyMap<string, LbServiceRow>;
  readonly warnings: readonly LbWarning[];
}

export interface LbDesiredInput {
  readonly snapshot: IntentSnapshot;
  /** Allocated ingress IPs per service key ("namespace/name"), from LB-IPAM. */
  readonly ingress: ReadonlyMap<string, readonly string[]>;
}

export function lbMode(svc: ServiceManifest): LbMode | { invalid: string } {
  const v = svc.metadata.annotations?.[ANNOTATION_LB_MODE];
  if (v === undefined || v === '') return 'dnat';
  return v === 'dnat' || v === 'none' || v === 'snat' || v === 'dsr' ? v : { invalid: v };
}

export function lbAlgorithm(svc: ServiceManifest): LbAlgorithm | { invalid: string; annotation: string } {
  const a = svc.metadata.annotations ?? {};
  const own = a[ANNOTATION_LB_ALGORITHM];
  if (own !== undefined && own !== '') {
    return own === 'maglev' || own === 'random' || own === 'round-robin' ? own : { invalid: own, annotation: `${ANNOTATION_LB_ALGORITHM}: "${own}" is not one of maglev, random, round-robin` };
  }
  const cilium = a[ANNOTATION_CILIUM_LB_ALGORITHM];
  if (cilium === undefined || cilium === '') return 'maglev';
  return cilium === 'maglev' || cilium === 'random' ? cilium : { invalid: cilium, annotation: `${ANNOTATION_CILIUM_LB_ALGORITHM}: "${cilium}" is not one of maglev, random` };
}

function backendPort(sp: ServicePort, slice: EndpointSliceManifest): number | undefined {
  const name = sp.name ?? '';
  const match = slice.ports.find((p) => (p.name ?? '') === name && p.protocol === sp.protocol);
  if (match?.port !== undefined) return match.port;
  if (slice.ports.length > 0 && match === undefined) return undefined; // the slice says which ports it serves
  return typeof sp.targetPort === 'number' ? sp.targetPort : sp.port;
}

export function computeLbDesired(input: LbDesiredInput): LbDesired {
  const { snapshot, ingress } = input;
  const slicesBy = new Map<string, EndpointSliceManifest[]>();
  for (const s of snapshot.endpointSlices.values()) {
    const svc = sliceService(s);
    if (svc === undefined) continue;
    (slicesBy.get(svc) ?? slicesBy.set(svc, []).get(svc)!).push(s);
  }
  const rows = new Map<string, LbServiceRow>();
  const warnings: LbWarning[] = [];
  const keys = [...snapshot.services.keys()].sort();
  for (const key of keys) {
    const svc = snapshot.services.get(key)!;
    const ips = ingress.get(key) ?? [];
    if (ips.length === 0) continue;
    const mode = lbMode(svc);
    if (typeof mode === 'object') {
      warnings.push({ service: key, message: `${ANNOTATION_LB_MODE}: "${mode.invalid}" is not one of dnat, none, snat, dsr; not balanced` });
      continue;
    }
    if (mode === 'none') continue;
    const algorithm = lbAlgorithm(svc);
    if (typeof algorithm === 'object') {
      warnings.push({ service: key, message: `${algorithm.annotation}; not balanced` });
      continue;
    }
    const slicesOf = { IPv4: (slicesBy.get(key) ?? []).filter((s) => s.addressType === 'IPv4'), IPv6: (slicesBy.get(key) ?? []).filter((s) => s.addressType === 'IPv6') };
    const affinity = svc.spec.sessionAffinity;
    const timeout = affinity === 'ClientIP' ? (svc.spec.sessionAffinityConfig?.clientIP.timeoutSeconds ?? 10800) : 0;
    for (const sp of svc.spec.ports) {
      if (sp.protocol === 'SCTP') {
        warnings.push({ service: key, message: `port ${sp.port}/SCTP: SCTP is not balanced` });
        continue;
      }
      const backendsOf = (family: 'IPv4' | 'IPv6'): LbBackendRow[] => {
        const backends = new Map<string, LbBackendRow>();
        for (const slice of slicesOf[family]) {
          const port = backendPort(sp, slice);
          if (port === undefined) continue;
          for (const ep of slice.endpoints) {
            const ready = ep.conditions.ready ?? true;
            const serving = ep.conditions.serving ?? ready;
            const terminating = ep.conditions.terminating ?? false;
            if (!serving) continue;
            for (const ip of ep.addresses) {
              const id = `${ip}:${port}`;
              const prev = backends.get(id);
              // Listed twice (two slices): active wins over terminating.
              if (prev && !prev.terminating) continue;
              backends.set(id, { ip, port, terminating });
            }
          }
        }
        return [...backends.values()].sort((a, b) => (a.ip === b.ip ? a.port - b.port : a.ip < b.ip ? -1 : 1));
      };
      const sortedOf = { IPv4: backendsOf('IPv4'), IPv6: backendsOf('IPv6') };
      if (mode === 'dsr' && [...sortedOf.IPv4, ...sortedOf.IPv6].some((b) => b.port !== sp.port)) {
        warnings.push({ service: key, message: `port ${sp.port}: dsr keeps the service port; backends must listen on ${sp.port} (the slice says otherwise)` });
      }
      for (const vip of ips) {
        const v4 = isIpv4(vip);
        const sorted = v4 ? sortedOf.IPv4 : sortedOf.IPv6;
        const rowKey = lbFrontendKey(vip, sp.port, sp.protocol);
        if (rows.has(rowKey)) {
          warnings.push({ service: key, message: `${rowKey} is also ${rows.get(rowKey)!.service}'s; the first (by name) is balanced` });
          continue;
        }
        rows.set(rowKey, {
          key: rowKey,
          service: key,
          vip,
          port: sp.port,
          proto: sp.protocol,
          mode,
          algorithm,
          affinity,
          affinityTimeoutS: timeout,
          backends: sorted,
        });
      }
    }
  }
  return { rows, warnings };
}
