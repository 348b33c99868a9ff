/**
 * The contract of the in-memory Lease API (test/helpers/fake-kube-leases.ts):
 * the same cases run against a real kube-apiserver (test/helpers/kube.ts)
 * and against the fake, so the fake the fast LeaseOwnership tests run on
 * cannot drift from what the API server does with Leases — conditional
 * creates, updates and deletes, 404s, list resourceVersions, the order of
 * watch events, and deleteAsRead's outcomes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { KubeClient, deleteAsRead, isConflict, isNotFound, type KubeApiError, type KubeObject } from '../../src/intent/sources/kube-client.js';
import { FakeLeaseApi, leasesPath } from '../helpers/fake-kube-leases.js';
import { startKube, type KubeServer } from '../helpers/kube.js';

const NS = 'lease-contract';

interface Backend {
  client: KubeClient;
  stop(): Promise<void>;
}

const backends: Record<string, () => Promise<Backend>> = {
  fake: async () => ({ client: new FakeLeaseApi().client('contract'), stop: async () => {} }),
  'kube-apiserver': async () => {
    const kube: KubeServer = await startKube();
    try {
      const r = await kube.api('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
      assert.equal(r.status, 201, r.text);
      const client = await KubeClient.create({ kubeconfig: kube.kubeconfig('admin', ['system:masters']) });
      return { client, stop: () => kube.stop() };
    } catch (e) {
      await kube.stop();
      throw e;
    }
  },
};

const lease = (name: string, holder: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'coordination.k8s.io/v1',
  kind: 'Lease',
  metadata: { name, namespace: NS, labels: { 'herald.dev/lease': 'contract' } },
  spec: { holderIdentity: holder, leaseDurationSeconds: 6, ...extra },
});

async function failure(p: Promise<unknown>): Promise<KubeApiError> {
  try {
    await p;
  } catch (e) {
    return e as KubeApiError;
  }
  assert.fail('expected the request to fail');
}

for (const [kind, make] of Object.entries(backends)) {
  describe(`the Lease API contract: ${kind}`, () => {
    let b: Backend;
    let c: KubeClient;
    before(async () => {
      b = await make();
      c = b.client;
    });
    after(async () => {
      await b?.stop();
    });
    const path = (name?: string) => leasesPath(NS, name);

    test('create: uid and a decimal resourceVersion; the same name again → 409 AlreadyExists; GET of a missing Lease → 404', async () => {
      const made = await c.request<KubeObject>('POST', path(), lease('c-create', 'node-a'));
      assert.match(String(made.metadata.uid), /.+/);
      assert.match(String(made.metadata.resourceVersion), /^\d+$/);
      assert.equal((made.spec as any).holderIdentity, 'node-a');
      const again = await failure(c.request('POST', path(), lease('c-create', 'node-b')));
      assert.ok(isConflict(again));
      assert.equal(again.reason, 'AlreadyExists');
      const got = await c.request<KubeObject>('GET', path('c-create'));
      assert.equal(got.metadata.resourceVersion, made.metadata.resourceVersion);
      assert.equal(got.metadata.uid, made.metadata.uid);
      const missing = await failure(c.request('GET', path('c-missing')));
      assert.ok(isNotFound(missing));
      assert.equal(missing.reason, 'NotFound');
    });

    test('update: with the stored resourceVersion it applies (a higher one); with a stale one → 409 Conflict; without one → 422 Invalid (no unconditional update); a missing Lease is created (create on update) unless the body names its old uid → 409', async () => {
      const made = await c.request<KubeObject>('POST', path(), lease('c-update', 'node-a'));
      const upd = await c.request<KubeObject>('PUT', path('c-update'), { ...made, spec: { ...(made.spec as object), holderIdentity: 'node-b' } });
      assert.ok(BigInt(upd.metadata.resourceVersion!) > BigInt(made.metadata.resourceVersion!));
      assert.equal(upd.metadata.uid, made.metadata.uid);
      assert.equal((upd.spec as any).holderIdentity, 'node-b');
      const stale = await failure(c.request('PUT', path('c-update'), { ...made, spec: { ...(made.spec as object), holderIdentity: 'node-c' } }));
      assert.ok(isConflict(stale));
      assert.equal(stale.reason, 'Conflict');
      const { resourceVersion: _rv, ...meta } = upd.metadata;
      const blind = await failure(c.request<KubeObject>('PUT', path('c-update'), { ...upd, metadata: meta, spec: { ...(upd.spec as object), holderIdentity: 'node-d' } }));
      assert.deepEqual([blind.status, blind.reason], [422, 'Invalid']);
      assert.equal(((await c.request<KubeObject>('GET', path('c-update'))).spec as any).holderIdentity, 'node-b');
      // A PUT of a missing Lease creates it (create on update), whatever resourceVersion it carries…
      const created = await c.request<KubeObject>('PUT', path('c-nothing'), { ...lease('c-nothing', 'node-a'), metadata: { name: 'c-nothing', namespace: NS, resourceVersion: '1' } });
      assert.equal((created.spec as any).holderIdentity, 'node-a');
      assert.match(String(created.metadata.uid), /.+/);
      assert.equal((await c.request<KubeObject>('GET', path('c-nothing'))).metadata.resourceVersion, created.metadata.resourceVersion);
      // …but not one written as read before it was deleted (its uid): 409, so a renewal of a deleted node Lease is refused.
      await c.request('DELETE', path('c-nothing'));
      const gone = await failure(c.request('PUT', path('c-nothing'), created));
      assert.ok(isConflict(gone), `${gone.status} ${gone.reason}`);
      assert.ok(isNotFound(await failure(c.request('GET', path('c-nothing')))));
    });

    test('delete: a uid or resourceVersion precondition that does not match → 409 and nothing deleted; matching → deleted; then GET and DELETE → 404', async () => {
      const made = await c.request<KubeObject>('POST', path(), lease('c-delete', 'node-a'));
      const wrongUid = await failure(c.request('DELETE', path('c-delete'), { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: '00000000-0000-0000-0000-000000000000' } }));
      assert.ok(isConflict(wrongUid));
      const upd = await c.request<KubeObject>('PUT', path('c-delete'), { ...made, spec: { ...(made.spec as object), holderIdentity: 'node-b' } });
      const wrongRv = await failure(c.request('DELETE', path('c-delete'), { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: made.metadata.uid, resourceVersion: made.metadata.resourceVersion } }));
      assert.ok(isConflict(wrongRv));
      assert.equal((await c.request<KubeObject>('GET', path('c-delete'))).metadata.resourceVersion, upd.metadata.resourceVersion, 'still there');
      await c.request('DELETE', path('c-delete'), { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: upd.metadata.uid, resourceVersion: upd.metadata.resourceVersion } });
      assert.ok(isNotFound(await failure(c.request('GET', path('c-delete')))));
      assert.ok(isNotFound(await failure(c.request('DELETE', path('c-delete')))));
      // A Lease created again under the same name is another object (another uid).
      const again = await c.request<KubeObject>('POST', path(), lease('c-delete', 'node-a'));
      assert.notEqual(again.metadata.uid, made.metadata.uid);
      await c.request('DELETE', path('c-delete'));
    });

    test("list: every Lease of the namespace and the list's resourceVersion, at least every item's", async () => {
      await c.request('POST', path(), lease('c-list-1', 'node-a'));
      await c.request('POST', path(), lease('c-list-2', 'node-b'));
      const list = await c.list(path());
      const names = list.items.map((i) => i.metadata.name);
      assert.ok(names.includes('c-list-1') && names.includes('c-list-2'));
      assert.match(String(list.metadata.resourceVersion), /^\d+$/);
      for (const i of list.items) assert.ok(BigInt(list.metadata.resourceVersion!) >= BigInt(i.metadata.resourceVersion!));
    });

    test('watch from a resourceVersion: ADDED, MODIFIED, DELETED of later writes, in order, each carrying its own (increasing) resourceVersion', async () => {
      const from = (await c.list(path())).metadata.resourceVersion!;
      const events: Array<[string, string, string, string]> = [];
      let done = 0;
      const w = new c.k8s.Watch(c.kc);
      const req = await w.watch(path(), { resourceVersion: from, allowWatchBookmarks: true }, (type: string, obj: any) => {
        if (type !== 'BOOKMARK') events.push([type, obj.metadata.name, obj.spec?.holderIdentity, obj.metadata.resourceVersion]);
      }, () => void done++);
      try {
        const made = await c.request<KubeObject>('POST', path(), lease('c-watch', 'node-a'));
        const upd = await c.request<KubeObject>('PUT', path('c-watch'), { ...made, spec: { ...(made.spec as object), holderIdentity: 'node-b' } });
        await c.request('DELETE', path('c-watch'));
        const deadline = Date.now() + 5000;
        while (events.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        assert.deepEqual(
          events.map(([t, n, h]) => [t, n, h]),
          [
            ['ADDED', 'c-watch', 'node-a'],
            ['MODIFIED', 'c-watch', 'node-b'],
            ['DELETED', 'c-watch', 'node-b'],
          ],
        );
        assert.equal(events[0]![3], made.metadata.resourceVersion);
        assert.equal(events[1]![3], upd.metadata.resourceVersion);
        assert.ok(BigInt(events[2]![3]) > BigInt(upd.metadata.resourceVersion!), "a DELETED event carries the delete's resourceVersion");
      } finally {
        (req as { abort(): void }).abort();
      }
    });

    test("deleteAsRead: deleted (as read, or as known), gone, refused by the judge, conflict when the known copy is stale", async () => {
      const made = await c.request<KubeObject>('POST', path(), lease('c-dar', 'node-a'));
      assert.equal(await deleteAsRead(c, path('c-dar'), (cur) => (cur.spec as any).holderIdentity === 'node-b'), 'refused');
      assert.equal(await deleteAsRead(c, path('c-dar'), () => true, { known: made }), 'deleted');
      assert.equal(await deleteAsRead(c, path('c-dar'), () => true), 'gone');
      const made2 = await c.request<KubeObject>('POST', path(), lease('c-dar', 'node-a'));
      await c.request('PUT', path('c-dar'), { ...made2, spec: { ...(made2.spec as object), holderIdentity: 'node-b' } });
      assert.equal(await deleteAsRead(c, path('c-dar'), () => true, { known: made2, attempts: 1 }), 'conflict');
      assert.equal(await deleteAsRead(c, path('c-dar'), () => true, { known: made2 }), 'deleted', 'the second attempt reads it again');
      assert.equal(await deleteAsRead(c, path('c-dar'), () => true, { known: made2 }), 'gone');
    });
  });
}
