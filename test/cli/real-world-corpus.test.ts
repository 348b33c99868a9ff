/**
 * The real-world corpus (test/fixtures/real-world): each file or directory
 * through the real CLI binary (bin/herald validate, from dist/), checked
 * against its verdict in verdicts.json — accepted or refused, objects read,
 * kinds ignored, and the warnings or errors that must be printed.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CORPUS = fileURLToPath(new URL('../fixtures/real-world/', import.meta.url));
const BIN = `${REPO}bin/herald`;

interface Verdict {
  readonly verdict: 'accepted' | 'refused';
  readonly read?: number;
  readonly ignored?: readonly string[];
  readonly warnings?: readonly string[];
  readonly errors?: readonly string[];
  readonly reason: string;
}

const verdicts = JSON.parse(readFileSync(`${CORPUS}verdicts.json`, 'utf8')) as Record<string, Verdict>;

function validate(path: string): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    // A fixed node name, so the result does not depend on this machine's hostname.
    execFile(BIN, ['validate', '--node', 'corpus-node', path], { cwd: REPO, timeout: 30_000 }, (err, stdout) => {
      if (err && typeof err.code !== 'number') return reject(err);
      resolve({ code: err ? Number(err.code) : 0, stdout });
    });
  });
}

const count = (kinds: readonly string[]): Map<string, number> => {
  const m = new Map<string, number>();
  for (const k of kinds) m.set(k, (m.get(k) ?? 0) + 1);
  return m;
};

describe('real-world manifest corpus through bin/herald validate', () => {
  it('has a verdict for every entry, and at least 12 of them', () => {
    const entries = readdirSync(CORPUS).filter((n) => n !== 'verdicts.json').sort();
    assert.deepEqual(entries, Object.keys(verdicts).sort());
    assert.ok(entries.length >= 12);
  });

  for (const [name, v] of Object.entries(verdicts)) {
    it(`${name}: ${v.verdict} (${v.reason})`, async () => {
      const { code, stdout } = await validate(`${CORPUS}${name}`);
      const lines = stdout.trimEnd().split('\n');
      const summary = lines[lines.length - 1] ?? '';
      const diagnostics = lines.slice(0, -1);
      if (v.verdict === 'refused') {
        assert.equal(code, 1, stdout);
        assert.match(summary, /: \d+ errors?/, stdout);
        for (const e of v.errors ?? []) assert.ok(diagnostics.some((l) => !l.includes('warning:') && l.includes(e)), `missing error ${e}:\n${stdout}`);
        return;
      }
      assert.equal(code, 0, stdout);
      const warnings = diagnostics.filter((l) => l.includes(': warning: '));
      assert.equal(warnings.length, v.warnings?.length ?? 0, stdout);
      for (const w of v.warnings ?? []) assert.ok(warnings.some((l) => l.includes(w)), `missing warning ${w}:\n${stdout}`);
      const ignored = count(v.ignored ?? []);
      const total = (v.read ?? 0) + (v.ignored?.length ?? 0);
      assert.match(summary, new RegExp(`^\\d+ files?, ${total} objects?`), stdout);
      if (ignored.size === 0) {
        assert.doesNotMatch(summary, /ignored/, stdout);
      } else {
        assert.ok(summary.includes(`: ${v.read ?? 0} read, ${v.ignored?.length} ignored (`), stdout);
        for (const [kind, n] of ignored) assert.ok(summary.includes(`${kind} ×${n}`), `summary misses ${kind} ×${n}: ${summary}`);
      }
    });
  }
});
