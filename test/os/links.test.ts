/**
 * The rtnetlink edge against the real kernel: concurrent callers (the
 * reconciler's prune, the control plane's interface match, a link event) share
 * one socket, and their requests must not interleave. Before requests were
 * queued, every agent start logged "prune failed: Multipart message not
 * terminated properly" and left stale entries until the next full pass.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NetlinkLinks } from '../../src/os/links.js';

test('concurrent link reads on one socket all succeed', async () => {
  const links = new NetlinkLinks();
  try {
    for (let round = 0; round < 10; round++) {
      const results = await Promise.allSettled([links.list(), links.list(), links.byName('lo'), links.list(), links.byName('no-such-if0')]);
      const failures = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
      assert.deepEqual(failures, [], `round ${round}`);
      const [first, , lo, , missing] = results.map((r) => (r as PromiseFulfilledResult<unknown>).value);
      assert.ok((first as Array<{ name: string }>).some((l) => l.name === 'lo'));
      assert.equal((lo as { name: string }).name, 'lo');
      assert.equal(missing, undefined);
    }
  } finally {
    links.dispose();
  }
});
