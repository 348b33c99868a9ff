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
  assert.ok(log.lines.some((l) => l.level === 'warn' && /unreadable/.test(l.msg)));
});
