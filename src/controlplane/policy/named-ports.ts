/**
 * Named ports (`toPorts: [{ports: [{port: http}]}]`, NetworkPolicy
 * `ports: [{port: http}]`): in Cilium a name means the pod's container port
 * of that name. herald polices the service's frontend, so a name resolves,
 * per selected service, to the service ports whose `targetPort` is that name
 * and whose protocol matches — exactly the frontend ports that lead to such
 * a container port. A name no port of the service targets resolves to
 * nothing: the rule then matches no packet of that service (as Cilium, where
 * an unresolved name selects no port). Pure.
 */
import type { PolicyRule, PortRange } from './model.js';
import type { ServicePort } from './shared.js';

export function resolveNamedPorts<R extends PolicyRule>(rules: readonly R[], ports: readonly ServicePort[]): R[] {
  if (!rules.some((r) => r.namedPorts !== undefined)) return [...rules];
  return rules.map((r) => {
    if (r.namedPorts === undefined) return r;
    const out: PortRange[] = [...(r.ports ?? [])];
    for (const n of r.namedPorts) {
      for (const p of ports) {
        if (p.targetPort !== n.name || p.proto !== n.proto) continue;
        if (!out.some((x) => x.proto === p.proto && x.lo <= p.port && p.port <= x.hi)) out.push({ proto: p.proto, lo: p.port, hi: p.port });
      }
    }
    const { namedPorts: _n, ...rest } = r;
    return { ...rest, ports: out } as unknown as R;
  });
}
