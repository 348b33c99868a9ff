import { parseIp } from '../../core/addr.js';
import { parseNodeLabels } from '../../intent/node-labels.js';
import { Command, InvalidArgumentError, Option } from 'commander';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { HeraldError } from '../../core/errors.js';
import { parseViewListen, viewAdvertiseUrl } from '../../api/view/server.js';
import { hostAddresses } from '../../os/host-addresses.js';
import { Agent } from '../../agent.js';
import { defaultStatusSocket } from '../../api/status-server.js';
import { parseAnnouncement } from '../../controlplane/static-announcements.js';
import { describeError } from '../../core/errors.js';
import { reconcilerDefaults } from '../../core/reconciler/reconciler.js';
import { RESPONDER_MAP_SIZE_DEFAULT } from '../../datapath/l2-responder/datapath.js';
import { LOCAL_STORE_LIVENESS_MAX_AGE_MS, livenessDefaults } from '../../datapath/l2-responder/liveness.js';
import { ownerWatchDefaults } from '../../datapath/owner-watch-options.js';
import { garpDefaults } from '../../datapath/garp.js';
import { conflictDefenceDefaults } from '../../datapath/conflict-defence.js';
import { lbDefaults } from '../../datapath/lb/stack.js';
import { defaultLifetimes, type CtLifetimes } from '../../datapath/lb/program.js';
import { isPrime } from '../../datapath/lb/maglev.js';
import { SupervisorLink } from '../../supervisor/child.js';
import { SUPERVISED_ENV } from '../../supervisor/protocol.js';
import { createLogger, type LogFormat } from '../logging.js';
import { AGENT_NICE_DEFAULT, applyNice, parseNice } from '../nice.js';
import { manifestLimitDefaults } from '../../intent/limits.js';
import { collect, defaultNodeName, parseByteSize, parseCount, durationOption, parseNodeName, parsePositiveInt, pinDirFor } from '../options.js';

interface AgentOptions {
  nice: number;
  node: string;
  nodeLabels?: Record<string, string>;
  manifests?: string;
  store: 'local' | 'etcd';
  etcd: string[];
  etcdPrefix: string;
  kubernetes?: boolean;
  kubeconfig?: string;
  kubeNamespace: string;
  kubeLeaseDuration: number;
  kubeLeaseRenew: number;
  stateDir?: string;
  announce: string[];
  bpfPinDir?: string;
  responderMapSize: number;
  livenessInterval: number;
  livenessMaxAge?: number;
  heartbeatThread: boolean;
  garpCount: number;
  garpInterval: number;
  conflictDefenceInterval: number;
  fullReconcileInterval: number;
  pruneGrace: number;
  statusSocket?: string;
  metricsListen?: string;
  viewListen?: string;
  viewAdvertiseAddress?: string;
  viewTokenFile?: string;
  onStoreLoss: 'withdraw' | 'keep';
  wireProbeInterval: number;
  wireSilence: number;
  handoverHold?: number;
  localRoutes?: boolean;
  logFormat: LogFormat;
  logLevel: string;
  maxManifestSize: number;
  lbClasses?: string[];
  bgpRouterId?: string;
  bgpBfd?: number;
  bgpTickOnly?: number;
  birdSocket?: string;
  birdInclude?: string;
  lbInterfaces?: string[];
  lbCtSize: number;
  lbMaglevSize: number;
  lbCtLifetimes?: CtLifetimes;
  lbGcMinInterval: number;
  lbSnatAddress?: string;
  lbSnatAddress6?: string;
  lbSnatPorts?: { min: number; max: number };
  lbXdp?: boolean;
  lbXdpTargets?: string[];
  supervisor: boolean;
}

function parseInterfaceList(value: string): string[] {
  const names = value.split(',').map((s) => s.trim()).filter(Boolean);
  if (names.length === 0 || names.some((n) => !/^[A-Za-z0-9_.:@-]{1,15}$/.test(n))) throw new InvalidArgumentError('expected interface names, comma-separated');
  return names;
}

function parseIntRange(name: string, min: number, max: number, prime = false) {
  return (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`${name} ${v}: expected an integer between ${min} and ${max}`);
    if (prime && !isPrime(n)) throw new InvalidArgumentError(`${name} ${v}: expected a prime (e.g. 251, 1021, 16381, 65537)`);
    return n;
  };
}

/** tcp-syn=60,tcp-established=21600,tcp-closing=10,non-tcp=60 (seconds; any subset). */
function parseLifetimes(v: string): CtLifetimes {
  const out: CtLifetimes = { ...defaultLifetimes };
  const names: Record<string, keyof CtLifetimes> = { 'tcp-syn': 'tcpSynS', 'tcp-established': 'tcpEstablishedS', 'tcp-closing': 'tcpClosingS', 'non-tcp': 'nonTcpS' };
  for (const part of v.split(',')) {
    const [k, val] = part.split('=');
    const field = names[(k ?? '').trim()];
    const n = Number(val);
    if (!field || !(n > 0 && n <= 7 * 86400)) {
      throw new InvalidArgumentError(`--lb-ct-lifetimes ${part}: expected ${Object.keys(names).join('|')}=<seconds> (0 < s ≤ 604800)`);
    }
    out[field] = n;
  }
  return out;
}

function parseLbClasses(value: string, previous: string[] = []): string[] {
  const classes = value.split(',').map((s) => s.trim()).filter(Boolean);
  if (classes.length === 0) throw new InvalidArgumentError('expected one or more load balancer classes, comma-separated');
  return [...new Set([...previous, ...classes])];
}

const ETCD_URL_RE = /^(https?:\/\/[^\s/]+|unix:\/\/\/\S+)$/;
function parseEtcdUrls(value: string, previous: string[] = []): string[] {
  const urls = value.split(',').map((s) => s.trim()).filter(Boolean);
  for (const u of urls) {
    if (!ETCD_URL_RE.test(u)) throw new InvalidArgumentError(`"${u}" is not an etcd endpoint (http://host:port or unix:///path)`);
  }
  return [...previous, ...urls];
}

export function agentCommand(): Command {
  return new Command('agent')
    .description('run the node agent: intent → LB-IPAM → announcement policy → ownership → eBPF ARP/NDP responder')
    .option('--node <name>', "this node's name", parseNodeName, defaultNodeName())
    .option('--node-labels <k=v,...>', "this node's labels besides kubernetes.io/os, arch and hostname (a Node manifest's labels win)", parseNodeLabels)
    .option('--manifests <path>', 'a file or directory of manifests (CiliumLoadBalancerIPPool, CiliumL2AnnouncementPolicy, Service, Node), watched')
    .addOption(new Option('--store <kind>', 'coordination store: local (one node) or etcd').choices(['local', 'etcd']).default('local'))
    .option('--etcd <url...>', 'etcd endpoints (http://host:port or unix:///path; repeatable or comma-separated)', parseEtcdUrls, [])
    .option('--etcd-prefix <prefix>', 'key prefix of herald in etcd', '/herald/')
    .option('--kubernetes', 'read intent from the Kubernetes API server (informers) and write Service status back; in-cluster credentials unless --kubeconfig')
    .option('--kubeconfig <path>', 'with --kubernetes: a kubeconfig file instead of the in-cluster service account')
    .option('--kube-namespace <ns>', 'with --kubernetes: namespace of herald\'s Leases', 'herald-system')
    .option('--kube-lease-duration <seconds>', 'with --kubernetes: duration of the node Lease (an owner that stops renewing is replaced after this long)', parsePositiveInt, 6)
    .addOption(durationOption('--kube-lease-renew <duration>', 'with --kubernetes: renewal interval of the node Lease (one API write per node per interval)', 2000))
    .option('--max-manifest-size <size>', 'refuse a manifest file or stored object larger than this (e.g. 4MiB); it is not read', parseByteSize, manifestLimitDefaults.maxBytes)
    .option('--state-dir <dir>', 'where local state (LB-IPAM allocations) is kept (default /var/lib/herald/<node>)')
    .option('--announce <ip@interface>', 'also answer ARP (IPv4) or NDP (IPv6) for this address on this interface (repeatable)', collect, [])
    .option('--bpf-pin-dir <dir>', 'where the maps are pinned (default /sys/fs/bpf/herald/<node>)')
    .option('--responder-map-size <n>', 'capacity of the responder map', parsePositiveInt, RESPONDER_MAP_SIZE_DEFAULT)
    .addOption(durationOption('--liveness-interval <duration>', 'how often the datapath heartbeat is written', livenessDefaults.intervalMs))
    .addOption(durationOption(
      '--liveness-max-age <duration>',
      'the datapath stops answering when the heartbeat is older (default: 800ms with etcd, below the lease TTL; 3s with the local store, to outlast a restart)',
    ))
    .option('--no-heartbeat-thread', 'write the datapath heartbeat from the agent thread instead of a thread of its own (a busy agent thread then silences the node)')
    .option('--garp-count <n>', 'gratuitous ARP / unsolicited NA rounds per newly announced IP (0 = off)', parseCount, garpDefaults.count)
    .addOption(durationOption('--garp-interval <duration>', 'time between gratuitous ARP rounds', garpDefaults.intervalMs))
    .addOption(durationOption(
      '--conflict-defence-interval <duration>',
      'when a foreign MAC claims an owned IP, re-announce it at most once per interval (min 100ms)',
      conflictDefenceDefaults.intervalMs,
    ))
    .addOption(durationOption('--full-reconcile-interval <duration>', 'period of the full datapath reconciliation', reconcilerDefaults.fullIntervalMs))
    .addOption(durationOption('--prune-grace <duration>', 'at start, keep pinned entries this long at most while intent loads', reconcilerDefaults.initGraceMs))
    .option('--status-socket <path>', 'unix socket of the read-only status API (default /run/herald/<node>.sock)')
    .option('--metrics-listen <addr>', 'serve Prometheus metrics on host:port (off by default)')
    .option('--view-listen <addr>', 'serve the cluster view (page, JSON, event stream) on host:port; loopback unless --view-token-file is given (off by default; always on the status socket)')
    .option('--view-advertise-address <host[:port]>', "where other nodes reach this node's view server (published on its node card); default: the --view-listen address, or for a wildcard one this host's first global address; needed for a loopback one behind a proxy")
    .option('--view-token-file <path>', 'bearer token the view requires (needed to bind --view-listen beyond loopback)')
    .addOption(
      new Option('--on-store-loss <mode>', 'etcd unreachable: withdraw (never two owners) or keep announcing (availability first)')
        .choices(['withdraw', 'keep'])
        .default('withdraw'),
    )
    .option(
      '--lb-classes <classes>',
      'LB-IPAM serves only Services with one of these loadBalancerClass values (comma-separated); default: no class, io.cilium/l2-announcer, io.cilium/bgp-control-plane',
      parseLbClasses,
    )
    .addOption(durationOption('--wire-probe-interval <duration>', 'with --store etcd: how often another owner is probed on the wire (faster once it is overdue)', ownerWatchDefaults.probeIntervalMs))
    .addOption(durationOption('--wire-silence <duration>', 'with --store etcd: an owner heard before and silent on the wire this long is fenced out (its lease revoked)', ownerWatchDefaults.silenceMs))
    .addOption(durationOption('--handover-hold <duration>', 'with --store etcd: a more preferred node must be a candidate this long before an owner hands an IP over to it (default 5s)'))
    .option('--no-supervisor', 'with --store etcd or --kubernetes: run the agent without its supervisor (which silences a crashed agent\'s datapath and revokes its etcd lease / deletes its node Lease at once)')
    .option('--nice <n>', `the agent's CPU priority (-20..19): a starved agent answers late and misses its heartbeats, so it runs ahead of ordinary work by default`, parseNice, AGENT_NICE_DEFAULT)
    .option('--local-routes', 'install a local route for each owned IP so host services can serve it (plain hosts)')
    .option('--bgp-router-id <ipv4>', 'BGP anycast: advertise service IPs with ready backends through herald\'s own BIRD, with this router ID (off by default)', parseRouterId)
    .option('--bgp-bfd <ms>', 'BGP anycast: BFD on every session at this interval (multiplier 3)', (v: string) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 10 || n > 60_000) throw new Error(`--bgp-bfd ${v}: expected milliseconds between 10 and 60000`);
      return n;
    })
    .addOption(durationOption('--bgp-tick-only <duration>', "BGP anycast: apply route changes only on a tick this often (e.g. 2s, flock's ticker) instead of at once; bounds churn, adds up to one tick of delay (default: event-driven)"))
    .option('--bird-socket <path>', "BGP anycast through a BIRD the operator runs, reconfigured through this control socket: herald starts no BIRD and owns only the include file (--bird-include)")
    .option('--bird-include <file>', "with --bird-socket: the file herald writes and the operator's bird.conf includes (default: --state-dir/bird/herald.conf)")
    .option('--lb-interfaces <names>', 'L4 load balancing of service IPs in eBPF on these (announcing) interfaces, comma-separated (off by default)', parseInterfaceList)
    .option('--lb-xdp', 'load balancing: XDP+tc — an XDP program on the --lb-interfaces takes the forward path of DNAT services (native XDP; tc keeps the rest). Off: tc only')
    .option('--lb-xdp-targets <names>', 'with --lb-xdp: interfaces XDP may redirect to (each must take XDP frames: native-XDP NIC, or a veth whose peer has an XDP program or GRO on); without, XDP sends only back out the interface it came in on', parseInterfaceList)
    .option('--lb-ct-size <n>', 'load balancing: connection-tracking entries (LRU)', parseIntRange('--lb-ct-size', 64, 16_777_216), lbDefaults.ctMapSize)
    .option('--lb-maglev-size <prime>', 'load balancing: Maglev table size per frontend (a prime, ≥ 100 × backends)', parseIntRange('--lb-maglev-size', 7, 1_000_003, true), lbDefaults.maglevSize)
    .option('--lb-ct-lifetimes <list>', 'load balancing: connection lifetimes in seconds, e.g. tcp-syn=60,tcp-established=21600,tcp-closing=10,non-tcp=60', parseLifetimes)
    .option('--lb-gc-min-interval <ms>', 'load balancing: shortest conntrack GC interval (the interval adapts up to 5 min)', parseIntRange('--lb-gc-min-interval', 100, 3_600_000), lbDefaults.gc.minMs)
    .option('--lb-snat-address <ipv4>', 'load balancing: this node\'s IPv4, the source toward the backends of services annotated herald.io/lb-mode: snat', (v: string) => {
      const ip = parseIp(v);
      if (!ip || ip.family !== 'IPv4') throw new InvalidArgumentError(`--lb-snat-address ${v}: expected an IPv4 address`);
      return ip.text;
    })
    .option('--lb-snat-address6 <ipv6>', 'load balancing: this node\'s IPv6, the source toward the backends of IPv6 service IPs in snat mode', (v: string) => {
      const ip = parseIp(v);
      if (!ip || ip.family !== 'IPv6') throw new InvalidArgumentError(`--lb-snat-address6 ${v}: expected an IPv6 address`);
      return ip.text;
    })
    .option('--lb-snat-ports <min-max>', 'load balancing: source ports SNAT flows take, e.g. 32768-60999 (the default); a new flow whose probed ports are all taken is dropped and counted (herald_lb_datapath_events_total{event="snat_exhausted"})', (v: string) => {
      const m = /^(\d{1,5})-(\d{1,5})$/.exec(v);
      const min = Number(m?.[1]);
      const max = Number(m?.[2]);
      if (!m || min < 1 || max > 65535 || min > max) throw new InvalidArgumentError(`--lb-snat-ports ${v}: expected MIN-MAX with 1 ≤ MIN ≤ MAX ≤ 65535`);
      return { min, max };
    })
    .addOption(new Option('--log-format <format>', 'log output').choices(['json', 'text']).default('text'))
    .addOption(new Option('--log-level <level>', 'log level').choices(['debug', 'info', 'warn', 'error']).default('info'))
    .action(async (opts: AgentOptions) => {
      // With etcd or Kubernetes, this process becomes the supervisor and runs the agent as its child (src/supervisor).
      if (opts.supervisor && !process.env[SUPERVISED_ENV] && ((opts.store === 'etcd' && opts.etcd.length > 0) || opts.kubernetes)) {
        const { runSupervisor } = await import('../../supervisor/supervisor.js');
        const args = [...process.execArgv, ...process.argv.slice(1)];
        const kubernetes = opts.kubernetes ? { kubernetes: opts.kubeconfig ? { kubeconfig: opts.kubeconfig } : {} } : {};
        process.exit(await runSupervisor({ command: process.execPath, args, pinDir: pinDirFor(opts), endpoints: opts.etcd, ...kubernetes }));
      }
      const supervisor = SupervisorLink.fromEnv();
      const log = createLogger({ format: opts.logFormat, level: opts.logLevel, name: opts.node, nonBlocking: true });
      // bin/herald already applied it before loading the code; a refusal (not root) is worth a line.
      const niceProblem = applyNice(opts.nice);
      if (niceProblem) log.warn({ nice: opts.nice, err: niceProblem }, 'could not set the CPU priority; running at the inherited one');
      let agent: Agent | undefined;
      try {
        if (opts.store === 'etcd' && opts.etcd.length === 0) throw new Error('--store etcd needs --etcd <url>');
        if (opts.store === 'local' && opts.etcd.length > 0) throw new Error('--etcd is only used with --store etcd');
        if (opts.kubeconfig && !opts.kubernetes) throw new Error('--kubeconfig is only used with --kubernetes');
        if (opts.birdSocket && !opts.bgpRouterId) throw new Error('--bird-socket needs --bgp-router-id (BGP anycast is off without it)');
        if (opts.birdInclude && !opts.birdSocket) throw new Error('--bird-include is only used with --bird-socket');
        agent = await Agent.create(
          {
            node: opts.node,
            ...(opts.nodeLabels ? { nodeLabels: opts.nodeLabels } : {}),
            ...(opts.manifests ? { manifests: opts.manifests } : {}),
            store: opts.store,
            etcd: { endpoints: opts.etcd, prefix: opts.etcdPrefix },
            ...(opts.kubernetes
              ? { kubernetes: { ...(opts.kubeconfig ? { kubeconfig: opts.kubeconfig } : {}), namespace: opts.kubeNamespace, leaseDurationS: opts.kubeLeaseDuration, leaseRenewMs: opts.kubeLeaseRenew } }
              : {}),
            stateDir: opts.stateDir ?? join('/var/lib/herald', opts.node),
            manifestLimits: { ...manifestLimitDefaults, maxBytes: opts.maxManifestSize },
            announcements: opts.announce.map(parseAnnouncement),
            datapath: {
              pinDir: pinDirFor(opts),
              responderMapSize: opts.responderMapSize,
              liveness: {
                intervalMs: opts.livenessInterval,
                maxAgeMs: opts.livenessMaxAge ?? (opts.store === 'etcd' || opts.kubernetes ? livenessDefaults.maxAgeMs : LOCAL_STORE_LIVENESS_MAX_AGE_MS),
                thread: opts.heartbeatThread,
              },
            },
            garp: { count: opts.garpCount, intervalMs: opts.garpInterval },
            conflictDefence: { intervalMs: opts.conflictDefenceInterval },
            reconciler: { ...reconcilerDefaults, fullIntervalMs: opts.fullReconcileInterval, initGraceMs: opts.pruneGrace },
            statusSocket: opts.statusSocket ?? defaultStatusSocket(opts.node),
            onStoreLoss: opts.onStoreLoss,
            ownerWatch: { probeIntervalMs: opts.wireProbeInterval, silenceMs: opts.wireSilence },
            ...(opts.handoverHold !== undefined ? { handoverHoldMs: opts.handoverHold } : {}),
            localRoutes: Boolean(opts.localRoutes),
            ...(opts.bgpRouterId
              ? {
                  bgp: {
                    routerId: opts.bgpRouterId,
                    ...(opts.bgpBfd ? { bfd: { intervalMs: opts.bgpBfd, multiplier: 3 } } : {}),
                    ...(opts.bgpTickOnly ? { tickMs: opts.bgpTickOnly } : {}),
                    ...(opts.birdSocket ? { operatorBird: { socketPath: opts.birdSocket, ...(opts.birdInclude ? { includePath: opts.birdInclude } : {}) } } : {}),
                  },
                }
              : {}),
            ...(opts.lbClasses ? { lbClasses: opts.lbClasses } : {}),
            ...(opts.lbInterfaces
              ? {
                  lb: {
                    interfaces: opts.lbInterfaces,
                    pinDir: pinDirFor(opts),
                    ctMapSize: opts.lbCtSize,
                    maglevSize: opts.lbMaglevSize,
                    lifetimes: opts.lbCtLifetimes ?? defaultLifetimes,
                    gc: { minMs: opts.lbGcMinInterval, maxMs: Math.max(opts.lbGcMinInterval, lbDefaults.gc.maxMs) },
                    ...(opts.lbSnatAddress ? { snatAddress: opts.lbSnatAddress } : {}),
                    ...(opts.lbSnatAddress6 ? { snatAddress6: opts.lbSnatAddress6 } : {}),
                    ...(opts.lbSnatPorts ? { snatPorts: opts.lbSnatPorts } : {}),
                    ...(opts.lbXdp ? { xdp: { targets: opts.lbXdpTargets ?? [] } } : {}),
                  },
                }
              : {}),
            ...viewOptions(opts),
            ...(opts.metricsListen ? { metricsListen: (await import('../../api/metrics.js')).parseListen(opts.metricsListen) } : {}),
          },
          log,
        );
        supervisor?.reportLeases(agent.etcdSession);
        supervisor?.reportJournal(agent.journalPrefix);
        supervisor?.reportKubeLease(agent.kubeNodeLease);
        if (supervisor) agent.reportCrashHandoverPlans((plan) => supervisor.reportHandoverPlan(plan));
        await agent.start();
        log.info({ pinDir: pinDirFor(opts), store: opts.store, manifests: opts.manifests ?? null }, 'agent running');
      } catch (e) {
        log.error({ err: describeError(e), code: (e as { code?: string }).code }, 'agent failed to start');
        agent?.dispose();
        process.exit(1);
      }
      let stopping = false;
      const stop = async (signal: string) => {
        if (stopping) return;
        stopping = true;
        log.info({ signal }, 'stopping: releasing ownership');
        try {
          await agent?.drain();
        } catch (e) {
          log.warn({ err: describeError(e) }, 'release failed');
        }
        await agent?.stop();
        log.info({}, 'stopped');
        process.exit(0);
      };
      // on, not once: under a supervisor a group signal arrives twice (directly and forwarded).
      process.on('SIGTERM', () => void stop('SIGTERM'));
      process.on('SIGINT', () => void stop('SIGINT'));
      supervisor?.onSupervisorGone(() => void stop('supervisor gone'));
    });
}

function parseRouterId(v: string): string {
  const ip = parseIp(v);
  if (!ip || ip.family !== 'IPv4') throw new Error(`--bgp-router-id ${v}: expected an IPv4 address`);
  return ip.text;
}

/** --view-listen and its token: refused (coded error) when the address reaches beyond loopback without a token. */
function viewOptions(opts: AgentOptions): { viewListen?: { host: string; port: number }; viewToken?: string; viewUrl?: string } {
  const token = opts.viewTokenFile ? readViewToken(opts.viewTokenFile) : undefined;
  if (!opts.viewListen) {
    if (opts.viewAdvertiseAddress !== undefined) throw new HeraldError('HERALD_BAD_ARGUMENT', '--view-advertise-address needs --view-listen');
    return token ? { viewToken: token } : {};
  }
  const viewListen = parseViewListen(opts.viewListen, token);
  const viewUrl = viewAdvertiseUrl(viewListen, opts.viewAdvertiseAddress, hostAddresses());
  return { viewListen, ...(token ? { viewToken: token } : {}), ...(viewUrl ? { viewUrl } : {}) };
}

function readViewToken(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8').trim();
  } catch (e) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `--view-token-file ${path}: ${(e as Error).message}`);
  }
  if (text.length < 16 || text.length > 4096 || /\s/.test(text)) throw new HeraldError('HERALD_BAD_ARGUMENT', `--view-token-file ${path}: the token must be 16 to 4096 characters without spaces`);
  return text;
}
