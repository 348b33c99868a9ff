/** `herald` — the one entry point of every command. */
import { Command, CommanderError } from 'commander';
import { describeError } from '../core/errors.js';
import { agentCommand } from './commands/agent.js';
import { datapathCommand } from './commands/datapath.js';
import { garpCommand } from './commands/garp.js';
import { mapCommand } from './commands/map.js';
import { applyCommand, deleteCommand, validateCommand } from './commands/manifests.js';
import { statusCommand } from './commands/status.js';

export async function main(argv: string[]): Promise<void> {
  const program = new Command('herald')
    .description('service IPs on bare-metal networks: eBPF ARP responder, per-IP ownership, LB-IPAM')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  program.addCommand(agentCommand());
  program.addCommand(statusCommand());
  program.addCommand(mapCommand());
  program.addCommand(datapathCommand());
  program.addCommand(garpCommand());
  program.addCommand(validateCommand());
  program.addCommand(applyCommand());
  program.addCommand(deleteCommand());
  try {
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      process.exitCode = e.exitCode;
      return;
    }
    process.stderr.write(`herald: ${describeError(e)}\n`);
    process.exitCode = 1;
  }
}
