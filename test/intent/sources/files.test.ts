import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rename, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { silentLogger } from '../../../src/core/logger.js';
import { loadManifestPath } from '../../../src/intent/load.js';
import { FileIntentSource, scanManifestPath, type FileIntentSourceOptions } from '../../../src/intent/sources/files.js';
import { Recorder, keysOf } from './recorder.js';

const FIXTURES = 'test/fixtures/manifests';
const pool = (name: string, cidr: string): string =>
  `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: ${name}\nspec:\n  blocks:\n  - cidr: ${cidr}\n`;
const service = (ns: string, name: string): string =>
  `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${name}\n  namespace: ${ns}\nspec:\n  type: LoadBalancer\n  ports:\n  - port: 80\n`;

/**
 * "Nothing happened" is checked without waiting a quiet period: rescan() runs
 * one complete scan of the state on disk (so its outcome is known), and a
 * marker change written afterwards is the next thing the source may report
 * (inotify events arrive in order and scans run one at a time), so anything
 * the change before it caused shows up before the marker's snapshot.
 */
const markerPool = pool('zz-marker', '203.0.113.240/28');
const hasMarker = (s: { pools: ReadonlyMap<string, unknown> }): boolean => s.pools.has('zz-marker');

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-files-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function started(t: TestContext, opts: Partial<FileIntentSourceOptions> & { path: string }): Promise<Recorder & { source: FileIntentSource }> {
  const source = new FileIntentSource({ log: silentLogger, debounceMs: 30, rescanMs: 0, ...opts });
  t.after(() => source.dispose());
  const rec = new Recorder();
  await source.start(rec);
  return Object.assign(rec, { source });
}

/** Writes the marker into `dir` and returns every snapshot reported from now up to and including the marker's. */
async function untilMarker(rec: Recorder, dir: string): Promise<readonly { pools: ReadonlyMap<string, unknown> }[]> {
  const from = rec.snapshots.length;
  await writeFile(join(dir, 'zz-marker.yaml'), markerPool);
  await rec.snapshotWhere(hasMarker, 'the marker snapshot');
  return rec.snapshots.slice(from);
}

describe('FileIntentSource', () => {
  it('loads a directory at start, before start() resolves', async (t) => {
    const dir = await tempDir(t);
    await writeFile(join(dir, 'pools.yaml'), `${pool('blue', '192.0.2.0/26')}---\n${pool('red', '198.51.100.0/26')}`);
    await writeFile(join(dir, 'svc.yml'), service('shop', 'web'));
    await writeFile(join(dir, 'notes.txt'), 'not a manifest');
    const rec = await started(t, { path: dir });
    assert.equal(rec.snapshots.length, 1);
    assert.deepEqual(keysOf(rec.last), { services: ['shop/web'], pools: ['blue', 'red'], policies: [], nodes: [] });
    assert.equal(rec.last.pools.get('blue')?.source.file, join(dir, 'pools.yaml'));
    assert.equal(rec.problems.length, 0);
  });

  it('publishes an edited file as a new snapshot', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'pools.yaml');
    await writeFile(file, pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { path: dir });
    await writeFile(file, pool('blue', '203.0.113.0/24'));
    const s = await rec.snapshotAfter(1);
    assert.deepEqual(s.pools.get('blue')?.spec.blocks, [{ type: 'cidr', family: 'IPv4', cidr: '203.0.113.0/24' }]);
  });

  it('rejects a bad edit with file, line, document and field, keeps the last snapshot, and takes the fix', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'pools.yaml');
    await writeFile(file, pool('blue', '192.0.2.0/26'));
    await writeFile(join(dir, 'other.yaml'), pool('red', '198.51.100.0/26'));
    const rec = await started(t, { path: dir });
    const first = rec.last;

    await writeFile(file, `${pool('green', '198.51.100.128/26')}---\n${pool('blue', '192.0.2.300/24')}`);
    const problem = await rec.problemAfter(0);
    assert.equal(
      problem,
      `${file}:15:11: document 2 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].cidr: invalid CIDR "192.0.2.300/24": "192.0.2.300" is not an IP address`,
    );
    await rec.source.rescan(); // one more complete scan of the bad state
    assert.equal(rec.snapshots.length, 1, 'nothing of the bad change is applied (not even the good document)');
    assert.equal(rec.last, first);

    // The fix is the marker: the next snapshot must be it, with nothing of the bad state before it.
    await writeFile(file, `${pool('green', '198.51.100.128/26')}---\n${pool('blue', '192.0.2.64/26')}`);
    const s = await rec.snapshotWhere((x) => x.pools.has('blue') && x.pools.has('green'), 'the fixed snapshot');
    assert.deepEqual(keysOf(s).pools, ['blue', 'green', 'red']);
    assert.equal(rec.snapshots.length, 2, 'one snapshot: the fix');
    assert.equal(rec.problems.length, 1);
  });

  it('reports every error of a change, across files', async (t) => {
    const dir = await tempDir(t);
    const rec = await started(t, { path: dir });
    await mkdir(join(dir, 'sub'));
    await writeFile(join(dir, 'a.yaml'), pool('blue', '192.0.2.0/24'));
    await writeFile(join(dir, 'sub', 'b.yaml'), `${pool('blue', '198.51.100.0/24')}---\nkind: Nope\n`);
    await writeFile(join(dir, 'c.yaml'), 'a: [\n');
    const text = await rec.problemAfter(0);
    const lines = text.split('\n');
    assert.equal(lines.length, 3, text);
    assert.match(lines[0] ?? '', /^.*\/c\.yaml:2:1: document 1: YAML syntax error: /);
    assert.equal(lines[1], `${dir}/sub/b.yaml:4:9: document 1 (CiliumLoadBalancerIPPool "blue"): metadata.name: duplicate CiliumLoadBalancerIPPool "blue": already defined in ${dir}/a.yaml document 1 (line 1)`);
    assert.match(lines[2] ?? '', /sub\/b\.yaml:\d+:\d+: document 2 \(Nope\): apiVersion: required /);
    assert.equal(rec.snapshots.length, 1);
  });

  it('sees an editor-style replace (write a temp file, rename it over the original)', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'pools.yaml');
    await writeFile(file, pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { path: dir });
    const tmp = join(dir, '.pools.yaml.swp');
    await writeFile(tmp, pool('blue', '192.0.2.128/26'));
    await rename(tmp, file);
    const s = await rec.snapshotAfter(1);
    assert.deepEqual(s.pools.get('blue')?.spec.blocks, [{ type: 'cidr', family: 'IPv4', cidr: '192.0.2.128/26' }]);
  });

  it('watches a single file through its directory, including rename-replace', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'pool.yaml');
    await writeFile(file, pool('blue', '192.0.2.0/26'));
    await writeFile(join(dir, 'ignored.yaml'), pool('other', '198.51.100.0/24'));
    const rec = await started(t, { path: file });
    assert.deepEqual(keysOf(rec.last).pools, ['blue']);
    await writeFile(`${file}.tmp`, pool('blue', '203.0.113.0/26'));
    await rename(`${file}.tmp`, file);
    const s = await rec.snapshotAfter(1);
    assert.deepEqual(keysOf(s).pools, ['blue'], 'other files of the directory are not read');
    assert.deepEqual(s.pools.get('blue')?.spec.blocks, [{ type: 'cidr', family: 'IPv4', cidr: '203.0.113.0/26' }]);
  });

  it('withdraws the objects of a deleted file', async (t) => {
    const dir = await tempDir(t);
    await writeFile(join(dir, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    await writeFile(join(dir, 'b.yaml'), pool('red', '198.51.100.0/26'));
    const rec = await started(t, { path: dir });
    await rm(join(dir, 'b.yaml'));
    const s = await rec.snapshotAfter(1);
    assert.deepEqual(keysOf(s).pools, ['blue']);
  });

  it('picks up a new file in a new subdirectory (every directory is watched)', async (t) => {
    const dir = await tempDir(t);
    await writeFile(join(dir, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { path: dir });
    await mkdir(join(dir, 'tenants', 'b'), { recursive: true });
    await writeFile(join(dir, 'tenants', 'b', 'svc.yaml'), service('tenant-b', 'portal'));
    await rec.snapshotAfter(1);
    // And a change deep inside it, after the new directory got its own watch.
    await writeFile(join(dir, 'tenants', 'b', 'svc.yaml'), `${service('tenant-b', 'portal')}---\n${service('tenant-b', 'admin')}`);
    await rec.snapshotAfter(2);
    assert.deepEqual(keysOf(rec.last).services, ['tenant-b/admin', 'tenant-b/portal']);
  });

  it('publishes an empty snapshot when every manifest is deleted', async (t) => {
    const dir = await tempDir(t);
    await mkdir(join(dir, 'sub'));
    await writeFile(join(dir, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    await writeFile(join(dir, 'sub', 'b.yaml'), service('shop', 'web'));
    const rec = await started(t, { path: dir });
    await rm(join(dir, 'a.yaml'));
    await rm(join(dir, 'sub'), { recursive: true });
    const isEmpty = (x: Parameters<typeof keysOf>[0]) => JSON.stringify(keysOf(x)) === JSON.stringify({ services: [], pools: [], policies: [], nodes: [] });
    await rec.snapshotWhere(isEmpty, 'an empty snapshot');
    await rec.source.rescan();
    assert.ok(isEmpty(rec.last), 'the empty snapshot stays in force');
    assert.equal(rec.problems.length, 0);
  });

  it('publishes nothing for a touch, a rewrite with the same bytes, or a hidden or non-manifest file', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'a.yaml');
    await writeFile(file, pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { path: dir });
    const later = new Date(Date.now() + 5000);
    await utimes(file, later, later);
    await writeFile(file, pool('blue', '192.0.2.0/26'));
    await writeFile(join(dir, '.hidden.yaml'), 'not: [valid');
    await writeFile(join(dir, 'README.md'), '# notes');
    await rec.source.rescan();
    assert.equal(rec.snapshots.length, 1, 'a scan of this state publishes nothing');
    const reported = await untilMarker(rec, dir);
    assert.equal(reported.length, 1, 'the events of the touch and the rewrites published nothing before the marker');
    assert.ok(hasMarker(reported[0]!));
    assert.equal(rec.problems.length, 0);
  });

  it('reports a missing path at start, then loads it when it is created', async (t) => {
    const dir = await tempDir(t);
    const path = join(dir, 'manifests');
    const rec = await started(t, { path });
    assert.equal(rec.snapshots.length, 0);
    assert.equal(rec.lastProblem, `manifest path ${path} does not exist`);
    await mkdir(path);
    await writeFile(join(path, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    const s = await rec.snapshotAfter(0);
    assert.deepEqual(keysOf(s).pools, ['blue']);
  });

  it('keeps the last snapshot when the path itself disappears, and reports it once', async (t) => {
    const dir = await tempDir(t);
    const path = join(dir, 'manifests');
    await mkdir(path);
    await writeFile(join(path, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { path });
    await rm(path, { recursive: true });
    assert.equal(await rec.problemAfter(0), `manifest path ${path} does not exist`);
    await rec.source.rescan(); // the same missing path, scanned once more: not reported again
    assert.equal(rec.snapshots.length, 1);
    assert.equal(rec.problems.length, 1);
    // Back with other content: a new snapshot; back with the same content would publish nothing.
    await mkdir(path);
    await writeFile(join(path, 'a.yaml'), pool('blue', '203.0.113.0/26'));
    await rec.snapshotAfter(1);
    assert.equal(rec.problems.length, 1, 'the disappearance was reported once');
  });

  it('finds changes no event announced with the periodic re-scan', async (t) => {
    const dir = await tempDir(t);
    // The parent does not exist either, so there is nothing to watch yet.
    const path = join(dir, 'deep', 'manifests');
    const rec = await started(t, { path, rescanMs: 100 });
    assert.equal(rec.problems.length, 1);
    await mkdir(path, { recursive: true });
    await writeFile(join(path, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    const s = await rec.snapshotAfter(0, 5000);
    assert.deepEqual(keysOf(s).pools, ['blue']);
  });

  it('reports nothing after dispose()', async (t) => {
    const dir = await tempDir(t);
    await writeFile(join(dir, 'a.yaml'), pool('blue', '192.0.2.0/26'));
    const source = new FileIntentSource({ path: dir, log: silentLogger, debounceMs: 10, rescanMs: 50 });
    const rec = new Recorder();
    await source.start(rec);
    // The marker: a live source on the same directory whose debounce is ten times longer. Both
    // watches get the same event; had the disposed one still reacted, it would have reported first.
    const witness = await started(t, { path: dir, debounceMs: 100 });
    source.dispose();
    source.dispose();
    await writeFile(join(dir, 'a.yaml'), pool('blue', '203.0.113.0/26'));
    await witness.snapshotAfter(1);
    await source.rescan(); // a disposed source runs no scan
    assert.equal(rec.snapshots.length, 1);
    await assert.rejects(source.start(new Recorder()), /start\(\) after dispose\(\)/);
  });

  it('reads exactly what loadManifestPath reads (same walk rules)', async () => {
    const scan = await scanManifestPath(FIXTURES);
    const load = await loadManifestPath(FIXTURES);
    assert.deepEqual(
      scan.files.map((f) => f.file),
      load.files,
    );
    assert.deepEqual(scan.errors, []);
    assert.ok(scan.dirs.size >= 3, 'the parent, the directory and its subdirectory are watched');
  });
});
