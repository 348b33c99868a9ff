/**
 * Local LB-IPAM coordination on a real state file: this agent is always the
 * allocator, a fresh directory starts empty, a saved state is what the next
 * start reads back (atomically written, schema-checked).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { EMPTY_ALLOCATION_STATE, type AllocationState } from '../../src/controlplane/ipam/state.js';
import { LocalIpamCoordinator } from '../../src/store/local-ipam.js';

const dir = mkdtempSync(join(tmpdir(), 'herald-local-ipam-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a fresh state directory: empty state, this node the allocator, source file, generation 0', async () => {
  const c = new LocalIpamCoordinator(join(dir, 'fresh.json'), 'n1');
  await c.start();
  assert.equal(c.kind, 'local');
  assert.deepEqual(c.current(), EMPTY_ALLOCATION_STATE);
  assert.equal(c.isAllocator(), true);
  assert.equal(c.allocator(), 'n1');
  assert.deepEqual(c.status(), { allocator: 'n1', generation: 0, source: 'file' });
  c.dispose();
});

test('a saved state is current at once, written to the file, and read back by the next start', async () => {
  const path = join(dir, 'saved.json');
  const c = new LocalIpamCoordinator(path, 'n1');
  await c.start();
  const state: AllocationState = { version: 1, allocations: { 'default/web': ['192.0.2.10', '2001:db8::10'] }, fingerprints: { 'default/web': 'f1' }, generation: 7 };
  assert.equal(await c.save(state), true);
  assert.deepEqual(c.current(), state);
  assert.deepEqual(c.status(), { allocator: 'n1', generation: 7, source: 'file' });
  assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), state);
  const next = new LocalIpamCoordinator(path, 'n2');
  await next.start();
  assert.deepEqual(next.current(), state);
  assert.deepEqual(next.status(), { allocator: 'n2', generation: 7, source: 'file' });
});

test('a state file that fails its schema is refused, not half-read', async () => {
  const path = join(dir, 'bad.json');
  writeFileSync(path, JSON.stringify({ version: 1, allocations: { 'default/web': ['not-an-ip'] } }));
  const c = new LocalIpamCoordinator(path, 'n1');
  await assert.rejects(c.start(), /not an IP address/);
  assert.deepEqual(c.current(), EMPTY_ALLOCATION_STATE);
});
