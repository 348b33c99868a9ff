import { Command } from 'commander';
import { STATUS_SOCKET_DIR, fetchStatus } from '../../api/status-server.js';
import { renderStatus, type AgentStatus } from '../../api/status.js';
import { discoverStatusSocket } from '../discover.js';
import { defaultNodeName, parseNodeName } from '../options.js';

export function statusCommand(): Command {
  return new Command('status')
    .description("show what this node owns and where, candidates, LB-IPAM allocations and conditions, the live map, reconciler health")
    .option('--node <name>', 'the node whose agent to ask (default: the only agent running here, else the hostname)', parseNodeName)
    .option('--status-socket <path>', 'the agent\'s status socket (default /run/herald/<node>.sock)')
    .option('--json', 'machine-readable output')
    .action(async (opts: { node?: string; statusSocket?: string; json?: boolean }) => {
      const socket = discoverStatusSocket(opts, STATUS_SOCKET_DIR, defaultNodeName());
      const status = (await fetchStatus(socket.path)) as AgentStatus;
      process.stdout.write(opts.json ? JSON.stringify(status, null, 2) + '\n' : renderStatus(status));
    });
}
