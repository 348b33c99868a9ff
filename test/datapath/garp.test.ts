import assert from 'node:assert/strict';
import { test } from 'node:test';
import { silentLogger } from '../../src/core/logger.js';
import { GarpAnnouncer, type FrameSender } from '../../src/datapath/garp.js';
import { parseArpFrame } from '../../src/net/arp.js';
import { parseNdFrame } from '../../src/net/ndp.js';
import { ManualClock } from '../helpers/manual-clock.js';

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
  const garp = new GarpAnnouncer({ sender, clock, log: silentLogger }, { count: 5, intervalMs: 1000 });
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
  const garp = new GarpAnnouncer({ sender: { send: (_i, frame) => frames.push({ at: clock.now(), frame }) }, clock, log: silentLogger }, { count: 5, intervalMs: 1000 });
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
    { sender: { send: (_i, frame) => frames.push({ at: clock.now(), frame }) }, clock, log: silentLogger, held: () => held },
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
