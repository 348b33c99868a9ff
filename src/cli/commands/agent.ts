import { Command, Option } from 'commander';
import { Agent } from '../../agent.js';
import { parseAnnouncement } from '../../controlplane/static-announcements.js';
import { reconcilerDefaults } from '../../core/reconciler/reconciler.js';
import { describeError } from '../../core/errors.js';
import { RESPONDER_MAP_SIZE_DEFAULT } from '../../datapath/l2-responder/datapath.js';
import { livenessDefaults } from '../../datapath/l2-responder/liveness.js';
import { garpDefaults } from '../../datapath/garp.js';
import { createLogger, type LogFormat } from '../logging.js';
import { collect, defaultNodeName, parseCount, parseDuration, parseNodeName, parsePositiveInt, pinDirFor } from '../options.js';

interface AgentOptions {
  node: string;
  announce: string[];
  bpfPinDir?: string;
  responderMapSize: number;
  livenessInterval: number;
  livenessMaxAge: number;
  garpCount: number;
  garpInterval: number;
  fullReconcileInterval: number;
  pruneGrace: number;
  logFormat: LogFormat;
  logLevel: string;
}

export function agentCommand(): Command {
  return new Command('agent')
    .description('run the node agent: load the L2 responder, keep it alive, announce service IPs')
    .option('--node <name>', 'this node\'s name', parseNodeName, defaultNodeName())
    .option('--announce <ip@interface>', 'answer ARP for this IPv4 address on this interface (repeatable)', collect, [])
    .option('--bpf-pin-dir <dir>', 'where the maps are pinned (default /sys/fs/bpf/herald/<node>)')
    .option('--responder-map-size <n>', 'capacity of the responder map', parsePositiveInt, RESPONDER_MAP_SIZE_DEFAULT)
    .option('--liveness-interval <duration>', 'how often the datapath heartbeat is written', parseDuration, livenessDefaults.intervalMs)
    .option('--liveness-max-age <duration>', 'the datapath stops answering when the heartbeat is older', parseDuration, livenessDefaults.maxAgeMs)
    .option('--garp-count <n>', 'gratuitous ARP rounds per newly announced IP (0 = off)', parseCount, garpDefaults.count)
    .option('--garp-interval <duration>', 'time between gratuitous ARP rounds', parseDuration, garpDefaults.intervalMs)
    .option('--full-reconcile-interval <duration>', 'period of the full datapath reconciliation', parseDuration, reconcilerDefaults.fullIntervalMs)
    .option('--prune-grace <duration>', 'at start, keep pinned entries this long at most while intent loads', parseDuration, reconcilerDefaults.initGraceMs)
    .addOption(new Option('--log-format <format>', 'log output').choices(['json', 'text']).default('text'))
    .addOption(new Option('--log-level <level>', 'log level').choices(['debug', 'info', 'warn', 'error']).default('info'))
    .action(async (opts: AgentOptions) => {
      const log = createLogger({ format: opts.logFormat, level: opts.logLevel, name: opts.node });
      let agent: Agent | undefined;
      try {
        agent = new Agent(
          {
            node: opts.node,
            announcements: opts.announce.map(parseAnnouncement),
            datapath: {
              pinDir: pinDirFor(opts),
              responderMapSize: opts.responderMapSize,
              liveness: { intervalMs: opts.livenessInterval, maxAgeMs: opts.livenessMaxAge },
            },
            garp: { count: opts.garpCount, intervalMs: opts.garpInterval },
            reconciler: { ...reconcilerDefaults, fullIntervalMs: opts.fullReconcileInterval, initGraceMs: opts.pruneGrace },
          },
          log,
        );
        await agent.start();
        log.info({ pinDir: pinDirFor(opts) }, 'agent running');
      } catch (e) {
        log.error({ err: describeError(e), code: (e as { code?: string }).code }, 'agent failed to start');
        agent?.dispose();
        process.exitCode = 1;
        return;
      }
      const stop = (signal: string) => {
        log.info({ signal }, 'stopping; the datapath keeps answering until the liveness limit passes');
        agent?.dispose();
        process.exit(0);
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
}
