import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import { Fifo, GarpAnnouncer, garpDefaults, type FrameSender } from '../../src/datapath/garp.js';
import { parseArpFrame } from '../../src/net/arp.js';
import { parseNdFrame } from '../../src/net/ndp.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { recordingLogger } from '../helpers/recording-logger.js';

class RecordingSender implements FrameSender {
  sent: Array<{ ifindex: number; at: number; op: number; ip: string }> = [];
  failNext = 0;
  constructor(private readonly clock: ManualClock) {}
  send(ifindex: number, frame: Buffer): void {
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('ENETDOWN');
    }
    const p = parseArpFrame(frame)!;
    this.sent.push({ ifindex, at: this.clock.now(), op: p.op, ip: p.spa });
  }
}

const target = { ip: '198.51.100.7', ifindex: 4, mac: '02:00:5e:00:53:0a' };

test('default burst: at once, then 4 more rounds 1 s apart, each a request and a reply', () => {
  const clock = new ManualClock();
  const sender = new RecordingSender(clock);
  assert.deepEqual(garpDefaults, { count: 5, intervalMs: 1000 });
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, garpDefaults);
  garp.announce(target);
  assert.equal(sender.sent.length, 2, 'the first round goes out synchronously');
  clock.advance(10_000);
  assert.deepEqual(
    sender.sent.map((s) => [s.at, s.op]),
    [0, 1000, 2000, 3000, 4000].flatMap((t) => [[t, 1], [t, 2]]),
  );
  assert.equal(garp.stats.sent, 10);
  assert.equal(garp.activeBursts, 0);
  assert.equal(clock.pending, 0);
});

test('a failed send is counted and the burst goes on', () => {
  const clock = new ManualClock();
  const sender = new RecordingSender(clock);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 3, intervalMs: 500 });
  sender.failNext = 3;
  garp.announce(target);
  clock.advance(2000);
  assert.equal(garp.stats.failed, 3);
  assert.equal(garp.stats.sent, 3);
  assert.deepEqual(garp.perIp.get(target.ip), { sent: 3, failed: 3 });
});

test('announcing again restarts the burst; cancel stops it', () => {
  const clock = new ManualClock();
  const sender = new RecordingSender(clock);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 3, intervalMs: 1000 });
  garp.announce(target);
  clock.advance(1500);
  garp.announce(target); // e.g. ownership moved away and back
  clock.advance(5000);
  assert.deepEqual(sender.sent.filter((s) => s.op === 1).map((s) => s.at), [0, 1000, 1500, 2500, 3500]);
  garp.announce(target);
  garp.cancel(target.ip, target.ifindex);
  clock.advance(5000);
  assert.equal(sender.sent.filter((s) => s.op === 1).length, 6);
  assert.equal(garp.activeBursts, 0);
});

test('count 0 disables gratuitous ARP', () => {
  const clock = new ManualClock();
  const sender = new RecordingSender(clock);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 0, intervalMs: 1000 });
  garp.announce(target);
  assert.equal(sender.sent.length, 0);
});

test('IPv6: each round of the burst is one unsolicited Neighbor Advertisement to all-nodes, on the same schedule', () => {
  const clock = new ManualClock();
  const frames: Array<{ at: number; frame: Buffer }> = [];
  const garp = new GarpAnnouncer({ sender: { send: (_i, frame) => void frames.push({ at: clock.now(), frame }) }, clock, log: silentLogger }, { count: 5, intervalMs: 1000 });
  garp.announce({ ip: '2001:db8::7', ifindex: 4, mac: '02:00:5e:00:53:0a' });
  clock.advance(10_000);
  assert.deepEqual(frames.map((f) => f.at), [0, 1000, 2000, 3000, 4000]);
  for (const { frame } of frames) {
    const p = parseNdFrame(frame)!;
    assert.deepEqual(
      { type: p.type, dst: p.ipDst, ethDst: p.ethDst, o: p.override, s: p.solicited, lladdr: p.lladdr, target: p.target, ok: p.checksumOk },
      { type: 136, dst: 'ff02::1', ethDst: '33:33:00:00:00:01', o: true, s: false, lladdr: '02:00:5e:00:53:0a', target: '2001:db8::7', ok: true },
    );
  }
  assert.equal(garp.stats.sent, 5);
});

test('while the liveness gate is held, rounds wait (IPv4 and IPv6 alike) and resume once it opens', () => {
  const clock = new ManualClock();
  const frames: Array<{ at: number; frame: Buffer }> = [];
  let held = true;
  const garp = new GarpAnnouncer(
    { sender: { send: (_i, frame) => void frames.push({ at: clock.now(), frame }) }, clock, log: silentLogger, held: () => held },
    { count: 3, intervalMs: 1000 },
  );
  garp.announce(target);
  garp.announce({ ip: '2001:db8::7', ifindex: 4, mac: '02:00:5e:00:53:0a' });
  clock.advance(5000);
  assert.equal(frames.length, 0, 'nothing goes out while held');
  held = false;
  clock.advance(5000);
  const v6 = frames.filter((f) => parseNdFrame(f.frame) !== undefined);
  const v4 = frames.filter((f) => parseArpFrame(f.frame) !== undefined);
  assert.equal(v6.length, 3, 'all three NA rounds, after the hold');
  assert.equal(v4.length, 6, 'all three ARP rounds (request + reply), after the hold');
  assert.ok(frames.every((f) => f.at >= 5000));
  assert.equal(garp.activeBursts, 0);
});

/** A sender whose queue holds `room` frames until drained, like a socket send buffer in front of a slow link. */
class FullQueueSender implements FrameSender {
  sent: Array<{ at: number; ip: string }> = [];
  room: number;
  constructor(private readonly clock: ManualClock, room: number, private readonly perMs: number) {
    this.room = room;
  }
  send(_ifindex: number, frame: Buffer): boolean {
    if (this.room === 0) return false;
    this.room--;
    this.sent.push({ at: this.clock.now(), ip: parseNdFrame(frame)!.target });
    return true;
  }
  /** The link drains `perMs` frames a millisecond. */
  tick(ms: number): void {
    for (let i = 0; i < ms; i++) {
      this.room += this.perMs;
      this.clock.advance(1);
    }
  }
}

const v6 = (i: number) => ({ ip: `2001:db8:100::${i.toString(16)}`, ifindex: 4, mac: '02:00:5e:00:53:0a' });

test('a full queue defers frames instead of losing them: every IP of a 1,000-IP burst goes out once, first rounds in order, none failed', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 200, 50);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 1, intervalMs: 1000 });
  for (let i = 1; i <= 1000; i++) garp.announce(v6(i));
  assert.equal(sender.sent.length, 200, 'what the queue holds goes out at once');
  sender.tick(30);
  assert.deepEqual(
    sender.sent.map((s) => s.ip),
    Array.from({ length: 1000 }, (_, i) => v6(i + 1).ip),
  );
  assert.ok(sender.sent.at(-1)!.at <= 17, `the last IP went out ${sender.sent.at(-1)!.at} ms after the first (the link's pace)`);
  assert.deepEqual(garp.stats, { sent: 1000, failed: 0 });
  assert.equal(garp.deferred, 16, 'one refused frame per retry: rounds announced meanwhile wait for the retry instead of knocking on a full queue');
  assert.equal(garp.queuedRounds, 0);
  assert.equal(garp.activeBursts, 0);
});

test('first rounds go ahead of repeat rounds; each repeat keeps its interval from when its round went out', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 0, 10);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 2, intervalMs: 100 });
  for (let i = 1; i <= 500; i++) garp.announce(v6(i)); // 50 ms at the link's pace
  sender.tick(98); // the first IPs' repeats are due now, while the last first rounds wait
  for (let i = 501; i <= 600; i++) garp.announce(v6(i));
  sender.tick(300);
  const firstAt = new Map<string, number>();
  const order: string[] = [];
  for (const s of sender.sent) {
    if (!firstAt.has(s.ip)) firstAt.set(s.ip, s.at);
    order.push(firstAt.get(s.ip) === s.at && order.filter((x) => x === s.ip).length === 0 ? `first ${s.ip}` : `repeat ${s.ip}`);
  }
  const lastFirst = order.lastIndexOf(`first ${v6(600).ip}`);
  assert.ok(order.slice(0, lastFirst).filter((o) => o.startsWith('repeat')).length <= 10, 'the late first rounds jumped the queue of repeats');
  for (let i = 1; i <= 600; i++) {
    const times = sender.sent.filter((s) => s.ip === v6(i).ip).map((s) => s.at);
    assert.equal(times.length, 2, `two rounds for ${v6(i).ip}`);
    assert.ok(times[1]! - times[0]! >= 100, `${v6(i).ip}: repeat ${times[1]! - times[0]!} ms after its first`);
  }
  assert.equal(garp.stats.failed, 0);
});

test('a withdrawn IP waiting in the queue never goes out', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 0, 1);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 3, intervalMs: 100 });
  garp.announce(v6(1));
  garp.announce(v6(2));
  garp.cancel(v6(1).ip, 4);
  sender.tick(1000);
  assert.deepEqual([...new Set(sender.sent.map((s) => s.ip))], [v6(2).ip]);
  assert.equal(sender.sent.length, 3);
  assert.equal(clock.pending, 0);
});

test('a bad schedule is refused with a code; count 0 and interval 0 are allowed', () => {
  const clock = new ManualClock();
  const deps = { sender: new RecordingSender(clock), clock, log: silentLogger };
  assert.throws(() => new GarpAnnouncer(deps, { count: -1, intervalMs: 1000 }), { code: 'HERALD_BAD_ARGUMENT', message: /count -1, interval 1000 ms/ });
  assert.throws(() => new GarpAnnouncer(deps, { count: 3, intervalMs: -5 }), { code: 'HERALD_BAD_ARGUMENT' });
  assert.throws(() => new GarpAnnouncer(deps, { count: Number.NaN, intervalMs: 5 }), { code: 'HERALD_BAD_ARGUMENT' });
  new GarpAnnouncer(deps, { count: 0, intervalMs: 0 }).dispose();
  const g = new GarpAnnouncer(deps, { count: 2, intervalMs: 0 });
  g.announce(target);
  clock.advance(1);
  assert.equal(deps.sender.sent.length, 4, 'interval 0: both rounds at once');
});

test('announceOnce (conflict defence): one round now, outside any burst; a full queue drops it (not a failure)', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 1, 1);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 5, intervalMs: 1000 });
  garp.announceOnce(v6(1));
  garp.announceOnce(v6(2)); // the queue is full: dropped, not retried
  sender.tick(50);
  assert.deepEqual(sender.sent.map((s) => s.ip), [v6(1).ip]);
  assert.deepEqual(garp.stats, { sent: 1, failed: 0 });
  assert.equal(garp.activeBursts, 0);
  assert.equal(clock.pending, 0);
});

test('dispose stops every burst and the paced queue: nothing goes out after it', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 0, 1);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 3, intervalMs: 100 });
  for (let i = 1; i <= 5; i++) garp.announce(v6(i));
  sender.tick(2);
  const before = sender.sent.length;
  garp.dispose();
  sender.tick(1000);
  assert.equal(sender.sent.length, before);
  assert.equal(clock.pending, 0);
});

test('a long queue is drained in order across its compaction (5,000 first rounds)', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 300, 300);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 1, intervalMs: 1000 });
  for (let i = 1; i <= 5000; i++) garp.announce(v6(i));
  sender.tick(40);
  assert.deepEqual(sender.sent.map((s) => s.ip), Array.from({ length: 5000 }, (_, i) => v6(i + 1).ip));
  assert.equal(garp.queuedRounds, 0);
});

test('first rounds always go ahead of repeat rounds already waiting: 200 IPs announced in two waves go out in announcement order before any repeat', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 0, 10);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 2, intervalMs: 1 });
  for (let i = 1; i <= 100; i++) garp.announce(v6(i));
  sender.tick(5); // ~50 first rounds out, their repeats due and waiting
  const out = sender.sent.length;
  assert.ok(out > 0 && out < 100);
  assert.ok(garp.queuedRounds > 100 - out, `repeat rounds are waiting (${garp.queuedRounds} queued, ${100 - out} of them first rounds)`);
  for (let i = 101; i <= 200; i++) garp.announce(v6(i));
  sender.tick(100);
  assert.deepEqual(sender.sent.slice(0, 200).map((s) => s.ip), Array.from({ length: 200 }, (_, i) => v6(i + 1).ip));
  assert.equal(sender.sent.length, 400);
  assert.equal(new Set(sender.sent.slice(200).map((s) => s.ip)).size, 200, 'then one repeat of each');
});

test('queuedRounds counts first and repeat rounds waiting', () => {
  const clock = new ManualClock();
  const sender = new FullQueueSender(clock, 2, 0);
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 2, intervalMs: 0 });
  for (let i = 1; i <= 5; i++) garp.announce(v6(i));
  assert.equal(sender.sent.length, 2);
  assert.equal(garp.queuedRounds, 3, 'three first rounds wait');
  clock.advance(0); // the two sent IPs' repeat rounds join the queue (the retry of the full queue is 1 ms away)
  assert.equal(garp.queuedRounds, 5, 'three first rounds and two repeats');
  garp.dispose();
});

test('at most 1,024 frames go out per turn of the event loop; the budget starts again on the next turn', async () => {
  const clock = new ManualClock();
  const sent: string[] = [];
  const garp = new GarpAnnouncer({ sender: { send: (_i, frame) => void sent.push(parseNdFrame(frame)!.target) }, clock, log: silentLogger }, { count: 1, intervalMs: 0 });
  garp.announce(v6(1)); // a turn that sends a single frame
  await new Promise((r) => setImmediate(r));
  for (let i = 2; i <= 2100; i++) garp.announce(v6(i));
  assert.equal(sent.length, 1 + 1024, 'one frame in the first turn, 1,024 in this one, the rest waits');
  assert.equal(garp.queuedRounds, 2100 - 1025);
  clock.advance(0);
  assert.deepEqual(sent, Array.from({ length: 2100 }, (_, i) => v6(i + 1).ip));
  assert.equal(garp.queuedRounds, 0);
});

test('a failed send is logged with IP, interface and error (ARP and NA worded apart); a conflict-defence frame dropped by a full queue is a debug line', () => {
  const clock = new ManualClock();
  const log = recordingLogger();
  const sender = new RecordingSender(clock);
  const garp = new GarpAnnouncer({ sender, clock, log }, { count: 1, intervalMs: 0 });
  sender.failNext = 1;
  garp.announce(target);
  assert.deepEqual(log.lines, [{ level: 'warn', msg: 'gratuitous ARP send failed', obj: { ip: target.ip, ifindex: 4, err: 'ENETDOWN' } }]);
  log.lines.length = 0;
  const g6 = new GarpAnnouncer({ sender: { send: () => { throw new Error('ENOBUFS'); } }, clock, log }, { count: 1, intervalMs: 0 });
  g6.announce(v6(9));
  assert.deepEqual(log.lines, [{ level: 'warn', msg: 'unsolicited neighbor advertisement send failed', obj: { ip: v6(9).ip, ifindex: 4, err: 'ENOBUFS' } }]);
  log.lines.length = 0;
  const full = new FullQueueSender(clock, 1, 0);
  const gOnce = new GarpAnnouncer({ sender: full, clock, log }, { count: 1, intervalMs: 0 });
  gOnce.announceOnce(v6(1)); // sent: nothing logged
  assert.deepEqual(log.lines, []);
  gOnce.announceOnce(v6(2));
  assert.deepEqual(log.lines, [{ level: 'debug', msg: 'conflict defence frame dropped: the interface queue is full', obj: { ip: v6(2).ip } }]);
});

test('the FIFO behind the paced queue: order kept, an empty one stays empty, removed slots given back in one copy once more than 1,024 are over half the array', () => {
  /** Shifts everything out in order; returns [shift number, slots after] for every compaction. */
  const drainAll = (n: number): Array<[number, number]> => {
    const q = new Fifo<number>();
    for (let i = 0; i < n; i++) q.push(i);
    const compactions: Array<[number, number]> = [];
    let slots = q.slots;
    for (let i = 0; i < n; i++) {
      assert.equal(q.peek(), i);
      assert.equal(q.shift(), i);
      assert.equal(q.length, n - i - 1);
      if (q.slots !== slots) compactions.push([i + 1, (slots = q.slots)]);
    }
    const slotsEmpty = q.slots;
    assert.equal(q.shift(), undefined);
    assert.equal(q.length, 0, 'shifting an empty queue leaves it empty');
    assert.equal(q.slots, slotsEmpty, '… and does not grow it');
    q.push(7);
    assert.equal(q.peek(), 7);
    assert.equal(q.length, 1);
    return compactions;
  };
  assert.deepEqual(drainAll(1000), [], 'never more than 1,024 removed slots');
  assert.deepEqual(drainAll(2000), [[1025, 975]], 'the 1,025th removal, past half of 2,000');
  assert.deepEqual(drainAll(2100), [[1051, 1049], [2076, 24]], 'the first removal past half of 2,100, and 1,025 later again');
});
