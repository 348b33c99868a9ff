/**
 * The local-store timeline kept in the state directory (a real file): an
 * agent restart finds the same events with the same ids and goes on with
 * higher ones; the file stays bounded by the ring; a corrupt file is set
 * aside, not fatal.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { eventRingDefaults } from '../../src/core/events.js';
import { FileJournal } from '../../src/store/local-journal.js';
import { recordingLogger } from '../helpers/recording-logger.js';

const dir = mkdtempSync(join(tmpdir(), 'herald-journal-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('the timeline survives a restart: same ids, in order, and new ids above them', async () => {
  const path = join(dir, 'view-events.json');
  const first = new FileJournal('n1', path, recordingLogger(), { flushMs: 10 });
  await first.start();
  await first.record({ kind: 'node-started', version: '1' });
  await first.record({ kind: 'allocated', service: 'default/web', ip: '198.51.100.10' });
  await first.record({ kind: 'node-stopping' });
  await first.flush();
  const ids = first.ring.list().map((e) => e.id);
  const second = new FileJournal('n1', path, recordingLogger(), { flushMs: 10 });
  await second.start();
  assert.deepEqual(second.ring.list().map((e) => e.id), ids);
  assert.deepEqual(second.ring.list().map((e) => e.kind), ['node-started', 'allocated', 'node-stopping']);
  await second.record({ kind: 'node-started', version: '1' });
  assert.ok(second.ring.last > ids[ids.length - 1]!);
  // Coalesced writes reach the file without an explicit flush.
  await new Promise((r) => setTimeout(r, 100));
  assert.equal((JSON.parse(readFileSync(path, 'utf8')) as unknown[]).length, 4);
});

test('the file is bounded by the ring', async () => {
  const path = join(dir, 'bounded.json');
  const j = new FileJournal('n1', path, recordingLogger(), { flushMs: 10 });
  await j.start();
  for (let k = 0; k < eventRingDefaults.capacity + 500; k++) await j.record({ kind: 'intent-accepted' });
  await j.flush();
  assert.equal((JSON.parse(readFileSync(path, 'utf8')) as unknown[]).length, eventRingDefaults.capacity);
});

test('a corrupt file is set aside with a warning; the agent goes on with an empty timeline', async () => {
  const path = join(dir, 'corrupt.json');
  writeFileSync(path, '{"not": "a list"');
  const log = recordingLogger();
  const j = new FileJournal('n1', path, log);
  await j.start();
  assert.equal(j.ring.list().length, 0);
  assert.ok(existsSync(`${path}.corrupt`));
  assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj.path]), [['warn', 'cluster view: the kept timeline is unreadable; set aside, starting a new one', path]]);
});

test('a kept file read back out of order, with unreadable entries, is the valid events in id order; new ids go above a stored id ahead of the clock', async () => {
  const path = join(dir, 'unordered.json');
  const ahead = Date.now() + 3_600_000; // written by a host whose clock ran an hour fast
  const ev = (id: number, kind: string) => ({ id, node: 'n0', at: '2026-11-26T00:00:00.000Z', kind });
  writeFileSync(path, JSON.stringify([ev(ahead, 'node-stopping'), { id: -1, node: 'n0', at: 'x', kind: 'bad' }, 'junk', ev(5, 'node-started'), null, ev(7, 'intent-accepted')]));
  const log = recordingLogger();
  const j = new FileJournal('n1', path, log, { flushMs: 10 });
  await j.start();
  assert.deepEqual(j.ring.list().map((e) => [e.id, e.kind, e.node]), [[5, 'node-started', 'n0'], [7, 'intent-accepted', 'n0'], [ahead, 'node-stopping', 'n0']]);
  await j.record({ kind: 'node-started', version: '2' });
  await j.record({ kind: 'node-stopping' });
  const mine = j.ring.list().slice(3);
  assert.deepEqual(mine.map((e) => [e.id, e.kind, e.node]), [[ahead + 1, 'node-started', 'n1'], [ahead + 2, 'node-stopping', 'n1']]);
  assert.ok(Math.abs(Date.parse(mine[0]!.at) - Date.now()) < 60_000, 'stamped with the wall time it was recorded at');
  assert.equal(log.lines.length, 0);
});

test('two events in the same millisecond get increasing ids (none dropped)', async () => {
  const j = new FileJournal('n1', join(dir, 'same-ms.json'), recordingLogger(), { flushMs: 10 });
  await j.start();
  for (let k = 0; k < 50; k++) await j.record({ kind: 'intent-accepted' });
  const ids = j.ring.list().map((e) => e.id);
  assert.equal(ids.length, 50);
  assert.ok(ids.every((id, k) => k === 0 || id > ids[k - 1]!));
  await j.flush();
});

test('a flush before start (an agent stopped while starting) leaves the kept file as it was', async () => {
  const path = join(dir, 'early-stop.json');
  const first = new FileJournal('n1', path, recordingLogger(), { flushMs: 10 });
  await first.start();
  await first.record({ kind: 'node-started', version: '1' });
  await first.flush();
  const kept = readFileSync(path, 'utf8');
  const early = new FileJournal('n1', path, recordingLogger(), { flushMs: 10 });
  await early.record({ kind: 'intent-accepted' }); // before start: in the ring, no write scheduled
  await early.flush();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(readFileSync(path, 'utf8'), kept);
});

test('a failed save is a warning naming the file, not a throw', async () => {
  const path = join(dir, 'no-such-dir', 'events.json');
  const log = recordingLogger();
  const j = new FileJournal('n1', path, log, { flushMs: 10 });
  await j.start();
  await j.record({ kind: 'node-started', version: '1' });
  await j.flush();
  assert.deepEqual(log.lines.map((l) => [l.level, l.msg, l.obj.path]), [['warn', 'cluster view: keeping the timeline failed', path]]);
  assert.equal(typeof log.lines[0]!.obj.err, 'string');
});
