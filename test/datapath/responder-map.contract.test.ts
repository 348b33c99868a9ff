/**
 * One contract, two implementations: the in-memory fake the unit tests use and
 * the real pinned BPF map must behave the same.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { batchErrno } from '../../src/os/bpf-map.js';
import { DEFAULT_OBJECT_PATH, L2ResponderProgram } from '../../src/datapath/l2-responder/program.js';
import { BpfResponderMap, DUMP_MIN_KEYS, FakeResponderMap, type ResponderMap } from '../../src/datapath/l2-responder/responder-map.js';

const CAPACITY = 4;

/**
 * The compiled program: build/bpf/ beside the sources, or — when this file runs
 * from a copy of the tree without build/ (Stryker's sandbox under
 * .stryker-tmp/, which leaves build/ out) — the nearest build/bpf/ above it.
 */
function objectPath(): string {
  if (existsSync(DEFAULT_OBJECT_PATH)) return DEFAULT_OBJECT_PATH;
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const candidate = join(dir, 'build', 'bpf', 'l2_responder.bpf.o');
    if (existsSync(candidate)) return candidate;
  }
  return DEFAULT_OBJECT_PATH; // missing: load() says so (run npm run build)
}

/** A pin directory of its own per load: test files and Stryker's workers run side by side. */
const uniquePinDir = (prefix: string) => `/sys/fs/bpf/herald/${prefix}${process.pid}-${randomBytes(4).toString('hex')}`;
const load = (pinDir: string, responderMapSize: number) => L2ResponderProgram.load({ pinDir, responderMapSize, objectPath: objectPath() });

function contract(name: string, make: () => { map: ResponderMap; bump?: (ip: string, ifindex: number) => void; close: () => void }, skip: string | false = false) {
  describe(`ResponderMap contract: ${name}`, { skip }, () => {
    test('create is create-if-absent and reports whether it created', () => {
      const { map, close } = make();
      try {
        assert.equal(map.capacity, CAPACITY);
        assert.equal(map.create({ ip: '198.51.100.1', ifindex: 3 }), true);
        assert.equal(map.create({ ip: '198.51.100.1', ifindex: 3 }), false);
        assert.equal(map.create({ ip: '198.51.100.1', ifindex: 4 }), true, 'same IP, other interface: another key');
        assert.equal(map.has({ ip: '198.51.100.1', ifindex: 4 }), true);
        assert.equal(map.has({ ip: '198.51.100.2', ifindex: 4 }), false);
        assert.deepEqual(
          map.keys().map((k) => `${k.ip}@${k.ifindex}`).sort(),
          ['198.51.100.1@3', '198.51.100.1@4'],
        );
      } finally {
        close();
      }
    });

    test('delete reports whether the key was there', () => {
      const { map, close } = make();
      try {
        map.create({ ip: '198.51.100.1', ifindex: 3 });
        assert.equal(map.delete({ ip: '198.51.100.1', ifindex: 3 }), true);
        assert.equal(map.delete({ ip: '198.51.100.1', ifindex: 3 }), false);
        assert.deepEqual(map.keys(), []);
      } finally {
        close();
      }
    });

    test('IPv6 keys live in responder_v6, with the same semantics and a capacity of their own', () => {
      const { map, close } = make();
      try {
        for (let i = 1; i <= CAPACITY; i++) assert.equal(map.create({ ip: `198.51.100.${i}`, ifindex: 3 }), true);
        assert.equal(map.create({ ip: '2001:db8::10', ifindex: 3 }), true, 'a full IPv4 map does not limit IPv6');
        assert.equal(map.create({ ip: '2001:db8::10', ifindex: 3 }), false);
        assert.equal(map.has({ ip: '2001:db8::10', ifindex: 3 }), true);
        assert.equal(map.has({ ip: '2001:db8::10', ifindex: 4 }), false);
        assert.ok(map.keys().some((k) => k.ip === '2001:db8::10' && k.ifindex === 3));
        for (let i = 2; i <= CAPACITY; i++) map.create({ ip: `2001:db8::${i}`, ifindex: 3 });
        assert.throws(() => map.create({ ip: '2001:db8::99', ifindex: 3 }), (e) => isHeraldError(e, 'HERALD_BPF_MAP_FULL'));
        assert.equal(map.delete({ ip: '2001:db8::10', ifindex: 3 }), true);
        assert.equal(map.delete({ ip: '2001:db8::10', ifindex: 3 }), false);
        assert.equal(map.keys().length, 2 * CAPACITY - 1);
      } finally {
        close();
      }
    });

    test('createMany / deleteMany: one outcome per key, in order, IPv4 and IPv6 mixed', () => {
      const { map, close } = make();
      try {
        map.create({ ip: '198.51.100.2', ifindex: 3 });
        const keys = [
          { ip: '198.51.100.1', ifindex: 3 },
          { ip: '2001:db8::1', ifindex: 3 },
          { ip: '198.51.100.2', ifindex: 3 },
          { ip: '198.51.100.3', ifindex: 3 },
        ];
        assert.deepEqual(map.createMany(keys), [true, true, false, true]);
        assert.deepEqual(map.createMany(keys), [false, false, false, false]);
        assert.deepEqual(map.keysNotIn([keys[0]!, keys[3]!]).map((k) => k.ip).sort(), ['198.51.100.2', '2001:db8::1']);
        assert.deepEqual(map.deleteMany([keys[2]!, { ip: '198.51.100.9', ifindex: 3 }, keys[1]!]), [true, false, true]);
        assert.deepEqual(map.keys().map((k) => k.ip).sort(), ['198.51.100.1', '198.51.100.3']);
        assert.deepEqual(map.keysNotIn(keys), []);
      } finally {
        close();
      }
    });

    test('batches large enough to read the whole map compare keys exactly (small and huge ifindexes, same address)', () => {
      const { map, close } = make();
      try {
        // Same addresses on ifindex 3 and on 0x300000 (beyond the numeric fast path): distinct keys.
        const keys = Array.from({ length: DUMP_MIN_KEYS }, (_, i) => ({ ip: `198.51.100.${i % 2}`, ifindex: i < 2 ? 3 : i < 4 ? 0x300000 : 3 }));
        const uniq = keys.slice(0, 4);
        map.create(uniq[1]!);
        const padded = [...uniq, ...keys.slice(4)];
        const out = map.createMany(padded);
        assert.deepEqual(out.slice(0, 4), [true, false, true, true]);
        assert.ok(out.slice(4).every((o) => o === false), 'repeats of keys already there');
        assert.equal(map.keys().length, 4);
        assert.deepEqual(
          map.keysNotIn([...keys.slice(4), uniq[2]!]).map((k) => `${k.ip}@${k.ifindex}`).sort(),
          [`198.51.100.1@${0x300000}`],
        );
      } finally {
        close();
      }
    });

    for (const n of [CAPACITY + 2, DUMP_MIN_KEYS + 10]) {
      test(`createMany of ${n} keys into a map of ${CAPACITY}: the keys that fit go in, each other key gets HERALD_BPF_MAP_FULL`, () => {
        const { map, close } = make();
        try {
          map.create({ ip: '198.51.101.0', ifindex: 3 }); // one already there
          const keys = Array.from({ length: n }, (_, i) => ({ ip: `198.51.101.${i}`, ifindex: 3 }));
          const out = map.createMany(keys);
          assert.equal(out[0], false, 'the existing key: already there');
          assert.equal(out.filter((o) => o === true).length, CAPACITY - 1);
          const errors = out.filter((o) => o instanceof Error);
          assert.equal(errors.length, n - CAPACITY);
          assert.ok(errors.every((e) => isHeraldError(e, 'HERALD_BPF_MAP_FULL')), 'each failed key has its own error');
          assert.equal(map.keys().length, CAPACITY);
          for (const [i, o] of out.entries()) assert.equal(map.has(keys[i]!), !(o instanceof Error), `key ${i}: in the map unless it failed`);
          // Freeing room lets the same batch finish: the outcome is per key, not per batch.
          assert.equal(map.deleteMany(keys.slice(1, 3)).filter((d) => d === true).length, 2);
          const again = map.createMany(keys);
          assert.equal(again.filter((o) => o === true).length, 2);
          assert.equal(map.keys().length, CAPACITY);
        } finally {
          close();
        }
      });
    }

    test('a full map refuses a new key with HERALD_BPF_MAP_FULL and keeps the others', () => {
      const { map, close } = make();
      try {
        for (let i = 1; i <= CAPACITY; i++) assert.equal(map.create({ ip: `198.51.100.${i}`, ifindex: 3 }), true);
        assert.throws(() => map.create({ ip: '198.51.100.99', ifindex: 3 }), (e) => isHeraldError(e, 'HERALD_BPF_MAP_FULL'));
        assert.equal(map.create({ ip: '198.51.100.1', ifindex: 3 }), false, 'an existing key is still fine');
        assert.equal(map.keys().length, CAPACITY);
      } finally {
        close();
      }
    });
  });
}

contract('fake', () => ({ map: new FakeResponderMap(CAPACITY), close: () => {} }));

const realSkip = process.getuid?.() !== 0 ? 'needs root (BPF)' : false;
contract(
  'pinned BPF map',
  () => {
    const pinDir = uniquePinDir('hlct');
    let program: L2ResponderProgram;
    try {
      program = load(pinDir, CAPACITY);
    } catch (e) {
      rmSync(pinDir, { recursive: true, force: true });
      throw e;
    }
    return {
      map: new BpfResponderMap(program.maps.responders),
      close: () => {
        program.dispose();
        rmSync(pinDir, { recursive: true, force: true });
      },
    };
  },
  realSkip,
);

describe('BpfMap batch calls (the general capability under the responder map)', { skip: realSkip }, () => {
  const withMap = (fn: (program: L2ResponderProgram) => void) => {
    const pinDir = uniquePinDir('hlbt');
    try {
      const program = load(pinDir, 1024);
      try {
        fn(program);
      } finally {
        program.dispose();
      }
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  };
  const key = (i: number) => ({ ip: `198.51.100.${i}`, ifindex: 7 });

  test('forEachBatch visits every entry exactly once, whatever the batch size; keys() and entries() agree with the key-by-key walk', () => {
    withMap((program) => {
      const m = program.maps.responders.v4;
      const written = m.updateMany(Array.from({ length: 200 }, (_, i) => [key(i), { replies: BigInt(i), conflicts: 0n }] as const));
      assert.ok(written.every((r) => r === undefined));
      for (const size of [1, 3, 64, 4096]) {
        const seen: string[] = [];
        m.forEachBatch((b) => {
          assert.ok(b.count <= size || size < 4, 'a batch holds at most what was asked (a bucket may force more only after ENOSPC)');
          for (let i = 0; i < b.count; i++) seen.push(b.keys.toString('hex', i * b.keySize, (i + 1) * b.keySize));
        }, size);
        assert.equal(seen.length, 200, `batch size ${size}`);
        assert.equal(new Set(seen).size, 200, `batch size ${size}: no entry twice`);
      }
      const byKey = m.keysOneByOne().map((k) => k.ip).sort();
      assert.deepEqual(m.keys().map((k) => k.ip).sort(), byKey);
      const entries = m.entries();
      assert.equal(entries.length, 200);
      assert.ok(entries.every(([k, v]) => v.replies === BigInt(Number(k.ip.split('.')[3]))), 'each value with its key');
    });
  });

  test('forEachBatchAsync: the same walk, awaiting each batch (the event loop runs between batches); deleting a batch inside it misses nothing', async () => {
    const pinDir = uniquePinDir('hlbt');
    try {
      const program = load(pinDir, 1024);
      try {
        const m = program.maps.responders.v4;
        m.updateMany(Array.from({ length: 250 }, (_, i) => [key(i), { replies: BigInt(i), conflicts: 0n }] as const));
        let ticks = 0;
        const timer = setInterval(() => ticks++, 0);
        let batches = 0;
        let seen = 0;
        try {
          await m.forEachBatchAsync(async (b) => {
            batches++;
            seen += b.count;
            m.deleteBatchRaw(Buffer.from(b.keys.subarray(0, b.count * b.keySize)), b.count);
            await new Promise((r) => setTimeout(r, 2));
          }, 16);
        } finally {
          clearInterval(timer);
        }
        assert.equal(seen, 250, 'every entry once, although each batch was deleted before the next was read');
        assert.ok(batches >= 250 / 16 / 2, `${batches} batches of at most 16 (a bucket may add some)`);
        assert.ok(ticks >= batches - 1, `timers ran between batches (${ticks} ticks, ${batches} batches)`);
        assert.deepEqual(m.keys(), []);
        await assert.rejects(m.forEachBatchAsync(() => {}, 0), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
      } finally {
        program.dispose();
      }
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  });

  test('an empty map is walked without a batch', () => {
    withMap((program) => {
      let batches = 0;
      program.maps.responders.v4.forEachBatch(() => batches++);
      assert.equal(batches, 0);
      assert.deepEqual(program.maps.responders.v4.keys(), []);
    });
  });

  test('deleteMany: a missing key in the middle gets ENOENT and the keys after it are still deleted', () => {
    withMap((program) => {
      const m = program.maps.responders.v4;
      m.updateMany([0, 1, 3, 4].map((i) => [key(i), { replies: 0n, conflicts: 0n }] as const));
      const out = m.deleteMany([0, 1, 2, 3, 4].map(key));
      assert.deepEqual(out.map((r) => (r === undefined ? 'ok' : batchErrno(r))), ['ok', 'ok', 'ENOENT', 'ok', 'ok']);
      assert.deepEqual(m.keys(), []);
    });
  });

  test('updateMany into a full map: the entries that fit are written, each other entry has HERALD_BPF_MAP_FULL', () => {
    const pinDir = uniquePinDir('hlbt');
    try {
      const program = load(pinDir, 4);
      try {
        const m = program.maps.responders.v4;
        const out = m.updateMany([0, 1, 2, 3, 4, 5].map((i) => [key(i), { replies: 0n, conflicts: 0n }] as const));
        assert.deepEqual(out.map((r) => (r === undefined ? 'ok' : r.code)), ['ok', 'ok', 'ok', 'ok', 'HERALD_BPF_MAP_FULL', 'HERALD_BPF_MAP_FULL']);
        assert.equal(m.keys().length, 4);
        // Replacing existing entries needs no room.
        assert.ok(m.updateMany([0, 1].map((i) => [key(i), { replies: 5n, conflicts: 0n }] as const)).every((r) => r === undefined));
        assert.equal(m.lookup(key(1))?.replies, 5n);
      } finally {
        program.dispose();
      }
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  });

  test('buffers shorter than the count, or a batch size below 1, are refused before any syscall', () => {
    withMap((program) => {
      const m = program.maps.responders.v4;
      assert.throws(() => m.updateBatchRaw(Buffer.alloc(8), Buffer.alloc(16), 2), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
      assert.throws(() => m.forEachBatch(() => {}, 0), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
    });
  });
});
