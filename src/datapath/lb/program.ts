/**
 * Loads the load balancer object (bpf/lb.bpf.c), reusing the maps pinned under
 * `<pinDir>/lb` (a restarting agent keeps its connections and services), and
 * attaches its two programs to the announcing interface: DNAT at tc ingress,
 * reverse NAT at tc egress, both at handle 0x4852 priority 3 — after the L2
 * responder (priority 1, which passes non-ARP/NDP with TC_ACT_UNSPEC) and the
 * service policy (priority 2).
 *
 * A pinned map whose layout (key, value, size) differs from this herald's is
 * removed and recreated rather than misread (Cilium's DeleteIfUpgradeNeeded).
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError } from '../../core/errors.js';
import { BpfMap, mapInfoByFd, type MapCodec } from '../../os/bpf-map.js';
import { ensurePinDir } from '../../os/bpffs.js';
import { SyscallError, check, checkPtr, libbpf, takeLibbpfLog } from '../../os/libbpf.js';
import { attachTc, detachTc, queryTc } from '../../os/tc-attach.js';
import { tcProgram } from '../tc-programs.js';
import { attachXdp, detachXdp, queryXdp, xdpProgramName } from '../../os/xdp.js';
import { pinnedMapPath as policyPinnedMapPath } from '../policy/program.js';
import { ipv4ToBytes, ipv6ToBytes } from '../../net/addr.js';
import {
  CFG_MAGLEV_M,
  CFG_SNAT_ADDR4,
  CFG_SNAT_ADDR6_HI,
  CFG_SNAT_ADDR6_LO,
  CFG_SNAT_PORT_MAX,
  CFG_SNAT_PORT_MIN,
  CFG_SLOTS,
  CFG_NON_TCP_NS,
  CFG_TCP_CLOSING_NS,
  CFG_TCP_ESTABLISHED_NS,
  CFG_TCP_SYN_NS,
  LB_EGRESS_PROGRAM,
  LB_INGRESS_PROGRAM,
  LB_STAT_NAMES,
  LB_XDP_PROGRAM,
  MAP_LB_POL_SVC_V4,
  MAP_LB_POL_SVC_V6,
  MAP_LB_XDP_TARGETS,
  xdpTargetsCodec,
  MAP_CT4,
  MAP_CT6,
  MAP_LB4_SERVICES,
  MAP_LB6_SERVICES,
  MAP_LB_BACKENDS,
  MAP_LB_CONFIG,
  MAP_LB_MAGLEV,
  MAP_LB_STATS,
  MAP_LB4_AFFINITY,
  MAP_LB6_AFFINITY,
  ST_CT_USER_DELETED,
  affinity4Codec,
  affinity6Codec,
  backendCodec,
  configCodec,
  ct4Codec,
  ct6Codec,
  maglevTableCodec,
  service4Codec,
  service6Codec,
  type BackendValue,
  type CtEntry,
  type CtKey,
  type ServiceKey,
  type ServiceValue,
} from './layout.js';

/** The LB's tc programs: last of herald's (legacy priority 3; 1: L2 responder, 2: service policy), tcx links pinned in `<pinDir>/lb`. */
export const lbTc = (egress: boolean, lbDir?: string) =>
  tcProgram(egress ? LB_EGRESS_PROGRAM : LB_INGRESS_PROGRAM, { egress, ...(lbDir !== undefined ? { pinDir: lbDir } : {}) });

export const DEFAULT_LB_OBJECT_PATH = fileURLToPath(new URL('../../../build/bpf/lb.bpf.o', import.meta.url));

const BPF_MAP_TYPE_ARRAY = 2;

/** Connection lifetimes (Cilium's defaults: SYN 60 s, established 6 h, closing 10 s, non-TCP 60 s). */
export interface CtLifetimes {
  tcpSynS: number;
  tcpEstablishedS: number;
  tcpClosingS: number;
  nonTcpS: number;
}

export const defaultLifetimes: CtLifetimes = { tcpSynS: 60, tcpEstablishedS: 21600, tcpClosingS: 10, nonTcpS: 60 };

export interface LbLoadOptions {
  pinDir: string;
  /** ct4 and ct6 entries (LRU, each). */
  ctMapSize: number;
  /** Maglev table size (a prime). */
  maglevSize: number;
  objectPath?: string;
  /**
   * The service policy's pin directory: the XDP program reads the policy's own
   * svc_v4 / svc_v6 there (pinned by whichever loads first), so a policed
   * service IP is always left to the tc path, where the policy runs first.
   * Unset: private, empty maps (tests and benchmarks without a policy).
   */
  policyPinDir?: string;
}

export interface LbMaps {
  services4: BpfMap<ServiceKey, ServiceValue>;
  services6: BpfMap<ServiceKey, ServiceValue>;
  backends: BpfMap<number, BackendValue>;
  maglev: BpfMap<number, number>;
  ct4: BpfMap<CtKey, CtEntry>;
  ct6: BpfMap<CtKey, CtEntry>;
  config: BpfMap<number, bigint>;
  /** Interfaces the XDP program may redirect to (ifindex → ifindex). */
  xdpTargets: BpfMap<number, number>;
}

export function lbPinDir(pinDir: string): string {
  return join(pinDir, 'lb');
}

interface MapSpec {
  name: string;
  codec: MapCodec<unknown, unknown>;
  maxEntries?: number;
}

export class LbProgram implements Disposable {
  private closed = false;

  private constructor(
    private readonly obj: unknown,
    readonly ingressFd: number,
    readonly egressFd: number,
    readonly xdpFd: number,
    readonly maps: LbMaps,
    private readonly statsFd: number,
    readonly maglevSize: number,
    private readonly lbDir: string,
  ) {}

  static load(opts: LbLoadOptions): LbProgram {
    const objectPath = opts.objectPath ?? DEFAULT_LB_OBJECT_PATH;
    if (!existsSync(objectPath)) throw new HeraldError('HERALD_BPF_LOAD', `BPF object ${objectPath} is missing (run npm run build)`);
    if (!Number.isInteger(opts.ctMapSize) || opts.ctMapSize < 64) throw new HeraldError('HERALD_BAD_ARGUMENT', `ct map size ${opts.ctMapSize}: at least 64`);
    const dir = lbPinDir(opts.pinDir);
    ensurePinDir(dir);
    const specs: MapSpec[] = [
      { name: MAP_LB4_SERVICES, codec: service4Codec as MapCodec<unknown, unknown> },
      { name: MAP_LB6_SERVICES, codec: service6Codec as MapCodec<unknown, unknown> },
      { name: MAP_LB_BACKENDS, codec: backendCodec as MapCodec<unknown, unknown> },
      { name: MAP_CT4, codec: ct4Codec as MapCodec<unknown, unknown>, maxEntries: opts.ctMapSize },
      { name: MAP_CT6, codec: ct6Codec as MapCodec<unknown, unknown>, maxEntries: opts.ctMapSize },
      // Its slot count is part of the contract: an older, shorter config map is recreated.
      { name: MAP_LB_CONFIG, codec: configCodec as MapCodec<unknown, unknown>, maxEntries: CFG_SLOTS },
      { name: MAP_LB_MAGLEV, codec: maglevTableCodec as MapCodec<unknown, unknown> },
      { name: MAP_LB_STATS, codec: configCodec as MapCodec<unknown, unknown>, maxEntries: LB_STAT_NAMES.length },
      { name: MAP_LB4_AFFINITY, codec: affinity4Codec as MapCodec<unknown, unknown> },
      { name: MAP_LB6_AFFINITY, codec: affinity6Codec as MapCodec<unknown, unknown> },
    ];
    const lib = libbpf();
    // The Maglev tables' size is part of the outer map's contract: a change recreates it.
    removeIfMaglevSizeChanged(dir, opts.maglevSize);
    for (const spec of specs) {
      // A recreated ct4 starts empty: its counters (created, deleted: the eviction count) start again with it.
      if (removeIfUpgradeNeeded(join(dir, spec.name), spec) && (spec.name === MAP_CT4 || spec.name === MAP_CT6)) rmSync(join(dir, MAP_LB_STATS), { force: true });
    }
    const obj = checkPtr('HERALD_BPF_LOAD', `open ${objectPath}`, lib.objectOpenFile(objectPath));
    try {
      if (opts.policyPinDir !== undefined) {
        ensurePinDir(opts.policyPinDir);
        for (const [name, file] of [
          [MAP_LB_POL_SVC_V4, 'svc_v4'],
          [MAP_LB_POL_SVC_V6, 'svc_v6'],
        ] as const) {
          const map = checkPtr('HERALD_BPF_LOAD', `find map ${name}`, lib.objectFindMapByName(obj, name));
          check('HERALD_BPF_LOAD', `pin path for ${name}`, lib.mapSetPinPath(map, policyPinnedMapPath(opts.policyPinDir, file)));
        }
      }
      for (const spec of specs) {
        const map = checkPtr('HERALD_BPF_LOAD', `find map ${spec.name}`, lib.objectFindMapByName(obj, spec.name));
        check('HERALD_BPF_LOAD', `pin path for ${spec.name}`, lib.mapSetPinPath(map, join(dir, spec.name)));
        if (spec.maxEntries !== undefined) check('HERALD_BPF_LOAD', `max entries of ${spec.name}`, lib.mapSetMaxEntries(map, spec.maxEntries));
      }
      const outer = checkPtr('HERALD_BPF_LOAD', 'find lb_maglev', lib.objectFindMapByName(obj, MAP_LB_MAGLEV));
      // The inner template, of the configured size (libbpf 1.1 cannot resize its own template).
      const template = lib.mapCreate(BPF_MAP_TYPE_ARRAY, 'hl_mg_tmpl', 4, 4, opts.maglevSize);
      if (template < 0) throw new SyscallError('HERALD_BPF_LOAD', 'bpf_map_create (maglev template)', -template);
      let rc: number;
      try {
        check('HERALD_BPF_LOAD', 'maglev inner map', lib.mapSetInnerMapFd(outer, template));
        takeLibbpfLog();
        rc = lib.objectLoad(obj);
      } finally {
        lib.close(template);
      }
      if (rc < 0) {
        const log = takeLibbpfLog().join('\n');
        throw new HeraldError(rc === -13 ? 'HERALD_BPF_VERIFIER' : 'HERALD_BPF_LOAD', `loading the load balancer failed (errno ${-rc})${log ? `:\n${log}` : ''}`);
      }
      const progFd = (name: string) =>
        check('HERALD_BPF_LOAD', `program fd ${name}`, lib.programFd(checkPtr('HERALD_BPF_LOAD', `find program ${name}`, lib.objectFindProgramByName(obj, name))));
      const fd = (name: string) => check('HERALD_BPF_LOAD', `map fd ${name}`, lib.mapFd(checkPtr('HERALD_BPF_LOAD', name, lib.objectFindMapByName(obj, name))));
      const maps: LbMaps = {
        services4: BpfMap.fromObjectFd(MAP_LB4_SERVICES, fd(MAP_LB4_SERVICES), service4Codec),
        services6: BpfMap.fromObjectFd(MAP_LB6_SERVICES, fd(MAP_LB6_SERVICES), service6Codec),
        backends: BpfMap.fromObjectFd(MAP_LB_BACKENDS, fd(MAP_LB_BACKENDS), backendCodec),
        maglev: BpfMap.fromObjectFd(MAP_LB_MAGLEV, fd(MAP_LB_MAGLEV), maglevTableCodec),
        ct4: BpfMap.fromObjectFd(MAP_CT4, fd(MAP_CT4), ct4Codec),
        ct6: BpfMap.fromObjectFd(MAP_CT6, fd(MAP_CT6), ct6Codec),
        config: BpfMap.fromObjectFd(MAP_LB_CONFIG, fd(MAP_LB_CONFIG), configCodec),
        xdpTargets: BpfMap.fromObjectFd(MAP_LB_XDP_TARGETS, fd(MAP_LB_XDP_TARGETS), xdpTargetsCodec),
      };
      const program = new LbProgram(obj, progFd(LB_INGRESS_PROGRAM), progFd(LB_EGRESS_PROGRAM), progFd(LB_XDP_PROGRAM), maps, fd(MAP_LB_STATS), opts.maglevSize, dir);
      maps.config.update(CFG_MAGLEV_M, BigInt(opts.maglevSize));
      return program;
    } catch (e) {
      lib.objectClose(obj);
      throw e;
    }
  }

  /** Connection lifetimes, read by the datapath on every packet. */
  setLifetimes(l: CtLifetimes): void {
    const ns = (s: number) => BigInt(Math.round(s * 1e9));
    this.maps.config.update(CFG_TCP_SYN_NS, ns(l.tcpSynS));
    this.maps.config.update(CFG_TCP_ESTABLISHED_NS, ns(l.tcpEstablishedS));
    this.maps.config.update(CFG_TCP_CLOSING_NS, ns(l.tcpClosingS));
    this.maps.config.update(CFG_NON_TCP_NS, ns(l.nonTcpS));
  }

  /**
   * Installs a service's Maglev table: a new inner array filled in one batch,
   * then swapped into lb_maglev in one update — a packet sees the old table or
   * the new one, never a mix. The old table is freed by the kernel.
   */
  setMaglevTable(serviceId: number, table: Uint32Array): void {
    this.assertOpen();
    writeMaglevTable(this.maps.maglev, serviceId, table, this.maglevSize);
  }

  /**
   * The node's address that SNAT services of its family use as the source toward
   * their backends; undefined clears it (IPv4 unless `family` says 6).
   */
  setSnatAddress(ip: string | undefined, family: 4 | 6 = ip?.includes(':') ? 6 : 4): void {
    if (family === 4) {
      this.maps.config.update(CFG_SNAT_ADDR4, ip === undefined ? 0n : BigInt(ipv4ToBytes(ip).readUInt32LE(0)));
      return;
    }
    const b = ip === undefined ? Buffer.alloc(16) : ipv6ToBytes(ip);
    this.maps.config.update(CFG_SNAT_ADDR6_LO, b.readBigUInt64LE(0));
    this.maps.config.update(CFG_SNAT_ADDR6_HI, b.readBigUInt64LE(8));
  }

  /** SNAT source ports [min, max] for new connections (default 32768–60999). */
  setSnatPortRange(min: number, max: number): void {
    if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || max > 65535 || min > max) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `SNAT port range ${min}-${max}: expected 1 ≤ min ≤ max ≤ 65535`);
    }
    this.maps.config.update(CFG_SNAT_PORT_MIN, BigInt(min));
    this.maps.config.update(CFG_SNAT_PORT_MAX, BigInt(max));
  }

  /** Per-CPU counters summed. */
  stats(): Record<string, bigint> {
    return readStats(this.statsFd);
  }

  /** Records conntrack entries user space deleted (GC, flush): the eviction count needs them. */
  recordDeleted(n: number): void {
    addUserDeleted(this.statsFd, n);
  }

  attach(ifindex: number): void {
    this.assertOpen();
    attachTc(ifindex, this.ingressFd, lbTc(false, this.lbDir));
    attachTc(ifindex, this.egressFd, lbTc(true, this.lbDir));
  }

  /**
   * Attaches the XDP program (native mode) to an interface that already has
   * the tc programs: XDP takes the forward path of DNAT services it can send
   * on itself and passes everything else to them.
   */
  attachXdp(ifindex: number): void {
    this.assertOpen();
    attachXdp(ifindex, this.xdpFd);
  }

  /**
   * The interfaces the XDP program may redirect to (besides sending back out
   * the interface it came in on, XDP_TX). Each must take XDP frames: a NIC
   * with native XDP, or a veth whose peer has an XDP program or GRO enabled.
   */
  setXdpTargets(ifindexes: readonly number[]): void {
    this.assertOpen();
    const want = new Set(ifindexes);
    for (const [k] of this.maps.xdpTargets.entries()) if (!want.has(k)) this.maps.xdpTargets.delete(k);
    for (const i of want) this.maps.xdpTargets.update(i, i);
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    libbpf().objectClose(this.obj);
  }

  private assertOpen(): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', 'load balancer program is closed');
  }
}

export function writeMaglevTable(outer: BpfMap<number, number>, serviceId: number, table: Uint32Array, m: number): void {
  if (table.length !== m) throw new HeraldError('HERALD_BAD_ARGUMENT', `maglev table of ${table.length} slots, the datapath's size is ${m}`);
  const lib = libbpf();
  const fd = lib.mapCreate(BPF_MAP_TYPE_ARRAY, `hl_mg_${serviceId}`.slice(0, 15), 4, 4, m);
  if (fd < 0) throw new SyscallError('HERALD_BPF_MAP', 'bpf_map_create (maglev table)', -fd);
  const inner = BpfMap.fromOwnedFd(`maglev table ${serviceId}`, fd, maglevTableCodec);
  try {
    const keys = Buffer.alloc(4 * m);
    for (let i = 0; i < m; i++) keys.writeUInt32LE(i, i * 4);
    inner.updateBatch(keys, Buffer.from(table.buffer, table.byteOffset, table.byteLength), m);
    outer.update(serviceId, fd);
  } finally {
    inner.dispose(); // the outer map holds its own reference
  }
}

export function removeMaglevTable(outer: BpfMap<number, number>, serviceId: number): void {
  outer.delete(serviceId);
}

function possibleCpus(): number {
  const text = readFileSync('/sys/devices/system/cpu/possible', 'utf8').trim();
  let n = 0;
  for (const part of text.split(',')) {
    const [a, b] = part.split('-').map(Number);
    n += b === undefined ? 1 : b - (a ?? 0) + 1;
  }
  return n;
}

export function readStats(fd: number): Record<string, bigint> {
  const lib = libbpf();
  const cpus = possibleCpus();
  const out: Record<string, bigint> = {};
  LB_STAT_NAMES.forEach((name, slot) => {
    const key = Buffer.alloc(4);
    key.writeUInt32LE(slot);
    const val = Buffer.alloc(8 * cpus);
    const rc = lib.mapLookupElem(fd, key, val);
    if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', 'lookup lb_stats', -rc);
    let sum = 0n;
    for (let c = 0; c < cpus; c++) sum += val.readBigUInt64LE(c * 8);
    out[name] = sum;
  });
  return out;
}

/**
 * Adds `n` to the ct_user_deleted slot (CPU 0's copy; the datapath never
 * writes this slot, so the read-modify-write races only with another user
 * space writer: the agent's GC and a concurrent `herald ct flush`).
 */
export function addUserDeleted(fd: number, n: number): void {
  if (n <= 0) return;
  const lib = libbpf();
  const key = Buffer.alloc(4);
  key.writeUInt32LE(ST_CT_USER_DELETED);
  const val = Buffer.alloc(8 * possibleCpus());
  const rc = lib.mapLookupElem(fd, key, val);
  if (rc < 0) throw new SyscallError('HERALD_BPF_MAP', 'lookup lb_stats', -rc);
  val.writeBigUInt64LE(val.readBigUInt64LE(0) + BigInt(n), 0);
  const wrc = lib.mapUpdateElem(fd, key, val, 0n);
  if (wrc < 0) throw new SyscallError('HERALD_BPF_MAP', 'update lb_stats', -wrc);
}

function removeIfMaglevSizeChanged(dir: string, m: number): void {
  const path = join(dir, MAP_LB_CONFIG);
  if (!existsSync(path)) return;
  let pinned: bigint | undefined;
  try {
    const cfg = BpfMap.openPinned(path, configCodec);
    try {
      pinned = cfg.lookup(CFG_MAGLEV_M);
    } finally {
      cfg.dispose();
    }
  } catch {
    return; // another layout: removeIfUpgradeNeeded recreates it
  }
  if (pinned !== undefined && pinned !== 0n && pinned !== BigInt(m)) rmSync(join(dir, MAP_LB_MAGLEV), { force: true });
}

/** Removes a pinned map whose layout is not this herald's, so the load recreates it. */
function removeIfUpgradeNeeded(path: string, spec: MapSpec): boolean {
  if (!existsSync(path)) return false;
  const lib = libbpf();
  const fd = lib.objGet(path);
  if (fd < 0) return false;
  try {
    const info = mapInfoByFd(fd);
    const same =
      info.keySize === spec.codec.keySize &&
      info.valueSize === spec.codec.valueSize &&
      (spec.maxEntries === undefined || info.maxEntries === spec.maxEntries);
    if (same) return false;
  } finally {
    lib.close(fd);
  }
  rmSync(path, { force: true });
  return true;
}

export function lbAttachedProgramId(ifindex: number): number | undefined {
  return queryTc(ifindex, lbTc(false));
}

/** The interface's native XDP program id (the load balancer's when `--lb-xdp` attached it), or undefined. */
export function lbXdpProgramId(ifindex: number): number | undefined {
  return queryXdp(ifindex);
}

/**
 * Removes the load balancer's XDP program from an interface. With `ifname`,
 * only when the program there is ours (by name): another XDP program is left.
 */
export function detachLbXdp(ifindex: number, ifname?: string): boolean {
  if (ifname !== undefined && xdpProgramName(ifname) !== LB_XDP_PROGRAM) return false;
  return detachXdp(ifindex);
}

/** Removes the LB's tc programs from `ifindex` (either kind; with the agent's `pinDir`, their link pins too). */
export function detachLb(ifindex: number, ifname?: string, pinDir?: string): void {
  const dir = pinDir !== undefined ? lbPinDir(pinDir) : undefined;
  detachTc(ifindex, lbTc(false, dir));
  detachTc(ifindex, lbTc(true, dir), ifname);
}

/** Opens the pinned maps of a running (or stopped) agent, for `herald ct`. */
export function openPinnedLbMaps(pinDir: string): {
  ct4: BpfMap<CtKey, CtEntry>;
  ct6: BpfMap<CtKey, CtEntry>;
  backends: BpfMap<number, BackendValue>;
  stats: () => Record<string, bigint>;
  recordDeleted: (n: number) => void;
  dispose: () => void;
} {
  const dir = lbPinDir(pinDir);
  const ct4 = BpfMap.openPinned(join(dir, MAP_CT4), ct4Codec);
  let backends: BpfMap<number, BackendValue>;
  let ct6: BpfMap<CtKey, CtEntry>;
  try {
    ct6 = BpfMap.openPinned(join(dir, MAP_CT6), ct6Codec);
    try {
      backends = BpfMap.openPinned(join(dir, MAP_LB_BACKENDS), backendCodec);
    } catch (e) {
      ct6.dispose();
      throw e;
    }
  } catch (e) {
    ct4.dispose();
    throw e;
  }
  const lib = libbpf();
  const statsFd = lib.objGet(join(dir, MAP_LB_STATS));
  return {
    ct4,
    ct6,
    backends,
    stats: () => (statsFd >= 0 ? readStats(statsFd) : {}),
    recordDeleted: (n) => {
      if (statsFd >= 0) addUserDeleted(statsFd, n);
    },
    dispose: () => {
      ct4.dispose();
      ct6.dispose();
      backends.dispose();
      if (statsFd >= 0) lib.close(statsFd);
    },
  };
}
