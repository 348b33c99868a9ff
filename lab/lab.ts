/**
 * The lab: hosts as uniquely named network namespaces on one Ethernet segment
 * (a bridge in a "switch" namespace), for tests, benchmarks and the demo.
 *
 * Everything it creates is torn down by destroy(), and also when the process
 * exits or is interrupted (SIGINT/SIGTERM), so a failing test leaves nothing.
 * Commands run through `nsenter --net` — never `ip netns exec`, which remounts
 * /sys and hides /sys/fs/bpf. Only documentation address ranges are used.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs';
import koffi from 'koffi';
import { join } from 'node:path';

export const LAB_HOST_SUBNET = '192.0.2.0/24';
export const LAB_SERVICE_SUBNET = '198.51.100.0/24';
export const LAB_SECOND_SUBNET = '203.0.113.0/25';
export const LAB_PIN_ROOT = '/sys/fs/bpf/herald';
export const LAB_RUN_ROOT = '/run/herald-lab';

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface LabOptions {
  /** Number of node hosts (n1…nN). */
  nodes: number;
  /** Also give every host an eth1 on a second segment (203.0.113.0/25). */
  secondSegment?: boolean;
  /** Short tag in namespace names, for reading `ip netns` output. */
  tag?: string;
  /** Also a "store" host (192.0.2.2) on the segment, e.g. for etcd. */
  storeHost?: boolean;
  /**
   * Accepts or refuses a drawn lab id (namespace and node names are derived
   * from it): a test whose expectations need a certain hash spread over the
   * node names draws again instead of failing once in N runs.
   */
  acceptId?: (id: string) => boolean;
}

const liveLabs = new Set<Lab>();
let exitHooksInstalled = false;

function installExitHooks(): void {
  if (exitHooksInstalled) return;
  exitHooksInstalled = true;
  process.on('exit', () => {
    for (const lab of liveLabs) lab.destroySync();
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      for (const lab of liveLabs) lab.destroySync();
      process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1));
    });
  }
}

function run(cmd: string, args: string[], input?: string): ExecResult {
  // A status of thousands of IPs is megabytes: the 1 MiB default would cut it off.
  const r = spawnSync(cmd, args, { encoding: 'utf8', input, maxBuffer: 256 * 1024 * 1024 });
  return { code: r.status ?? -1, stdout: r.stdout ?? '', stderr: r.stderr ?? (r.error ? String(r.error) : '') };
}

function must(cmd: string, args: string[], input?: string): string {
  const r = run(cmd, args, input);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.code}): ${r.stderr.trim()}`);
  return r.stdout;
}

export class LabProcess {
  readonly output: string[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
  ) {
    const collect = (chunk: Buffer) => {
      this.output.push(chunk.toString());
      if (this.output.length > 2000) this.output.splice(0, 1000);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    // At 'exit' the output may not have been read yet (Node's docs): resolve once both pipes
    // have closed too — bounded, since a daemon the process started may hold them open.
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        const drained = [child.stdout, child.stderr].map(
          (s) => new Promise<void>((r) => (!s || s.closed || s.readableEnded ? r() : (s.once('close', () => r()), s.once('end', () => r())))),
        );
        const bound = new Promise<void>((r) => setTimeout(r, 1000).unref());
        void Promise.race([Promise.all(drained), bound]).then(() => resolve({ code, signal }));
      }),
    );
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  text(): string {
    return this.output.join('');
  }

  /** Signals the whole process group (nsenter and what it runs). */
  signal(sig: NodeJS.Signals): void {
    if (!this.running) return;
    try {
      process.kill(-this.pid, sig);
    } catch {
      /* already gone */
    }
  }

  async stop(sig: NodeJS.Signals = 'SIGTERM', timeoutMs = 5000): Promise<void> {
    if (!this.running) return;
    this.signal(sig);
    const timer = setTimeout(() => this.signal('SIGKILL'), timeoutMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** Resolves when the output contains `pattern`. */
  async waitForOutput(pattern: RegExp | string, timeoutMs = 10_000): Promise<void> {
    await waitFor(() => (typeof pattern === 'string' ? this.text().includes(pattern) : pattern.test(this.text())), {
      timeoutMs,
      what: `${this.name} to print ${pattern}`,
      onTimeout: () => this.text().slice(-2000),
      abortIf: () => (this.running ? undefined : `${this.name} exited:\n${this.text().slice(-2000)}`),
    });
  }
}

/**
 * The pid of the agent process a supervised `herald agent` runs (from the
 * supervisor's first line), or undefined when it runs without a supervisor.
 * kill -9 of this pid is an agent crash; of the process group, a crash of both.
 */
export function supervisedAgentPid(p: LabProcess): number | undefined {
  const m = /herald supervisor: agent pid (\d+)/.exec(p.text());
  return m ? Number(m[1]) : undefined;
}

export class Host {
  constructor(
    readonly lab: Lab,
    /** Logical name: client, n1, n2 … */
    readonly name: string,
    readonly netns: string,
    readonly ip: string,
    readonly ip2: string | undefined,
  ) {}

  /** Argument prefix that runs a command inside this host. */
  private prefix(): string[] {
    return ['--net=/run/netns/' + this.netns, '--'];
  }

  exec(cmd: string, args: string[] = [], input?: string): ExecResult {
    return run('nsenter', [...this.prefix(), cmd, ...args], input);
  }

  /** Like exec, but throws on a non-zero exit. */
  must(cmd: string, args: string[] = [], input?: string): string {
    return must('nsenter', [...this.prefix(), cmd, ...args], input);
  }

  /** Asynchronous command (for tools that run while the test drives others). */
  execAsync(cmd: string, args: string[] = []): Promise<ExecResult> {
    const p = this.spawn(`${cmd}`, cmd, args);
    // 'close', not 'exit': at 'exit' the output may not have been read yet (Node's docs: the stdio streams
    // might still be open), and an empty read was taken for an empty answer (a BGP lab once counted a FIB
    // sample as missing so).
    return new Promise((resolve) => p.child.once('close', (code) => resolve({ code: code ?? -1, stdout: p.text(), stderr: '' })));
  }

  /** A long-lived process inside this host, killed by lab.destroy(). */
  spawn(label: string, cmd: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): LabProcess {
    const child = spawn('nsenter', [...this.prefix(), cmd, ...args], {
      detached: true, // own process group, so stop() reaches every descendant
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    const proc = new LabProcess(`${this.name}/${label}`, child);
    this.lab.track(proc);
    return proc;
  }

  /**
   * Runs `fn` synchronously with this process's main thread in the host's
   * network namespace (setns), then returns to where it was: for attaching a
   * tc program in-process. BPF maps and programs are not bound to a namespace,
   * so what `fn` loads stays usable from the test.
   */
  enter<T>(fn: () => T): T {
    const setns = koffi.load('libc.so.6').func('int setns(int fd, int nstype)');
    const CLONE_NEWNET = 0x40000000;
    const home = openSync('/proc/thread-self/ns/net', 'r');
    const target = openSync('/run/netns/' + this.netns, 'r');
    try {
      if (setns(target, CLONE_NEWNET) !== 0) throw new Error(`setns into ${this.netns} failed (errno ${koffi.errno()})`);
      try {
        return fn();
      } finally {
        if (setns(home, CLONE_NEWNET) !== 0) throw new Error(`setns back failed (errno ${koffi.errno()})`);
      }
    } finally {
      closeSync(target);
      closeSync(home);
    }
  }

  mac(iface = 'eth0'): string {
    const out = JSON.parse(this.must('ip', ['-j', 'link', 'show', 'dev', iface])) as Array<{ address: string }>;
    return out[0]?.address ?? '';
  }

  ifindex(iface = 'eth0'): number {
    const out = JSON.parse(this.must('ip', ['-j', 'link', 'show', 'dev', iface])) as Array<{ ifindex: number }>;
    return out[0]?.ifindex ?? 0;
  }

  /** The neighbour entry's MAC for `ip` on this host ('' when none). */
  neighbourMac(ip: string, iface = 'eth0'): string {
    const out = JSON.parse(this.must('ip', ['-j', 'neigh', 'show', ip, 'dev', iface]) || '[]') as Array<{ lladdr?: string }>;
    return out[0]?.lladdr ?? '';
  }

  /** This host's pin directory when it runs an agent. */
  get pinDir(): string {
    return join(LAB_PIN_ROOT, this.netns);
  }

  /** This host's agent state directory (LB-IPAM allocations), removed with the lab. */
  get stateDir(): string {
    return join(LAB_RUN_ROOT, this.netns);
  }

  /** This host's agent status socket. */
  get statusSocket(): string {
    return join(LAB_RUN_ROOT, `${this.netns}.sock`);
  }
}

export class Lab {
  readonly id: string;
  readonly client: Host;
  readonly nodes: Host[];
  /** The store host (192.0.2.2), when asked for. */
  readonly store: Host | undefined;
  /** Backends added with addBackends(). */
  readonly backends: Host[] = [];
  private readonly switchNs: string;
  private readonly namespaces: string[] = [];
  private readonly processes = new Set<LabProcess>();
  private destroyed = false;

  private constructor(readonly opts: LabOptions) {
    const draw = () => `hl${opts.tag ?? ''}${randomBytes(3).toString('hex')}`;
    let id = draw();
    for (let tries = 1; opts.acceptId && !opts.acceptId(id); tries++) {
      if (tries >= 1000) throw new Error('lab: no acceptable id in 1000 draws');
      id = draw();
    }
    this.id = id;
    this.switchNs = `${this.id}-sw`;
    const second = (i: number) => (opts.secondSegment ? `203.0.113.${i}` : undefined);
    this.client = new Host(this, 'client', `${this.id}-client`, '192.0.2.1', second(1));
    this.nodes = Array.from({ length: opts.nodes }, (_, i) => new Host(this, `n${i + 1}`, `${this.id}-n${i + 1}`, `192.0.2.${11 + i}`, second(11 + i)));
    this.store = opts.storeHost ? new Host(this, 'store', `${this.id}-store`, '192.0.2.2', second(2)) : undefined;
  }

  static create(opts: LabOptions): Lab {
    if (process.getuid?.() !== 0) throw new Error('the lab needs root (network namespaces, BPF)');
    if (opts.nodes < 0 || opts.nodes > 200) throw new Error('lab nodes must be 0..200');
    installExitHooks();
    const lab = new Lab(opts);
    liveLabs.add(lab);
    // Marks the lab as alive for scripts/lab-sweep.sh, which only removes labs whose owner died.
    mkdirSync(LAB_RUN_ROOT, { recursive: true });
    writeFileSync(lab.ownerFile, `${process.pid}\n`);
    try {
      lab.build();
    } catch (e) {
      lab.destroySync();
      throw e;
    }
    return lab;
  }

  private get ownerFile(): string {
    return join(LAB_RUN_ROOT, `${this.id}.owner`);
  }

  get hosts(): Host[] {
    return [this.client, ...this.nodes, ...(this.store ? [this.store] : [])];
  }

  private addNetns(name: string): void {
    must('ip', ['netns', 'add', name]);
    this.namespaces.push(name);
    must('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
  }

  private build(): void {
    this.addNetns(this.switchNs);
    // A switch forwards frames; it does not run them through ip(6)tables and a
    // route lookup, as a Linux bridge does by default (bridge netfilter):
    // that doubled the cost of every frame sent on the segment (a send of 500
    // NAs: 20 → 11 µs per frame), charged to the sender.
    must('ip', ['netns', 'exec', this.switchNs, 'sysctl', '-q', '-w', 'net.bridge.bridge-nf-call-iptables=0', 'net.bridge.bridge-nf-call-ip6tables=0', 'net.bridge.bridge-nf-call-arptables=0']);
    // Nor does it run an IPv6 stack of its own on the segment: a bridge with
    // IPv6 up joins all-nodes, so every NA to ff02::1 went up through its
    // input path too (ip6_route_input, icmpv6_rcv), again on the sender's CPU.
    must('ip', ['netns', 'exec', this.switchNs, 'sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']);
    const bridges = this.opts.secondSegment ? ['br0', 'br1'] : ['br0'];
    for (const br of bridges) {
      must('ip', ['-n', this.switchNs, 'link', 'add', br, 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0', 'mcast_snooping', '0']);
      must('ip', ['-n', this.switchNs, 'link', 'set', br, 'up']);
    }
    for (const host of this.hosts) {
      this.addNetns(host.netns);
      this.plug(host, 'eth0', 'br0', host.ip, '24');
      if (host.ip2) this.plug(host, 'eth1', 'br1', host.ip2, '25');
    }
    // The client reaches service IPs on-link, so it ARPs for them directly.
    must('ip', ['-n', this.client.netns, 'route', 'add', LAB_SERVICE_SUBNET, 'dev', 'eth0']);
  }

  /** A veth from `host` (as `iface`) to a bridge port in the switch. */
  private plug(host: Host, iface: string, bridge: string, ip: string, prefix: string): void {
    const port = `${host.name}-${iface}`.slice(0, 15);
    const tmp = `t${randomBytes(4).toString('hex')}`;
    must('ip', ['-n', this.switchNs, 'link', 'add', port, 'type', 'veth', 'peer', 'name', tmp, 'netns', host.netns]);
    must('ip', ['-n', host.netns, 'link', 'set', tmp, 'name', iface]);
    must('ip', ['-n', this.switchNs, 'link', 'set', port, 'master', bridge, 'up']);
    must('ip', ['-n', host.netns, 'addr', 'add', `${ip}/${prefix}`, 'dev', iface]);
    must('ip', ['-n', host.netns, 'link', 'set', iface, 'up']);
  }

  /**
   * Deletes a host's interface (both veth ends) and plugs a new one under the
   * same name and address: the host sees the link go and come back with a new ifindex.
   */
  replug(host: Host, iface: 'eth0' | 'eth1' = 'eth0'): void {
    host.must('ip', ['link', 'del', iface]);
    if (iface === 'eth0') this.plug(host, 'eth0', 'br0', host.ip, '24');
    else this.plug(host, 'eth1', 'br1', host.ip2!, '25');
  }

  /** Bring a host's switch port down/up (the host's link loses carrier). */
  setPort(host: Host, iface: string, up: boolean): void {
    const port = `${host.name}-${iface}`.slice(0, 15);
    must('ip', ['-n', this.switchNs, 'link', 'set', port, up ? 'up' : 'down']);
  }

  /**
   * Backends behind `node`: each a namespace with eth0 on a bridge `lbbr`
   * inside the node (203.0.113.129/25 on the node, 203.0.113.130+i on the
   * backends, default route via the node). The node forwards (ip_forward=1).
   */
  addBackends(node: Host, count: number): Host[] {
    if (count < 1 || count > 100) throw new Error('backends must be 1..100');
    if (!node.exec('ip', ['link', 'show', 'lbbr']).stdout) {
      node.must('ip', ['link', 'add', 'lbbr', 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0']);
      node.must('ip', ['addr', 'add', '203.0.113.129/25', 'dev', 'lbbr']);
      node.must('ip', ['link', 'set', 'lbbr', 'up']);
      node.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
    }
    const out: Host[] = [];
    for (let n = 0; n < count; n++) {
      const { b, port } = this.newBackend(node, 'lbb');
      must('ip', ['-n', node.netns, 'link', 'set', port, 'master', 'lbbr', 'up']);
      must('ip', ['-n', b.netns, 'addr', 'add', `${b.ip}/25`, 'dev', 'eth0']);
      must('ip', ['-n', b.netns, 'link', 'set', 'eth0', 'up']);
      must('ip', ['-n', b.netns, 'route', 'add', 'default', 'via', '203.0.113.129']);
      this.backends.push(b);
      out.push(b);
    }
    return out;
  }

  /**
   * Backends behind `node`, each on its own veth and routed (no bridge): the
   * node's `lbrN` holds 203.0.113.129/32 with a peer route to the backend's
   * address. What an XDP program can redirect to (a bridge takes no XDP
   * frames). `xdpReady` turns GRO on at the backend's end of the veth, which
   * gives it the NAPI context a veth needs to receive redirected XDP frames.
   */
  addRoutedBackends(node: Host, count: number, opts: { xdpReady?: boolean } = {}): Host[] {
    if (count < 1 || count > 100) throw new Error('backends must be 1..100');
    node.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
    const out: Host[] = [];
    for (let n = 0; n < count; n++) {
      const { b, port } = this.newBackend(node, 'lbr');
      must('ip', ['-n', node.netns, 'addr', 'add', '203.0.113.129/32', 'peer', `${b.ip}/32`, 'dev', port]);
      must('ip', ['-n', node.netns, 'link', 'set', port, 'up']);
      must('ip', ['-n', b.netns, 'addr', 'add', `${b.ip}/32`, 'peer', '203.0.113.129/32', 'dev', 'eth0']);
      must('ip', ['-n', b.netns, 'link', 'set', 'eth0', 'up']);
      must('ip', ['-n', b.netns, 'route', 'add', 'default', 'via', '203.0.113.129', 'dev', 'eth0', 'onlink']);
      if (opts.xdpReady) must('ip', ['netns', 'exec', b.netns, 'ethtool', '-K', 'eth0', 'gro', 'on']);
      this.backends.push(b);
      out.push(b);
    }
    return out;
  }

  /** The next backend's namespace (b<N>, 203.0.113.129+N) with eth0 on a veth whose other end, `<prefix><N>`, is in `node`. */
  private newBackend(node: Host, prefix: string): { b: Host; port: string } {
    const i = this.backends.length;
    const b = new Host(this, `b${i + 1}`, `${this.id}-b${i + 1}`, `203.0.113.${130 + i}`, undefined);
    this.addNetns(b.netns);
    const port = `${prefix}${i + 1}`;
    const tmp = `t${randomBytes(4).toString('hex')}`;
    must('ip', ['-n', node.netns, 'link', 'add', port, 'type', 'veth', 'peer', 'name', tmp, 'netns', b.netns]);
    must('ip', ['-n', b.netns, 'link', 'set', tmp, 'name', 'eth0']);
    return { b, port };
  }

  track(proc: LabProcess): void {
    this.processes.add(proc);
    void proc.exited.then(() => this.processes.delete(proc));
  }

  async destroy(): Promise<void> {
    await Promise.all([...this.processes].map((p) => p.stop('SIGTERM', 3000)));
    this.destroySync();
  }

  /** Synchronous teardown (also used from exit handlers). Idempotent. */
  destroySync(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    liveLabs.delete(this);
    for (const p of this.processes) p.signal('SIGKILL');
    for (const ns of [...this.namespaces].reverse()) run('ip', ['netns', 'del', ns]);
    for (const host of this.hosts) {
      for (const path of [host.pinDir, host.stateDir, host.statusSocket]) rmSync(path, { recursive: true, force: true });
    }
    rmSync(this.ownerFile, { force: true });
  }
}

export async function waitFor(
  cond: () => boolean | Promise<boolean>,
  opts: { timeoutMs?: number; intervalMs?: number; what?: string; onTimeout?: () => string; abortIf?: () => string | undefined } = {},
): Promise<void> {
  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  for (;;) {
    if (await cond()) return;
    const abort = opts.abortIf?.();
    if (abort) throw new Error(`while waiting for ${opts.what ?? 'a condition'}: ${abort}`);
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${opts.what ?? 'a condition'}${opts.onTimeout ? `\n${opts.onTimeout()}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
