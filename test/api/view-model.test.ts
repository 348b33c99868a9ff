/**
 * The view's per-IP columns (pool, LB backends, policy revision, reconcile
 * state, answers by node) and the peer reports they draw on: the pure model,
 * and the poller against a real loopback HTTP server (token sent, answers
 * bounded, a silent peer timed out, a report naming another node refused).
 */
import assert from 'node:assert/strict';
import { createServer, type RequestListener, type Server } from 'node:http';
import { after, describe, test } from 'node:test';
import { NO_DETAILS, buildCounters, buildDetails, buildView, compactView, diffDetails, diffPerNode, expandView, ipsOfRowKey, reconcileByIp, type ViewInput } from '../../src/api/view/model.js';
import { PeerPoller, parseReport } from '../../src/api/view/peers.js';
import { viewAdvertiseUrl } from '../../src/api/view/server.js';

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

describe('view model: BGP advertisers and LB connections from every node', () => {
  const peer = (node: string, extra: object) => ({ report: { node, at: 0, replies: {}, notDone: [], health: 'ok', ...extra }, error: '' });
  test("advertised by: this node's routes and every peer's, an IP only a peer advertises is a row", () => {
    const v = buildView({
      ...base,
      bgpAdvertised: new Set(['198.51.100.10']),
      peerReports: new Map([
        ['n2', peer('n2', { advertised: ['198.51.100.10', '198.51.100.11'] })],
        ['n3', peer('n3', { advertised: ['203.0.113.50', '198.51.100.10'] })],
        // A peer that did not answer: its routes are not shown (they may be stale).
        ['n4', { ...peer('n4', { advertised: ['198.51.100.11'] }), error: 'no answer within 800 ms' }],
      ]),
    });
    const ip = (a: string) => v.ips.find((x) => x.ip === a)!;
    assert.deepEqual(ip('198.51.100.10').advertisedBy, ['n1', 'n2', 'n3']);
    assert.equal(ip('198.51.100.10').mode, 'L2+BGP');
    assert.deepEqual(ip('198.51.100.11').advertisedBy, ['n2']);
    assert.deepEqual(ip('203.0.113.50').advertisedBy, ['n3']);
    assert.equal(ip('203.0.113.50').mode, 'BGP');
    assert.equal(ip('203.0.113.50').owner, null);
    assert.deepEqual(ip('2001:db8::b').advertisedBy, []);
    assert.equal(ip('2001:db8::b').mode, 'L2');
  });

  test('LB connections per IP and node, from this node and the peers that count them', () => {
    const v = buildView({ ...base, connections: new Map([['198.51.100.10', 3]]), peerReports: new Map([['n2', peer('n2', { connections: { '198.51.100.10': 2, '198.51.100.11': 7 } })]]) });
    const ip = (a: string) => v.ips.find((x) => x.ip === a)!;
    assert.deepEqual(ip('198.51.100.10').connections, { n1: 3, n2: 2 });
    assert.deepEqual(ip('198.51.100.11').connections, { n2: 7 });
    assert.deepEqual(ip('2001:db8::b').connections, {});
  });

  test("a peer's report: advertised IPs and connection counts are checked and bounded", () => {
    const r = parseReport(JSON.stringify({ node: 'n2', advertised: ['198.51.100.10', 5, 'x'.repeat(100)], connections: { '198.51.100.10': 4, bad: 'x', neg: -1 } }), 'n2');
    assert.deepEqual(r.advertised, ['198.51.100.10', 'x'.repeat(64)]);
    assert.deepEqual(r.connections, { '198.51.100.10': 4 });
  });
});

describe('view model: the compact snapshot and the counters deltas', () => {
  const big = (n: number): ViewInput => {
    const services = new Map<string, string[]>();
    const owners = new Map<string, string>();
    const replies = new Map<string, number>();
    for (let k = 1; k <= n; k++) {
      const ip = `2001:db8::${k.toString(16)}`;
      services.set(`ns-${k % 50}/svc-${k}`, [ip]);
      owners.set(ip, k % 3 === 0 ? 'n2' : 'n1');
      replies.set(ip, k % 7);
    }
    return { ...base, services, owners, replies, poolOf: new Map([...owners.keys()].map((ip) => [ip, 'big'])), bgpAdvertised: new Set(['2001:db8::5']) };
  };

  test('columns with shared strings expand to exactly the rows; a fifth of the size or less', () => {
    const v = buildView({
      ...big(2000),
      connections: new Map([['2001:db8::2', 9]]),
      lbFrontends: [{ key: '[2001:db8::1]:80/TCP', vip: '2001:db8::1', mode: 'dnat', backends: [{ ip: '2001:db8:1::1', port: 8080, terminating: false }] }],
      policies: [{ service: 'ns-3/svc-3', ips: ['2001:db8::3'], revision: 2 }],
      self: { node: 'n1', at: 0, notDone: [{ reconciler: 'l2-responder', key: '2001:db8::4|eth0', kind: 'pending' }], health: 'ok' },
      events: [{ id: 1, node: 'n1', at: new Date(5).toISOString(), kind: 'owner-took', ip: '2001:db8::1' } as ViewInput['events'][number]],
    });
    const compact = compactView(v);
    const back = expandView(JSON.parse(JSON.stringify(compact)) as typeof compact);
    assert.deepEqual(back, v);
    const full = JSON.stringify(v).length;
    const small = JSON.stringify(compact).length;
    assert.ok(small * 4 < full, `compact ${small} bytes vs ${full}`);
  });

  test('counters deltas: only changed answers; a node no longer reporting is dropped', () => {
    const sent = new Map<string, Map<string, number>>();
    assert.deepEqual(diffPerNode(sent, { n1: { a: 1, b: 2 }, n2: { a: 0 } }), { n1: { a: 1, b: 2 }, n2: { a: 0 } });
    assert.deepEqual(diffPerNode(sent, { n1: { a: 1, b: 3 }, n2: { a: 0 } }), { n1: { b: 3 } });
    assert.deepEqual(diffPerNode(sent, { n1: { a: 1, b: 3 } }), {});
    assert.equal(sent.has('n2'), false);
    assert.deepEqual(diffPerNode(sent, { n1: { a: 1, b: 3 }, n2: { a: 0 } }), { n2: { a: 0 } }, 'a node back: all of its answers again');
     // An IP that moved away from n1: the page is told to drop n1's counter for it (-1), once.
    assert.deepEqual(diffPerNode(sent, { n1: { a: 1 }, n2: { a: 0, b: 5 } }), { n1: { b: -1 }, n2: { b: 5 } });
    assert.deepEqual(diffPerNode(sent, { n1: { a: 1 }, n2: { a: 0, b: 5 } }), {});
  });
});

describe('view URL published on the node card', () => {
  const addrs = [
    { address: '127.0.0.1', family: 4 as const, internal: true },
    { address: 'fe80::1', family: 6 as const, internal: false },
    { address: '2001:db8::5', family: 6 as const, internal: false },
    { address: '192.0.2.11', family: 4 as const, internal: false },
  ];
  const on = (host: string) => ({ host, port: 9470 });
  test('a definite address as it is; a wildcard one from the host address; loopback only when advertised', () => {
    assert.equal(viewAdvertiseUrl(on('192.0.2.3'), undefined, addrs), 'http://192.0.2.3:9470');
    assert.equal(viewAdvertiseUrl(on('0.0.0.0'), undefined, addrs), 'http://192.0.2.11:9470');
    assert.equal(viewAdvertiseUrl(on('::'), undefined, addrs.slice(0, 3)), 'http://[2001:db8::5]:9470');
    assert.equal(viewAdvertiseUrl(on('0.0.0.0'), undefined, addrs.slice(0, 3)), undefined, 'no IPv4 address for an IPv4 wildcard');
    assert.equal(viewAdvertiseUrl(on('127.0.0.1'), undefined, addrs), undefined);
    assert.equal(viewAdvertiseUrl(undefined, undefined, addrs), undefined);
  });
  test('--view-advertise-address: host, host:port, IPv6 with or without brackets, a name; bad input refused with a code', () => {
    assert.equal(viewAdvertiseUrl(on('127.0.0.1'), '192.0.2.9', addrs), 'http://192.0.2.9:9470');
    assert.equal(viewAdvertiseUrl(on('127.0.0.1'), '192.0.2.9:8443', addrs), 'http://192.0.2.9:8443');
    assert.equal(viewAdvertiseUrl(on('::'), '[2001:db8::9]:81', addrs), 'http://[2001:db8::9]:81');
    assert.equal(viewAdvertiseUrl(on('::'), '2001:db8::9', addrs), 'http://[2001:db8::9]:9470');
    assert.equal(viewAdvertiseUrl(on('0.0.0.0'), 'view.example.net', addrs), 'http://view.example.net:9470');
    for (const bad of ['bad host', '1.2.3.4:99999', 'http://x', '', 'a/b'])
      assert.throws(() => viewAdvertiseUrl(on('0.0.0.0'), bad, addrs), (e: Error & { code?: string }) => e.code === 'HERALD_BAD_ARGUMENT', bad);
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
