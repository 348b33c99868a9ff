/**
 * Fields of kinds herald reads leniently (Service, Node: herald reads a subset
 * of what Kubernetes accepts, so it cannot refuse every unknown field) that
 * Kubernetes removed or renamed. The API server's strict field validation
 * (kubectl's default) refuses them; so does herald, with what to write instead.
 */

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

interface RemovedField {
  readonly kind: string;
  readonly path: readonly string[];
  readonly instead: string;
}

const REMOVED: readonly RemovedField[] = [
  {
    kind: 'Service',
    path: ['spec', 'ipFamily'],
    instead: 'removed in Kubernetes 1.20; write spec.ipFamilies (e.g. [IPv6]) and spec.ipFamilyPolicy',
  },
  {
    kind: 'Service',
    path: ['spec', 'topologyKeys'],
    instead: 'removed in Kubernetes 1.22; use spec.internalTrafficPolicy or spec.trafficDistribution',
  },
];

export interface RemovedFieldUse {
  readonly path: readonly string[];
  readonly message: string;
}

/** The removed fields `obj` (a raw object of `kind`) still sets. */
export function removedFieldsIn(kind: string, obj: unknown): RemovedFieldUse[] {
  const out: RemovedFieldUse[] = [];
  for (const r of REMOVED) {
    if (r.kind !== kind) continue;
    let node: unknown = obj;
    for (const seg of r.path.slice(0, -1)) node = isRecord(node) ? node[seg] : undefined;
    if (isRecord(node) && Object.hasOwn(node, r.path[r.path.length - 1]!)) {
      out.push({ path: r.path, message: `unknown field ${JSON.stringify(r.path.join('.'))}: ${r.instead} (the API server's strict field validation refuses it too)` });
    }
  }
  return out;
}
