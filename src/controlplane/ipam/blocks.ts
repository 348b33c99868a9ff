/**
 * Pool blocks for LB-IPAM as inclusive bigint ranges (addresses are parsed
 * and formatted by `core/addr.ts`), and `AddressSet`, a sorted set of merged
 * intervals that answers "lowest free address in [lo, hi]" in
 * O(log n) without ever enumerating a block (a /64 is as cheap as a /30).
 */
import { cidrRange, formatAddr, mustParseIp, parseCidr, rangesOverlap, toAddr, type Addr, type IpFamily } from '../../core/addr.js';
import type { PoolBlock } from '../../intent/index.js';

/** One pool block, compiled. */
export interface Block {
  readonly family: IpFamily;
  readonly first: bigint;
  readonly last: bigint;
  /** Bounds for new allocations: first/last shrunk by one each when they are reserved. */
  readonly lo: bigint;
  readonly hi: bigint;
  /** Number of reserved addresses (0, or 2 for `allowFirstLastIPs: No` on a CIDR of ≥ 4 addresses). */
  readonly reserved: bigint;
  /** Cilium's notation for the range, "from - to" (used in conflict messages). */
  readonly label: string;
}

/**
 * Compiles a parsed block. `allowFirstLastIPs: No` reserves the first and
 * last address of CIDRs with at least 4 addresses only (Cilium skips /31,
 * /32, /127, /128, where it would reserve everything); ranges never reserve.
 */
export function compileBlock(block: PoolBlock, allowFirstLastIPs: boolean): Block {
  let first: bigint;
  let last: bigint;
  if (block.type === 'cidr') {
    const parsed = parseCidr(block.cidr);
    // The intent layer has already validated the CIDR; a failure here is a bug.
    if (!parsed.ok) throw new Error(`invalid CIDR ${block.cidr}: ${parsed.reason}`);
    ({ first, last } = cidrRange(parsed.cidr));
  } else {
    first = toAddr(mustParseIp(block.start)).value;
    last = toAddr(mustParseIp(block.stop)).value;
  }
  const reserve = block.type === 'cidr' && !allowFirstLastIPs && last - first >= 3n;
  const family = block.family;
  return {
    family,
    first,
    last,
    lo: reserve ? first + 1n : first,
    hi: reserve ? last - 1n : last,
    reserved: reserve ? 2n : 0n,
    label: `${formatAddr({ family, value: first })} - ${formatAddr({ family, value: last })}`,
  };
}

export function blockSize(block: Block): bigint {
  return block.last - block.first + 1n;
}

export function blockContains(block: Block, addr: Addr): boolean {
  return block.family === addr.family && addr.value >= block.first && addr.value <= block.last;
}

/** Whether `addr` is one of the block's reserved first/last addresses. */
export function isReserved(block: Block, addr: Addr): boolean {
  return block.reserved > 0n && blockContains(block, addr) && (addr.value === block.first || addr.value === block.last);
}

export function blocksOverlap(a: Block, b: Block): boolean {
  return rangesOverlap(a, b);
}

/**
 * A set of addresses of one family as sorted, disjoint, non-adjacent
 * intervals. Sequential allocation keeps it at one interval; lookups are a
 * binary search.
 */
export class AddressSet {
  readonly #starts: bigint[] = [];
  readonly #ends: bigint[] = [];

  /** Index of the last interval starting at or before `v`, or -1. */
  #floor(v: bigint): number {
    let lo = 0;
    let hi = this.#starts.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if ((this.#starts[mid] as bigint) <= v) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  }

  has(v: bigint): boolean {
    const i = this.#floor(v);
    return i >= 0 && (this.#ends[i] as bigint) >= v;
  }

  add(v: bigint): void {
    const i = this.#floor(v);
    if (i >= 0 && (this.#ends[i] as bigint) >= v) return;
    const joinsLeft = i >= 0 && (this.#ends[i] as bigint) + 1n === v;
    const joinsRight = i + 1 < this.#starts.length && (this.#starts[i + 1] as bigint) - 1n === v;
    if (joinsLeft && joinsRight) {
      this.#ends[i] = this.#ends[i + 1] as bigint;
      this.#starts.splice(i + 1, 1);
      this.#ends.splice(i + 1, 1);
    } else if (joinsLeft) {
      this.#ends[i] = v;
    } else if (joinsRight) {
      this.#starts[i + 1] = v;
    } else {
      this.#starts.splice(i + 1, 0, v);
      this.#ends.splice(i + 1, 0, v);
    }
  }

  /** Removes `v` (nothing when absent), splitting its interval when `v` lies inside. */
  delete(v: bigint): void {
    const i = this.#floor(v);
    if (i < 0) return;
    const start = this.#starts[i] as bigint;
    const end = this.#ends[i] as bigint;
    if (end < v) return;
    if (start === end) {
      this.#starts.splice(i, 1);
      this.#ends.splice(i, 1);
    } else if (v === start) {
      this.#starts[i] = v + 1n;
    } else if (v === end) {
      this.#ends[i] = v - 1n;
    } else {
      this.#ends[i] = v - 1n;
      this.#starts.splice(i + 1, 0, v + 1n);
      this.#ends.splice(i + 1, 0, end);
    }
  }

  /** The lowest address in [lo, hi] that is not in the set, if any. */
  firstFree(lo: bigint, hi: bigint): bigint | undefined {
    if (lo > hi) return undefined;
    const i = this.#floor(lo);
    // Intervals never touch, so the address after the one covering `lo` is free.
    const candidate = i >= 0 && (this.#ends[i] as bigint) >= lo ? (this.#ends[i] as bigint) + 1n : lo;
    return candidate <= hi ? candidate : undefined;
  }

  /** Number of intervals (for tests: sequential allocation must keep this small). */
  get intervals(): number {
    return this.#starts.length;
  }
}
