/**
 * Builders for LB-IPAM tests: manifests as JSON documents (valid YAML, and
 * every string quoted, so YAML 1.1's `No` stays a string), parsed by the
 * real intent parser. Documentation addresses only.
 */
import assert from 'node:assert/strict';
import { formatErrors, parseManifests, type IntentSnapshot } from '../../../src/intent/index.js';
import { allocate } from '../../../src/controlplane/ipam/allocator.js';
import type { AllocationState } from '../../../src/controlplane/ipam/state.js';
import type { IpamResult } from '../../../src/controlplane/ipam/types.js';

export type BlockSpec = string | { start: string; stop?: string };

export interface PoolSpec {
  blocks: BlockSpec[];
  selector?: { matchLabels?: Record<string, string>; matchExpressions?: unknown[] };
  allowFirstLastIPs?: 'Yes' | 'No';
  disabled?: boolean;
  created?: string;
}

export function pool(name: string, spec: PoolSpec): object {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumLoadBalancerIPPool',
    metadata: { name, ...(spec.created ? { creationTimestamp: spec.created } : {}) },
    spec: {
      blocks: spec.blocks.map((b) => (typeof b === 'string' ? { cidr: b } : b)),
      ...(spec.selector ? { serviceSelector: spec.selector } : {}),
      ...(spec.allowFirstLastIPs ? { allowFirstLastIPs: spec.allowFirstLastIPs } : {}),
      ...(spec.disabled !== undefined ? { disabled: spec.disabled } : {}),
    },
  };
}

export interface ServiceSpec {
  namespace?: string;
  labels?: Record<string, string>;
  created?: string;
  type?: string;
  lbClass?: string;
  /** lbipam.cilium.io/ips */
  ips?: string;
  loadBalancerIP?: string;
  sharingKey?: string;
  crossNamespace?: string;
  ports?: (number | { port: number; protocol: string })[];
  etp?: 'Cluster' | 'Local';
  selector?: Record<string, string>;
  families?: ('IPv4' | 'IPv6')[];
  policy?: 'SingleStack' | 'PreferDualStack' | 'RequireDualStack';
  ingress?: string[];
  /** Further annotations, as written. */
  annotations?: Record<string, string>;
}

export function service(name: string, spec: ServiceSpec = {}): object {
  const annotations: Record<string, string> = { ...spec.annotations };
  if (spec.ips !== undefined) annotations['lbipam.cilium.io/ips'] = spec.ips;
  if (spec.sharingKey !== undefined) annotations['lbipam.cilium.io/sharing-key'] = spec.sharingKey;
  if (spec.crossNamespace !== undefined) annotations['lbipam.cilium.io/sharing-cross-namespace'] = spec.crossNamespace;
  const ports = (spec.ports ?? [80]).map((p, i) =>
    typeof p === 'number' ? { name: `p${i}`, port: p } : { name: `p${i}`, ...p },
  );
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name,
      namespace: spec.namespace ?? 'default',
      labels: spec.labels ?? {},
      annotations,
      ...(spec.created ? { creationTimestamp: spec.created } : {}),
    },
    spec: {
      type: spec.type ?? 'LoadBalancer',
      ports,
      ...(spec.lbClass ? { loadBalancerClass: spec.lbClass } : {}),
      ...(spec.loadBalancerIP ? { loadBalancerIP: spec.loadBalancerIP } : {}),
      ...(spec.etp ? { externalTrafficPolicy: spec.etp } : {}),
      ...(spec.selector ? { selector: spec.selector } : {}),
      ...(spec.families ? { ipFamilies: spec.families } : {}),
      ...(spec.policy ? { ipFamilyPolicy: spec.policy } : {}),
    },
    ...(spec.ingress ? { status: { loadBalancer: { ingress: spec.ingress.map((ip) => ({ ip })) } } } : {}),
  };
}

/** Parses objects through the real manifest parser; fails the test on any error. */
export function snapshot(...objects: object[]): IntentSnapshot {
  const text = objects.map((o) => JSON.stringify(o)).join('\n---\n');
  const load = parseManifests(text, 'test.yaml');
  assert.equal(formatErrors(load.errors), '', 'test manifests must parse');
  assert.ok(load.snapshot);
  return load.snapshot;
}

/** Ingress IPs per Service key. */
export function ingressOf(result: IpamResult): Record<string, readonly string[]> {
  return Object.fromEntries([...result.services].map(([k, v]) => [k, v.ingress]));
}

export function reasonOf(result: IpamResult, key: string): string | undefined {
  return result.services.get(key)?.condition.reason;
}

/** A restart: the state goes through JSON, as it does through the state file. */
export function restart(snap: IntentSnapshot, state: AllocationState): IpamResult {
  return allocate(snap, JSON.parse(JSON.stringify(state)) as AllocationState);
}

/** Pool counts as [total, used, available] decimal strings. */
export function countsOf(result: IpamResult, name: string): [string, string, string] | undefined {
  const p = result.pools.get(name);
  return p ? [p.total.toString(), p.used.toString(), p.available.toString()] : undefined;
}
