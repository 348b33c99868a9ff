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

test('grouped by successor: 1,000 IPs to two successors is a third of the one-triple-per-IP form', () => {
  const moves = Array.from({ length: 1000 }, (_, i) => ({ ip: `2001:db8:100::${(i + 1).toString(16)}`, node: i % 2 ? 'node-b' : 'node-c', lease: i % 2 ? '7587874431234567' : '7587874431234568' }));
  const text = encodeHandoverRecord('node-a', moves)!;
  const parsed = JSON.parse(text);
  assert.equal(parsed.v, 2);
  assert.deepEqual(parsed.to.map((g: string[]) => [g[0], g[1], g.length - 2]), [['node-c', '7587874431234568', 500], ['node-b', '7587874431234567', 500]]);
  const v1 = JSON.stringify({ v: 1, node: 'node-a', moves: moves.map((m) => [m.ip, m.node, m.lease]) });
  assert.ok(text.length * 2.5 < v1.length, `${text.length} bytes against ${v1.length}`);
  const r = parseHandoverRecord(text)!;
  assert.equal(r.moves.size, 1000);
  for (const m of moves) assert.deepEqual(r.moves.get(m.ip), { node: m.node, lease: m.lease });
  // The same lease under two group entries (one successor's IPs split) still reads as one successor per IP.
  assert.deepEqual(parseHandoverRecord('{"v":2,"node":"a","to":[["b","1","198.51.100.7"],["b","1","198.51.100.8"]]}')?.moves.size, 2);
});

test("a version 1 record (an agent from before version 2 stopping) is read the same", () => {
  const r = parseHandoverRecord(JSON.stringify({ v: 1, node: 'node-a', cause: 'crash', moves: [['198.51.100.7', 'node-b', '7587'], ['2001:db8::7', 'node-c', '7588']] }))!;
  assert.deepEqual(r, { node: 'node-a', cause: 'crash', moves: new Map([['198.51.100.7', { node: 'node-b', lease: '7587' }], ['2001:db8::7', { node: 'node-c', lease: '7588' }]]) });
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
    '{"v":2,"node":"a"}',
    '{"v":2,"node":"a","to":{}}',
    '{"v":2,"node":"","to":[]}',
    '{"v":2,"node":"a","to":[["b","1"]]}',
    '{"v":2,"node":"a","to":[["b","","198.51.100.7"]]}',
    '{"v":2,"node":"a","to":[["","1","198.51.100.7"]]}',
    '{"v":2,"node":"a","to":[["b","1",""]]}',
    '{"v":2,"node":"a","to":[["b","1",7]]}',
    '{"v":2,"node":"a","to":["b"]}',
    '{"v":2,"node":"a","cause":"gone","to":[]}',
    '{"v":3,"node":"a","to":[]}',
    '{"v":1,"node":"a","to":[["b","1","198.51.100.7"]]}',
  ];
  for (const text of bad) assert.equal(parseHandoverRecord(text), undefined, text);
  // Two successors for one IP: the whole record is refused, not the first or the last taken.
  assert.equal(parseHandoverRecord('{"v":1,"node":"a","moves":[["198.51.100.7","b","1"],["198.51.100.7","c","2"]]}'), undefined);
  assert.equal(parseHandoverRecord('{"v":2,"node":"a","to":[["b","1","198.51.100.7"],["c","2","198.51.100.7"]]}'), undefined);
  assert.equal(parseHandoverRecord('{"v":2,"node":"a","to":[["b","1","198.51.100.7","198.51.100.7"]]}'), undefined);
  assert.deepEqual(parseHandoverRecord('{"v":2,"node":"a","to":[]}'), { node: 'a', moves: new Map() }, 'an empty record is well-formed and grants nothing');
});

test('bounded: an oversized value is neither written nor read', () => {
  const moves = Array.from({ length: 80_000 }, (_, i) => ({ ip: `2001:db8::${i.toString(16)}`, node: 'node-with-a-long-name', lease: '7587000000000000' }));
  assert.equal(encodeHandoverRecord('node-a', moves) === undefined, true, '80,000 IPs exceed the bound');
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
