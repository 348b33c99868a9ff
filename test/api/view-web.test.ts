/** The page's modules (web/view/, DOM types) type-check with the product types they import; esbuild alone would not check them. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

test('web/view type-checks (tsc -p web/tsconfig.json)', () => {
  const r = spawnSync(process.execPath, [`${ROOT}node_modules/typescript/bin/tsc`, '-p', 'web/tsconfig.json'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
