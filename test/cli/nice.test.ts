import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
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

/** Runs applyNice(n) in a fresh process (optionally its own session) and reports every thread's nice and the autogroup's. */
function niceInChild(n: number, ownSession: boolean): { threads: number[]; autogroup: string; parentAutogroup: string; problem?: string } {
  const script = `
    import { readdirSync, readFileSync } from 'node:fs';
    import { applyNice } from ${JSON.stringify(fileURLToPath(new URL('../../src/cli/nice.ts', import.meta.url)))};
    const problem = applyNice(${n});
    const threads = readdirSync('/proc/self/task').map((t) => { const s = readFileSync('/proc/self/task/' + t + '/stat', 'utf8'); return Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[16]); });
    console.log(JSON.stringify({ threads, autogroup: readFileSync('/proc/self/autogroup', 'utf8').trim(), problem }));`;
  const args = ['--import', 'tsx', '--input-type=module', '-e', script];
  // setsid(1) makes the child a session leader, as a service manager does.
  const r = ownSession ? spawnSync('setsid', ['-w', process.execPath, ...args], { encoding: 'utf8' }) : spawnSync(process.execPath, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return { ...JSON.parse(r.stdout), parentAutogroup: readFileSync('/proc/self/autogroup', 'utf8').trim() };
}

test('every thread takes the nice value (Linux keeps one per thread; V8 starts its threads before our code)', () => {
  const r = niceInChild(-3, false);
  assert.equal(r.problem, undefined);
  assert.ok(r.threads.length > 1, 'node runs several threads');
  assert.deepEqual(new Set(r.threads), new Set([-3]));
  // Not a session leader: the session's group (shared with whoever started us) is left alone.
  assert.equal(r.autogroup, r.parentAutogroup);
});

test('a session leader (a service) sets its autogroup nice too, since autogroup scheduling shares the CPU by session first', () => {
  const r = niceInChild(-4, true);
  assert.equal(r.problem, undefined);
  assert.deepEqual(new Set(r.threads), new Set([-4]));
  assert.match(r.autogroup, /nice -4$/);
});
