/**
 * Pools as LB-IPAM uses them: compiled blocks, selector, and the
 * conflict/disabled state that decides whether a pool hands out new IPs.
 *
 * Conflicts (cilium:operator/pkg/lbipam/lbipam.go settleConflicts): pools
 * are visited oldest first (creationTimestamp; unset = newest; ties by name).
 * A pool conflicts when two of its own blocks overlap, or when a block
 * overlaps one of an older pool that is not itself conflicting; the
 * conflicting pool's ranges are closed to new allocations until the overlap
 * ends. Cilium's result depends on event history and map order; this is the
 * same rule made a pure function of the current pools.
 */
import { matchesSelector, type IPPoolManifest, type Labels, type LabelSelector } from '../../intent/index.js';
import type { Addr } from '../../core/addr.js';
import { blockContains, blocksOverlap, compileBlock, type Block } from './blocks.js';
import { byString } from '../../core/order.js';

export interface PoolConflict {
  /** Cilium's message: `Pool conflicts since range '<A>' overlaps range '<B>' from IP Pool '<X>'`. */
  readonly message: string;
  readonly otherPool: string;
}

export interface PoolView {
  readonly name: string;
  readonly selector: LabelSelector | undefined;
  readonly blocks: readonly Block[];
  readonly disabled: boolean;
  readonly conflict: PoolConflict | undefined;
  /** Open for new allocations: neither disabled nor conflicting. */
  readonly usable: boolean;
}

export function poolMatches(pool: PoolView, labels: Labels): boolean {
  return matchesSelector(pool.selector, labels);
}

/** The first block of `pool` containing `addr`. */
export function blockOf(pool: PoolView, addr: Addr): Block | undefined {
  return pool.blocks.find((b) => blockContains(b, addr));
}

function conflictMessage(own: Block, other: Block, otherPool: string): PoolConflict {
  return {
    message: `Pool conflicts since range '${own.label}' overlaps range '${other.label}' from IP Pool '${otherPool}'`,
    otherPool,
  };
}

function internalConflict(name: string, blocks: readonly Block[]): PoolConflict | undefined {
  for (let i = 0; i < blocks.length; i++) {
    for (let j = i + 1; j < blocks.length; j++) {
      const a = blocks[i] as Block;
      const b = blocks[j] as Block;
      if (blocksOverlap(a, b)) return conflictMessage(a, b, name);
    }
  }
  return undefined;
}

function crossConflict(own: readonly Block[], other: PoolView): PoolConflict | undefined {
  for (const a of own) {
    for (const b of other.blocks) if (blocksOverlap(a, b)) return conflictMessage(a, b, other.name);
  }
  return undefined;
}

function createdMs(pool: IPPoolManifest): number {
  const t = pool.metadata.creationTimestamp;
  const ms = t === undefined ? Number.NaN : Date.parse(t);
  return Number.isNaN(ms) ? Number.POSITIVE_INFINITY : ms;
}

const byName = byString<{ name: string }>((p) => p.name);

/**
 * Compiles every pool and settles conflicts. The result is in pool name
 * order, which is also the order pools are tried in for new allocations.
 */
export function compilePools(pools: Iterable<IPPoolManifest>): PoolView[] {
  const byAge = [...pools]
    .map((p) => ({ name: p.metadata.name, created: createdMs(p), manifest: p }))
    .sort((a, b) => (a.created !== b.created ? (a.created < b.created ? -1 : 1) : byName(a, b)));
  const settled: PoolView[] = [];
  for (const { name, manifest } of byAge) {
    const blocks = manifest.spec.blocks.map((b) => compileBlock(b, manifest.spec.allowFirstLastIPs !== 'No'));
    let conflict = internalConflict(name, blocks);
    for (const older of settled) {
      if (conflict) break;
      if (!older.conflict) conflict = crossConflict(blocks, older);
    }
    const disabled = manifest.spec.disabled;
    settled.push({
      name,
      selector: manifest.spec.serviceSelector,
      blocks,
      disabled,
      conflict,
      usable: !disabled && conflict === undefined,
    });
  }
  return settled.sort(byName);
}
