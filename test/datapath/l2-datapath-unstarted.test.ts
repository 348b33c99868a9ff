/**
 * L2Datapath before start(): its options are checked at construction (before
 * anything touches the kernel), and every use that needs the loaded program
 * fails with a coded error instead of a TypeError. start() itself loads and
 * attaches the program: the lab tests cover it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { silentLogger } from '../../src/core/logger.js';
import { systemClock } from '../../src/core/clock.js';
import { L2Datapath, RESPONDER_MAP_SIZE_DEFAULT } from '../../src/datapath/l2-responder/datapath.js';

const make = (responderMapSize: number) =>
  new L2Datapath({ clock: systemClock, log: silentLogger }, { pinDir: '/sys/fs/bpf/herald/unused', responderMapSize, liveness: { intervalMs: 200, maxAgeMs: 800 } });

test('the responder map size must be a positive integer', () => {
  for (const size of [0, -1, 1.5, Number.NaN]) {
    assert.throws(() => make(size), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && (e as Error).message === `responder map size must be a positive integer, got ${size}`, String(size));
  }
  assert.doesNotThrow(() => make(1));
  assert.equal(RESPONDER_MAP_SIZE_DEFAULT, 65536);
});

test('before start(): the map, the maps, the ring buffer and the interface edge refuse with HERALD_STOPPED; dispose is harmless', () => {
  const d = make(16);
  const stopped = (e: unknown) => isHeraldError(e, 'HERALD_STOPPED') && (e as Error).message === 'the L2 datapath is not started';
  assert.throws(() => d.map, stopped);
  assert.throws(() => d.maps, stopped);
  assert.throws(() => d.conflictEventsFd, stopped);
  assert.throws(() => d.prepare({ name: 'eth0', ifindex: 2, mac: '02:00:5e:00:53:01', ethernet: true, up: true, carrier: true, arp: true }), stopped);
  assert.throws(() => d.forgetAllBut(new Set([2])), stopped);
  assert.equal(d.liveness, undefined);
  assert.doesNotThrow(() => d.dispose());
});
