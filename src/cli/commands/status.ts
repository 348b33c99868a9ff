import { Command } from 'commander';
import { defaultStatusSocket, fetchStatus } from '../../api/status-server.js';
import { renderStatus, type AgentStatus } from '../../api/status.js';
import { defaultNodeName, parseNodeName } from '../options.js';

export function statusCommand(): Command {
  return new Command('status')
    .description("show what this node owns and where, candidates, LB-IPAM allocations and conditions, the live map, reconciler health")
    .option('--node <name>', 'the node whose agent to ask', parseNodeName, defaultNodeName())
    .option('--status-socket <path>', 'the agent\'s status socket (default /run/herald/<node>.sock)')
    .option('--json', 'machine-readable output')
    .action(async (opts: { node: string; statusSocket?: string; json?: boolean }) => {
      const status = (await fetchStatus(opts.statusSocket ?? defaultStatusSocket(opts.node))) as AgentStatus;
      process.stdout.write(opts.json ? JSON.stringify(status, null, 2) + '\n' : renderStatus(status));
    });
}
