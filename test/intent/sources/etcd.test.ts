/**
 * EtcdIntentSource against a real etcd (Debian's /usr/bin/etcd): writes go
 * through the same function `herald apply` uses, or straight into etcd for
 * what apply would refuse to write.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { writeManifestPath } from '../../../src/cli/commands/manifests.js';
import { silentLogger } from '../../../src/core/logger.js';
import { createEtcdClient, parseEtcdEndpoint, parseEtcdEndpoints } from '../../../src/intent/sources/etcd-client.js';
import { EtcdIntentSource, type EtcdIntentSourceOptions } from '../../../src/intent/sources/etcd.js';
import { listManifests } from '../../../src/intent/sources/etcd-store.js';
import { TcpProxy, hostPort, startEtcd, type EtcdServer } from '../../helpers/etcd.js';
import { Recorder, keysOf, waitUntil } from './recorder.js';

const pool = (name: string, cidr: string): string =>
  `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: ${name}\nspec:\n  blocks:\n  - cidr: ${cidr}\n`;
const service = (ns: string, name: string): string =>
  `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${name}\n  namespace: ${ns}\nspec:\n  type: LoadBalancer\n  ports:\n  - port: 80\n`;

/**
 * "Nothing happened" is checked on the revision it is about, not after a quiet
 * period: once the source's offeredRevision has reached the store's revision,
 * it has looked at every write up to there, and what it reported is final.
 */
async function seenUpTo(client: Etcd3, prefix: string, source: EtcdIntentSource): Promise<number> {
  const { revision } = await listManifests(client, prefix);
  await waitUntil(() => source.offeredRevision >= revision, 15_000, `the source to look at revision ${revision}`);
  return revision;
}

describe('EtcdIntentSource (real etcd)', () => {
  let etcd: EtcdServer;
  let dir = '';
  let client: Etcd3;
  let n = 0;

  before(async () => {
    etcd = await startEtcd({ unix: true });
    dir = await mkdtemp(join(tmpdir(), 'herald-etcd-src-'));
    client = createEtcdClient({ endpoints: [etcd.endpoint] });
  });
  after(async () => {
    client?.close();
    await etcd?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** A fresh prefix per test, so tests do not see each other's objects. */
  const freshPrefix = (): string => `/herald-test/${++n}/manifests/`;

  async function apply(prefix: string, text: string, mode: 'apply' | 'delete' = 'apply', endpoint = etcd.endpoint): Promise<string[]> {
    const file = join(dir, `m-${++n}.yaml`);
    await writeFile(file, text);
    const result = await writeManifestPath({ path: file, endpoints: [endpoint], prefix, mode });
    assert.ok(result.ok, JSON.stringify(result));
    return result.changes.map((c) => `${c.ref} ${c.result}`);
  }

  async function started(t: TestContext, opts: Partial<EtcdIntentSourceOptions> & { prefix: string }): Promise<Recorder & { source: EtcdIntentSource }> {
    const source = new EtcdIntentSource({ endpoints: [etcd.endpoint], log: silentLogger, debounceMs: 20, ...opts });
    t.after(() => source.dispose());
    const rec = new Recorder();
    await source.start(rec);
    return Object.assign(rec, { source });
  }

  it('reads what apply stored, then follows apply and delete', async (t) => {
    const prefix = freshPrefix();
    assert.deepEqual(await apply(prefix, `${pool('blue', '192.0.2.0/26')}---\n${service('shop', 'web')}`), [
      'ciliumloadbalancerippool.cilium.io/blue created',
      'service/web created',
    ]);
    const rec = await started(t, { prefix });
    assert.equal(rec.snapshots.length, 1, 'the first snapshot is there when start() resolves');
    assert.deepEqual(keysOf(rec.last), { services: ['shop/web'], pools: ['blue'], policies: [], nodes: [] });
    assert.equal(rec.last.pools.get('blue')?.source.file, `${prefix}CiliumLoadBalancerIPPool/_cluster/blue`);

    await apply(prefix, pool('red', '198.51.100.0/26'));
    assert.deepEqual(keysOf(await rec.snapshotAfter(1)).pools, ['blue', 'red']);

    assert.deepEqual(await apply(prefix, service('shop', 'web'), 'delete'), ['service/web deleted']);
    assert.deepEqual(keysOf(await rec.snapshotAfter(2)).services, []);
    assert.equal(rec.problems.length, 0);
  });

  it('publishes nothing when apply changes nothing', async (t) => {
    const prefix = freshPrefix();
    await apply(prefix, pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { prefix });
    const before = (await listManifests(client, prefix)).revision;
    assert.deepEqual(await apply(prefix, pool('blue', '192.0.2.0/26')), ['ciliumloadbalancerippool.cilium.io/blue unchanged']);
    await seenUpTo(client, prefix, rec.source);
    assert.equal(rec.snapshots.length, 1);
    assert.equal((await listManifests(client, prefix)).revision, before, 'apply wrote nothing');
  });

  it('applies a multi-object transaction as one snapshot', async (t) => {
    const prefix = freshPrefix();
    const rec = await started(t, { prefix });
    assert.deepEqual(keysOf(rec.last).pools, [], 'an empty prefix is an empty snapshot');
    await apply(prefix, [pool('a', '192.0.2.0/28'), pool('b', '192.0.2.16/28'), pool('c', '192.0.2.32/28')].join('---\n'));
    await rec.snapshotAfter(1);
    await seenUpTo(client, prefix, rec.source);
    assert.equal(rec.snapshots.length, 2);
    assert.deepEqual(keysOf(rec.last).pools, ['a', 'b', 'c']);
  });

  it('rejects a bad object written straight into etcd, naming its key, and keeps the last snapshot', async (t) => {
    const prefix = freshPrefix();
    await apply(prefix, pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { prefix });
    const badKey = `${prefix}CiliumLoadBalancerIPPool/_cluster/green`;
    await client
      .put(badKey)
      .value(JSON.stringify({ apiVersion: 'cilium.io/v2', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'green' }, spec: { blocks: [{ cidr: '192.0.2.300/24' }] } }));
    const problem = await rec.problemAfter(0);
    assert.equal(
      problem,
      `${badKey}:1:118: document 1 (CiliumLoadBalancerIPPool "green"): spec.blocks[0].cidr: invalid CIDR "192.0.2.300/24": "192.0.2.300" is not an IP address`,
    );
    // While it is there, good changes are held back too (a change applies as a whole).
    await apply(prefix, pool('red', '198.51.100.0/26'));
    await rec.problemAfter(1);
    assert.equal(rec.snapshots.length, 1);

    await client.delete().key(badKey);
    assert.deepEqual(keysOf(await rec.snapshotAfter(1)).pools, ['blue', 'red']);
  });

  it('rejects an object stored under another key, and a key holding something that is not one object', async (t) => {
    const prefix = freshPrefix();
    const rec = await started(t, { prefix });
    const wrong = `${prefix}CiliumLoadBalancerIPPool/_cluster/not-blue`;
    await client.put(wrong).value(JSON.stringify({ apiVersion: 'cilium.io/v2', kind: 'CiliumLoadBalancerIPPool', metadata: { name: 'blue' }, spec: {} }));
    assert.equal(
      await rec.problemAfter(0),
      `${wrong} (CiliumLoadBalancerIPPool "blue"): stored under the wrong key: this object belongs at ${prefix}CiliumLoadBalancerIPPool/_cluster/blue`,
    );
    await client.delete().key(wrong);
    await seenUpTo(client, prefix, rec.source); // the delete is looked at on its own, not coalesced with the next write
    const empty = `${prefix}Service/default/empty`;
    await client.put(empty).value('');
    assert.equal(await rec.problemAfter(1), `${empty}: expected exactly one object per key, found 0`);
  });

  it('resumes after etcd is killed and restarted, and sees changes made after the restart', async (t) => {
    const prefix = freshPrefix();
    await apply(prefix, pool('blue', '192.0.2.0/26'));
    const rec = await started(t, { prefix, retryMinMs: 100, retryMaxMs: 500 });
    await etcd.kill();
    await new Promise((r) => setTimeout(r, 1500)); // the outage lasts a while (not a check: nothing is asserted about it)
    await etcd.restart();
    await apply(prefix, pool('red', '198.51.100.0/26'));
    assert.deepEqual(keysOf(await rec.snapshotAfter(1, 20_000)).pools, ['blue', 'red']);
    // And the watch is live again (not just a re-read): one more change.
    await apply(prefix, pool('blue', '192.0.2.0/26'), 'delete');
    assert.deepEqual(keysOf(await rec.snapshotAfter(2)).pools, ['red']);
  });

  it('reports an unreachable etcd at start, then loads once it answers', async (t) => {
    const prefix = freshPrefix();
    await apply(prefix, pool('blue', '192.0.2.0/26'));
    const proxy = new TcpProxy(hostPort(etcd.endpoint));
    await proxy.start();
    const endpoint = proxy.endpoint;
    await proxy.cut();
    t.after(() => proxy.close());
    const rec = await started(t, { prefix, endpoints: [endpoint], retryMinMs: 100, retryMaxMs: 300 });
    assert.equal(rec.snapshots.length, 0);
    assert.match(rec.lastProblem, new RegExp(`^cannot read from etcd at ${endpoint}: connect ECONNREFUSED 127\\.0\\.0\\.1:\\d+$`));
    await proxy.restore();
    assert.deepEqual(keysOf(await rec.snapshotAfter(0, 15_000)).pools, ['blue']);
  });

  it('re-reads and watches anew when its revision was compacted during an outage', async (t) => {
    const prefix = freshPrefix();
    await apply(prefix, pool('blue', '192.0.2.0/26'));
    const proxy = new TcpProxy(hostPort(etcd.endpoint));
    await proxy.start();
    t.after(() => proxy.close());
    const rec = await started(t, { prefix, endpoints: [proxy.endpoint], retryMinMs: 100, retryMaxMs: 300 });
    await proxy.cut();
    // Changes the source cannot see, then history compacted past its watch revision.
    await apply(prefix, pool('red', '198.51.100.0/26'));
    await apply(prefix, pool('blue', '192.0.2.0/26'), 'delete');
    const { revision } = await listManifests(client, prefix);
    await client.kv.compact({ revision: String(revision), physical: true });
    await proxy.restore();
    assert.deepEqual(keysOf(await rec.snapshotAfter(1, 15_000)).pools, ['red']);
    await apply(prefix, pool('green', '203.0.113.0/26'));
    assert.deepEqual(keysOf(await rec.snapshotAfter(2)).pools, ['green', 'red']);
  });

  it('works over a unix:// endpoint', async (t) => {
    const unix = etcd.unixEndpoint;
    assert.ok(unix);
    const prefix = freshPrefix();
    assert.deepEqual(await apply(prefix, pool('blue', '192.0.2.0/26'), 'apply', unix), ['ciliumloadbalancerippool.cilium.io/blue created']);
    const rec = await started(t, { prefix, endpoints: [unix] });
    assert.deepEqual(keysOf(rec.last).pools, ['blue']);
    await apply(prefix, service('default', 'web'), 'apply', unix);
    assert.deepEqual(keysOf(await rec.snapshotAfter(1)).services, ['default/web']);
  });

  it('writes all objects in one transaction, so etcd\'s --max-txn-ops limit is reported, not split', async () => {
    const prefix = freshPrefix();
    const pools = Array.from({ length: 130 }, (_, i) => pool(`p${i}`, `2001:db8:${i.toString(16)}::/64`)).join('---\n');
    const file = join(dir, 'many.yaml');
    await writeFile(file, pools);
    await assert.rejects(writeManifestPath({ path: file, endpoints: [etcd.endpoint], prefix, mode: 'apply' }), {
      code: 'HERALD_STORE',
      message: `cannot write to etcd at ${etcd.endpoint}: etcdserver: too many operations in txn request (etcd --max-txn-ops, 128 by default: write fewer objects at a time)`,
    });
    assert.deepEqual((await listManifests(client, prefix)).kvs, []);
  });

  it('disposes cleanly (idempotent; nothing reported afterwards)', async (t) => {
    const prefix = freshPrefix();
    const source = new EtcdIntentSource({ endpoints: [etcd.endpoint], prefix, log: silentLogger, debounceMs: 10 });
    const rec = new Recorder();
    await source.start(rec);
    // The marker: a live source on the same prefix. It has looked at the write once its
    // offeredRevision reaches it; the disposed one, with a shorter debounce, would have reported by then.
    const witness = new EtcdIntentSource({ endpoints: [etcd.endpoint], prefix, log: silentLogger, debounceMs: 100 });
    t.after(() => witness.dispose());
    await witness.start(new Recorder());
    source.dispose();
    source.dispose();
    await apply(prefix, pool('blue', '192.0.2.0/26'));
    await seenUpTo(client, prefix, witness);
    assert.equal(rec.snapshots.length, 1);
    assert.equal(source.offeredRevision < witness.offeredRevision, true, 'the disposed source looked at nothing more');
  });
});

describe('etcd endpoints', () => {
  it('accepts http://host:port and unix:///absolute/path', () => {
    assert.deepEqual(parseEtcdEndpoints('http://127.0.0.1:2379, http://[2001:db8::1]:2379/,unix:///run/etcd.sock'), [
      'http://127.0.0.1:2379',
      'http://[2001:db8::1]:2379',
      'unix:///run/etcd.sock',
    ]);
    assert.deepEqual(parseEtcdEndpoints(['http://etcd-1.example:2379', 'http://etcd-2.example:2379']), [
      'http://etcd-1.example:2379',
      'http://etcd-2.example:2379',
    ]);
  });

  it('rejects anything else with a precise message', () => {
    const cases: [string, string][] = [
      ['127.0.0.1:2379', 'etcd endpoint "127.0.0.1:2379": missing scheme: use http://HOST:PORT or unix:///ABSOLUTE/PATH'],
      ['http://127.0.0.1', 'etcd endpoint "http://127.0.0.1": expected http://HOST:PORT (the port is required; no path, user or query)'],
      ['http://127.0.0.1:2379/v3', 'etcd endpoint "http://127.0.0.1:2379/v3": expected http://HOST:PORT (the port is required; no path, user or query)'],
      ['http://127.0.0.1:70000', 'etcd endpoint "http://127.0.0.1:70000": port 70000 is out of range (1-65535)'],
      ['unix://run/etcd.sock', 'etcd endpoint "unix://run/etcd.sock": a unix socket needs an absolute path: unix:///ABSOLUTE/PATH'],
      ['grpc://127.0.0.1:2379', 'etcd endpoint "grpc://127.0.0.1:2379": unsupported scheme "grpc": use http://HOST:PORT or unix:///ABSOLUTE/PATH'],
      [
        'https://127.0.0.1:2379',
        'etcd endpoint "https://127.0.0.1:2379": TLS is not supported yet (herald has no etcd TLS settings): use http:// on a trusted network, or unix://',
      ],
    ];
    for (const [input, message] of cases) assert.throws(() => parseEtcdEndpoint(input), { code: 'HERALD_BAD_ARGUMENT', message });
    assert.throws(() => parseEtcdEndpoints(' , '), { message: 'no etcd endpoint given: use http://HOST:PORT or unix:///ABSOLUTE/PATH' });
  });
});
