/**
 * Intent can't starve the datapath (issue 9): manifest input is bounded in
 * size (checked before reading), YAML documents, aliases, nesting and
 * alias-expanded size; parsing runs in a worker thread with its own heap;
 * a refused input leaves the previous snapshot in force; values quoted in
 * messages are bounded.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, truncate as truncateFile, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { validatePaths } from '../../src/cli/commands/manifests.js';
import { parseByteSize } from '../../src/cli/options.js';
import { silentLogger } from '../../src/core/logger.js';
import { formatDiagnostic, formatErrors } from '../../src/intent/diagnostics.js';
import { MiB, formatBytes, manifestLimitDefaults, type ManifestLimits } from '../../src/intent/limits.js';
import { loadManifestPath, readManifestFile } from '../../src/intent/load.js';
import { parseFile, parseManifests } from '../../src/intent/parse.js';
import { quote, truncate } from '../../src/intent/quote.js';
import { FileIntentSource } from '../../src/intent/sources/files.js';
import { readStoredManifests } from '../../src/intent/sources/stored-manifest.js';
import { parseInWorker } from '../../src/intent/sources/worker-parser.js';
import { Recorder, keysOf } from './sources/recorder.js';

const pool = (name: string, cidr: string): string =>
  `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: ${name}\nspec:\n  blocks:\n  - cidr: ${cidr}\n`;
const service = (name: string): string =>
  `apiVersion: v1\nkind: Service\nmetadata: { name: ${name}, namespace: default }\nspec:\n  type: LoadBalancer\n  ports: [{ port: 80 }]\n`;

let dir = '';
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'herald-limits-'));
});
after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A sparse file of `bytes` bytes: costs no disk, and reading it would cost that much memory. */
async function sparse(name: string, bytes: number): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, '');
  await truncateFile(path, bytes);
  return path;
}

describe('size cap', () => {
  it('refuses a file over the cap by its size, without reading it, naming the file, its size and the limit', async () => {
    const path = await sparse('huge.yaml', 60 * MiB);
    const read = await readManifestFile(path);
    assert.ok('error' in read);
    assert.equal(read.error.code, 'HERALD_MANIFEST_TOO_LARGE');
    assert.equal(
      formatDiagnostic(read.error),
      `${path}: HERALD_MANIFEST_TOO_LARGE: file is 62914560 bytes (60 MiB), over the limit of 4194304 bytes (4 MiB, --max-manifest-size); not read`,
    );
  });

  it('stops reading one byte past the cap whatever stat says (a pipe, a growing file)', async () => {
    const read = await readManifestFile('/dev/zero', { ...manifestLimitDefaults, maxBytes: 1000 });
    assert.ok('error' in read);
    assert.match(read.error.message, /^file is more than 1000 bytes, over the limit of 1000 bytes/);
  });

  it('loads the other files of a directory but rejects the load as a whole, and the cap is configurable', async (t) => {
    const sub = join(dir, 'mixed');
    await rm(sub, { recursive: true, force: true });
    await import('node:fs/promises').then((fs) => fs.mkdir(sub));
    await writeFile(join(sub, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    await writeFile(join(sub, 'b.yaml'), `${service('web')}# ${'x'.repeat(2000)}\n`);
    t.after(() => rm(sub, { recursive: true, force: true }));
    const ok = await loadManifestPath(sub);
    assert.equal(formatErrors(ok.errors), '');
    const limits: ManifestLimits = { ...manifestLimitDefaults, maxBytes: 1024 };
    const load = await loadManifestPath(sub, limits);
    assert.equal(load.snapshot, undefined);
    assert.deepEqual(load.objects.map((o) => o.kind), ['CiliumLoadBalancerIPPool']);
    assert.deepEqual(load.errors.map((e) => [e.file, e.code]), [[join(sub, 'b.yaml'), 'HERALD_MANIFEST_TOO_LARGE']]);
    // herald validate applies the same limits as the agent.
    const report = await validatePaths([sub], limits);
    assert.equal(report.errors.length, 1);
  });

  it('refuses text and stored values over the cap before parsing them, naming the key', () => {
    const limits: ManifestLimits = { ...manifestLimitDefaults, maxBytes: 100 };
    const text = JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', annotations: { a: 'é'.repeat(100) } } });
    const parsed = parseFile(text, 'x.json', limits);
    assert.equal(parsed.errors[0]?.code, 'HERALD_MANIFEST_TOO_LARGE');
    assert.match(parsed.errors[0]!.message, new RegExp(`^file is ${Buffer.byteLength(text)} bytes`));
    const key = '/herald/manifests/Service/default/web';
    const load = readStoredManifests('/herald/manifests/', [{ key, value: text }], limits);
    assert.equal(load.errors[0]?.file, key);
    assert.equal(load.errors[0]?.code, 'HERALD_MANIFEST_TOO_LARGE');
  });

  it('--max-manifest-size takes binary and decimal units', () => {
    assert.equal(parseByteSize('4MiB'), 4 * MiB);
    assert.equal(parseByteSize('512KiB'), 512 * 1024);
    assert.equal(parseByteSize('1MB'), 1_000_000);
    assert.equal(parseByteSize('300'), 300);
    assert.throws(() => parseByteSize('0'), /at least 1 byte/);
    assert.throws(() => parseByteSize('4 lots'), /not a size/);
    assert.equal(formatBytes(62914560), '60 MiB');
  });
});

describe('YAML bounds (alias bombs and the like)', () => {
  it('refuses a billion-laughs document before expanding it', () => {
    const lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
    for (let i = 1; i < 10; i++) {
      const prev = String.fromCharCode(96 + i);
      lines.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill(`*${prev}`).join(',')}]`);
    }
    const load = parseManifests(`${lines.join('\n')}\n`, 'laughs.yaml');
    assert.equal(load.errors.length, 1, formatErrors(load.errors));
    assert.equal(load.errors[0]?.code, 'HERALD_MANIFEST_TOO_LARGE');
    assert.match(load.errors[0]!.message, /more than 1048576 YAML nodes with its aliases expanded/);
    assert.equal(load.errors[0]?.document, 1);
  });

  it('refuses a file with too many aliases, however small each expansion', () => {
    const text = `kind: Service\nx: &x 1\nitems:\n${'- *x\n'.repeat(20_000)}`;
    const load = parseManifests(text, 'aliases.yaml');
    assert.equal(load.errors.length, 1, formatErrors(load.errors));
    assert.equal(formatDiagnostic(load.errors[0]!), 'aliases.yaml: HERALD_MANIFEST_TOO_LARGE: more than 10000 YAML aliases in the file; refused before parsing it');
    // The same many aliases spread over documents count together; `*` inside strings is not an alias.
    assert.equal(parseManifests(`${'- *x\n'.repeat(10)}`, 'few.yaml').errors.some((e) => /aliases/.test(e.message)), false);
    assert.equal(parseManifests(`a: "${'*'.repeat(20_000)}"\n`, 'stars.yaml').errors.some((e) => /aliases/.test(e.message)), false);
  });

  it('refuses an alias that refers to a node containing it, and nesting deeper than 100 levels', () => {
    assert.match(formatErrors(parseManifests('a: &a [1, *a]\n', 'self.yaml').errors), /alias \*a refers to a node that contains it/);
    const deep = `${'['.repeat(150)}${']'.repeat(150)}\n`;
    assert.match(formatErrors(parseManifests(deep, 'deep.yaml').errors), /nested deeper than 100 levels/);
  });

  it('refuses more than maxDocuments documents, and lists at most maxDiagnostics errors per file', () => {
    const limits: ManifestLimits = { ...manifestLimitDefaults, maxDocuments: 5, maxDiagnostics: 3 };
    const docs = parseManifests('--- null\n'.repeat(10), 'docs.yaml', limits);
    assert.match(formatErrors(docs.errors), /document 6: HERALD_MANIFEST_TOO_LARGE: more than 5 YAML documents in one file/);
    const bad = parseManifests('- 1\n---\n'.repeat(5), 'bad.yaml', { ...manifestLimitDefaults, maxDiagnostics: 3 });
    assert.equal(bad.errors.length, 4);
    assert.equal(bad.errors[3]?.message, '… and 2 more errors in this file (not listed)');
  });
});

describe('bounded quoting', () => {
  it('quotes at most 200 characters of a value, then its size', () => {
    const long = 'x'.repeat(5000);
    assert.equal(quote(long), `"${'x'.repeat(200)}"… (5000 bytes)`);
    assert.equal(quote('short'), '"short"');
    assert.equal(truncate(long, 10), 'xxxxxxxxxx… (5000 bytes)');
  });

  it('a megabyte-long bad value is quoted in the error only up to the bound', () => {
    const huge = `192.0.2.${'9'.repeat(1_000_000)}/24`;
    const load = parseManifests(pool('blue', huge), 'pool.yaml');
    const text = formatErrors(load.errors);
    assert.match(text, /spec\.blocks\[0\]\.cidr: invalid CIDR "192\.0\.2\.9+"… \(1000011 bytes\)/);
    assert.ok(text.length < 1000, `${text.length} characters`);
  });
});

describe('parsing in a worker thread', () => {
  const bigServices = (bytes: number): string => {
    const parts: string[] = [];
    let n = 0;
    for (let i = 0; n < bytes; i++) {
      const s = `${service(`svc-${i}`)}---\n`;
      parts.push(s);
      n += s.length;
    }
    return parts.join('');
  };

  it('parses and validates off the main thread: the main event loop keeps turning meanwhile', async () => {
    const text = bigServices(1 * MiB);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      const load = await parseInWorker({ kind: 'files', files: [{ file: 'big.yaml', text }], ioErrors: [], limits: manifestLimitDefaults });
      assert.equal(formatErrors(load.errors), '');
      assert.ok(load.snapshot && load.snapshot.services.size > 1000);
    } finally {
      clearInterval(timer);
    }
    // A parse of this size on the main thread would let no timer run until it ends.
    assert.ok(ticks >= 20, `the main loop ran ${ticks} timer callbacks during the parse`);
  });

  it('a parse that exhausts its heap kills the worker only, and the file being parsed is refused by name', async () => {
    const text = '- 1\n'.repeat(400_000);
    const load = await parseInWorker(
      { kind: 'files', files: [{ file: 'ok.yaml', text: pool('blue', '192.0.2.0/26') }, { file: 'ints.yaml', text }], ioErrors: [], limits: manifestLimitDefaults },
      { heapMb: 32 },
    );
    assert.equal(load.snapshot, undefined);
    assert.equal(formatErrors(load.errors), 'ints.yaml: HERALD_MANIFEST_TOO_LARGE: parsing needed more than 32 MB of memory; refused');
  });
});

describe('FileIntentSource with a file over the cap', () => {
  async function started(t: TestContext, path: string): Promise<Recorder> {
    const source = new FileIntentSource({ path, log: silentLogger, debounceMs: 30, rescanMs: 0 });
    t.after(() => source.dispose());
    const rec = new Recorder();
    await source.start(rec);
    return rec;
  }

  it('refuses it with the size error, keeps the previous snapshot, and takes the directory back once it is gone', async (t) => {
    const sub = await mkdtemp(join(dir, 'watched-'));
    await writeFile(join(sub, 'pool.yaml'), pool('blue', '192.0.2.0/26'));
    const rec = await started(t, sub);
    assert.equal(rec.snapshots.length, 1);
    const big = join(sub, 'big.yaml');
    await writeFile(big, '');
    await truncateFile(big, 60 * MiB);
    const problem = await rec.problemAfter(0);
    assert.equal(problem, `${big}: HERALD_MANIFEST_TOO_LARGE: file is 62914560 bytes (60 MiB), over the limit of 4194304 bytes (4 MiB, --max-manifest-size); not read`);
    assert.equal(rec.snapshots.length, 1, 'the previous snapshot stays in force');
    assert.deepEqual(keysOf(rec.last).pools, ['blue']);
    await unlink(big);
    await writeFile(join(sub, 'pool2.yaml'), pool('red', '198.51.100.0/26'));
    assert.deepEqual(keysOf(await rec.snapshotAfter(1)).pools, ['blue', 'red']);
  });
});
