/**
 * The two responder maps (responder_v4 for ARP, responder_v6 for NDP) as one
 * keyed by address: every reader and writer picks the map by the key's family,
 * so nothing above this file branches on it.
 */
import type { Disposable } from '../../core/disposable.js';
import { isIpv4 } from '../../core/addr.js';
import type { BpfMap, BpfMapInfo, UpdateMode } from '../../os/bpf-map.js';
import type { ResponderKey, ResponderStats } from './layout.js';

type Map1 = BpfMap<ResponderKey, ResponderStats>;

export class ResponderMaps implements Disposable {
  constructor(
    readonly v4: Map1,
    /** Absent only when inspecting the pins of an agent that predates NDP. */
    readonly v6: Map1 | undefined,
  ) {}

  private of(ip: string): Map1 | undefined {
    return isIpv4(ip) ? this.v4 : this.v6;
  }

  /** Capacity and sizes of responder_v4 (responder_v6 is created with the same capacity). */
  info(): BpfMapInfo {
    return this.v4.info();
  }

  lookup(key: ResponderKey): ResponderStats | undefined {
    return this.of(key.ip)?.lookup(key);
  }

  update(key: ResponderKey, value: ResponderStats, mode: UpdateMode = 'any'): void {
    const map = this.of(key.ip);
    if (!map) throw new Error(`no IPv6 responder map to write ${key.ip} to`);
    map.update(key, value, mode);
  }

  delete(key: ResponderKey): boolean {
    return this.of(key.ip)?.delete(key) ?? false;
  }

  keys(): ResponderKey[] {
    return [...this.v4.keys(), ...(this.v6?.keys() ?? [])];
  }

  entries(): Array<[ResponderKey, ResponderStats]> {
    return [...this.v4.entries(), ...(this.v6?.entries() ?? [])];
  }

  dispose(): void {
    this.v4.dispose();
    this.v6?.dispose();
  }
}
