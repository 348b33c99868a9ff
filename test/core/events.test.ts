/** The cluster timeline's ring: bounded, ordered by id, duplicates ignored, followers bounded, causes of moves resolved. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EventRing, MemoryJournal, type ClusterEvent, type EventBody } from '../../src/core/events.js';
import { describeEvent } from '../../src/api/view/describe.js';

let nextId = 100;
const at = (ms = 0) => new Date(Date.parse('2026-01-01T00:00:00Z') + ms).toISOString();
const e = (node: string, body: EventBody, ms = 0): ClusterEvent => ({ ...body, id: nextId++, node, at: at(ms) }) as ClusterEvent;

test('the ring keeps the newest events, ignores ids it has seen, and reports a gap for ids it dropped', () => {
  const ring = new EventRing({ capacity: 3, maxQueued: 10 });
  const events = [1, 2, 3, 4, 5].map((id) => ({ ...e('n1', { kind: 'node-stopping' }), id }));
  ring.add(...events);
  ring.add(events[4]!, events[1]!); // a re-read of the store replays what is already there
  assert.deepEqual(ring.list().map((x) => x.id), [3, 4, 5]);
  assert.deepEqual(ring.since(3), { events: [ring.list()[1], ring.list()[2]], gap: false });
  assert.equal(ring.since(1).gap, true, 'event 2 was dropped before a follower at 1 saw it');
});

test('a follower that falls behind its bound is cut off, never grows without bound', () => {
  const ring = new EventRing({ capacity: 100, maxQueued: 5 });
  let wakes = 0;
  const f = ring.follow(() => wakes++);
  ring.add(...[1, 2, 3].map((id) => ({ ...e('n1', { kind: 'node-stopping' }), id })));
  assert.equal(f.drain().length, 3);
  ring.add(...[4, 5, 6, 7, 8, 9].map((id) => ({ ...e('n1', { kind: 'node-stopping' }), id })));
  assert.equal(f.overflowed, true);
  assert.deepEqual(f.drain(), []);
  f.close();
  assert.equal(ring.followerCount, 0);
});

test("a takeover's cause comes from what the previous owner or a fencer recorded before it", () => {
  const ring = new EventRing();
  const ip = '198.51.100.10';
  const [handover] = ring.add(e('n1', { kind: 'owner-released', ip, why: 'handing over to the preferred node', cause: 'spread-rebalance' }), e('n2', { kind: 'owner-took', ip, from: 'n1', gapMs: 12, hint: 'lease-ended' }, 10)).slice(1);
  assert.equal(handover!.kind === "owner-took" && handover!.cause, 'spread-rebalance');
  const [stop] = ring.add(e('n2', { kind: 'node-stopping' }, 20), e('n3', { kind: 'owner-took', ip, from: 'n2', gapMs: 30, hint: 'lease-ended' }, 30)).slice(1);
  assert.equal(stop!.kind === "owner-took" && stop!.cause, 'clean-stop');
  const [fenced] = ring.add(e('n1', { kind: 'owner-fenced', fenced: 'n3', ips: [ip] }, 40), e('n2', { kind: 'owner-took', ip, from: 'n3', gapMs: 40, hint: 'lease-ended' }, 50)).slice(1);
  assert.equal(fenced!.kind === "owner-took" && fenced!.cause, 'wire-silence');
  const [expiry] = ring.add(e('n1', { kind: 'owner-took', ip, from: 'n2', gapMs: 25, hint: 'lease-ended' }, 60));
  assert.equal(expiry!.kind === "owner-took" && expiry!.cause, 'lease-ended');
  assert.match(describeEvent(expiry!), /took 198\.51\.100\.10 from n2 after 25 ms: the previous owner's lease expired/);
  // A crash its supervisor recorded (before revoking the lease) is a crash, not an expiry.
  const [crash] = ring.add(e('n2', { kind: 'node-crashed', signal: 'SIGKILL' }, 70), e('n3', { kind: 'owner-took', ip, from: 'n2', gapMs: 3, hint: 'lease-ended' }, 80)).slice(1);
  assert.equal(crash!.kind === "owner-took" && crash!.cause, 'crash');
  assert.match(describeEvent(crash!), /the previous owner crashed/);
});

test('the memory journal gives increasing ids', async () => {
  const j = new MemoryJournal('n1');
  await j.record({ kind: 'node-started', version: '1' });
  await j.record({ kind: 'node-stopping' });
  const [a, b] = j.ring.list();
  assert.ok(a!.id < b!.id);
  assert.equal(a!.node, 'n1');
});
