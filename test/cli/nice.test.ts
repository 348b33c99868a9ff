import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { parseNice } from '../../src/cli/nice.js';

const HERALD = fileURLToPath(new URL('../../bin/herald', import.meta.url));

test('--nice takes a whole number from -20 to 19 and refuses anything else precisely', () => {
  assert.equal(parseNice('-10'), -10);
  assert.equal(parseNice('19'), 19);
  for (const bad of ['-21', '20', '1.5', 'low', '']) assert.throws(() => parseNice(bad), /--nice .*: expected a whole number from -20 to 19/);
  const r = spawnSync(process.execPath, [HERALD, 'agent', '--nice', '42', '--manifests', '/nonexistent'], { encoding: 'utf8' });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--nice 42: expected a whole number from -20 to 19/);
});
