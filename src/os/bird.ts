/**
 * herald's own BIRD (Debian's bird2): configuration and control socket under
 * the state directory, supervised (restarted with backoff when it dies; the
 * host routes stay in the kernel meanwhile), reconfigured with `birdc
 * configure` only when the rendered configuration changes.
 *
 * A new configuration is parsed first (`bird -p`); one BIRD refuses is never
 * made current, so the running BIRD keeps the last good configuration and the
 * error is reported (thrown to the reconciler, which keeps it on the row and
 * retries). Run in a named network namespace with `netns` (labs).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Clock, TimerHandle } from '../core/clock.js';
import type { Disposable } from '../core/disposable.js';
import { HeraldError, describeError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';

const run = promisify(execFile);

export interface BirdHealth {
  running: boolean;
  pid?: number;
  /** Times BIRD was started again after it died. */
  restarts: number;
  /** The configuration in force was applied at this wall-clock time. */
  appliedAt?: number;
  lastError?: string;
}

export interface BgpSession {
  protocol: string;
  /** BIRD's state column (up, start, …) and info (Established, Active, Connect, …). */
  state: string;
  info: string;
}

export interface BirdOptions {
  stateDir: string;
  netns?: string;
  birdBin: string;
  birdcBin: string;
  restartMinMs: number;
  restartMaxMs: number;
}

export const birdDefaults = { birdBin: 'bird', birdcBin: 'birdc', restartMinMs: 200, restartMaxMs: 30_000 } as const;

export class BirdDaemon implements Disposable {
  private child: ChildProcess | undefined;
  private applied: string | undefined;
  /** Some peer negotiates graceful restart (the applied configuration says so). */
  private gracefulRestart = false;
  private disposed = false;
  private restartTimer: TimerHandle | undefined;
  private backoffMs: number;
  private readonly health: BirdHealth = { running: false, restarts: 0 };
  readonly configPath: string;
  readonly socketPath: string;

  constructor(
    private readonly opts: BirdOptions,
    private readonly deps: { clock: Clock; log: Logger },
  ) {
    this.configPath = join(opts.stateDir, 'bird.conf');
    this.socketPath = join(opts.stateDir, 'bird.ctl');
    this.backoffMs = opts.restartMinMs;
  }

  status(): BirdHealth {
    return { ...this.health, ...(this.child?.pid !== undefined && this.health.running ? { pid: this.child.pid } : {}) };
  }

  /** Makes `config` the running configuration (starting BIRD the first time); a no-op when it is already. */
  async apply(config: string, opts: { gracefulRestart: boolean } = { gracefulRestart: false }): Promise<void> {
    if (this.disposed) throw new HeraldError('HERALD_STOPPED', 'BIRD supervisor stopped');
    if (config === this.applied && this.health.running) return;
    this.gracefulRestart = opts.gracefulRestart;
    await mkdir(this.opts.stateDir, { recursive: true });
    const next = `${this.configPath}.next`;
    await writeFile(next, config);
    try {
      await run(this.opts.birdBin, ['-p', '-c', next]);
    } catch (e) {
      throw this.fail('HERALD_BIRD_CONFIG', `BIRD refused the new configuration (the last good one stays in force): ${explainRefusal(config, stderrOf(e))}`, e);
    }
    const previous = await readFile(this.configPath, 'utf8').catch(() => undefined);
    await rename(next, this.configPath);
    if (!this.health.running) {
      // Not started yet, or dead and waiting for its restart: start it now, once, on the new config.
      this.restartTimer?.cancel();
      this.restartTimer = undefined;
      this.spawn();
      this.applied = config;
      this.health.appliedAt = this.deps.clock.now();
      return;
    }
    const out = await this.birdc(['configure']).catch((e: unknown) => `error: ${describeError(e)}`);
    if (!/Reconfigured|Reconfiguration in progress/.test(out)) {
      if (previous !== undefined) await writeFile(this.configPath, previous);
      throw this.fail('HERALD_BIRD_CONFIG', `birdc configure refused the new configuration (the last good one stays in force): ${out.trim()}`);
    }
    this.applied = config;
    this.health.appliedAt = this.deps.clock.now();
    delete this.health.lastError;
  }

  /** The sessions last read by `refreshSessions` (status reads this, never BIRD itself). */
  lastSessions: { at: number; sessions: BgpSession[]; error?: string } | undefined;

  /** Reads the sessions from BIRD into `lastSessions` (a periodic job's body). */
  async refreshSessions(): Promise<void> {
    if (!this.health.running) {
      this.lastSessions = { at: this.deps.clock.now(), sessions: [], error: 'BIRD is not running' };
      return;
    }
    try {
      this.lastSessions = { at: this.deps.clock.now(), sessions: await this.sessions() };
    } catch (e) {
      this.lastSessions = { at: this.deps.clock.now(), sessions: [], error: describeError(e) };
    }
  }

  /** BGP sessions as BIRD reports them (`show protocols`). */
  async sessions(): Promise<BgpSession[]> {
    return parseSessions(await this.birdc(['show', 'protocols']));
  }

  /** Runs birdc against our control socket; its stdout. */
  async birdc(args: string[]): Promise<string> {
    const { stdout } = await run(...this.cmd(this.opts.birdcBin, ['-s', this.socketPath, ...args]));
    return stdout;
  }

  private cmd(bin: string, args: string[]): [string, string[]] {
    return this.opts.netns !== undefined ? ['ip', ['netns', 'exec', this.opts.netns, bin, ...args]] : [bin, args];
  }

  private spawn(): void {
    // With graceful restart, every start is a restart's second half: `-R` sets the
    // Restart State bit, so peers keep our stale routes until our End-of-RIB.
    const recover = this.gracefulRestart ? ['-R'] : [];
    const [bin, args] = this.cmd(this.opts.birdBin, ['-f', ...recover, '-c', this.configPath, '-s', this.socketPath]);
    const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    this.child = child;
    this.health.running = true;
    const startedAt = this.deps.clock.now();
    child.on('exit', (code, signal) => {
      if (this.child !== child) return;
      this.health.running = false;
      this.child = undefined;
      if (this.disposed) return;
      if (this.deps.clock.now() - startedAt > 10_000) this.backoffMs = this.opts.restartMinMs; // it had been stable
      this.health.lastError = `bird exited (${signal ?? `code ${code}`})${stderr ? `: ${stderr.trim()}` : ''}`;
      this.deps.log.warn({ code, signal, restartInMs: this.backoffMs }, 'BIRD exited; restarting (host routes stay in the kernel)');
      this.restartTimer = this.deps.clock.setTimeout(() => {
        this.restartTimer = undefined;
        if (this.disposed) return;
        this.health.restarts++;
        this.spawn();
      }, this.backoffMs);
      this.backoffMs = Math.min(this.backoffMs * 2, this.opts.restartMaxMs);
    });
  }

  private fail(code: 'HERALD_BIRD_CONFIG' | 'HERALD_BIRD', message: string, cause?: unknown): HeraldError {
    this.health.lastError = message;
    return new HeraldError(code, message, cause !== undefined ? { cause } : undefined);
  }

  /**
   * Stops BIRD and waits for it to exit. Without graceful restart (or with
   * `withdraw`) its sessions close with a Cease, so peers withdraw at once.
   * With graceful restart BIRD stops through `birdc graceful restart`: the
   * sessions drop without a Cease and peers keep the routes, marked stale,
   * for the restart time, while the host routes stay in the kernel — an agent
   * restart breaks no flow. (If that fails, SIGTERM: a withdrawal, never a hang.)
   */
  async stop(opts: { withdraw?: boolean } = {}): Promise<void> {
    this.disposed = true;
    this.restartTimer?.cancel();
    const child = this.child;
    if (!child) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    if (this.gracefulRestart && !opts.withdraw && this.health.running) {
      const ok = await this.birdc(['graceful', 'restart']).then(
        (out) => /Graceful restart/i.test(out),
        () => false,
      );
      const timeout = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), 5000).unref());
      if (ok && (await Promise.race([exited, timeout])) !== 'timeout') return;
      this.deps.log.warn({ birdcAccepted: ok }, 'BIRD did not stop for a graceful restart; stopping it (peers withdraw)');
    }
    child.kill('SIGTERM');
    await exited;
  }

  dispose(): void {
    this.stop().catch(() => {}); // stop() does not reject; the catch keeps the promise owned
  }
}

function stderrOf(e: unknown): string {
  const s = (e as { stderr?: string }).stderr;
  return (typeof s === 'string' && s.trim() !== '' ? s : describeError(e)).trim();
}

export interface OperatorBirdOptions {
  /** The operator's BIRD control socket (`--bird-socket`). */
  socketPath: string;
  /** The file herald owns, which the operator's bird.conf includes (`--bird-include`). */
  includePath: string;
  netns?: string;
  birdcBin: string;
}

/**
 * A BIRD the operator runs (`--bird-socket`): herald never starts, stops or
 * supervises it and owns only one include file. Applying a configuration
 * writes the fragment, lets BIRD check the whole configuration with it
 * (`birdc configure check`), then `birdc configure`; a fragment BIRD refuses
 * is replaced by the previous one, so the running BIRD keeps the last good
 * configuration and the error is reported.
 *
 * Stopping the agent empties the fragment (the sessions herald defined close:
 * peers withdraw), unless some peer negotiates graceful restart: then the
 * fragment stays and the operator's BIRD keeps advertising while herald
 * restarts (the host routes stay in the kernel).
 */
export class OperatorBird {
  private applied: string | undefined;
  private gracefulRestart = false;
  private readonly health: BirdHealth = { running: false, restarts: 0 };
  readonly socketPath: string;
  readonly configPath: string;
  lastSessions: { at: number; sessions: BgpSession[]; error?: string } | undefined;

  constructor(
    private readonly opts: OperatorBirdOptions,
    private readonly deps: { clock: Clock; log: Logger },
  ) {
    this.socketPath = opts.socketPath;
    this.configPath = opts.includePath;
  }

  status(): BirdHealth & { operator: true; socket: string; include: string } {
    return { ...this.health, operator: true, socket: this.socketPath, include: this.configPath };
  }

  async apply(config: string, opts: { gracefulRestart: boolean } = { gracefulRestart: false }): Promise<void> {
    if (config === this.applied) return;
    this.gracefulRestart = opts.gracefulRestart;
    const previous = await readFile(this.configPath, 'utf8').catch(() => '');
    await this.write(config);
    const check = await this.birdc(['configure', 'check']).catch((e: unknown) => `error: ${outputOf(e)}`);
    if (!/Configuration OK/.test(check)) {
      await this.write(previous);
      throw this.fail(`the operator's BIRD (${this.socketPath}) refused herald's fragment ${this.configPath} (the last good one stays in force): ${explainRefusal(config, check.trim(), this.configPath)}`);
    }
    const out = await this.birdc(['configure']).catch((e: unknown) => `error: ${outputOf(e)}`);
    if (!/Reconfigured|Reconfiguration in progress/.test(out)) {
      await this.write(previous);
      throw this.fail(`birdc configure on the operator's BIRD (${this.socketPath}) failed (the last good fragment stays): ${out.trim()}`);
    }
    this.applied = config;
    this.health.running = true;
    this.health.appliedAt = this.deps.clock.now();
    delete this.health.lastError;
  }

  async refreshSessions(): Promise<void> {
    try {
      this.lastSessions = { at: this.deps.clock.now(), sessions: await this.sessions() };
      this.health.running = true;
    } catch (e) {
      this.health.running = false;
      this.lastSessions = { at: this.deps.clock.now(), sessions: [], error: describeError(e) };
    }
  }

  /** herald's BGP sessions (protocols named herald_*) as the operator's BIRD reports them. */
  async sessions(): Promise<BgpSession[]> {
    return parseSessions(await this.birdc(['show', 'protocols'])).filter((s) => s.protocol.startsWith('herald_'));
  }

  async birdc(args: string[]): Promise<string> {
    const argv = ['-s', this.socketPath, ...args];
    const { stdout } = this.opts.netns !== undefined ? await run('ip', ['netns', 'exec', this.opts.netns, this.opts.birdcBin, ...argv]) : await run(this.opts.birdcBin, argv);
    return stdout;
  }

  async stop(opts: { withdraw?: boolean } = {}): Promise<void> {
    if (this.applied === undefined || (this.gracefulRestart && !opts.withdraw)) return;
    try {
      await this.write('# herald stopped: no sessions, nothing advertised.\n');
      await this.birdc(['configure']);
      this.applied = undefined;
    } catch (e) {
      this.deps.log.warn({ err: describeError(e) }, "could not withdraw herald's sessions from the operator's BIRD");
    }
  }

  dispose(): void {
    this.stop().catch(() => {});
  }

  private async write(text: string): Promise<void> {
    const tmp = `${this.configPath}.next`;
    await writeFile(tmp, text);
    await rename(tmp, this.configPath);
  }

  private fail(message: string): HeraldError {
    this.health.lastError = message;
    return new HeraldError('HERALD_BIRD_CONFIG', message);
  }
}

/**
 * BIRD's error names `file:line:column`; when that line of our configuration
 * is a construct older BIRDs lack, say which intent asked for it.
 */
export function explainRefusal(config: string, error: string, file?: string): string {
  const m = /([^\s:]+):(\d+):\d+ /.exec(error);
  if (!m || (file !== undefined && m[1] !== file)) return error;
  const line = config.split('\n')[Number(m[2]) - 1] ?? '';
  if (/^\s*neighbor .* external;/.test(line)) {
    return `${error} — peerASN 0 (accept the AS in the peer's OPEN) is rendered as BIRD's \`neighbor … external\`, which this BIRD does not accept: give the peer's ASN in CiliumBGPClusterConfig, or install a BIRD 2 that has it (Debian 12's 2.0.12 does)`;
  }
  return error;
}

/** birdc reports a refused configuration on stdout with a non-zero exit. */
function outputOf(e: unknown): string {
  const { stdout, stderr } = e as { stdout?: string; stderr?: string };
  const text = `${stdout ?? ''}${stderr ?? ''}`.replace(/^BIRD [\d.]+ ready\.\n/, '').trim();
  return text !== '' ? text : describeError(e);
}

function parseSessions(out: string): BgpSession[] {
  const sessions: BgpSession[] = [];
  for (const line of out.split('\n')) {
    const m = /^(\S+)\s+BGP\s+\S+\s+(\S+)\s+\S+\s*(.*)$/.exec(line);
    if (m) sessions.push({ protocol: m[1]!, state: m[2]!, info: (m[3] ?? '').trim() });
  }
  return sessions;
}
