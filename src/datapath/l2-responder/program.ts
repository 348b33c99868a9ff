/**
 * Loads the L2 responder object, reusing the maps pinned under the pin
 * directory (so a restarting agent keeps the entries the node answers from),
 * and attaches the program to tc ingress of the interfaces it serves.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import type { Disposable } from '../../core/disposable.js';
import { HeraldError } from '../../core/errors.js';
import { BpfMap, mapInfoByFd } from '../../os/bpf-map.js';
import { ensurePinDir } from '../../os/bpffs.js';
import { check, checkPtr, libbpf, takeLibbpfLog } from '../../os/libbpf.js';
import { attachTc, attachedAs, detachTc, queryTc, type TcAttachMode, type TcAttachResult } from '../../os/tc-attach.js';
import { tcProgram } from '../tc-programs.js';
import {
  MAP_CONFLICT_EVENTS,
  MAP_INTERFACES,
  MAP_OUR_MACS,
  MAP_RESPONDER_V4,
  MAP_RESPONDER_V6,
  MAP_RUNTIME_CONFIG,
  PROGRAM_NAME,
  interfacesCodec,
  ourMacsCodec,
  responderKey6Codec,
  responderKeyCodec,
  runtimeConfigCodec,
  type InterfaceInfo,
} from './layout.js';
import { ResponderMaps } from './family-maps.js';

/** herald's first program on tc ingress (legacy: 'HR' handle, priority 1); its tcx link pinned in `pinDir`. */
export const responderTc = (pinDir?: string) => tcProgram(PROGRAM_NAME, pinDir !== undefined ? { pinDir } : {});

export const DEFAULT_OBJECT_PATH = fileURLToPath(new URL('../../../build/bpf/l2_responder.bpf.o', import.meta.url));

export interface L2ResponderLoadOptions {
  pinDir: string;
  responderMapSize: number;
  objectPath?: string;
}

export interface L2ResponderMaps {
  /** responder_v4 and responder_v6, picked by the key's family. */
  responders: ResponderMaps;
  interfaces: BpfMap<number, InterfaceInfo>;
  config: BpfMap<number, bigint>;
}

/** The loaded program's maps: the pinned ones it shares with every agent run, and ourMacs, which is not pinned (it lives with the program and is filled by the loading agent). */
export interface L2ResponderProgramMaps extends L2ResponderMaps {
  /** The MACs of `interfaces` as keys, for the program's "is this MAC ours" (kept in step by the datapath). */
  ourMacs: BpfMap<string, number>;
}

export class L2ResponderProgram implements Disposable {
  private closed = false;

  private constructor(
    private readonly obj: unknown,
    readonly progFd: number,
    readonly maps: L2ResponderProgramMaps,
    /** The conflict_events ring buffer (valid while this object is open). */
    readonly conflictEventsFd: number,
    private readonly pinDir: string,
  ) {}

  static load(opts: L2ResponderLoadOptions): L2ResponderProgram {
    const objectPath = opts.objectPath ?? DEFAULT_OBJECT_PATH;
    if (!existsSync(objectPath)) {
      throw new HeraldError('HERALD_BPF_LOAD', `BPF object ${objectPath} is missing (run npm run build)`);
    }
    ensurePinDir(opts.pinDir);
    const lib = libbpf();
    const obj = checkPtr('HERALD_BPF_LOAD', `open ${objectPath}`, lib.objectOpenFile(objectPath));
    try {
      for (const name of [MAP_RESPONDER_V4, MAP_RESPONDER_V6, MAP_INTERFACES, MAP_RUNTIME_CONFIG]) {
        const map = checkPtr('HERALD_BPF_LOAD', `find map ${name}`, lib.objectFindMapByName(obj, name));
        check('HERALD_BPF_LOAD', `pin path for ${name}`, lib.mapSetPinPath(map, join(opts.pinDir, name)));
        if (name === MAP_RESPONDER_V4 || name === MAP_RESPONDER_V6) check('HERALD_BPF_LOAD', 'set max entries', lib.mapSetMaxEntries(map, opts.responderMapSize));
      }
      takeLibbpfLog();
      const rc = lib.objectLoad(obj);
      if (rc < 0) throw L2ResponderProgram.explainLoadFailure(rc, opts);
      const prog = checkPtr('HERALD_BPF_LOAD', `find program ${PROGRAM_NAME}`, lib.objectFindProgramByName(obj, PROGRAM_NAME));
      const progFd = check('HERALD_BPF_LOAD', 'program fd', lib.programFd(prog));
      const fd = (name: string) =>
        check('HERALD_BPF_LOAD', `map fd ${name}`, lib.mapFd(checkPtr('HERALD_BPF_LOAD', name, lib.objectFindMapByName(obj, name))));
      const maps: L2ResponderProgramMaps = {
        responders: new ResponderMaps(
          BpfMap.fromObjectFd(MAP_RESPONDER_V4, fd(MAP_RESPONDER_V4), responderKeyCodec),
          BpfMap.fromObjectFd(MAP_RESPONDER_V6, fd(MAP_RESPONDER_V6), responderKey6Codec),
        ),
        interfaces: BpfMap.fromObjectFd(MAP_INTERFACES, fd(MAP_INTERFACES), interfacesCodec),
        config: BpfMap.fromObjectFd(MAP_RUNTIME_CONFIG, fd(MAP_RUNTIME_CONFIG), runtimeConfigCodec),
        ourMacs: BpfMap.fromObjectFd(MAP_OUR_MACS, fd(MAP_OUR_MACS), ourMacsCodec),
      };
      return new L2ResponderProgram(obj, progFd, maps, fd(MAP_CONFLICT_EVENTS), opts.pinDir);
    } catch (e) {
      lib.objectClose(obj);
      throw e;
    }
  }

  /** Turns libbpf's "couldn't reuse pinned map" into an error an operator can act on. */
  private static explainLoadFailure(rc: number, opts: L2ResponderLoadOptions): Error {
    const log = takeLibbpfLog().join('\n');
    if (/reuse pinned map|pinned map .* incompatible|couldn't reuse/i.test(log)) {
      let detail = '';
      const lib = libbpf();
      const pinned = lib.objGet(join(opts.pinDir, MAP_RESPONDER_V4));
      if (pinned >= 0) {
        const info = mapInfoByFd(pinned);
        lib.close(pinned);
        if (info.maxEntries !== opts.responderMapSize) {
          detail = `: the pinned ${MAP_RESPONDER_V4} holds ${info.maxEntries} entries, configured ${opts.responderMapSize}`;
        }
      }
      return new HeraldError(
        'HERALD_BPF_PIN_MISMATCH',
        `maps pinned in ${opts.pinDir} do not match this configuration${detail} ` +
          `(keep the old size, or remove the pins with 'herald datapath remove')`,
      );
    }
    const code = rc === -13 ? 'HERALD_BPF_VERIFIER' : 'HERALD_BPF_LOAD';
    return new HeraldError(code, `loading the L2 responder failed (errno ${-rc})${log ? `:\n${log}` : ''}`);
  }

  /**
   * Attach (or atomically replace) on tc ingress: a tcx link pinned beside
   * the maps, or a cls_bpf filter on kernels without tcx (os/tc-attach).
   */
  attach(ifindex: number): TcAttachResult {
    this.assertOpen();
    return attachTc(ifindex, this.progFd, responderTc(this.pinDir));
  }

  /** Takes the program off one interface (its link pin too). */
  detach(ifindex: number, ifname?: string): boolean {
    return detachTc(ifindex, responderTc(this.pinDir), ifname);
  }

  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    // Closing our fds does not detach the program or unpin maps: the kernel keeps
    // answering from them until the next agent replaces them.
    libbpf().objectClose(this.obj);
  }

  private assertOpen(): void {
    if (this.closed) throw new HeraldError('HERALD_STOPPED', 'L2 responder program is closed');
  }
}

export function attachedProgramId(ifindex: number): number | undefined {
  return queryTc(ifindex, responderTc());
}

/** How the responder is attached on `ifindex` (tcx link or cls_bpf filter), if at all. */
export function responderAttachedAs(ifindex: number): TcAttachMode | undefined {
  return attachedAs(ifindex, responderTc());
}

/** Removes the responder from `ifindex` (either kind; with `pinDir`, its link pin too). */
export function detach(ifindex: number, ifname?: string, pinDir?: string): boolean {
  return detachTc(ifindex, responderTc(pinDir), ifname);
}

/** Opens the pinned maps of a running (or stopped) agent, for inspection tools. */
export function openPinnedMaps(pinDir: string): L2ResponderMaps {
  const v4 = BpfMap.openPinned(join(pinDir, MAP_RESPONDER_V4), responderKeyCodec);
  const v6Path = join(pinDir, MAP_RESPONDER_V6);
  let responders: ResponderMaps | undefined;
  try {
    responders = new ResponderMaps(v4, existsSync(v6Path) ? BpfMap.openPinned(v6Path, responderKey6Codec) : undefined);
    return {
      responders,
      interfaces: BpfMap.openPinned(join(pinDir, MAP_INTERFACES), interfacesCodec),
      config: BpfMap.openPinned(join(pinDir, MAP_RUNTIME_CONFIG), runtimeConfigCodec),
    };
  } catch (e) {
    if (responders) responders.dispose();
    else v4.dispose();
    throw e;
  }
}
