/**
 * Which interface the kernel would send a packet to `address` out of (`ip
 * route get`): for BGP, the interfaces facing the peers are the ones a
 * route learned from them brings traffic in on.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface RouteLookup {
  /** The output interface's name, or undefined when there is no route. */
  outputInterface(address: string): Promise<string | undefined>;
}

export class IprouteRouteLookup implements RouteLookup {
  async outputInterface(address: string): Promise<string | undefined> {
    try {
      const { stdout } = await run('ip', ['-j', 'route', 'get', address], { timeout: 5000 });
      const routes = JSON.parse(stdout || '[]') as Array<{ dev?: string }>;
      return routes[0]?.dev;
    } catch {
      return undefined; // no route (unreachable), or not an address
    }
  }
}
