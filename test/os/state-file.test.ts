import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { z } from 'zod';
import { allocationStateSchema, type AllocationState } from '../../src/controlplane/ipam/state.js';
import { isHeraldError } from '../../src/core/errors.js';
import { StateFile } from '../../src/os/state-file.js';

const counter = z.object({ n: z.number().int() });

describe('StateFile', () => {
  let dir = '';
  let seq = 0;
  const fresh = (): string => join(dir, `state-${++seq}.json`);
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'herald-state-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('load of a missing file is undefined; save then load round-trips', async () => {
    const file = new StateFile({ path: fresh(), schema: counter });
    assert.equal(await file.load(), undefined);
    await file.save({ n: 1 });
    assert.deepEqual(await file.load(), { n: 1 });
    await file.save({ n: 2 });
    assert.deepEqual(await file.load(), { n: 2 });
    assert.equal(await readFile(file.path, 'utf8'), '{"n":2}\n');
  });

  it('leaves no temporary file behind', async () => {
    const path = fresh();
    const file = new StateFile({ path, schema: counter });
    await file.save({ n: 1 });
    const names = await readdir(dir);
    assert.deepEqual(names.filter((n) => n.startsWith(`state-${seq}.json`)), [`state-${seq}.json`]);
  });

  const corrupt: [string, string, RegExp][] = [
    ['an empty file', '', /corrupt state file .*: it is empty/],
    ['a torn write', '{"n": 1', /corrupt state file .*: it is not valid JSON/],
    ['valid JSON, wrong shape', '{"n": "one"}', /invalid state file .*: n: /],
    ['valid JSON, not an object', '[]', /invalid state file .*: \(root\): /],
  ];
  for (const [name, text, message] of corrupt) {
    it(`a corrupt file is a precise HERALD_BAD_ARGUMENT, never "no state": ${name}`, async () => {
      const path = fresh();
      await writeFile(path, text);
      const file = new StateFile({ path, schema: counter });
      await assert.rejects(file.load(), (e: unknown) => isHeraldError(e, 'HERALD_BAD_ARGUMENT') && message.test(e.message) && e.message.includes(path));
    });
  }

  it('validates an LB-IPAM allocation state, naming the bad entry', async () => {
    const path = fresh();
    const file = new StateFile<AllocationState>({ path, schema: allocationStateSchema, indent: 2 });
    const state: AllocationState = { version: 1, allocations: { 'default/a': ['192.0.2.1', '2001:db8::1'] }, fingerprints: { 'default/a': '00ff' } };
    await file.save(state);
    assert.deepEqual(await file.load(), state);
    await writeFile(path, JSON.stringify({ version: 1, allocations: { 'default/a': ['192.0.2.300'] } }));
    await assert.rejects(file.load(), /invalid state file .*: allocations\.default\/a\.0: not an IP address: "192\.0\.2\.300"/);
    await writeFile(path, JSON.stringify({ version: 2, allocations: {} }));
    await assert.rejects(file.load(), /invalid state file .*: version: /);
  });

  it('serialises concurrent saves in call order; the last one wins', async () => {
    const file = new StateFile({ path: fresh(), schema: counter });
    const saves = Array.from({ length: 20 }, (_, n) => file.save({ n }));
    await Promise.all(saves);
    assert.deepEqual(await file.load(), { n: 19 });
  });

  it('a concurrent load sees the old or the new value, never a torn one', async () => {
    const file = new StateFile({ path: fresh(), schema: z.object({ n: z.number(), pad: z.string() }) });
    const pad = 'x'.repeat(256 * 1024);
    await file.save({ n: 0, pad });
    const writes = Array.from({ length: 10 }, (_, i) => file.save({ n: i + 1, pad }));
    const seen: number[] = [];
    for (let i = 0; i < 10; i++) seen.push(((await file.load()) as { n: number }).n);
    await Promise.all(writes);
    assert.ok(seen.every((n) => n >= 0 && n <= 10));
  });

  it('a failed save is a HERALD_INTERNAL error and does not block later saves', async () => {
    const sub = join(dir, 'not-yet');
    const file = new StateFile({ path: join(sub, 'state.json'), schema: counter });
    await assert.rejects(file.save({ n: 1 }), (e: unknown) => isHeraldError(e, 'HERALD_INTERNAL') && e.message.includes(sub));
    await mkdir(sub);
    await file.save({ n: 2 });
    assert.deepEqual(await file.load(), { n: 2 });
  });

  it('a failed rename removes the temporary file and leaves the target alone', async () => {
    const path = join(dir, 'a-directory');
    await mkdir(path);
    await writeFile(join(path, 'keep'), 'x');
    const file = new StateFile({ path, schema: counter });
    await assert.rejects(file.save({ n: 1 }), (e: unknown) => isHeraldError(e, 'HERALD_INTERNAL'));
    assert.deepEqual((await readdir(dir)).filter((n) => n.startsWith('a-directory')), ['a-directory']);
    assert.deepEqual(await readdir(path), ['keep']);
  });

  it('a value mutated after save() is written as it was at the call', async () => {
    const file = new StateFile({ path: fresh(), schema: counter });
    const value = { n: 1 };
    const done = file.save(value);
    value.n = 2;
    await done;
    assert.deepEqual(await file.load(), { n: 1 });
  });
});
