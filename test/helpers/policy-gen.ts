/** Seeded random rule sets and packets for the policy property tests and bench. */
import { FAMILY_WIDTH, hostMask, PROTO, type Family, type Packet, type PeerBlock, type PolicyRule, type PortRange, type Prefix } from '../../src/controlplane/policy/model.js';

export type Rng = () => number;

/** mulberry32: small, seeded, good enough for test inputs. */
export function rng(seed: number): Rng {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const int = (r: Rng, lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1));
export const pick = <T>(r: Rng, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

export function randomBits(r: Rng, bits: number): bigint {
  let v = 0n;
  for (let i = 0; i < bits; i += 16) v = (v << 16n) | BigInt(int(r, 0, 0xffff));
  return v & ((1n << BigInt(bits)) - 1n);
}

/** Documentation ranges as roots, so random prefixes overlap often. */
const ROOTS: Record<Family, Prefix[]> = {
  4: [
    { family: 4, addr: 0xc0000200n, len: 24 },
    { family: 4, addr: 0xc6336400n, len: 24 },
    { family: 4, addr: 0xcb007100n, len: 24 },
  ],
  6: [{ family: 6, addr: 0x20010db8n << 96n, len: 32 }],
};

function within(r: Rng, outer: Prefix, len: number): Prefix {
  const width = FAMILY_WIDTH[outer.family];
  const bits = randomBits(r, width) & hostMask(outer.family, outer.len) & ~hostMask(outer.family, len);
  return { family: outer.family, len, addr: outer.addr | bits };
}

function shorter(p: Prefix, len: number): Prefix {
  return { family: p.family, len, addr: p.addr & ~hostMask(p.family, len) };
}

export function randomPrefix(r: Rng, family: Family, pool: Prefix[]): Prefix {
  const width = FAMILY_WIDTH[family];
  const own = pool.filter((p) => p.family === family);
  const roll = r();
  let p: Prefix;
  if (own.length > 0 && roll < 0.45) {
    const base = pick(r, own);
    p = within(r, base, int(r, base.len, Math.min(width, base.len + 8)));
  } else if (own.length > 0 && roll < 0.6) {
    const base = pick(r, own);
    p = shorter(base, int(r, Math.max(0, base.len - 8), base.len));
  } else if (roll < 0.65) {
    p = { family, addr: 0n, len: 0 };
  } else {
    const root = pick(r, ROOTS[family]);
    p = within(r, root, int(r, root.len, width));
  }
  pool.push(p);
  return p;
}

/** ICMP types the generator uses (ND 133-137 left out: the datapath always passes Neighbor Discovery). */
const ICMP_TYPES: Record<number, number[]> = { [PROTO.ICMP]: [0, 3, 8, 11], [PROTO.ICMPV6]: [1, 2, 128, 129] };

function randomPorts(r: Rng): PortRange[] | undefined {
  if (r() < 0.35) return undefined;
  const n = int(r, 1, 2);
  const out: PortRange[] = [];
  if (r() < 0.2) {
    // An `icmps` rule: ICMP / ICMPv6 types (never mixed with ports, as Cilium).
    for (let i = 0; i < n; i++) {
      const proto = pick(r, [PROTO.ICMP, PROTO.ICMPV6]);
      const type = pick(r, ICMP_TYPES[proto]!);
      out.push({ proto, lo: type, hi: type });
    }
    return out;
  }
  for (let i = 0; i < n; i++) {
    const lo = r() < 0.2 ? 1 : int(r, 1, 65535);
    const hi = r() < 0.4 ? lo : Math.min(65535, lo + int(r, 0, r() < 0.5 ? 20 : 5000));
    out.push({ proto: pick(r, [PROTO.TCP, PROTO.UDP, PROTO.SCTP]), lo, hi });
  }
  return out;
}

export function randomRules(r: Rng, pool: Prefix[], firstId = 1): PolicyRule[] {
  const n = int(r, 1, 6);
  const rules: PolicyRule[] = [];
  for (let i = 0; i < n; i++) {
    const peers: PeerBlock[] = [];
    for (let j = int(r, 1, 3); j > 0; j--) {
      const family: Family = r() < 0.6 ? 4 : 6;
      const cidr = randomPrefix(r, family, pool);
      const except: Prefix[] = [];
      for (let k = r() < 0.5 ? int(r, 1, 3) : 0; k > 0; k--) {
        const e = within(r, cidr, int(r, cidr.len, Math.min(FAMILY_WIDTH[family], cidr.len + 10)));
        except.push(e);
        pool.push(e);
      }
      peers.push({ cidr, except });
    }
    const ports = randomPorts(r);
    rules.push({ id: firstId + i, verdict: r() < 0.3 ? 'deny' : 'allow', peers, ...(ports ? { ports } : {}), origin: `random ${firstId + i}` });
  }
  return rules;
}

export function randomPacket(r: Rng, pool: readonly Prefix[], rules: readonly PolicyRule[]): Packet & { fragment?: boolean } {
  const family: Family = r() < 0.55 ? 4 : 6;
  const own = pool.filter((p) => p.family === family);
  const width = FAMILY_WIDTH[family];
  let src: bigint;
  if (own.length > 0 && r() < 0.8) {
    const p = pick(r, own);
    const host = randomBits(r, width) & hostMask(family, p.len);
    // Often the prefix's first or last address: edges are where off-by-ones live.
    const edge = r();
    src = p.addr | (edge < 0.15 ? 0n : edge < 0.3 ? hostMask(family, p.len) : host);
  } else {
    src = randomBits(r, width);
  }
  const proto = pick(r, [PROTO.TCP, PROTO.TCP, PROTO.UDP, PROTO.SCTP, family === 4 ? PROTO.ICMP : PROTO.ICMPV6]);
  if (proto === PROTO.ICMP || proto === PROTO.ICMPV6) {
    // The L4 key of ICMP is its type.
    if (family === 4 && r() < 0.05) return { family, src, proto, fragment: true };
    return { family, src, proto, dport: pick(r, [...ICMP_TYPES[proto]!, proto === PROTO.ICMP ? 13 : 130]) };
  }
  const ranges = rules.flatMap((x) => x.ports ?? []);
  let dport: number;
  if (ranges.length > 0 && r() < 0.7) {
    const pr = pick(r, ranges);
    dport = Math.max(1, Math.min(65535, pick(r, [pr.lo, pr.hi, pr.lo - 1, pr.hi + 1, int(r, pr.lo, pr.hi)])));
  } else {
    dport = int(r, 1, 65535);
  }
  if (family === 4 && r() < 0.05) return { family, src, proto, fragment: true };
  return { family, src, proto, dport };
}
