/**
 * One contract, two implementations: the in-memory fake the unit tests use and
 * the real pinned BPF map must behave the same.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { describe, test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { L2ResponderProgram } from '../../src/datapath/l2-responder/program.js';
import { BpfResponderMap, FakeResponderMap, type ResponderMap } from '../../src/datapath/l2-responder/responder-map.js';

const CAPACITY = 4;

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
    const pinDir = `/sys/fs/bpf/herald/hlct${randomBytes(3).toString('hex')}`;
    let program: L2ResponderProgram;
    try {
      program = L2ResponderProgram.load({ pinDir, responderMapSize: CAPACITY });
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
