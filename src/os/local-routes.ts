/**
 * Local routes for owned service IPs (`ip route … table local type local`,
 * /32 or /128):
 * the kernel accepts traffic for the IP as if it were configured, so host
 * services bound to 0.0.0.0 serve it, while the address itself is on no
 * interface. Written with iproute2 (`ip -batch` for bulk), read as JSON.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { HeraldError } from '../core/errors.js';

const run = promisify(execFile);
const host = (ip: string) => (ip.includes(':') ? `${ip}/128` : `${ip}/32`);

/** herald's routing protocol number: marks the routes it owns (kube-vip uses 248). */
export const HERALD_ROUTE_PROTO = 250;

export interface LocalRoutes {
  list(): Promise<string[]>;
  add(ip: string): Promise<void>;
  del(ip: string): Promise<void>;
  /** Makes the kernel leave ARP for these routes to herald on `iface`. */
  quietArp(iface: string): Promise<void>;
}

export class IprouteLocalRoutes implements LocalRoutes {
  private readonly quieted = new Set<string>();

  async list(): Promise<string[]> {
    const out: string[] = [];
    for (const family of ['-4', '-6']) {
      const { stdout } = await run('ip', ['-j', family, 'route', 'show', 'table', 'local', 'proto', String(HERALD_ROUTE_PROTO)]);
      out.push(...(JSON.parse(stdout || '[]') as Array<{ dst: string }>).map((r) => r.dst.replace(/\/(32|128)$/, '')));
    }
    return out;
  }

  /** An IPv6 local route does not make the kernel answer Neighbor Solicitations (only configured addresses are), so it needs no quieting. */
  async add(ip: string): Promise<void> {
    await this.ip(['route', 'replace', 'local', host(ip), 'dev', 'lo', 'table', 'local', 'proto', String(HERALD_ROUTE_PROTO)]);
  }

  async del(ip: string): Promise<void> {
    try {
      await this.ip(['route', 'del', 'local', host(ip), 'dev', 'lo', 'table', 'local', 'proto', String(HERALD_ROUTE_PROTO)]);
    } catch (e) {
      if (!String((e as Error).message).includes('No such process')) throw e; // already gone
    }
  }

  /**
   * A local route makes the IP "local" to the kernel, which would then answer
   * ARP for it itself — also after the agent died. arp_ignore=1 answers only
   * for addresses configured on the receiving interface (the route is not),
   * and arp_announce=2 keeps the VIP out of the node's own ARP requests.
   */
  async quietArp(iface: string): Promise<void> {
    if (this.quieted.has(iface)) return;
    await run('sysctl', ['-q', '-w', `net.ipv4.conf.${iface}.arp_ignore=1`, `net.ipv4.conf.${iface}.arp_announce=2`]);
    this.quieted.add(iface);
  }

  private async ip(args: string[]): Promise<void> {
    try {
      await run('ip', args);
    } catch (e) {
      throw new HeraldError('HERALD_INTERNAL', `ip ${args.join(' ')}: ${String((e as { stderr?: string }).stderr ?? e).trim()}`, { cause: e });
    }
  }
}
