/**
 * The view's per-IP columns (pool, LB backends, policy revision, reconcile
 * state, answers by node) and the peer reports they draw on: the pure model,
 * and the poller against a real loopback HTTP server (token sent, answers
 * bounded, a silent peer timed out, a report naming another node refused).
 */
import assert from 'node:assert/strict';
import { createServer, type RequestListener, type Server } from 'node:http';
import { after, describe, test } from 'node:test';
import { NO_DETAILS, buildCounters, buildDetails, buildView, diffDetails, ipsOfRowKey, reconcileByIp, type ViewInput } from '../../src/api/view/model.js';
import { PeerPoller } from '../../src/api/view/peers.js';

const base: ViewInput = {
  node: 'n1',
  version: '0.0.0',
  store: 'etcd',
  startedAt: new Date(0).toISOString(),
  lease: 'live',
  lastError: null,
  interfaces: ['eth0'],
  services: new Map([
    ['default/web', ['198.51.100.10']],
    ['default/db', ['198.51.100.11', '2001:db8::b']],
  ]),
  owners: new Map([
    ['198.51.100.10', 'n1'],
    ['198.51.100.11', 'n2'],
    ['2001:db8::b', 'n2'],
  ]),
  bgpAdvertised: new Set(),
  replies: new Map([['198.51.100.10', 7]]),
  peers: new Map([['n2', { version: '0.0.0', startedAt: new Date(0).toISOString(), interfaces: ['eth0'], owned: 2 }]]),
  pools: [],
  rejected: null,
  conflicts: [],
  garp: { sent: 0, failed: 0 },
  events: [],
  lastEventId: 0,
};

describe('view model: per-IP columns', () => {
  test('row keys name their IPs: l2 rows, routes, LB frontends, services', () => {
    const svc = new Map([['default/db', ['198.51.100.11', '2001:db8::b']]]);
    assert.deepEqual(ipsOfRowKey('198.51.100.10|eth0', svc), ['198.51.100.10']);
    assert.deepEqual(ipsOfRowKey('198.51.100.10/32', svc), ['198.51.100.10']);
    assert.deepEqual(ipsOfRowKey('2001:db8::b/128', svc), ['2001:db8::b']);
    assert.deepEqual(ipsOfRowKey('198.51.100.10:80/TCP', svc), ['198.51.100.10']);
    assert.deepEqual(ipsOfRowKey('[2001:db8::b]:53/UDP', svc), ['2001:db8::b']);
    assert.deepEqual(ipsOfRowKey('default/db', svc), ['198.51.100.11', '2001:db8::b']);
    assert.deepEqual(ipsOfRowKey('bird.conf', svc), []);
  });

  test('reconcile state per IP: an error anywhere wins over pending, and says where and why', () => {
    const m = reconcileByIp(
      [
        { node: 'n1', row: { reconciler: 'l2-responder', key: '198.51.100.10|eth0', kind: 'pending' } },
        { node: 'n2', row: { reconciler: 'lb-services', key: '198.51.100.10:80/TCP', kind: 'error', error: 'map full' } },
        { node: 'n2', row: { reconciler: 'local-routes', key: '198.51.100.11|eth0', kind: 'pending' } },
      ],
      new Map(),
    );
    assert.deepEqual(m.get('198.51.100.10'), { state: 'error', detail: 'n2 lb-services: map full' });
    assert.deepEqual(m.get('198.51.100.11'), { state: 'pending', detail: 'n2 local-routes' });
    assert.equal(m.has('2001:db8::b'), false);
  });

  test('the snapshot carries pool, LB backends, policy revision, answers by node and reconcile state', () => {
    const v = buildView({
      ...base,
      poolOf: new Map([
        ['198.51.100.10', 'blue'],
        ['198.51.100.11', 'blue'],
      ]),
      lbFrontends: [{ key: '198.51.100.10:80/TCP', vip: '198.51.100.10', mode: 'dnat', backends: [{ ip: '203.0.113.2', port: 8080, terminating: false }, { ip: '203.0.113.3', port: 8080, terminating: true }] }],
      // This node announces none of db's IPs: its row lists none; the service's IPs carry the revision all the same.
      policies: [{ service: 'default/db', ips: [], revision: 4 }],
      self: { node: 'n1', at: 0, notDone: [], health: 'ok' },
      peerReports: new Map([['n2', { report: { node: 'n2', at: 0, replies: { '198.51.100.11': 3 }, notDone: [{ reconciler: 'service-policy', key: 'default/db', kind: 'error', error: 'tc failed' }], health: '1 row in error' }, error: '' }]]),
    });
    const ip = (a: string) => v.ips.find((x) => x.ip === a)!;
    assert.equal(ip('198.51.100.10').pool, 'blue');
    assert.deepEqual(ip('198.51.100.10').lb, [{ frontend: '198.51.100.10:80/TCP', mode: 'dnat', backends: ['203.0.113.2:8080', '203.0.113.3:8080 (terminating)'] }]);
    assert.equal(ip('198.51.100.10').policyRevision, null);
    assert.deepEqual(ip('198.51.100.10').answers, { n1: 7 });
    assert.deepEqual(ip('198.51.100.10').reconcile, { state: 'done', detail: '' });
    assert.equal(ip('198.51.100.11').policyRevision, 4);
    assert.deepEqual(ip('198.51.100.11').answers, { n2: 3 }, "the peer's counter, as its report says");
    assert.deepEqual(ip('2001:db8::b').reconcile, { state: 'error', detail: 'n2 service-policy: tc failed' });
    assert.equal(v.nodes.find((n) => n.name === 'n2')!.health, '1 row in error');
    assert.equal(v.nodes.find((n) => n.name === 'n1')!.health, 'ok');
  });

  test('a peer that did not answer: its health says so, its stale counters are not shown', () => {
    const c = buildCounters({ ...base, peerReports: new Map([['n2', { report: { node: 'n2', at: 0, replies: { '198.51.100.11': 3 }, notDone: [], health: 'ok' }, error: 'no answer within 800 ms' }]]) });
    assert.equal(c.health['n2'], 'unreachable: no answer within 800 ms');
    assert.equal(c.answers['n2'], undefined);
  });
});

test('details pushed live: only the IPs whose pool, backends or policy revision changed; a vanished one is reset', () => {
  const sent = new Map<string, string>();
  const a = buildDetails({ poolOf: new Map([['198.51.100.10', 'blue'], ['198.51.100.11', 'blue']]), policies: [{ service: 'default/db', ips: ['198.51.100.11'], revision: 1 }] });
  assert.deepEqual(Object.keys(diffDetails(sent, a)).sort(), ['198.51.100.10', '198.51.100.11']);
  assert.deepEqual(diffDetails(sent, a), {}, 'nothing changed: nothing sent');
  const b = buildDetails({ poolOf: new Map([['198.51.100.11', 'blue']]), policies: [{ service: 'default/db', ips: ['198.51.100.11'], revision: 2 }] });
  assert.deepEqual(diffDetails(sent, b), { '198.51.100.11': { pool: 'blue', lb: [], policyRevision: 2 }, '198.51.100.10': NO_DETAILS });
});

describe('peer poller: other nodes reports over HTTP', () => {
  const servers: Server[] = [];
  after(() => servers.forEach((s) => s.close()));
  const serve = async (handler: RequestListener): Promise<string> => {
    const s = createServer(handler);
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const a = s.address() as { port: number };
    return `http://127.0.0.1:${a.port}`;
  };
  const settle = async (p: PeerPoller, n: number) => {
    for (let k = 0; k < 100 && [...p.current().values()].length < n; k++) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 50));
  };

  test('fetches each peer with the token; checks and bounds what comes back', async () => {
    const seenAuth: string[] = [];
    const good = await serve((req, res) => {
      seenAuth.push(req.headers.authorization ?? '');
      res.end(JSON.stringify({ node: 'n2', at: 1, replies: { '198.51.100.11': 5, bad: 'x' }, notDone: [{ reconciler: 'l2-responder', key: '198.51.100.11|eth0', kind: 'pending' }, { kind: 'nonsense' }], health: 'ok' }));
    });
    const liar = await serve((_req, res) => res.end(JSON.stringify({ node: 'n1', replies: {} })));
    const huge = await serve((_req, res) => res.end('x'.repeat(4096)));
    const silent = await serve(() => {});
    let wanted = false;
    const poller = new PeerPoller(
      {
        peers: () => [
          { node: 'n2', url: good },
          { node: 'n3', url: liar },
          { node: 'n4', url: huge },
          { node: 'n5', url: silent },
        ],
        wanted: () => wanted,
        token: 'secret-token',
      },
      { periodMs: 60_000, timeoutMs: 200, maxBytes: 1024 },
    );
    poller.poll();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(poller.current().size, 0, 'nobody looks: nobody is asked');
    wanted = true;
    poller.poll();
    await settle(poller, 4);
    const r = poller.current();
    assert.deepEqual(seenAuth, ['Bearer secret-token']);
    assert.deepEqual(r.get('n2')!.report!.replies, { '198.51.100.11': 5 });
    assert.equal(r.get('n2')!.report!.notDone.length, 1);
    assert.match(r.get('n3')!.error, /not n3's/);
    assert.match(r.get('n4')!.error, /larger than 1024/);
    assert.match(r.get('n5')!.error, /no answer within 200 ms/);
    poller.dispose();
  });
});
