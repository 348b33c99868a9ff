/**
 * `herald validate`, `herald apply`, `herald delete` as an operator runs
 * them (a child process each), against a real etcd for apply and delete.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { validationSummary } from '../../src/cli/commands/manifests.js';
import { createEtcdClient } from '../../src/intent/sources/etcd-client.js';
import { listManifests } from '../../src/intent/sources/etcd-store.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';
import { runHerald } from '../helpers/herald-cli.js';

const FIXTURES = 'test/fixtures/manifests';
const pool = (name: string, cidr: string): string =>
  `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: ${name}\nspec:\n  blocks:\n  - cidr: ${cidr}\n`;

let dir = '';
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'herald-cli-'));
});
after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function file(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, text);
  return path;
}

const FIXTURE_WARNINGS =
  'test/fixtures/manifests/service-annotated.yaml:8:36: document 1 (Service "shop/web"): warning: metadata.annotations["io.cilium/lb-ipam-sharing-key"]: ignored: "lbipam.cilium.io/sharing-key" is also set and takes precedence\n' +
  // spec.loadBalancerIP is deprecated in Kubernetes; Cilium's documentation points at the annotation.
  'test/fixtures/manifests/services.json:15:27: document 1, item 1 (Service "shop/api"): warning: spec.loadBalancerIP: deprecated: use the lbipam.cilium.io/ips annotation (still honoured)\n';

describe('herald validate', () => {
  it('accepts the fixture directory and prints a summary', async () => {
    const r = await runHerald(['validate', FIXTURES]);
    assert.equal(r.stderr, '');
    // The fixture sets a current name and its old alias: the alias is ignored, and said so.
    assert.equal(r.stdout, `${FIXTURE_WARNINGS}7 files, 12 objects: ok, 2 warnings\n`);
    assert.equal(r.code, 0);
  });

  it('adds up several paths, and prints warnings without failing', async () => {
    const empty = await file('warn/empty.yaml', 'apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: empty\nspec: {}\n');
    const r = await runHerald(['validate', `${FIXTURES}/pools-v2.yaml`, empty]);
    assert.equal(
      r.stdout,
      `${empty}:5:1: document 1 (CiliumLoadBalancerIPPool "empty"): warning: spec.blocks: the pool has no blocks, so it allocates nothing\n` +
        '2 files, 4 objects: ok, 1 warning\n',
    );
    assert.equal(r.code, 0);
  });

  it('prints every error with file, line, document and field, and exits 1', async () => {
    const bad = await file(
      'bad/pools.yaml',
      `${pool('blue', '192.0.2.0/24')}---\n${pool('green', '192.0.2.300/24')}---\n${pool('blue', '198.51.100.0/24')}`,
    );
    const r = await runHerald(['validate', join(dir, 'bad')]);
    assert.equal(
      r.stdout,
      [
        `${bad}:15:11: document 2 (CiliumLoadBalancerIPPool "green"): spec.blocks[0].cidr: invalid CIDR "192.0.2.300/24": "192.0.2.300" is not an IP address`,
        `${bad}:20:9: document 3 (CiliumLoadBalancerIPPool "blue"): metadata.name: duplicate CiliumLoadBalancerIPPool "blue": already defined in ${bad} document 1 (line 1)`,
        '1 file, 1 object: 2 errors',
        '',
      ].join('\n'),
    );
    assert.equal(r.code, 1);
  });

  it('fails on a path that does not exist', async () => {
    const missing = join(dir, 'nope');
    const r = await runHerald(['validate', missing]);
    assert.equal(r.stdout, `${missing}: cannot read: ENOENT\n0 files, 0 objects: 1 error\n`);
    assert.equal(r.code, 1);
  });

  it('needs a path', async () => {
    const r = await runHerald(['validate']);
    assert.match(r.stderr, /missing required argument 'path'/);
    assert.equal(r.code, 1);
  });

  it('summarises in the singular and plural', () => {
    assert.equal(validationSummary(1, 1, 0, 0), '1 file, 1 object: ok');
    assert.equal(validationSummary(3, 7, 0, 2), '3 files, 7 objects: ok, 2 warnings');
    assert.equal(validationSummary(2, 0, 1, 1), '2 files, 0 objects: 1 error, 1 warning');
  });
});

describe('herald apply / delete (real etcd)', () => {
  let etcd: EtcdServer;
  let client: Etcd3;
  before(async () => {
    etcd = await startEtcd({ unix: true });
    client = createEtcdClient({ endpoints: [etcd.endpoint] });
  });
  after(async () => {
    client?.close();
    await etcd?.stop();
  });

  const stored = async (prefix: string): Promise<string[]> => (await listManifests(client, prefix)).kvs.map((kv) => kv.key);

  it('creates, leaves unchanged, configures and deletes, kubectl-style', async () => {
    const prefix = '/t1/manifests/';
    const etcdArgs = ['--etcd', etcd.endpoint, '--prefix', prefix];
    const first = await runHerald(['apply', '-f', FIXTURES, ...etcdArgs]);
    assert.equal(first.stderr, FIXTURE_WARNINGS);
    assert.equal(
      first.stdout,
      [
        'ciliuml2announcementpolicy.cilium.io/policy1 created',
        'node/worker-1 created',
        'node/control-1 created',
        'service/dns created',
        'ciliumloadbalancerippool.cilium.io/green-pool created',
        'ciliumloadbalancerippool.cilium.io/blue-pool created',
        'ciliumloadbalancerippool.cilium.io/red-pool created',
        'ciliumloadbalancerippool.cilium.io/tenant-a created',
        'service/web created',
        'service/api created',
        'ciliumloadbalancerippool.cilium.io/tenant-b created',
        'service/portal created',
        '',
      ].join('\n'),
    );
    assert.equal(first.code, 0);
    assert.deepEqual((await stored(prefix)).filter((k) => k.includes('/Service/')), [
      `${prefix}Service/infra/dns`,
      `${prefix}Service/shop/api`,
      `${prefix}Service/shop/web`,
      `${prefix}Service/tenant-b/portal`,
    ]);
    const { revision } = await listManifests(client, prefix);

    const again = await runHerald(['apply', '-f', `${FIXTURES}/pools-v2.yaml`, ...etcdArgs]);
    assert.equal(
      again.stdout,
      'ciliumloadbalancerippool.cilium.io/blue-pool unchanged\nciliumloadbalancerippool.cilium.io/red-pool unchanged\nciliumloadbalancerippool.cilium.io/tenant-a unchanged\n',
    );
    assert.equal((await listManifests(client, prefix)).revision, revision, 'nothing was written');

    const changed = await file('apply/pools.yaml', `${pool('red-pool', '192.0.2.128/26')}---\n${pool('violet', '203.0.113.64/26')}`);
    const conf = await runHerald(['apply', '-f', changed, ...etcdArgs]);
    assert.equal(conf.stdout, 'ciliumloadbalancerippool.cilium.io/red-pool configured\nciliumloadbalancerippool.cilium.io/violet created\n');
    assert.equal(conf.code, 0);

    const del = await runHerald(['delete', '-f', changed, ...etcdArgs]);
    assert.equal(del.stdout, 'ciliumloadbalancerippool.cilium.io/red-pool deleted\nciliumloadbalancerippool.cilium.io/violet deleted\n');
    assert.equal(del.code, 0);

    const missing = await runHerald(['delete', '-f', changed, ...etcdArgs]);
    assert.equal(missing.stdout, 'ciliumloadbalancerippool.cilium.io/red-pool not found\nciliumloadbalancerippool.cilium.io/violet not found\n');
    assert.equal(missing.code, 1);
    const ignored = await runHerald(['delete', '-f', changed, '--ignore-not-found', ...etcdArgs]);
    assert.equal(ignored.stdout, '');
    assert.equal(ignored.code, 0);
  });

  it('stores objects one per key, as JSON without server-side fields', async () => {
    const prefix = '/t2/manifests/';
    const r = await runHerald(['apply', '-f', `${FIXTURES}/pool-v2alpha1.yaml`, '--etcd', etcd.endpoint, '--prefix', prefix]);
    assert.equal(r.stdout, 'ciliumloadbalancerippool.cilium.io/green-pool created\n');
    const { kvs } = await listManifests(client, prefix);
    assert.equal(kvs.length, 1);
    assert.equal(kvs[0]?.key, `${prefix}CiliumLoadBalancerIPPool/_cluster/green-pool`);
    const obj = JSON.parse(kvs[0]?.value ?? '') as { metadata: Record<string, unknown> };
    assert.deepEqual(Object.keys(obj.metadata), ['annotations', 'creationTimestamp', 'name']);
    assert.deepEqual(obj.metadata.annotations, {});
  });

  it('takes the endpoint from HERALD_ETCD, and works over unix://', async () => {
    const prefix = '/t3/manifests/';
    const unix = etcd.unixEndpoint;
    assert.ok(unix);
    const r = await runHerald(['apply', '-f', `${FIXTURES}/l2-policy.yaml`, '--prefix', prefix], { env: { HERALD_ETCD: unix } });
    assert.equal(r.stdout, 'ciliuml2announcementpolicy.cilium.io/policy1 created\n');
    assert.equal(r.code, 0);
    assert.deepEqual(await stored(prefix), [`${prefix}CiliumL2AnnouncementPolicy/_cluster/policy1`]);
  });

  it('writes nothing when any manifest is invalid', async () => {
    const prefix = '/t4/manifests/';
    await file('mixed/a-good.yaml', pool('fine', '192.0.2.0/26'));
    const bad = await file('mixed/b-bad.yaml', 'apiVersion: v1\nkind: Service\nmetadata:\n  name: Web_1\nspec:\n  ports:\n  - port: 0\n');
    const r = await runHerald(['apply', '-f', join(dir, 'mixed'), '--etcd', etcd.endpoint, '--prefix', prefix]);
    assert.equal(r.stdout, '');
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.at(-1), 'herald: 2 errors in manifests; nothing written');
    assert.equal(lines.length, 3, r.stderr);
    for (const line of lines.slice(0, 2)) assert.ok(line.startsWith(`${bad}:`), line);
    assert.equal(r.code, 1);
    assert.deepEqual(await stored(prefix), [], 'not even the valid file');
  });

  it('fails in seconds with one line when etcd cannot be reached', async () => {
    const r = await runHerald(['apply', '-f', `${FIXTURES}/l2-policy.yaml`, '--etcd', 'http://127.0.0.1:1']);
    assert.equal(r.stderr, 'herald: cannot write to etcd at http://127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1\n');
    assert.equal(r.stdout, '');
    assert.equal(r.code, 1);
    assert.ok(r.ms < 15_000, `took ${r.ms} ms`);

    const sock = join(dir, 'no-such.sock');
    const u = await runHerald(['delete', '-f', `${FIXTURES}/l2-policy.yaml`, '--etcd', `unix://${sock}`]);
    assert.equal(u.stderr, `herald: cannot delete from etcd at unix://${sock}: connect ENOENT ${sock}\n`);
    assert.equal(u.code, 1);
  });

  it('refuses a path with no objects', async () => {
    await mkdir(join(dir, 'empty'), { recursive: true });
    const r = await runHerald(['apply', '-f', join(dir, 'empty'), '--etcd', etcd.endpoint]);
    assert.equal(r.stderr, `herald: no objects to apply in ${join(dir, 'empty')}\n`);
    assert.equal(r.code, 1);
  });

  it('rejects a bad or missing endpoint before reading anything', async () => {
    const r = await runHerald(['apply', '-f', `${FIXTURES}/l2-policy.yaml`, '--etcd', '127.0.0.1:2379']);
    assert.equal(r.stderr, 'herald: etcd endpoint "127.0.0.1:2379": missing scheme: use http://HOST:PORT or unix:///ABSOLUTE/PATH\n');
    assert.equal(r.code, 1);
    const none = await runHerald(['apply', '-f', `${FIXTURES}/l2-policy.yaml`]);
    assert.equal(none.stderr, 'herald: no etcd endpoint: use --etcd URL[,URL] or set HERALD_ETCD\n');
    assert.equal(none.code, 1);
  });
});
