/**
 * Host routes for BGP-advertised service IPs (`ip/32`, `ip/128` in the main
 * table, protocol HERALD_ROUTE_PROTO): one next hop is a plain `via` route,
 * several are one RTA_MULTIPATH route (`nexthop via … nexthop via …`) so that
 * the kernel spreads flows across local backends per flow hash. BIRD's
 * `kernel` protocol imports exactly these routes by their protocol number.
 *
 * Written with iproute2 over rtnetlink, as local-routes.ts (one way of writing
 * routes in herald), read back as JSON. Replace is idempotent; deleting a
 * route that is gone, or whose interface vanished, is success.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { familyOf } from '../core/addr.js';
import { HeraldError } from '../core/errors.js';
import { HERALD_ROUTE_PROTO } from './local-routes.js';

const run = promisify(execFile);

export interface HostRoute {
  /** `ip/32` or `ip/128`. */
  readonly prefix: string;
  /** Gateway addresses, sorted. */
  readonly nextHops: readonly string[];
}

export interface HostRoutes {
  /** Every route herald owns (its protocol number, main table), both families. */
  list(): Promise<HostRoute[]>;
  /** Installs or replaces the route for `prefix` with exactly `nextHops` (at least one). */
  replace(route: HostRoute): Promise<void>;
  /** Removes the route for `prefix`; a missing route is success. */
  del(prefix: string): Promise<void>;
  /** replace() for many routes in one rtnetlink session: one outcome per route (undefined = done, else its error). */
  replaceMany(routes: readonly HostRoute[]): Promise<(Error | undefined)[]>;
  /** del() for many prefixes at once, with the same outcomes. */
  delMany(prefixes: readonly string[]): Promise<(Error | undefined)[]>;
}

/** Errors from `ip route del` that mean "already gone". */
const GONE = ['No such process', 'Cannot find device', 'No such device'];

export class IprouteHostRoutes implements HostRoutes {
  /** `netns`: run in that named network namespace (`ip -n`), for labs; unset = this process's. */
  constructor(private readonly opts: { netns?: string } = {}) {}

  async list(): Promise<HostRoute[]> {
    const out: HostRoute[] = [];
    for (const fam of ['-4', '-6']) {
      const { stdout } = await run('ip', [...this.ns(), '-j', fam, 'route', 'show', 'table', 'main', 'proto', String(HERALD_ROUTE_PROTO)]);
      for (const r of JSON.parse(stdout || '[]') as IpRouteJson[]) {
        const hops = r.nexthops ? r.nexthops.map((h) => h.gateway) : [r.gateway];
        const dst = r.dst.includes('/') ? r.dst : `${r.dst}/${fam === '-4' ? 32 : 128}`;
        out.push({ prefix: dst, nextHops: hops.filter((h): h is string => h !== undefined).sort() });
      }
    }
    return out;
  }

  async replace(route: HostRoute): Promise<void> {
    if (route.nextHops.length === 0) throw new HeraldError('HERALD_INTERNAL', `host route ${route.prefix}: no next hop`);
    const fam = familyOf(route.prefix.split('/')[0] ?? '') === 'IPv6' ? '-6' : '-4';
    const hops = route.nextHops.length === 1 ? ['via', route.nextHops[0]!] : route.nextHops.flatMap((h) => ['nexthop', 'via', h]);
    await this.ip([fam, 'route', 'replace', route.prefix, 'table', 'main', 'proto', String(HERALD_ROUTE_PROTO), ...hops]);
  }

  async del(prefix: string): Promise<void> {
    const fam = familyOf(prefix.split('/')[0] ?? '') === 'IPv6' ? '-6' : '-4';
    try {
      await this.ip([fam, 'route', 'del', prefix, 'table', 'main', 'proto', String(HERALD_ROUTE_PROTO)]);
    } catch (e) {
      if (!GONE.some((m) => String((e as Error).message).includes(m))) throw e;
    }
  }

  async replaceMany(routes: readonly HostRoute[]): Promise<(Error | undefined)[]> {
    const lines = routes.map((r) => {
      if (r.nextHops.length === 0) return undefined;
      const hops = r.nextHops.length === 1 ? `via ${r.nextHops[0]}` : r.nextHops.map((h) => `nexthop via ${h}`).join(' ');
      return `route replace ${r.prefix} table main proto ${HERALD_ROUTE_PROTO} ${hops}`;
    });
    return this.batch(lines, []);
  }

  async delMany(prefixes: readonly string[]): Promise<(Error | undefined)[]> {
    return this.batch(
      prefixes.map((p) => `route del ${p} table main proto ${HERALD_ROUTE_PROTO}`),
      GONE,
    );
  }

  /**
   * One `ip -batch - -force` for all lines (a line that fails does not stop the
   * rest; iproute2 names it "Command failed -:N" after its error text). Lines
   * are only ever built from parsed addresses and numbers above.
   */
  private async batch(lines: readonly (string | undefined)[], harmless: readonly string[]): Promise<(Error | undefined)[]> {
    const out: (Error | undefined)[] = lines.map((l) => (l === undefined ? new HeraldError('HERALD_INTERNAL', 'host route without a next hop') : undefined));
    const sent = lines.flatMap((l, i) => (l === undefined ? [] : [i]));
    if (sent.length === 0) return out;
    const stderr = await new Promise<string>((resolve, reject) => {
      const child = execFile('ip', [...this.ns(), '-batch', '-', '-force'], { maxBuffer: 64 * 1024 * 1024 }, (err, _stdout, stderrText) => {
        // A non-zero exit only says some line failed; which ones is in stderr.
        if (err && (err as { code?: unknown }).code === 'ENOENT') reject(err);
        else resolve(String(stderrText));
      });
      child.stdin!.end(sent.map((i) => lines[i]).join('\n') + '\n');
    });
    let pending: string[] = [];
    for (const text of stderr.split('\n')) {
      const m = /^Command failed -:(\d+)/.exec(text);
      if (!m) {
        if (text.trim() !== '') pending.push(text.trim());
        continue;
      }
      const i = sent[Number(m[1]) - 1];
      const message = pending.join('; ');
      pending = [];
      if (i === undefined || harmless.some((h) => message.includes(h))) continue;
      out[i] = new HeraldError('HERALD_INTERNAL', `ip ${lines[i]}: ${message}`);
    }
    return out;
  }

  private ns(): string[] {
    return this.opts.netns !== undefined ? ['-n', this.opts.netns] : [];
  }

  private async ip(args: string[]): Promise<void> {
    const full = [...this.ns(), ...args];
    try {
      await run('ip', full);
    } catch (e) {
      throw new HeraldError('HERALD_INTERNAL', `ip ${full.join(' ')}: ${String((e as { stderr?: string }).stderr ?? e).trim()}`, { cause: e });
    }
  }
}

interface IpRouteJson {
  dst: string;
  gateway?: string;
  nexthops?: { gateway?: string }[];
}
