/**
 * `herald` — the one entry point of every command.
 *
 * Only the command being run is loaded: `herald --help` and `herald --version`
 * import none of the heavy modules (etcd3, koffi, prom-client, pino, zod
 * schemas), so they start about as fast as node itself. The top-level help
 * lists each command from the table below; `subcommands.test.ts` checks the
 * table matches each command's own description.
 */
import { Command, CommanderError } from 'commander';
import { readFileSync } from 'node:fs';

export interface SubcommandEntry {
  name: string;
  description: string;
  load: () => Promise<Command>;
}

export const subcommands: readonly SubcommandEntry[] = [
  {
    name: 'agent',
    description: 'run the node agent: intent → LB-IPAM → announcement policy → ownership → eBPF ARP/NDP responder',
    load: async () => (await import('./commands/agent.js')).agentCommand(),
  },
  {
    name: 'status',
    description: 'show what this node owns and where, candidates, LB-IPAM allocations and conditions, the live map, reconciler health',
    load: async () => (await import('./commands/status.js')).statusCommand(),
  },
  {
    name: 'policy',
    description: "service traffic policy: repository and realized revision, each service's effective rules, drop counters; trace a packet",
    load: async () => (await import('./commands/policy.js')).policyCommand(),
  },
  {
    name: 'events',
    description: 'follow the cluster timeline: allocations, ownership moves with cause and gap, store outages, rejected intent',
    load: async () => (await import('./commands/events.js')).eventsCommand(),
  },
  { name: 'map', description: 'inspect the datapath maps (read live from the pinned maps)', load: async () => (await import('./commands/map.js')).mapCommand() },
  { name: 'ct', description: 'load balancer connection tracking: list (remaining lifetimes by the kernel clock), flush, stats', load: async () => (await import('./commands/ct.js')).ctCommand() },
  { name: 'datapath', description: 'manage the kernel side of the datapath', load: async () => (await import('./commands/datapath.js')).datapathCommand() },
  {
    name: 'garp',
    description: 'send a gratuitous ARP burst (IPv4) or unsolicited Neighbor Advertisements (IPv6) for an IP from an interface (works without an address on it)',
    load: async () => (await import('./commands/garp.js')).garpCommand(),
  },
  {
    name: 'validate',
    description: 'check manifest files or directories offline: every error with file, line, document and field',
    load: async () => (await import('./commands/manifests.js')).validateCommand(),
  },
  {
    name: 'apply',
    description: 'validate manifests and store them in etcd in one transaction (created / configured / unchanged)',
    load: async () => (await import('./commands/manifests.js')).applyCommand(),
  },
  {
    name: 'delete',
    description: 'validate manifests and delete their objects from etcd in one transaction',
    load: async () => (await import('./commands/manifests.js')).deleteCommand(),
  },
];

export function heraldVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** The command a command line runs (`herald help X` runs X's help), if any. */
function selected(args: readonly string[]): string | undefined {
  const first = args[0];
  return first === 'help' ? args[1] : first;
}

export async function main(argv: string[]): Promise<void> {
  const program = new Command('herald')
    .description('service IPs on bare-metal networks: eBPF ARP responder, per-IP ownership, LB-IPAM')
    .version(heraldVersion(), '-V, --version', 'print the version')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  try {
    const wanted = selected(argv.slice(2));
    for (const entry of subcommands) {
      program.addCommand(entry.name === wanted ? await entry.load() : new Command(entry.name).description(entry.description));
    }
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      process.exitCode = e.exitCode;
      return;
    }
    const { describeError } = await import('../core/errors.js');
    process.stderr.write(`herald: ${describeError(e)}\n`);
    process.exitCode = 1;
  }
}
