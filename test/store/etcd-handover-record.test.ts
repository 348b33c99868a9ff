/** The hand-over record's codec: what it grants must be exactly what the stopping node wrote, and nothing for anything else. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HANDOVER_RECORD_MAX_BYTES, encodeHandoverRecord, parseHandoverRecord } from '../../src/store/etcd/handover-record.js';

test('a record round-trips: one successor (node and lease) per IP', () => {
  const text = encodeHandoverRecord('node-a', [
    { ip: '198.51.100.7', node: 'node-b', lease: '7587' },
    { ip: '2001:db8::7', node: 'node-c', lease: '7588' },
  ])!;
  const r = parseHandoverRecord(text)!;
  assert.equal(r.node, 'node-a');
  assert.deepEqual([...r.moves], [
    ['198.51.100.7', { node: 'node-b', lease: '7587' }],
    ['2001:db8::7', { node: 'node-c', lease: '7588' }],
  ]);
  assert.deepEqual(parseHandoverRecord(Buffer.from(text)), r, 'from the stored bytes too');
});

test('anything but a well-formed record grants nothing', () => {
  const bad = [
    '',
    'null',
    '[]',
    '{"v":1,"node":"a","moves":[[',
    '{"v":2,"node":"a","moves":[]}',
    '{"v":1,"node":"","moves":[]}',
    '{"v":1,"node":7,"moves":[]}',
    '{"v":1,"node":"a","moves":{}}',
    '{"v":1,"node":"a","moves":[["198.51.100.7","b"]]}',
    '{"v":1,"node":"a","moves":[["198.51.100.7","b","1","x"]]}',
    '{"v":1,"node":"a","moves":[["198.51.100.7","b",1]]}',
    '{"v":1,"node":"a","moves":[["198.51.100.7","","1"]]}',
    '{"v":1,"node":"a","moves":["198.51.100.7"]}',
    '7',
    '"handover"',
    'true',
  ];
  for (const text of bad) assert.equal(parseHandoverRecord(text), undefined, text);
  // Two successors for one IP: the whole record is refused, not the first or the last taken.
  assert.equal(parseHandoverRecord('{"v":1,"node":"a","moves":[["198.51.100.7","b","1"],["198.51.100.7","c","2"]]}'), undefined);
});

test('bounded: an oversized value is neither written nor read', () => {
  const moves = Array.from({ length: 30_000 }, (_, i) => ({ ip: `2001:db8::${i.toString(16)}`, node: 'node-with-a-long-name', lease: '7587000000000000' }));
  assert.equal(encodeHandoverRecord('node-a', moves), undefined);
  const fits = encodeHandoverRecord('node-a', moves.slice(0, 1000))!;
  assert.ok(fits.length < HANDOVER_RECORD_MAX_BYTES);
  assert.equal(parseHandoverRecord(Buffer.alloc(HANDOVER_RECORD_MAX_BYTES + 1, 0x20)), undefined);
  assert.equal(parseHandoverRecord(fits)?.moves.size, 1000);
  // Exactly at the bound: written and read; one byte more: neither (a valid record all the same).
  const base = encodeHandoverRecord('', [{ ip: '198.51.100.7', node: 'node-b', lease: '1' }])!;
  const atBound = (extra: number) => encodeHandoverRecord('n'.repeat(HANDOVER_RECORD_MAX_BYTES - base.length + extra), [{ ip: '198.51.100.7', node: 'node-b', lease: '1' }]);
  const exact = atBound(0)!;
  assert.equal(Buffer.byteLength(exact), HANDOVER_RECORD_MAX_BYTES);
  assert.equal(parseHandoverRecord(exact)?.moves.get('198.51.100.7')?.node, 'node-b');
  assert.equal(atBound(1), undefined);
  const over = JSON.stringify({ v: 1, node: 'n'.repeat(HANDOVER_RECORD_MAX_BYTES), moves: [] });
  assert.equal(parseHandoverRecord(over), undefined, 'a well-formed record over the bound');
});

test("who wrote it, when not the stopping node: its supervisor after a crash, or a fencer after its silence; any other cause refuses the record", () => {
  const moves = [{ ip: '198.51.100.7', node: 'node-b', lease: '42' }];
  for (const cause of ['crash', 'wire-silence'] as const) {
    const text = encodeHandoverRecord('node-a', moves, cause)!;
    assert.equal(JSON.parse(text).cause, cause);
    assert.deepEqual(parseHandoverRecord(text), { node: 'node-a', cause, moves: new Map([['198.51.100.7', { node: 'node-b', lease: '42' }]]) });
  }
  assert.equal('cause' in parseHandoverRecord(encodeHandoverRecord('node-a', moves)!)!, false, "a stop's own record names no cause");
  assert.equal(parseHandoverRecord('{"v":1,"node":"a","cause":"gone","moves":[]}'), undefined);
  assert.equal(parseHandoverRecord('{"v":1,"node":"a","cause":7,"moves":[]}'), undefined);
});
