/**
 * The responder map over real BPF hash maps shaped like responder_v4 and
 * responder_v6 (made with bpf_map_create: root, no object file, no pins),
 * for what the shared contract does not reach: the pair of family maps
 * without responder_v6 (the pins of an agent that predates NDP), a key that
 * cannot be encoded, a key twice in one batch, values kept by create(), and
 * the errors of another writer (EEXIST) or of a delete.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { BpfMap } from '../../src/os/bpf-map.js';
import { libbpf } from '../../src/os/libbpf.js';
import { ResponderMaps } from '../../src/datapath/l2-responder/family-maps.js';
import { responderKey6Codec, responderKeyCodec, type ResponderKey, type ResponderStats } from '../../src/datapath/l2-responder/layout.js';
import { BpfResponderMap, DUMP_MIN_KEYS, FakeResponderMap } from '../../src/datapath/l2-responder/responder-map.js';

const skip = process.getuid?.() !== 0 ? 'needs root (BPF)' : false;
const BPF_MAP_TYPE_HASH = 1;
const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanup.splice(0).reverse()) c();
});

function hashMap(family: 4 | 6, capacity: number): BpfMap<ResponderKey, ResponderStats> {
  const codec = family === 4 ? responderKeyCodec : responderKey6Codec;
  const fd = libbpf().mapCreate(BPF_MAP_TYPE_HASH, `responder_v${family}`, codec.keySize, codec.valueSize, capacity);
  assert.ok(fd >= 0, `bpf_map_create: ${fd}`);
  const map = BpfMap.fromOwnedFd(`responder_v${family} (test)`, fd, codec);
  let disposed = false;
  cleanup.push(() => {
    if (!disposed) map.dispose();
  });
  const dispose = map.dispose.bind(map);
  map.dispose = () => {
    disposed = true;
    dispose();
  };
  return map;
}

const v4 = (i: number, ifindex = 3): ResponderKey => ({ ip: `198.51.100.${i}`, ifindex });
const v6 = (i: number, ifindex = 3): ResponderKey => ({ ip: `2001:db8::${i}`, ifindex });
const stats = (replies: bigint, conflicts = 0n): ResponderStats => ({ replies, conflicts });
const show = (keys: ResponderKey[]) => keys.map((k) => `${k.ip}@${k.ifindex}`).sort();

describe('ResponderMaps: the two family maps as one', { skip }, () => {
  test('each key goes to the map of its family; keys and entries list both', () => {
    const a = hashMap(4, 8);
    const b = hashMap(6, 8);
    const maps = new ResponderMaps(a, b);
    maps.update(v4(1), stats(5n));
    maps.update(v6(1), stats(7n, 1n));
    assert.deepEqual(a.entries(), [[v4(1), stats(5n)]]);
    assert.deepEqual(b.entries(), [[v6(1), stats(7n, 1n)]]);
    assert.deepEqual(maps.lookup(v6(1)), stats(7n, 1n));
    assert.deepEqual(maps.lookup(v4(1)), stats(5n));
    assert.deepEqual(show(maps.keys()), ['198.51.100.1@3', '2001:db8::1@3']);
    assert.deepEqual(maps.entries().map(([k, v]) => `${k.ip}=${v.replies}`).sort(), ['198.51.100.1=5', '2001:db8::1=7']);
    assert.throws(() => maps.update(v4(1), stats(1n), 'create'), (e) => (e as { errnoName?: string }).errnoName === 'EEXIST' || /EEXIST/.test(String(e)), 'the mode reaches the map');
    assert.equal(maps.delete(v6(1)), true);
    assert.equal(maps.delete(v6(1)), false);
    assert.equal(maps.info().maxEntries, 8);
    maps.dispose();
    assert.throws(() => a.lookup(v4(1)), 'responder_v4 closed');
    assert.throws(() => b.lookup(v6(1)), 'responder_v6 closed');
  });

  test('without responder_v6 (pins of an agent before NDP): IPv6 keys are absent, cannot be written, and are never deleted', () => {
    const a = hashMap(4, 8);
    const maps = new ResponderMaps(a, undefined);
    maps.update(v4(2), stats(1n));
    assert.equal(maps.lookup(v6(2)), undefined);
    assert.equal(maps.delete(v6(2)), false);
    assert.throws(() => maps.update(v6(2), stats(0n)), { message: 'no IPv6 responder map to write 2001:db8::2 to' });
    assert.deepEqual(show(maps.keys()), ['198.51.100.2@3']);
    assert.equal(maps.entries().length, 1);
    assert.doesNotThrow(() => maps.dispose());
  });
});

describe('BpfResponderMap beyond the contract', { skip }, () => {
  test('without responder_v6: each IPv6 key of a batch gets its own error, the IPv4 keys go in; deletes and prunes skip IPv6', () => {
    const map = new BpfResponderMap(new ResponderMaps(hashMap(4, 4), undefined));
    assert.equal(map.capacity, 4);
    const out = map.createMany([v4(1), v6(1), v4(2), v6(2)]);
    assert.equal(out[0], true);
    assert.equal(out[2], true);
    assert.equal((out[1] as Error).message, 'no IPv6 responder map to write 2001:db8::1 to');
    assert.equal((out[3] as Error).message, 'no IPv6 responder map to write 2001:db8::2 to');
    assert.deepEqual(map.deleteMany([v6(1), v4(1)]), [false, true]);
    assert.deepEqual(show(map.keysNotIn([v6(9)])), ['198.51.100.2@3']);
  });

  test('a key that cannot be encoded fails alone; a key twice in one small batch is created once', () => {
    const map = new BpfResponderMap(new ResponderMaps(hashMap(4, 16), hashMap(6, 16)));
    const out = map.createMany([v4(1), { ip: '198.51.100.300', ifindex: 3 }, v4(1), v6(4), v6(4)]);
    assert.equal(out[0], true);
    assert.ok(out[1] instanceof Error, 'the bad address has its error');
    assert.deepEqual([out[2], out[3], out[4]], [false, true, false]);
    assert.deepEqual(show(map.keys()), ['198.51.100.1@3', '2001:db8::4@3']);
  });

  test('a batch of only IPv6 keys leaves responder_v4 alone, and an existing entry keeps its counters', () => {
    const a = hashMap(4, 16);
    const b = hashMap(6, 16);
    const maps = new ResponderMaps(a, b);
    maps.update(v6(1), stats(9n, 2n));
    const map = new BpfResponderMap(maps);
    assert.deepEqual(map.createMany([v6(1), v6(2)]), [false, true]);
    assert.deepEqual(maps.lookup(v6(1)), stats(9n, 2n), 'counters kept');
    assert.deepEqual(maps.lookup(v6(2)), stats(0n), 'a new entry starts at zero');
    assert.deepEqual(a.keys(), []);
    assert.equal(map.create(v6(1)), false);
    assert.deepEqual(maps.lookup(v6(1)), stats(9n, 2n));
  });

  test('a large batch reads the map once and still keeps the counters of entries already there', () => {
    const a = hashMap(4, 256);
    const maps = new ResponderMaps(a, hashMap(6, 16));
    maps.update(v4(5), stats(3n, 1n));
    const map = new BpfResponderMap(maps);
    const keys = Array.from({ length: 100 }, (_, i) => v4(i));
    const out = map.createMany(keys);
    assert.equal(out[5], false);
    assert.equal(out.filter((o) => o === true).length, 99);
    assert.deepEqual(maps.lookup(v4(5)), stats(3n, 1n));
    assert.deepEqual(maps.lookup(v4(6)), stats(0n));
  });
});

describe('BpfResponderMap: how a batch finds what is there, and raw keys compared exactly', { skip }, () => {
  test(`below ${DUMP_MIN_KEYS} keys a batch looks each key up; from ${DUMP_MIN_KEYS} on it reads the map once; nothing missing, nothing written`, () => {
    const a = hashMap(4, 512);
    const maps = new ResponderMaps(a, hashMap(6, 16));
    let lookups = 0;
    let walks = 0;
    let writes = 0;
    const lookup = maps.lookup.bind(maps);
    maps.lookup = (k) => (lookups++, lookup(k));
    const walk = a.forEachBatch.bind(a);
    a.forEachBatch = (fn, size) => (walks++, walk(fn, size));
    const write = a.updateBatchRaw.bind(a);
    a.updateBatchRaw = (k, v, n, size) => (writes++, write(k, v, n, size));
    const map = new BpfResponderMap(maps);
    const keys = (n: number, from: number) => Array.from({ length: n }, (_, i) => ({ ip: `198.51.100.${from + i}`, ifindex: 3 }));
    assert.equal(map.createMany(keys(DUMP_MIN_KEYS - 1, 0)).filter((o) => o === true).length, DUMP_MIN_KEYS - 1);
    assert.deepEqual([lookups, walks, writes], [DUMP_MIN_KEYS - 1, 0, 1]);
    assert.equal(map.createMany(keys(DUMP_MIN_KEYS, 100)).filter((o) => o === true).length, DUMP_MIN_KEYS);
    assert.deepEqual([lookups, walks, writes], [DUMP_MIN_KEYS - 1, 1, 2], 'one walk, no lookups');
    assert.ok(map.createMany(keys(DUMP_MIN_KEYS, 100)).every((o) => o === false));
    assert.deepEqual([walks, writes], [2, 2], 'all there: no write');
  });

  test('keys that would collide if compared loosely stay distinct: same IPv6 prefix, large and boundary ifindexes', () => {
    const maps = new ResponderMaps(hashMap(4, 16), hashMap(6, 16));
    const map = new BpfResponderMap(maps);
    const pairs: Array<[ResponderKey, ResponderKey]> = [
      [v6(1), v6(2)], // the same first 8 bytes
      [{ ip: '198.51.100.0', ifindex: 0x300000 }, { ip: '198.51.100.1', ifindex: 0x100000 }],
      [{ ip: '198.51.100.1', ifindex: 0x400000 }, { ip: '198.51.100.2', ifindex: 0x200000 }],
      [{ ip: '198.51.100.3', ifindex: 0x200000 }, { ip: '198.51.100.4', ifindex: 0 }],
    ];
    for (const [a, b] of pairs) {
      maps.update(a, stats(0n));
      maps.update(b, stats(0n));
    }
    assert.deepEqual(show(map.keysNotIn(pairs.map(([a]) => a))), show(pairs.map(([, b]) => b)));
    assert.deepEqual(show(map.keysNotIn(pairs.map(([, b]) => b))), show(pairs.map(([a]) => a)));
  });
});

describe('BpfResponderMap: errors of the kernel and of other writers (scripted maps)', () => {
  const scripted = (over: Partial<Record<'lookup' | 'update' | 'delete', unknown>>) =>
    new BpfResponderMap({
      info: () => ({ type: 1, id: 1, keySize: 8, valueSize: 16, maxEntries: 4, flags: 0, name: 'responder_v4' }),
      keys: () => [],
      lookup: () => undefined,
      update: () => {},
      delete: () => false,
      v4: undefined as never,
      v6: undefined,
      ...over,
    } as unknown as ConstructorParameters<typeof BpfResponderMap>[0]);

  test('create(): an entry another writer created between the lookup and the write is "already there"; any other error is thrown', () => {
    const eexist = Object.assign(new Error('update in responder_v4: EEXIST'), { errnoName: 'EEXIST' });
    assert.equal(scripted({ update: () => { throw eexist; } }).create(v4(1)), false);
    const eperm = Object.assign(new Error('update in responder_v4: EPERM'), { errnoName: 'EPERM' });
    assert.throws(() => scripted({ update: () => { throw eperm; } }).create(v4(1)), (e) => e === eperm);
    let mode: unknown;
    let value: unknown;
    assert.equal(scripted({ update: (_k: unknown, v: unknown, m: unknown) => ((value = v), (mode = m)) }).create(v4(1)), true);
    assert.equal(mode, 'create', 'never overwrites an entry');
    assert.deepEqual(value, stats(0n));
  });

  test('deleteMany: an error other than "not there" is the key\'s outcome', () => {
    const efault = new Error('delete in responder_v4: EFAULT');
    const map = new BpfResponderMap({
      info: () => ({ maxEntries: 4 }),
      v4: { deleteMany: (keys: ResponderKey[]) => keys.map((_, i) => (i === 0 ? efault : undefined)) },
      v6: undefined,
    } as unknown as ConstructorParameters<typeof BpfResponderMap>[0]);
    assert.deepEqual(map.deleteMany([v4(1), v4(2)]), [efault, true]);
  });
});

test('the fake: a full family map refuses with HERALD_BPF_MAP_FULL naming its family; failWrites fails the next writes only', () => {
  const fake = new FakeResponderMap(1);
  fake.create(v4(1));
  fake.create(v6(1));
  assert.throws(() => fake.create(v4(2)), (e) => isHeraldError(e, 'HERALD_BPF_MAP_FULL') && (e as Error).message === 'map responder_v4 is full');
  assert.throws(() => fake.create(v6(2)), (e) => isHeraldError(e, 'HERALD_BPF_MAP_FULL') && (e as Error).message === 'map responder_v6 is full');
  const boom = new Error('EPERM');
  fake.failWrites = { count: 1, error: boom };
  assert.deepEqual(fake.deleteMany([v4(1), v4(1)]), [boom, true]);
  assert.deepEqual(fake.createMany([v4(1)]), [true]);
  assert.equal(fake.create(v4(1)), false, 'a key already there is not a write');
  assert.deepEqual(new FakeResponderMap().capacity, 65536);
  // A thrown non-Error becomes an Error outcome.
  fake.failWrites = { count: 1, error: 'EIO' as unknown as Error };
  const [o] = fake.deleteMany([v4(1)]);
  assert.ok(o instanceof Error && o.message === 'EIO');
});
