/**
 * The conflict defender's rate limiter, with a manual clock: the program's
 * counter and event stream are simulated the way bpf/l2_responder.bpf.c
 * produces them (every claim counted, at most one event per entry per 100 ms).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import type { Logger } from '../../src/core/logger.js';
import { ConflictDefender, type ConflictDefenceOptions } from '../../src/datapath/conflict-defence.js';
import type { GarpTarget } from '../../src/datapath/garp.js';
import { ManualClock } from '../helpers/manual-clock.js';

const OUR_MAC = '02:00:5e:00:53:0a';
const FOREIGN = '02:00:5e:00:53:66';
const IP = '198.51.100.7';
const IFINDEX = 4;
const REPORT_GAP_MS = 100; // CONFLICT_REPORT_GAP_NS in the program

class Harness {
  readonly clock = new ManualClock();
  readonly counters = new Map<string, bigint>();
  readonly lastReport = new Map<string, number>();
  readonly sent: Array<{ at: number; target: GarpTarget }> = [];
  readonly warnings: Array<Record<string, unknown>> = [];
  readonly defender: ConflictDefender;

  constructor(opts: ConflictDefenceOptions = { intervalMs: 1000 }) {
    this.clock.advance(10_000); // monotonic time well past zero, as on a real host
    const log: Logger = {
      debug() {},
      info() {},
      warn: (obj) => void this.warnings.push(obj as Record<string, unknown>),
      error() {},
      child: () => log,
    };
    this.counters.set(`${IP}|${IFINDEX}`, 0n);
    this.defender = new ConflictDefender(
      {
        clock: this.clock,
        log,
        conflictCount: (k) => this.counters.get(`${k.ip}|${k.ifindex}`),
        interfaceMac: (ifindex) => (ifindex === IFINDEX ? OUR_MAC : undefined),
        announce: (target) => void this.sent.push({ at: this.clock.now(), target }),
        interfaceName: () => 'eth0',
      },
      opts,
    );
  }

  /** One foreign frame claiming `ip`, as the program handles it. */
  claim(ip = IP, mac = FOREIGN, op = 1): void {
    const k = `${ip}|${IFINDEX}`;
    const c = this.counters.get(k);
    if (c === undefined) return; // not an entry: the program neither counts nor reports
    this.counters.set(k, c + 1n);
    const now = this.clock.now();
    const last = this.lastReport.get(k);
    if (last !== undefined && now - last < REPORT_GAP_MS) return;
    this.lastReport.set(k, now);
    this.defender.onConflict({ family: ip.includes(':') ? 6 : 4, ip, ifindex: IFINDEX, mac, op, ktimeNs: this.clock.monotonicNs() });
  }

  defenceTimes(ip = IP): number[] {
    return this.sent.filter((s) => s.target.ip === ip).map((s) => s.at);
  }
}

test('an IPv6 claim (a foreign Neighbor Advertisement) is defended like an ARP one and recorded as an advertisement', () => {
  const h = new Harness();
  const V6 = '2001:db8::7';
  h.counters.set(`${V6}|${IFINDEX}`, 0n);
  h.claim(V6, FOREIGN, 136);
  assert.deepEqual(h.sent.map((s) => s.target), [{ ip: V6, ifindex: IFINDEX, mac: OUR_MAC }]);
  const [r] = h.defender.records();
  assert.equal(r!.ip, V6);
  assert.equal(r!.op, 'advertisement');
});

test('a first claim is defended at once, from our MAC on the interface it arrived on', () => {
  const h = new Harness();
  const t0 = h.clock.now();
  h.claim();
  assert.deepEqual(h.sent, [{ at: t0, target: { ip: IP, ifindex: IFINDEX, mac: OUR_MAC } }]);
  assert.equal(h.warnings.length, 1);
  assert.equal(h.warnings[0]!.foreignMac, FOREIGN);
  const [r] = h.defender.records();
  assert.equal(r!.foreignMac, FOREIGN);
  assert.equal(r!.defences, 1);
  assert.equal(r!.claims, 1);
  assert.equal(r!.interface, 'eth0');
});

test('claims within the interval get one trailing defence at the end of it, not one each', () => {
  const h = new Harness({ intervalMs: 1000 });
  const t0 = h.clock.now();
  h.claim();
  for (let i = 0; i < 5; i++) {
    h.clock.advance(150);
    h.claim();
  }
  assert.equal(h.sent.length, 1, 'still rate-limited');
  h.clock.advance(5000);
  assert.deepEqual(h.defenceTimes(), [t0, t0 + 1000]);
  assert.equal(h.clock.pending, 0, 'quiet after the trailing check');
  assert.equal(h.warnings.length, 2, 'one log line per defence');
  assert.equal(h.warnings[1]!.claimsSinceLastLine, 5, 'the line counts the claims it stands for');
});

test('a flood gets at most one defence per interval, and the last claim is always answered', () => {
  const h = new Harness({ intervalMs: 1000 });
  const start = h.clock.now();
  const floodMs = 10_000;
  let lastClaim = start;
  for (let t = 0; t < floodMs; t++) {
    h.claim(); // 1,000 claims per second
    lastClaim = h.clock.now();
    h.clock.advance(1);
  }
  h.clock.advance(5000);
  const times = h.defenceTimes();
  assert.ok(times.length <= floodMs / 1000 + 2, `${times.length} defences for a ${floodMs} ms flood`);
  for (let i = 1; i < times.length; i++) assert.ok(times[i]! - times[i - 1]! >= 1000, `defences ${times[i - 1]} and ${times[i]} too close`);
  const last = times[times.length - 1]!;
  assert.ok(last > lastClaim, 'a defence follows the last claim, so caches end at our MAC');
  assert.ok(last - lastClaim <= 1000, 'within one interval of it');
  assert.equal(h.clock.pending, 0);
});

test('claims the program counted but did not report are still defended by the trailing check', () => {
  const h = new Harness({ intervalMs: 1000 });
  const t0 = h.clock.now();
  h.claim();
  h.clock.advance(20);
  h.claim(); // within the program's 100 ms report gap: counted only
  assert.equal(h.defender.stats.events, 1);
  h.clock.advance(2000);
  assert.deepEqual(h.defenceTimes(), [t0, t0 + 1000]);
});

test('a claim after a quiet interval is defended at once again', () => {
  const h = new Harness({ intervalMs: 1000 });
  h.claim();
  h.clock.advance(3000);
  const t1 = h.clock.now();
  h.claim(IP, '02:00:5e:00:53:77', 2);
  assert.equal(h.defenceTimes().at(-1), t1);
  const [r] = h.defender.records();
  assert.equal(r!.foreignMac, '02:00:5e:00:53:77', 'the record shows the latest claimant');
  assert.equal(r!.op, 'reply');
  assert.equal(r!.defences, 2);
});

test('an IP the node no longer answers for is not defended (the claimant may be its new owner)', () => {
  const h = new Harness({ intervalMs: 1000 });
  h.claim();
  h.clock.advance(100);
  h.claim();
  h.counters.delete(`${IP}|${IFINDEX}`); // withdrawn before the trailing check
  h.clock.advance(5000);
  assert.equal(h.sent.length, 1);
  assert.equal(h.clock.pending, 0);
});

test('IPs are limited independently', () => {
  const h = new Harness({ intervalMs: 1000 });
  const other = '198.51.100.8';
  h.counters.set(`${other}|${IFINDEX}`, 0n);
  h.claim(IP);
  h.claim(other);
  assert.deepEqual(
    h.sent.map((s) => s.target.ip),
    [IP, other],
  );
});

test('an interval below 100 ms is refused with a coded error', () => {
  assert.throws(
    () => new Harness({ intervalMs: 10 }),
    (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && /at least 100 ms/.test((e as Error).message),
  );
});

test('dispose cancels pending checks', () => {
  const h = new Harness({ intervalMs: 1000 });
  h.claim();
  h.clock.advance(10);
  h.claim();
  assert.equal(h.clock.pending, 1);
  h.defender.dispose();
  assert.equal(h.clock.pending, 0);
  h.claim();
  h.clock.advance(5000);
  assert.equal(h.sent.length, 1);
});
