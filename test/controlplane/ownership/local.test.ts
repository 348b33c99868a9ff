/**
 * Local ownership (one node, the embedded default): the node owns exactly the
 * IPs it qualifies for, tells the datapath each time that set changes (and
 * only then), and its liveness gate is always open (no other node can take
 * over, so nothing ever limits answering).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { OwnershipBackend, OwnershipView } from '../../../src/controlplane/ownership/backend.js';
import { openGate } from '../../../src/controlplane/ownership/edges.js';
import { LocalOwnership } from '../../../src/controlplane/ownership/local.js';

/** Candidates as the controller passes them: IP → interfaces it would be announced on. */
const cands = (...ips: string[]): ReadonlyMap<string, readonly string[]> => new Map(ips.map((ip) => [ip, ['eth0']]));

/** A started backend and every view it handed the datapath, as plain sorted data. */
async function started(node = 'node-a') {
  const o = new LocalOwnership(node);
  const views: OwnershipView[] = [];
  await o.start((v) => void views.push(v));
  return { o, views };
}

const plain = (v: OwnershipView) => ({ owned: [...v.owned].sort(), owners: [...v.owners].sort((a, b) => a[0].localeCompare(b[0])) });

test('the local backend is of kind local and owns nothing before its first candidates', async () => {
  const { o, views } = await started();
  assert.equal(o.kind, 'local');
  assert.deepEqual(plain(o.view()), { owned: [], owners: [] });
  assert.equal(views.length, 0, 'starting alone reports nothing: there is nothing owned yet');
});

test('the node owns every IP it qualifies for and names itself as the owner of each', async () => {
  const { o, views } = await started('node-a');
  o.setCandidates(cands('192.0.2.10', '2001:db8::1'));
  assert.equal(views.length, 1);
  const want = { owned: ['192.0.2.10', '2001:db8::1'], owners: [['192.0.2.10', 'node-a'], ['2001:db8::1', 'node-a']] };
  assert.deepEqual(plain(views[0]!), want);
  assert.deepEqual(plain(o.view()), want, 'view() answers the same as the last report');
  assert.ok(o.view().owned.has('192.0.2.10'));
  assert.equal(o.view().owners.get('2001:db8::1'), 'node-a');
});

test('the same candidate set again (in another order, other interfaces) reports nothing new', async () => {
  const { o, views } = await started();
  o.setCandidates(cands('192.0.2.10', '192.0.2.11'));
  o.setCandidates(new Map([['192.0.2.11', ['eth1']], ['192.0.2.10', ['eth1', 'eth2']]]));
  assert.equal(views.length, 1, 'ownership is per IP: other interfaces do not change what is owned');
  o.setCandidates(cands());
  o.setCandidates(cands());
  assert.equal(views.length, 2, 'an empty set is reported once');
  assert.deepEqual(plain(views[1]!), { owned: [], owners: [] });
});

test('every change of the set is reported: an IP added, one removed, or one swapped for another of the same count', async () => {
  const { o, views } = await started('node-b');
  o.setCandidates(cands('192.0.2.1'));
  o.setCandidates(cands('192.0.2.1', '192.0.2.2')); // added
  o.setCandidates(cands('192.0.2.2')); // removed
  o.setCandidates(cands('192.0.2.3')); // swapped: same size, other IP
  o.setCandidates(cands('192.0.2.3', '192.0.2.4'));
  o.setCandidates(cands('192.0.2.3', '192.0.2.5')); // same size, one IP in common
  assert.deepEqual(
    views.map((v) => plain(v).owned),
    [['192.0.2.1'], ['192.0.2.1', '192.0.2.2'], ['192.0.2.2'], ['192.0.2.3'], ['192.0.2.3', '192.0.2.4'], ['192.0.2.3', '192.0.2.5']],
  );
  assert.deepEqual(plain(o.view()).owners, [['192.0.2.3', 'node-b'], ['192.0.2.5', 'node-b']]);
});

test('the owned set is a copy: the caller reusing its candidate map does not change ownership behind the datapath', async () => {
  const { o, views } = await started();
  const m = new Map<string, readonly string[]>([['192.0.2.7', ['eth0']]]);
  o.setCandidates(m);
  m.set('192.0.2.8', ['eth0']);
  assert.deepEqual(plain(o.view()).owned, ['192.0.2.7']);
  o.setCandidates(m);
  assert.deepEqual(plain(views.at(-1)!).owned, ['192.0.2.7', '192.0.2.8']);
});

test('candidates set before start are owned but not reported (no callback yet); start does not replay them', async () => {
  const o = new LocalOwnership('node-a');
  assert.doesNotThrow(() => o.setCandidates(cands('192.0.2.10')));
  assert.deepEqual(plain(o.view()).owned, ['192.0.2.10']);
  const views: OwnershipView[] = [];
  await o.start((v) => void views.push(v));
  assert.equal(views.length, 0);
  o.setCandidates(cands('192.0.2.10', '192.0.2.11'));
  assert.equal(views.length, 1);
});

test('release changes nothing (no other node takes over) and dispose stops all reports', async () => {
  const { o, views } = await started();
  o.setCandidates(cands('192.0.2.10'));
  await o.release();
  const backend: OwnershipBackend = o; // as the agent holds it
  await backend.release({ silenced: true });
  assert.deepEqual(plain(o.view()).owned, ['192.0.2.10'], 'a restarting agent keeps answering throughout');
  assert.equal(views.length, 1);
  o.dispose();
  assert.doesNotThrow(() => o.setCandidates(cands('192.0.2.99')));
  assert.equal(views.length, 1, 'no report after dispose');
});

test('setCandidates hands the view over without waiting for the datapath to apply it (one owner, nothing to hand over)', async () => {
  const o = new LocalOwnership('node-a');
  let applied = 0;
  await o.start(async () => {
    await Promise.resolve();
    applied++;
  });
  o.setCandidates(cands('192.0.2.10'));
  assert.equal(applied, 0);
  await new Promise((r) => setImmediate(r));
  assert.equal(applied, 1);
});

test('the local store gate is always open: answer with no time limit, and a recheck resolves at once', async () => {
  assert.equal(openGate.answerUntilMs(), Infinity);
  const p = openGate.recheck('asleep past the liveness limit');
  assert.ok(p instanceof Promise, 'recheck is awaited by the heartbeat: it must return a promise');
  assert.equal(await p, undefined);
});
