/**
 * Loads bpf/policy.bpf.o (optionally pinning its maps so a restarting agent
 * keeps enforcing), attaches it to tc ingress at priority 2, runs it on
 * crafted packets (BPF_PROG_TEST_RUN) and reads its drop counters.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError } from '../../core/errors.js';
import { BpfMap, mapInfoByFd, type MapCodec } from '../../os/bpf-map.js';
import { ensurePinDir } from '../../os/bpffs.js';
import { ERRNO, SyscallError, check, checkPtr, libbpf, takeLibbpfLog } from '../../os/libbpf.js';
import { progTestRun, type TestRunResult } from '../../os/prog-test-run.js';
import { attachTc, detachTc, queryTc } from '../../os/tc-attach.js';
import { tcProgram } from '../tc-programs.js';
import {
  MAP_DROPS,
  MAP_GEN_HW,
  MAP_LPM_V4,
  MAP_LPM_V6,
  MAP_SVC_V4,
  MAP_SVC_V6,
  PROGRAM_NAME,
  decodeDropKey,
  genCodec,
  lpm4Codec,
  lpm6Codec,
  svc4Codec,
  svc6Codec,
  type DropKey,
  type LpmKey,
  type SvcValue,
} from './layout.js';
import type { PolicyL4Entry } from '../tables/service-policy.js';

/** After the L2 responder, before the L4 load balancer (legacy priority 2); its tcx link pinned beside the maps. */
export const policyTc = (pinDir?: string) => tcProgram(PROGRAM_NAME, pinDir !== undefined ? { pinDir } : {});

export const DEFAULT_POLICY_OBJECT = fileURLToPath(new URL('../../../build/bpf/policy.bpf.o', import.meta.url));

/** The maps a restarted agent reuses (file names `policy_<map>` in the pin directory). */
export const PINNED_MAPS = [MAP_SVC_V4, MAP_SVC_V6, MAP_LPM_V4, MAP_LPM_V6, MAP_GEN_HW] as const;

const PINNED_CODECS: Record<(typeof PINNED_MAPS)[number], MapCodec<unknown, unknown>> = {
  [MAP_SVC_V4]: svc4Codec as MapCodec<unknown, unknown>,
  [MAP_SVC_V6]: svc6Codec as MapCodec<unknown, unknown>,
  [MAP_LPM_V4]: lpm4Codec as MapCodec<unknown, unknown>,
  [MAP_LPM_V6]: lpm6Codec as MapCodec<unknown, unknown>,
  [MAP_GEN_HW]: genCodec as MapCodec<unknown, unknown>,
};

/**
 * Pinned maps of another layout (an older herald) are removed, all of them,
 * so the load creates a fresh set: the old program keeps enforcing from the
 * old set (it holds them) until the new one replaces it, and the new run
 * never writes a slot the old maps still point at. Cilium's DeleteIfUpgradeNeeded.
 */
function removeIfUpgradeNeeded(pinDir: string): boolean {
  const lib = libbpf();
  let stale = false;
  for (const name of PINNED_MAPS) {
    const path = pinnedMapPath(pinDir, name);
    if (!existsSync(path)) continue;
    const fd = lib.objGet(path);
    if (fd < 0) continue;
    try {
      const info = mapInfoByFd(fd);
      const codec = PINNED_CODECS[name];
      if (info.keySize !== codec.keySize || info.valueSize !== codec.valueSize) stale = true;
    } finally {
      lib.close(fd);
    }
  }
  // A set without the generation mark predates the verdict cache: its generations are unknown.
  if (!stale && existsSync(pinnedMapPath(pinDir, MAP_SVC_V4)) && !existsSync(pinnedMapPath(pinDir, MAP_GEN_HW))) stale = true;
  if (stale) for (const name of PINNED_MAPS) rmSync(pinnedMapPath(pinDir, name), { force: true });
  return stale;
}

export function pinnedMapPath(pinDir: string, map: (typeof PINNED_MAPS)[number]): string {
  return join(pinDir, `policy_${map}`);
}

export const TC_ACT_UNSPEC = -1;
export const TC_ACT_SHOT = 2;

export interface PolicyMaps {
  /** The generation high-water mark (pinned with the others). */
  genHw: BpfMap<number, bigint>;
  svc4: BpfMap<string, SvcValue>;
  svc6: BpfMap<string, SvcValue>;
  lpm4: BpfMap<LpmKey, readonly PolicyL4Entry[]>;
  lpm6: BpfMap<LpmKey, readonly PolicyL4Entry[]>;
}

export interface PolicyLoadOptions {
  /** Pin the maps here (reused when present); absent: private maps (tests, bench). */
  pinDir?: string;
  objectPath?: string;
}

function possibleCpus(): number {
  const text = readFileSync('/sys/devices/system/cpu/possible', 'utf8').trim();
  let n = 0;
  for (const part of text.split(',')) {
    const [a, b] = part.split('-').map(Number);
    n += b === undefined ? 1 : b - a! + 1;
  }
  return n;
}

export class PolicyProgram implements Disposable {
  private closed = false;
  private readonly ncpu = possibleCpus();
  private progId: number | undefined;

  private constructor(
    private readonly obj: unknown,
    readonly progFd: number,
    readonly maps: PolicyMaps,
    private readonly dropsFd: number,
    private readonly pinDir: string | undefined,
  ) {}

  /**
   * The verifier gives up with EAGAIN when a signal arrives while it runs (a
   * profiler, a child exiting): load again, a few times.
   */
  static load(opts: PolicyLoadOptions = {}): PolicyProgram {
    for (let attempt = 1; ; attempt++) {
      try {
        return PolicyProgram.loadOnce(opts);
      } catch (e) {
        if (attempt >= 5 || !(e instanceof HeraldError) || !/errno 11\)/.test(e.message)) throw e;
      }
    }
  }

  private static loadOnce(opts: PolicyLoadOptions): PolicyProgram {
    const objectPath = opts.objectPath ?? DEFAULT_POLICY_OBJECT;
    if (!existsSync(objectPath)) throw new HeraldError('HERALD_BPF_LOAD', `BPF object ${objectPath} is missing (run npm run build)`);
    const lib = libbpf();
    const obj = checkPtr('HERALD_BPF_LOAD', `open ${objectPath}`, lib.objectOpenFile(objectPath));
    try {
      if (opts.pinDir !== undefined) {
        ensurePinDir(opts.pinDir);
        removeIfUpgradeNeeded(opts.pinDir);
        // Not the drop counters: they are keyed by service and rule ids, which a new run assigns afresh.
        for (const name of PINNED_MAPS) {
          const map = checkPtr('HERALD_BPF_LOAD', `find map ${name}`, lib.objectFindMapByName(obj, name));
          check('HERALD_BPF_LOAD', `pin path for ${name}`, lib.mapSetPinPath(map, pinnedMapPath(opts.pinDir, name)));
        }
      }
      takeLibbpfLog();
      const rc = lib.objectLoad(obj);
      if (rc < 0) {
        const log = takeLibbpfLog().join('\n');
        throw new HeraldError(rc === -13 ? 'HERALD_BPF_VERIFIER' : 'HERALD_BPF_LOAD', `loading the policy program failed (errno ${-rc})${log ? `:\n${log}` : ''}`);
      }
      const prog = checkPtr('HERALD_BPF_LOAD', `find program ${PROGRAM_NAME}`, lib.objectFindProgramByName(obj, PROGRAM_NAME));
      const progFd = check('HERALD_BPF_LOAD', 'program fd', lib.programFd(prog));
      const fd = (name: string) =>
        check('HERALD_BPF_LOAD', `map fd ${name}`, lib.mapFd(checkPtr('HERALD_BPF_LOAD', name, lib.objectFindMapByName(obj, name))));
      const maps: PolicyMaps = {
        genHw: BpfMap.fromObjectFd(MAP_GEN_HW, fd(MAP_GEN_HW), genCodec),
        svc4: BpfMap.fromObjectFd(MAP_SVC_V4, fd(MAP_SVC_V4), svc4Codec),
        svc6: BpfMap.fromObjectFd(MAP_SVC_V6, fd(MAP_SVC_V6), svc6Codec),
        lpm4: BpfMap.fromObjectFd(MAP_LPM_V4, fd(MAP_LPM_V4), lpm4Codec),
        lpm6: BpfMap.fromObjectFd(MAP_LPM_V6, fd(MAP_LPM_V6), lpm6Codec),
      };
      return new PolicyProgram(obj, progFd, maps, fd(MAP_DROPS), opts.pinDir);
    } catch (e) {
      lib.objectClose(obj);
      throw e;
    }
  }

  /** Attach (or atomically replace) on tc ingress after the responder; returns the program id. */
  attach(ifindex: number): number {
    this.assertOpen();
    this.progId = attachTc(ifindex, this.progFd, policyTc(this.pinDir)).progId;
    return this.progId;
  }

  /** Whether this program (not another, not none) is herald's policy program on `ifindex`. */
  attachedHere(ifindex: number): boolean {
    return this.progId !== undefined && queryTc(ifindex, policyTc(this.pinDir)) === this.progId;
  }

  detach(ifindex: number): boolean {
    return detachTc(ifindex, policyTc(this.pinDir));
  }

  /** Runs the program on one Ethernet frame in the kernel. */
  testRun(frame: Buffer, repeat = 1): TestRunResult {
    this.assertOpen();
    return progTestRun(this.progFd, frame, repeat);
  }

  /** Drop counters summed over CPUs, read live. */
  drops(): Array<DropKey & { packets: bigint }> {
    this.assertOpen();
    const lib = libbpf();
    const out: Array<DropKey & { packets: bigint }> = [];
    let prev: Buffer | null = null;
    for (;;) {
      const next = Buffer.alloc(8);
      const rc = lib.mapGetNextKey(this.dropsFd, prev, next);
      if (rc === -ERRNO.ENOENT) break;
      if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', 'iterate drops', -rc);
      const value = Buffer.alloc(8 * this.ncpu);
      if (lib.mapLookupElem(this.dropsFd, next, value) === 0) {
        let packets = 0n;
        for (let i = 0; i < this.ncpu; i++) packets += value.readBigUInt64LE(i * 8);
        out.push({ ...decodeDropKey(next), packets });
      }
      prev = next;
    }
    return out;
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    for (const m of Object.values(this.maps)) (m as BpfMap<unknown, unknown>).dispose();
    libbpf().objectClose(this.obj);
  }

  private assertOpen(): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', 'policy program is closed');
  }
}
