/**
 * Address arithmetic for LB-IPAM: addresses as bigint (one code path for
 * IPv4 and IPv6), pool blocks as inclusive ranges, and `AddressSet`, a sorted
 * set of merged intervals that answers "lowest free address in [lo, hi]" in
 * O(log n) without ever enumerating a block (a /64 is as cheap as a /30).
 */
import { parseCidr, parseIp, type IpFamily, type PoolBlock } from '../../intent/index.js';

/** One address: family and numeric value. */
export interface Addr {
  readonly family: IpFamily;
  readonly value: bigint;
}

const BITS: Readonly<Record<IpFamily, bigint>> = { IPv4: 32n, IPv6: 128n };

const IPV4 = /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/;
const HEXTET = /^[0-9a-fA-F]{1,4}$/;

function parseV4(text: string): bigint | undefined {
  const m = IPV4.exec(text);
  if (!m) return undefined;
  let v = 0;
  for (let i = 1; i <= 4; i++) {
    const octet = Number(m[i]);
    if (octet > 255) return undefined;
    v = v * 256 + octet;
  }
  return BigInt(v);
}

/** The RFC 4291 text forms (`::`, embedded dotted quad); `undefined` for anything else. */
function parseV6(text: string): bigint | undefined {
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const words: number[][] = [];
  for (let h = 0; h < halves.length; h++) {
    const half = halves[h] as string;
    const parts = half === '' ? [] : half.split(':');
    const out: number[] = [];
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as string;
      if (HEXTET.test(part)) {
        out.push(parseInt(part, 16));
      } else if (i === parts.length - 1 && h === halves.length - 1) {
        const v4 = parseV4(part);
        if (v4 === undefined) return undefined;
        out.push(Number(v4 >> 16n), Number(v4 & 0xffffn));
      } else {
        return undefined;
      }
    }
    words.push(out);
  }
  const [head = [], tail = []] = words;
  const count = head.length + tail.length;
  if (halves.length === 2 ? count > 7 : count !== 8) return undefined;
  const all = [...head, ...new Array<number>(8 - count).fill(0), ...tail];
  let v = 0n;
  for (const w of all) v = (v << 16n) | BigInt(w);
  return v;
}

/** Parses an address (strictly, as the intent layer does); `undefined` if it is not one. */
export function addrOf(text: string): Addr | undefined {
  // A fast path for the usual forms (the intent parser pays for an exception on every IPv6 text).
  const v4 = parseV4(text);
  if (v4 !== undefined) return { family: 'IPv4', value: v4 };
  if (text.includes(':') && !text.includes('%')) {
    const v6 = parseV6(text);
    if (v6 !== undefined) return { family: 'IPv6', value: v6 };
  }
  const parsed = parseIp(text);
  if (!parsed) return undefined;
  let value = 0n;
  for (const byte of parsed.bytes) value = (value << 8n) | BigInt(byte);
  return { family: parsed.family, value };
}

/** Canonical text of an address (the same form `normalizeIp` gives). */
export function formatAddr(addr: Addr): string {
  if (addr.family === 'IPv4') {
    const v = Number(addr.value);
    return `${(v >>> 24) & 255}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`;
  }
  return formatIpv6(addr.value);
}

/** RFC 5952: lowercase, no leading zeros, the longest run (≥ 2) of zero hextets as `::`, IPv4-mapped as `::ffff:a.b.c.d`. */
function formatIpv6(value: bigint): string {
  if (value >> 32n === 0xffffn) return `::ffff:${formatAddr({ family: 'IPv4', value: value & 0xffffffffn })}`;
  const words: number[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) words.push(Number((value >> shift) & 0xffffn));
  let bestAt = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      bestAt = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (ws: number[]): string => ws.map((w) => w.toString(16)).join(':');
  if (bestAt < 0) return hex(words);
  return `${hex(words.slice(0, bestAt))}::${hex(words.slice(bestAt + bestLen))}`;
}

/** IPv4 before IPv6, then numeric order. */
export function compareAddrs(a: Addr, b: Addr): number {
  if (a.family !== b.family) return a.family === 'IPv4' ? -1 : 1;
  return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
}

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
    first = mustAddr(parsed.cidr.network.text).value;
    last = first + (1n << (BITS[block.family] - BigInt(parsed.cidr.prefix))) - 1n;
  } else {
    first = mustAddr(block.start).value;
    last = mustAddr(block.stop).value;
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

function mustAddr(text: string): Addr {
  const addr = addrOf(text);
  if (!addr) throw new Error(`invalid address ${text}`);
  return addr;
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
  return a.family === b.family && a.first <= b.last && b.first <= a.last;
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
