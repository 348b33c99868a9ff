/** Issue 18, "a new user's first ten minutes": the pieces that need no lab. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { IntentReport, nodeNameWarning, renderIntentStatus } from '../../src/api/intent-status.js';
import { discoverPinDir, discoverStatusSocket } from '../../src/cli/discover.js';
import { heraldVersion, subcommands } from '../../src/cli/main.js';
import { durationOption, formatDuration, parseDuration } from '../../src/cli/options.js';
import { loadManifestPath } from '../../src/intent/load.js';
import { requireManifestPath } from '../../src/intent/sources/require-path.js';
import { Command } from 'commander';

const tmp = mkdtempSync(join(tmpdir(), 'herald-first-ten-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

const listen = (path: string) =>
  new Promise<Server>((resolve) => {
    const s = createServer();
    s.listen(path, () => resolve(s));
  });

describe('finding the running agent without --node', () => {
  test('one socket in the directory is used; a non-socket file is not a candidate', async () => {
    const dir = mkdtempSync(join(tmp, 'run-'));
    writeFileSync(join(dir, 'notes.sock'), 'a regular file');
    const s = await listen(join(dir, 'alpha.sock'));
    try {
      assert.deepEqual(discoverStatusSocket({}, dir, 'host'), { path: join(dir, 'alpha.sock'), how: 'only-one' });
    } finally {
      s.close();
    }
  });

  test('several sockets: refused with the list and a hint to use --node', async () => {
    const dir = mkdtempSync(join(tmp, 'run-'));
    const a = await listen(join(dir, 'alpha.sock'));
    const b = await listen(join(dir, 'beta.sock'));
    try {
      assert.throws(() => discoverStatusSocket({}, dir, 'host'), (e: Error & { code?: string }) => {
        assert.equal(e.code, 'HERALD_BAD_ARGUMENT');
        assert.ok(e.message.includes(join(dir, 'alpha.sock')) && e.message.includes(join(dir, 'beta.sock')), e.message);
        assert.match(e.message, /--node <name>/);
        return true;
      });
      assert.equal(discoverStatusSocket({ node: 'beta' }, dir, 'host').path, join(dir, 'beta.sock'));
      assert.equal(discoverStatusSocket({ statusSocket: '/x.sock', node: 'beta' }, dir, 'host').path, '/x.sock');
    } finally {
      a.close();
      b.close();
    }
  });

  test('none: the hostname default, so the error names the path looked for', () => {
    assert.deepEqual(discoverStatusSocket({}, join(tmp, 'absent'), 'host'), { path: join(tmp, 'absent', 'host.sock'), how: 'default' });
    assert.deepEqual(discoverPinDir({}, join(tmp, 'absent'), 'host'), { path: join(tmp, 'absent', 'host'), how: 'default' });
  });

  test('pin directories: the only node directory, else --node', () => {
    const root = mkdtempSync(join(tmp, 'pins-'));
    mkdtempSync(join(root, 'n1-'));
    const only = discoverPinDir({}, root, 'host');
    assert.equal(only.how, 'only-one');
    mkdtempSync(join(root, 'n2-'));
    assert.throws(() => discoverPinDir({}, root, 'host'), /several agents run on this machine \(pin directories: .*--bpf-pin-dir/);
    assert.equal(discoverPinDir({ node: 'n9' }, root, 'host').path, join(root, 'n9'));
  });
});

describe('durations print and parse with units', () => {
  test('formatDuration picks the largest exact unit', () => {
    assert.equal(formatDuration(800), '800ms');
    assert.equal(formatDuration(3000), '3s');
    assert.equal(formatDuration(300_000), '5m');
    assert.equal(formatDuration(1500), '1500ms');
    assert.equal(formatDuration(0), '0ms');
    for (const ms of [800, 3000, 300_000, 1500]) assert.equal(parseDuration(formatDuration(ms)), ms);
  });

  test('a duration option shows its default with a unit in --help and parses units', () => {
    const cmd = new Command('x').addOption(durationOption('--every <duration>', 'period', 3000)).exitOverride();
    assert.match(cmd.helpInformation(), /--every <duration>\s+period \(default: 3s\)/);
    cmd.parse(['--every', '800ms'], { from: 'user' });
    assert.equal(cmd.opts().every, 800);
  });

  test('agent --help prints no duration default as bare milliseconds', async () => {
    const agent = await subcommands.find((c) => c.name === 'agent')!.load();
    const help = agent.helpInformation();
    assert.match(help, /--garp-interval <duration>\s+time between gratuitous ARP rounds \(default: 1s\)/);
    assert.doesNotMatch(help, /<duration>[^\n]*\(default: \d+\)/);
  });
});

describe('the command table loads lazily and says what each command says', () => {
  test('each entry loads the command of its name with the same description', async () => {
    for (const entry of subcommands) {
      const cmd = await entry.load();
      assert.equal(cmd.name(), entry.name);
      assert.equal(cmd.description(), entry.description, entry.name);
    }
  });

  test('--version is the package version', () => {
    assert.match(heraldVersion(), /^\d+\.\d+\.\d+/);
  });
});

describe('--manifests checked at start', () => {
  test('a missing path, a directory with no manifest file, a file with no object are refused; invalid manifests are left to the source', async () => {
    await assert.rejects(requireManifestPath(join(tmp, 'nope')), /--manifests .*nope: no such file or directory/);
    const empty = mkdtempSync(join(tmp, 'm-'));
    writeFileSync(join(empty, 'README.md'), '# not a manifest');
    await assert.rejects(requireManifestPath(empty), /no manifest file in it \(\.yaml, \.yml, \.json\)/);
    writeFileSync(join(empty, 'blank.yaml'), '---\n# later\n');
    await assert.rejects(requireManifestPath(empty), /1 file\(s\) read, no manifest object in them/);
    writeFileSync(join(empty, 'bad.yaml'), 'apiVersion: v1\nkind: Service\nmetadata: { name: bad }\nspec: { ports: [{ port: 70000 }] }\n');
    await requireManifestPath(empty); // an error the file source reports (and status shows), not a start failure
  });
});

describe('intent status: rejections and node warnings in the human view', () => {
  test('a rejected load is rendered with file, document, object, field and reason, and cleared by a good load', async () => {
    const dir = mkdtempSync(join(tmp, 'rej-'));
    writeFileSync(join(dir, 'svc.yaml'), 'apiVersion: v1\nkind: Service\nmetadata: { name: bad, namespace: default }\nspec: { ports: [{ port: 70000 }] }\n');
    const load = await loadManifestPath(dir);
    assert.ok(load.errors.length > 0);
    const report = new IntentReport('n1');
    report.rejectedErrors(load.errors, new Date(0));
    const lines = renderIntentStatus(report.status(), []);
    assert.match(lines[0]!, /^intent REJECTED at 1970-01-01T00:00:00.000Z/);
    assert.ok(lines.some((l) => /svc\.yaml document 1 Service\/default\/bad spec\.ports\[0\]\.port: /.test(l)), lines.join('\n'));
    writeFileSync(join(dir, 'svc.yaml'), 'apiVersion: v1\nkind: Service\nmetadata: { name: ok, namespace: default }\nspec: { type: LoadBalancer, ports: [{ port: 80 }] }\n');
    const good = await loadManifestPath(dir);
    report.loaded(good.snapshot!);
    assert.deepEqual(renderIntentStatus(report.status(), []), []);
  });

  test('--node that matches no Node object (when there are Node objects) is a warning; none at all is fine', async () => {
    const dir = mkdtempSync(join(tmp, 'node-'));
    writeFileSync(join(dir, 'node.yaml'), 'apiVersion: v1\nkind: Node\nmetadata: { name: worker-1 }\n');
    const snap = (await loadManifestPath(dir)).snapshot!;
    assert.match(nodeNameWarning('worker-2', snap) ?? '', /--node worker-2 matches no Node object in the intent \(nodes: worker-1\)/);
    assert.equal(nodeNameWarning('worker-1', snap), undefined);
    const report = new IntentReport('worker-2');
    report.loaded(snap);
    assert.match(renderIntentStatus(report.status(), [])[0]!, /^WARNING: --node worker-2 matches no Node object/);
  });

  test('a conflicting pool is rendered with its reason', () => {
    const lines = renderIntentStatus(undefined, [
      { pool: 'a', conflicting: false, conditions: [] },
      { pool: 'b', conflicting: true, conditions: [{ type: 'cilium.io/PoolConflict', status: 'True', message: 'overlaps pool a (198.51.100.0/24)' }] },
    ]);
    assert.deepEqual(lines, ['pool b CONFLICTING: overlaps pool a (198.51.100.0/24)']);
  });
});

describe('IPv6 in status (issue 11: NDP)', () => {
  test('an owned IPv6 address is listed as owned like an IPv4 one, and "not announced" is gone', async () => {
    const { buildStatus, renderStatus } = await import('../../src/api/status.js');
    const emptyMap = { entries: () => [], lookup: () => undefined };
    const st = buildStatus({
      config: { node: 'n1', store: 'local', datapath: { pinDir: '/pins/n1' } },
      startedAt: 0,
      controlPlane: {
        node: 'n1',
        snapshotLoaded: true,
        ipamState: { generation: 0, source: 'file' },
        candidates: [
          { ip: '198.51.100.10', interfaces: ['eth0'], services: ['default/web'], policies: ['p'] },
          { ip: '2001:db8::10', interfaces: ['eth0'], services: ['default/web'], policies: ['p'] },
        ],
        ownership: { owned: new Set(['198.51.100.10', '2001:db8::10']), owners: new Map() },
      },
      reconciler: undefined,
      rowsNotDone: [],
      table: [],
      datapath: { maps: { responders: emptyMap, config: emptyMap }, map: { capacity: 16 } },
      garp: { sent: 0, failed: 0 },
      now: 0n,
    } as unknown as Parameters<typeof buildStatus>[0]);
    assert.deepEqual(st.owned.map((o) => o.ip), ['198.51.100.10', '2001:db8::10']);
    assert.doesNotMatch(renderStatus(st), /not announced/);
    assert.match(renderStatus(st), /answers: ARP 0, NDP 0/);
  });
});
