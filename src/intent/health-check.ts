/**
 * Health checks for a Service's backends on plain hosts, where no kubelet
 * keeps EndpointSlice conditions current: herald probes its node's own
 * endpoints itself, as keepalived's and HAProxy's checks do, and a backend
 * that fails `fall` probes in a row counts as not ready until it passes
 * `rise` in a row. Asked for with Service annotations (herald's own; Cilium
 * ignores them):
 *
 *   herald.io/health-check            tcp | http            (unset: EndpointSlice conditions only)
 *   herald.io/health-check-port       1..65535              (default: the endpoint's port)
 *   herald.io/health-check-path       /healthz              (http; default /; 2xx and 3xx pass)
 *   herald.io/health-check-interval   2s                    (HAProxy's inter)
 *   herald.io/health-check-timeout    1s                    (at most the interval)
 *   herald.io/health-check-rise       2
 *   herald.io/health-check-fall       3
 */
import { durationMs } from '../core/duration.js';
import type { AnnotationIssue } from './annotations.js';

export const HEALTH_CHECK_PREFIX = 'herald.io/health-check';
const KEYS = {
  type: HEALTH_CHECK_PREFIX,
  port: `${HEALTH_CHECK_PREFIX}-port`,
  path: `${HEALTH_CHECK_PREFIX}-path`,
  interval: `${HEALTH_CHECK_PREFIX}-interval`,
  timeout: `${HEALTH_CHECK_PREFIX}-timeout`,
  rise: `${HEALTH_CHECK_PREFIX}-rise`,
  fall: `${HEALTH_CHECK_PREFIX}-fall`,
} as const;

export interface HealthCheckSpec {
  readonly type: 'tcp' | 'http';
  /** Unset: the endpoint's own port. */
  readonly port?: number;
  readonly path: string;
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly rise: number;
  readonly fall: number;
}

export const healthCheckDefaults = { path: '/', intervalMs: 2000, timeoutMs: 1000, rise: 2, fall: 3 } as const;

type Annotations = Readonly<Record<string, string>>;

/** The health check a Service's annotations ask for (undefined: none), and one issue per bad annotation. */
export function parseHealthCheck(annotations: Annotations): { spec?: HealthCheckSpec; issues: AnnotationIssue[] } {
  const issues: AnnotationIssue[] = [];
  const has = (k: string) => Object.hasOwn(annotations, k);
  const present = Object.values(KEYS).filter(has);
  for (const k of Object.keys(annotations)) {
    if (k.startsWith(`${HEALTH_CHECK_PREFIX}-`) && !(Object.values(KEYS) as string[]).includes(k)) {
      issues.push({ key: k, message: `unknown health check annotation (known: ${Object.values(KEYS).join(', ')})` });
    }
  }
  if (present.length === 0) return { issues };
  if (!has(KEYS.type)) {
    for (const k of present) issues.push({ key: k, message: `has no effect without ${KEYS.type}: tcp or http` });
    return { issues };
  }
  const type = annotations[KEYS.type]!.trim();
  if (type !== 'tcp' && type !== 'http') issues.push({ key: KEYS.type, message: `${JSON.stringify(type)} is not a health check type: tcp or http` });
  const int = (k: string, min: number, max: number, def?: number): number | undefined => {
    if (!has(k)) return def;
    const v = annotations[k]!.trim();
    const n = /^\d+$/.test(v) ? Number(v) : NaN;
    if (!(n >= min && n <= max)) issues.push({ key: k, message: `${JSON.stringify(v)} is not a whole number from ${min} to ${max}` });
    return n;
  };
  const dur = (k: string, min: number, max: number, def: number): number => {
    if (!has(k)) return def;
    const ms = durationMs(annotations[k]!);
    if (ms === undefined || ms < min || ms > max) issues.push({ key: k, message: `${JSON.stringify(annotations[k])} is not a duration from ${min}ms to ${max / 1000}s (e.g. 500ms, 2s)` });
    return ms ?? def;
  };
  const port = int(KEYS.port, 1, 65535);
  const path = has(KEYS.path) ? annotations[KEYS.path]! : healthCheckDefaults.path;
  if (!/^\/[\x21-\x7e]*$/.test(path)) issues.push({ key: KEYS.path, message: `${JSON.stringify(path)} is not an absolute request path (starts with /, printable, no spaces)` });
  if (has(KEYS.path) && type === 'tcp') issues.push({ key: KEYS.path, message: 'a path needs herald.io/health-check: http' });
  const intervalMs = dur(KEYS.interval, 50, 3_600_000, healthCheckDefaults.intervalMs);
  const timeoutMs = dur(KEYS.timeout, 10, 3_600_000, Math.min(healthCheckDefaults.timeoutMs, intervalMs));
  if (timeoutMs > intervalMs) issues.push({ key: KEYS.timeout, message: `timeout ${timeoutMs}ms is longer than the interval ${intervalMs}ms` });
  const rise = int(KEYS.rise, 1, 100, healthCheckDefaults.rise)!;
  const fall = int(KEYS.fall, 1, 100, healthCheckDefaults.fall)!;
  if (issues.length > 0) return { issues };
  return { spec: { type: type as 'tcp' | 'http', ...(port !== undefined ? { port } : {}), path, intervalMs, timeoutMs, rise, fall }, issues };
}
