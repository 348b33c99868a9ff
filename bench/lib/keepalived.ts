/**
 * Debian's keepalived (2.2.x) inside lab nodes, for failover benchmarks: one
 * VRRP instance holding a VIP on each node's eth0, the way keepalived works
 * (`virtual_ipaddress { VIP/32 dev eth0 }`: the master's kernel owns and
 * answers for the address, so host services on the master serve it).
 *
 * Several daemons run on one machine without colliding: each gets its own
 * config and pid files in a private temp dir (`-p/-r/-c`), runs in the
 * foreground (`--dont-fork`) with the VRRP subsystem only (`--vrrp`), logs to
 * the console (`--log-console --no-syslog`) so its state transitions can be
 * read from its output, and runs in its node's network namespace through the
 * lab's `nsenter --net` (no keepalived `--namespace`, which would create its
 * own namespaces and /run/keepalived/NAME directories).
 *
 * VRRP adverts are multicast (224.0.0.18) on the lab bridge, which floods
 * multicast (snooping off); `unicast: true` uses unicast peers instead.
 * advert_int 1 s is VRRPv2 (the default); a sub-second advert needs VRRPv3.
 * gARP settings are keepalived's defaults: 5 at the transition to master, 5
 * more after garp_master_delay (5 s), no periodic refresh.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor, type Host, type Lab, type LabProcess } from '../../lab/lab.js';

export interface KeepalivedOptions {
  /** VRRP advertisement interval; 1000 = the default. Not a whole number of seconds → VRRPv3. */
  advertIntMs: number;
  /** The virtual IP (a documentation address), held as VIP/32 on `iface`. */
  vip: string;
  /** Virtual router id, 1..255. */
  vrid: number;
  /** VRRP version; default 2 for whole seconds, 3 otherwise. */
  version?: 2 | 3;
  /** Nodes to run on; default every lab node. */
  nodes?: Host[];
  /** Priority per node (same order); default 150, 100, 50, … (n1 is the master). */
  priorities?: number[];
  iface?: string;
  /** Unicast adverts between the nodes' lab addresses instead of multicast. */
  unicast?: boolean;
  /** Wait until the highest-priority node is master (default true). */
  waitForMaster?: boolean;
  /** Give up starting after this long (default: 4·advert + 10 s). */
  startTimeoutMs?: number;
}

export type VrrpState = 'init' | 'BACKUP' | 'MASTER' | 'FAULT' | 'STOP' | 'stopped';

export interface KeepalivedNode {
  readonly host: Host;
  readonly priority: number;
  readonly confPath: string;
  /** The running daemon (undefined after stop, until start). */
  readonly proc: LabProcess | undefined;
  /** Last VRRP state keepalived logged for the instance ('stopped' when not running). */
  state(): VrrpState;
  /**
   * Stops the daemon. SIGTERM goes to the keepalived parent only (as `kill PID`):
   * a clean shutdown, which sends priority-0 adverts and removes the VIP.
   * SIGKILL goes to the whole process group (parent and VRRP child): a crash,
   * which leaves the VIP on the interface. Resolves when it has exited.
   */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts the daemon again with the same config. */
  start(): void;
  /** Whether the VIP is configured on this node's interface. */
  hasVip(): boolean;
}

export interface KeepalivedCluster {
  readonly nodes: KeepalivedNode[];
  readonly vip: string;
  readonly advertIntMs: number;
  readonly version: 2 | 3;
  readonly dir: string;
  node(host: Host): KeepalivedNode;
  /** The nodes whose last logged state is MASTER. */
  masters(): KeepalivedNode[];
  /** Resolves when `host` (default: the highest priority) is the only master and holds the VIP. */
  waitForMaster(host?: Host, timeoutMs?: number): Promise<void>;
  /**
   * Stops every daemon (SIGKILL unless given), removes the VIP wherever it was
   * left behind and deletes the temp dir. Idempotent; never throws.
   */
  destroy(signal?: NodeJS.Signals): Promise<void>;
}

const liveDirs = new Set<string>();
let exitHook = false;
function trackDir(dir: string): void {
  liveDirs.add(dir);
  if (exitHook) return;
  exitHook = true;
  // The Lab kills spawned processes on exit/SIGINT; the config dirs are ours.
  process.on('exit', () => {
    for (const d of liveDirs) rmSync(d, { recursive: true, force: true });
  });
}

function configFor(o: {
  name: string;
  iface: string;
  vip: string;
  vrid: number;
  priority: number;
  master: boolean;
  advertIntMs: number;
  version: 2 | 3;
  unicast: { self: string; peers: string[] } | undefined;
}): string {
  const advert = o.advertIntMs / 1000;
  const lines = [
    'global_defs {',
    `  router_id ${o.name}`,
    `  vrrp_version ${o.version}`,
    '}',
    'vrrp_instance VI_BENCH {',
    `  state ${o.master ? 'MASTER' : 'BACKUP'}`,
    `  interface ${o.iface}`,
    `  virtual_router_id ${o.vrid}`,
    `  priority ${o.priority}`,
    `  advert_int ${advert}`,
  ];
  if (o.unicast) {
    lines.push(`  unicast_src_ip ${o.unicast.self}`, '  unicast_peer {', ...o.unicast.peers.map((p) => `    ${p}`), '  }');
  }
  lines.push('  virtual_ipaddress {', `    ${o.vip}/32 dev ${o.iface}`, '  }', '}', '');
  return lines.join('\n');
}

const STATE_RE = /\(VI_BENCH\) Entering (MASTER|BACKUP|FAULT) STATE/g;

class Node implements KeepalivedNode {
  proc: LabProcess | undefined;

  constructor(
    readonly host: Host,
    readonly priority: number,
    readonly confPath: string,
    private readonly dir: string,
    private readonly vip: string,
    private readonly iface: string,
  ) {}

  start(): void {
    if (this.proc?.running) throw new Error(`keepalived on ${this.host.name} is already running`);
    const pid = (kind: string) => join(this.dir, `${this.host.name}.${kind}.pid`);
    this.proc = this.host.spawn('keepalived', 'keepalived', [
      '--use-file', this.confPath,
      '--dont-fork', '--vrrp', '--log-console', '--no-syslog', '--log-detail',
      '--pid', pid('main'), '--vrrp_pid', pid('vrrp'), '--checkers_pid', pid('checkers'), '--bfd_pid', pid('bfd'),
    ]);
  }

  state(): VrrpState {
    const p = this.proc;
    if (!p?.running) return 'stopped';
    const text = p.text();
    if (/\bStopping\b/.test(text)) return 'STOP';
    let last: VrrpState = 'init';
    for (const m of text.matchAll(STATE_RE)) last = m[1] as VrrpState;
    return last;
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const p = this.proc;
    if (!p?.running) return;
    if (signal === 'SIGKILL') p.signal('SIGKILL');
    else {
      try {
        process.kill(p.pid, signal);
      } catch {
        /* gone */
      }
    }
    const timer = setTimeout(() => p.signal('SIGKILL'), 5000);
    await p.exited;
    clearTimeout(timer);
  }

  hasVip(): boolean {
    const r = this.host.exec('ip', ['-o', '-4', 'addr', 'show', 'dev', this.iface, 'to', `${this.vip}/32`]);
    return r.code === 0 && r.stdout.includes(this.vip);
  }

  removeVip(): void {
    if (this.hasVip()) this.host.exec('ip', ['addr', 'del', `${this.vip}/32`, 'dev', this.iface]);
  }
}

/** Starts keepalived on the lab's nodes; on any failure everything started is undone. */
export async function startKeepalived(lab: Lab, opts: KeepalivedOptions): Promise<KeepalivedCluster> {
  const hosts = opts.nodes ?? lab.nodes;
  const iface = opts.iface ?? 'eth0';
  const version = opts.version ?? (opts.advertIntMs % 1000 === 0 ? 2 : 3);
  if (version === 2 && opts.advertIntMs % 1000 !== 0) throw new Error('VRRPv2 adverts are whole seconds; use version 3');
  if (opts.advertIntMs < 10 || opts.advertIntMs > 40_950) throw new Error('advert interval must be 10 ms .. 40.95 s');
  if (!(opts.vrid >= 1 && opts.vrid <= 255)) throw new Error('vrid must be 1..255');
  if (!/^(198\.51\.100|192\.0\.2|203\.0\.113)\.\d{1,3}$/.test(opts.vip)) throw new Error(`VIP ${opts.vip} is not a documentation address`);
  const priorities = opts.priorities ?? hosts.map((_, i) => Math.max(1, 150 - 50 * i));
  const top = Math.max(...priorities);

  const dir = mkdtempSync(join(tmpdir(), 'herald-keepalived-'));
  trackDir(dir);
  const nodes: Node[] = [];
  const cluster: KeepalivedCluster = {
    nodes,
    vip: opts.vip,
    advertIntMs: opts.advertIntMs,
    version,
    dir,
    node(host) {
      const n = nodes.find((x) => x.host === host);
      if (!n) throw new Error(`no keepalived on ${host.name}`);
      return n;
    },
    masters: () => nodes.filter((n) => n.state() === 'MASTER'),
    async waitForMaster(host, timeoutMs) {
      const want = host ? cluster.node(host) : nodes.find((n) => n.priority === top)!;
      await waitFor(() => want.state() === 'MASTER' && cluster.masters().length === 1 && want.hasVip(), {
        timeoutMs: timeoutMs ?? 4 * opts.advertIntMs + 10_000,
        intervalMs: 20,
        what: `keepalived on ${want.host.name} to be the only master`,
        onTimeout: () => nodes.map((n) => `--- ${n.host.name} (${n.state()})\n${n.proc?.text().slice(-1500) ?? ''}`).join('\n'),
      });
    },
    async destroy(signal = 'SIGKILL') {
      await Promise.all(nodes.map((n) => n.stop(signal).catch(() => undefined)));
      for (const n of nodes) {
        try {
          n.removeVip();
        } catch {
          /* the lab may already be gone */
        }
      }
      rmSync(dir, { recursive: true, force: true });
      liveDirs.delete(dir);
    },
  };

  try {
    hosts.forEach((host, i) => {
      const confPath = join(dir, `${host.name}.conf`);
      const priority = priorities[i] ?? 1;
      const unicast = opts.unicast ? { self: host.ip, peers: hosts.filter((h) => h !== host).map((h) => h.ip) } : undefined;
      writeFileSync(
        confPath,
        configFor({ name: host.name, iface, vip: opts.vip, vrid: opts.vrid, priority, master: priority === top, advertIntMs: opts.advertIntMs, version, unicast }),
      );
      const n = new Node(host, priority, confPath, dir, opts.vip, iface);
      n.removeVip(); // a VIP left by an earlier crash would answer before anyone is master
      nodes.push(n);
    });
    for (const n of nodes) n.start();
    for (const n of nodes) await n.proc!.waitForOutput(/Entering (BACKUP|MASTER|FAULT) STATE/, opts.startTimeoutMs ?? 10_000);
    if (opts.waitForMaster ?? true) await cluster.waitForMaster(undefined, opts.startTimeoutMs);
    return cluster;
  } catch (e) {
    await cluster.destroy();
    throw e;
  }
}
