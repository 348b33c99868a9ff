/**
 * The pairing behind the benches' on-node service time (bench/lib/service-time.ts):
 * a request paired with the next reply for the same target, a lost reply
 * never pairing a later request with an earlier answer, other targets ignored.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serviceGaps, summarize } from '../../bench/lib/service-time.js';

const line = (t: string, what: string) => `${t} ARP, ${what}, length 28`;

test('each request pairs with the next reply for its target (µs from ns stamps)', () => {
  const text = [
    'reading from file x.pcap, link-type EN10MB (Ethernet)',
    line('100.000000000', 'Request who-has 198.51.100.10 tell 192.0.2.1'),
    line('100.000012500', 'Reply 198.51.100.10 is-at 02:00:00:00:00:10'),
    line('100.010000000', 'Request who-has 198.51.100.10 tell 192.0.2.1'),
    line('100.010003000', 'Reply 198.51.100.10 is-at 02:00:00:00:00:10'),
  ].join('\n');
  const gaps = serviceGaps(text, '198.51.100.10', 'Request', 'Reply');
  assert.equal(gaps.length, 2);
  assert.ok(Math.abs(gaps[0]! - 12.5) < 0.01, String(gaps[0]));
  assert.ok(Math.abs(gaps[1]! - 3) < 0.01, String(gaps[1]));
});

test('an unanswered request is replaced by the next one; a reply without a request and other targets are ignored', () => {
  const text = [
    line('1.000000000', 'Reply 198.51.100.10 is-at 02:00:00:00:00:10'), // before any request
    line('1.000100000', 'Request who-has 198.51.100.10 tell 192.0.2.1'), // lost
    line('1.010000000', 'Request who-has 198.51.100.11 tell 192.0.2.1'), // another target
    line('1.020000000', 'Request who-has 198.51.100.10 tell 192.0.2.1'),
    line('1.020000004', 'Reply 198.51.100.11 is-at 02:00:00:00:00:11'), // another target
    line('1.020000005', 'Reply 198.51.100.10 is-at 02:00:00:00:00:10'),
    line('1.020000009', 'Reply 198.51.100.10 is-at 02:00:00:00:00:10'), // a second reply: no request left
  ].join('\n');
  const gaps = serviceGaps(text, '198.51.100.10', 'Request', 'Reply');
  assert.equal(gaps.length, 1);
  assert.ok(Math.abs(gaps[0]! - 0.005) < 0.001, String(gaps[0]));
});

test('summarize: nearest-rank quantiles over the sorted gaps', () => {
  const s = summarize(Array.from({ length: 100 }, (_, i) => 100 - i));
  assert.deepEqual(s, { pairs: 100, p10Us: 11, p50Us: 51, p90Us: 91, p99Us: 100 });
  assert.ok(Number.isNaN(summarize([]).p50Us));
});
