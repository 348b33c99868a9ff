import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { formatErrors } from '../../src/intent/diagnostics.js';
import { loadManifestPath, requireSnapshot } from '../../src/intent/load.js';

const FIXTURES = 'test/fixtures/manifests';
const pool = (name: string, cidr: string): string =>
  `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata:\n  name: ${name}\nspec:\n  blocks:\n  - cidr: ${cidr}\n`;

describe('loadManifestPath', () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'herald-intent-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('loads the fixture directory recursively, sorted, manifest files only', async () => {
    const result = await loadManifestPath(FIXTURES);
    assert.equal(formatErrors(result.errors), '');
    assert.deepEqual(result.files, [
      `${FIXTURES}/l2-policy.yaml`,
      `${FIXTURES}/list.yaml`,
      `${FIXTURES}/pool-v2alpha1.yaml`,
      `${FIXTURES}/pools-v2.yaml`,
      `${FIXTURES}/service-annotated.yaml`,
      `${FIXTURES}/services.json`,
      `${FIXTURES}/tenants/tenant-b.yml`,
    ]);
    const snapshot = requireSnapshot(result);
    assert.deepEqual(
      [snapshot.services.size, snapshot.pools.size, snapshot.policies.size, snapshot.nodes.size],
      [4, 5, 1, 2],
    );
    assert.deepEqual([...snapshot.services.keys()].sort(), ['infra/dns', 'shop/api', 'shop/web', 'tenant-b/portal']);
    assert.equal(snapshot.pools.get('tenant-b')?.source.file, `${FIXTURES}/tenants/tenant-b.yml`);
  });

  it('loads a single file whatever its extension', async () => {
    const file = join(dir, 'pool.txt');
    await writeFile(file, pool('one', '192.0.2.0/24'));
    const result = await loadManifestPath(file);
    assert.deepEqual(result.files, [file]);
    assert.equal(requireSnapshot(result).pools.size, 1);
  });

  it('reports duplicates across files with both places, and every other error too', async () => {
    const root = join(dir, 'dups');
    await mkdir(join(root, 'sub'), { recursive: true });
    await writeFile(join(root, 'a.yaml'), pool('blue', '192.0.2.0/24'));
    await writeFile(join(root, 'sub', 'b.yml'), `${pool('green', '192.0.2.300/24')}---\n${pool('blue', '198.51.100.0/24')}`);
    const result = await loadManifestPath(root);
    assert.equal(result.snapshot, undefined);
    assert.deepEqual(formatErrors(result.errors).split('\n'), [
      `${root}/sub/b.yml:7:11: document 1 (CiliumLoadBalancerIPPool "green"): spec.blocks[0].cidr: invalid CIDR "192.0.2.300/24": "192.0.2.300" is not an IP address`,
      `${root}/sub/b.yml:12:9: document 2 (CiliumLoadBalancerIPPool "blue"): metadata.name: duplicate CiliumLoadBalancerIPPool "blue": already defined in ${root}/a.yaml document 1 (line 1)`,
    ]);
    const dup = result.errors[1];
    assert.deepEqual(dup?.related, { file: `${root}/a.yaml`, document: 1, line: 1, column: 1 });
    // The first definition is still usable; the duplicate is left out.
    assert.deepEqual(
      result.objects.map((o) => o.metadata.name),
      ['blue'],
    );
  });

  it('namespaced duplicates need the same namespace', async () => {
    const root = join(dir, 'ns');
    await mkdir(root);
    const svc = (ns: string) => `apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ${ns}}\nspec: {ports: [{port: 80}]}\n`;
    await writeFile(join(root, 'a.yaml'), `${svc('shop')}---\n${svc('tenant-a')}`);
    await writeFile(join(root, 'b.yaml'), svc('shop'));
    const result = await loadManifestPath(root);
    assert.deepEqual(formatErrors(result.errors).split('\n'), [
      `${root}/b.yaml:3:18: document 1 (Service "shop/web"): metadata.name: duplicate Service "shop/web": already defined in ${root}/a.yaml document 1 (line 1)`,
    ]);
  });

  it('skips dot entries (ConfigMap ..data links), other extensions, and symlink loops', async () => {
    const root = join(dir, 'configmap');
    const data = join(root, '..2024_05_02_09_14_31.123');
    await mkdir(data, { recursive: true });
    await writeFile(join(data, 'pools.yaml'), pool('cm', '203.0.113.0/24'));
    await symlink('..2024_05_02_09_14_31.123', join(root, '..data'));
    await symlink('..data/pools.yaml', join(root, 'pools.yaml'));
    await writeFile(join(root, '.hidden.yaml'), 'not: [valid');
    await writeFile(join(root, 'notes.txt'), 'not: [valid');
    await symlink('.', join(root, 'loop'));
    const result = await loadManifestPath(root);
    assert.equal(formatErrors(result.errors), '');
    assert.deepEqual(result.files, [join(root, 'pools.yaml')]);
    assert.equal(result.snapshot?.pools.get('cm')?.spec.blocks[0]?.type, 'cidr');
  });

  it('a missing path is an error, not an exception', async () => {
    const missing = join(dir, 'nope');
    const result = await loadManifestPath(missing);
    assert.deepEqual(formatErrors(result.errors), `${missing}: cannot read: ENOENT`);
    assert.throws(
      () => requireSnapshot(result),
      (e) => isHeraldError(e, 'HERALD_BAD_MANIFEST') && e.message === `1 manifest error:\n${missing}: cannot read: ENOENT`,
    );
  });
});
