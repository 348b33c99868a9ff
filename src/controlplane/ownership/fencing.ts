/**
 * Wire-verified fencing, the store-independent half (issue 9's evidence
 * rules, shared by the etcd and the Kubernetes stores):
 *
 * - `watchTargets`: which IP of every other owner a candidate watches on the
 *   wire (OwnerWatch, edges.ts): one per node, an IPv4 one when it owns any
 *   (one ARP socket serves them all), the lowest address, and an IP its owner
 *   is releasing only when the node owns nothing else we could take (silence
 *   about an IP being given up says nothing about its node).
 * - `SilenceVerdicts`: what a silence report proves once the store has been
 *   read again. Silence about an IP its node no longer holds proves nothing
 *   (a releasing owner goes silent first, then lets go); silence about an IP
 *   its owner has marked as releasing proves nothing for `graceMs` (our own
 *   clock, from the first such verdict) — a marker still standing after it is
 *   fenced unless the IP was heard answering since (`OwnerWatch.stillSilent`).
 *
 * What a fence is (revoke an etcd lease, delete a node Lease) stays with each
 * store; that only silence gathered while the candidate ran on time counts is
 * the OwnerWatch's rule (datapath/owner-watch.ts).
 */
import { monotonicMs, type Clock, type TimerHandle } from '../../core/clock.js';
import { isIpv4 } from '../../core/addr.js';
import type { Logger } from '../../core/logger.js';
import type { OwnerWatch, WatchTarget } from './edges.js';

/** An IP another node holds, and whether that node has marked it as releasing. */
export interface HeldElsewhere {
  readonly ip: string;
  readonly node: string;
  readonly marked: boolean;
}

/**
 * One target per other owner among the IPs we are a candidate for (the first
 * candidate interface of the IP is the one probed from). One pass, no sort of
 * every owner (10k owners).
 */
export function watchTargets(held: Iterable<HeldElsewhere>, candidates: ReadonlyMap<string, readonly string[]>): WatchTarget[] {
  const perNode = new Map<string, WatchTarget & { v4: boolean; marked: boolean }>();
  for (const { ip, node, marked } of held) {
    const iface = candidates.get(ip)?.[0];
    if (!iface) continue;
    const v4 = isIpv4(ip);
    const best = perNode.get(node);
    const better = !best || (best.marked && !marked) || (best.marked === marked && ((v4 && !best.v4) || (v4 === best.v4 && ip.localeCompare(best.ip) < 0)));
    if (better) perNode.set(node, { node, ip, iface, v4, marked });
  }
  return [...perNode.values()].map(({ node, ip, iface }) => ({ node, ip, iface }));
}

/** The store's answer, read after the silence report: who holds the IP now, and whether that holder marked it releasing. */
export interface HeldNow {
  readonly holder: string | undefined;
  /** A releasing marker naming the holder, valid by the store's rules (on the same lease / the same object). */
  readonly releasing: boolean;
}

export const RELEASE_GRACE_MS = 3000;

export class SilenceVerdicts {
  /** "node|ip" → monotonic ms of our first silence verdict about a marked IP, and the re-check timer. */
  private readonly verdicts = new Map<string, { firstMs: number; timer: TimerHandle }>();

  constructor(
    private readonly deps: {
      clock: Clock;
      log: Logger;
      watch?: OwnerWatch;
      /** Called again when the grace of a marked IP has run out (the store decides afresh). */
      again: (node: string, ip: string) => void;
    },
    private readonly graceMs = RELEASE_GRACE_MS,
  ) {}

  /** True: `node` went silent about `ip` while still holding it — fence it. */
  judge(node: string, ip: string, now: HeldNow): boolean {
    const key = `${node}|${ip}`;
    if (now.holder !== node) {
      this.drop(key);
      this.deps.log.info({ node, ip, now: now.holder ?? null }, 'owner went silent about an IP it no longer holds: not fenced');
      return false;
    }
    if (!now.releasing) {
      this.drop(key);
      return true;
    }
    // Marked by its owner: a release in progress, not a death — unless it has not finished within the grace.
    // A crashed releasing owner is no safer for it (its supervisor frees it), nor a frozen one (its lease runs out).
    const at = monotonicMs(this.deps.clock);
    const seen = this.verdicts.get(key);
    if (!seen) {
      const timer = this.deps.clock.setTimeout(() => this.deps.again(node, ip), this.graceMs);
      this.verdicts.set(key, { firstMs: at, timer });
      this.deps.log.info({ node, ip, graceMs: this.graceMs }, 'owner went silent about an IP it is releasing: not fenced');
      return false;
    }
    if (at - seen.firstMs < this.graceMs) return false;
    this.verdicts.delete(key);
    // Heard answering since (a release called off): no evidence any more.
    if (this.deps.watch?.stillSilent?.(node, ip) === false) return false;
    this.deps.log.warn({ node, ip, afterMs: Math.round(at - seen.firstMs) }, 'owner marked an IP as releasing and did not release it within the grace: fencing');
    return true;
  }

  /** `ip` is no longer held by anyone we were waiting out (its release finished): no re-check. */
  released(ip: string): void {
    if (this.verdicts.size === 0) return;
    for (const key of [...this.verdicts.keys()]) if (key.endsWith(`|${ip}`)) this.drop(key);
  }

  private drop(key: string): void {
    this.verdicts.get(key)?.timer.cancel();
    this.verdicts.delete(key);
  }

  dispose(): void {
    for (const v of this.verdicts.values()) v.timer.cancel();
    this.verdicts.clear();
  }
}
