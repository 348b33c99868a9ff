/**
 * Which backends this node health-checks, and how a probe result moves a
 * backend between up and down: pure functions.
 *
 * A target is an endpoint address of a Service that asks for a check
 * (herald.io/health-check), in an EndpointSlice entry whose nodeName is this
 * node — each node checks its own backends, as keepalived does for its real
 * servers. The port is the annotation's, else the slice's first TCP port, else
 * the Service's first port's numeric targetPort, else its port.
 */
import { parseHealthCheck, type HealthCheckSpec } from '../../intent/health-check.js';
import { sliceService } from '../../intent/endpoint-slice.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import { sortedEntries } from '../../core/order.js';

export interface HealthTarget {
  /** "namespace/name|address|port": one probe loop per key. */
  readonly key: string;
  readonly service: string;
  readonly address: string;
  readonly port: number;
  readonly spec: HealthCheckSpec;
}

export const healthKey = (service: string, address: string): string => `${service}|${address}`;

export function healthTargets(snapshot: IntentSnapshot, nodeName: string): Map<string, HealthTarget> {
  const out = new Map<string, HealthTarget>();
  for (const [, slice] of sortedEntries(snapshot.endpointSlices)) {
    const service = sliceService(slice);
    if (service === undefined || slice.addressType === 'FQDN') continue;
    const svc = snapshot.services.get(service);
    const spec = svc ? parseHealthCheck(svc.metadata.annotations).spec : undefined;
    if (!svc || !spec) continue;
    const first = svc.spec.ports[0];
    const port =
      spec.port ??
      slice.ports.find((p) => p.protocol === 'TCP' && p.port !== undefined)?.port ??
      (typeof first?.targetPort === 'number' ? first.targetPort : first?.port);
    if (port === undefined) continue;
    for (const ep of slice.endpoints) {
      if (ep.nodeName !== nodeName) continue;
      for (const address of ep.addresses) {
        const key = `${healthKey(service, address)}|${port}`;
        out.set(key, { key, service, address, port, spec });
      }
    }
  }
  return out;
}

export interface HealthState {
  readonly up: boolean;
  /** Consecutive results against the current state (toward rise when down, fall when up). */
  readonly streak: number;
}

/**
 * A backend starts up (as HAProxy's servers do): an agent restart must not
 * withdraw a healthy backend while its first probes run; a dead one goes
 * down after `fall` failures.
 */
export const initialHealth: HealthState = { up: true, streak: 0 };

export function nextHealth(s: HealthState, ok: boolean, rise: number, fall: number): HealthState {
  if (ok === s.up) return { up: s.up, streak: 0 };
  const streak = s.streak + 1;
  return streak >= (s.up ? fall : rise) ? { up: !s.up, streak: 0 } : { up: s.up, streak };
}
