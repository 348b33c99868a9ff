import { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { STATUS_SOCKET_DIR } from '../../api/status-server.js';
import { describeEvent } from '../../api/view/describe.js';
import type { ClusterEvent } from '../../core/events.js';
import { HeraldError } from '../../core/errors.js';
import { discoverStatusSocket } from '../discover.js';
import { defaultNodeName, parseNodeName } from '../options.js';

interface EventsOptions {
  node?: string;
  statusSocket?: string;
  url?: string;
  tokenFile?: string;
  json?: boolean;
  all?: boolean;
}

/** Follows the cluster view's event stream (SSE) in the terminal; reconnects with the last id seen (no loss, no duplicate). */
export function eventsCommand(): Command {
  return new Command('events')
    .description('follow the cluster timeline: allocations, ownership moves with cause and gap, store outages, rejected intent')
    .option('--node <name>', 'the node whose agent to ask (default: the only agent running here)', parseNodeName)
    .option('--status-socket <path>', "the agent's status socket (default /run/herald/<node>.sock)")
    .option('--url <url>', "an agent's --view-listen address instead of the socket (http://host:port)")
    .option('--token-file <path>', 'bearer token for --url')
    .option('--all', 'print the events the agent keeps first, then follow')
    .option('--json', 'one JSON object per line')
    .action(async (opts: EventsOptions) => {
      const target = opts.url ? { url: new URL('/v1/events', opts.url) } : { socketPath: discoverStatusSocket(opts, STATUS_SOCKET_DIR, defaultNodeName()).path };
      const token = opts.tokenFile ? readFileSync(opts.tokenFile, 'utf8').trim() : undefined;
      let last: number | undefined = opts.all ? 0 : undefined;
      let connected = false;
      for (;;) {
        try {
          await follow(target, token, last, () => (connected = true), (e) => {
            last = e.id; // kept across a failed reconnection too
            process.stdout.write(opts.json ? JSON.stringify(e) + '\n' : `${e.at}  #${e.id}  ${e.node.padEnd(12)} ${describeEvent(e)}\n`);
          });
        } catch (e) {
          if (!connected) throw e; // never connected: say why
          process.stderr.write(`herald events: ${(e as Error).message}; reconnecting\n`);
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    });
}

/** One connection: resolves with the last id seen when the stream ends. */
function follow(target: { url: URL } | { socketPath: string }, token: string | undefined, after: number | undefined, onOpen: () => void, onEvent: (e: ClusterEvent) => void): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    let last = after;
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (after !== undefined) headers['last-event-id'] = String(after);
    if (token) headers['authorization'] = `Bearer ${token}`;
    const opts =
      'url' in target
        ? { host: target.url.hostname, port: target.url.port, path: target.url.pathname, headers }
        : { socketPath: target.socketPath, path: '/v1/events', headers };
    const req = request({ ...opts, method: 'GET' }, (res: IncomingMessage) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new HeraldError('HERALD_BAD_ARGUMENT', `the agent answered ${res.statusCode}${res.statusCode === 401 ? ' (a token is required: --token-file)' : ''}`));
        return;
      }
      onOpen();
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = new Map<string, string>();
          for (const line of block.split('\n')) {
            const i = line.indexOf(':');
            if (i > 0) fields.set(line.slice(0, i), line.slice(i + 1).trimStart());
          }
          if (fields.get('event') !== 'event') continue;
          const e = JSON.parse(fields.get('data') ?? '{}') as ClusterEvent;
          last = e.id;
          onEvent(e);
        }
      });
      res.on('end', () => resolve(last));
      res.on('error', () => resolve(last));
    });
    req.on('error', (e: NodeJS.ErrnoException) => {
      reject(new HeraldError('HERALD_BAD_ARGUMENT', e.code === 'ENOENT' || e.code === 'ECONNREFUSED' ? 'no agent is listening there (is it running?)' : e.message));
    });
    req.end();
  });
}
