/**
 * The cluster view's HTTP side on a real loopback server: read-only (every
 * non-GET refused), the bearer token, SSE resume by Last-Event-ID without
 * loss or duplicate, and a client that stops reading cut off with the
 * agent's memory bounded.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { EventRing, type ClusterEvent } from '../../src/core/events.js';
import { buildView } from '../../src/api/view/model.js';
import { ViewHandler, ViewServer, parseViewListen, type ViewSource } from '../../src/api/view/server.js';
import { isHeraldError } from '../../src/core/errors.js';

const TOKEN = 'correct-horse-battery-staple';

function source(ring: EventRing): ViewSource & { owners: (c: Map<string, string | null>) => void } {
  let ownersListener: (c: ReadonlyMap<string, string | null>) => void = () => {};
  return {
    ring,
    snapshot: () =>
      buildView({
        node: 'n1',
        version: '0.0.0',
        store: 'etcd',
        startedAt: new Date().toISOString(),
        lease: 'live',
        lastError: null,
        interfaces: ['eth0'],
        services: new Map([['default/web', ['198.51.100.10']]]),
        owners: new Map([['198.51.100.10', 'n2']]),
        bgpAdvertised: new Set(),
        replies: new Map(),
        peers: new Map(),
        pools: [],
        rejected: null,
        conflicts: [],
        garp: { sent: 0, failed: 0 },
        events: ring.list(),
        lastEventId: ring.last,
      }),
    onOwners: (l) => {
      ownersListener = l;
      return () => {};
    },
    onNodes: () => () => {},
    counters: () => ({ answers: {}, health: {}, reconcile: {} }),
    nodeReport: () => ({ node: 'n1', at: 0, replies: {}, notDone: [], health: 'ok' }),
    details: () => new Map(),
    pools: () => [],
    onPools: () => () => {},
    owners: (c) => ownersListener(c),
  };
}

const ev = (id: number, extra: Partial<ClusterEvent> = {}): ClusterEvent => ({ id, node: 'n1', at: new Date().toISOString(), kind: 'allocated', service: 'default/web', ip: `198.51.100.${id % 250}`, ...extra }) as ClusterEvent;

function http(port: number, method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(method === 'GET' || method === 'HEAD' ? undefined : '{"kind":"owner-took"}');
  });
}

/** Reads SSE events from the stream until `n` have arrived. */
function readEvents(port: number, headers: Record<string, string>, n: number, path = '/v1/events'): Promise<{ ids: number[]; names: string[] }> {
  return new Promise((resolve, reject) => {
    const ids: number[] = [];
    const names: string[] = [];
    const req = request({ host: '127.0.0.1', port, path, headers }, (res) => {
      let buf = '';
      res.setEncoding('utf8').on('data', (c: string) => {
        buf += c;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const name = /^event: (.*)$/m.exec(block)?.[1];
          const id = /^id: (\d+)$/m.exec(block)?.[1];
          if (name) names.push(name);
          if (id) ids.push(Number(id));
          if (ids.length >= n) {
            req.destroy();
            resolve({ ids, names });
          }
        }
      });
    });
    req.on('error', (e) => (ids.length >= n ? undefined : reject(e)));
    req.end();
  });
}

describe('cluster view server', () => {
  let ring: EventRing;
  let src: ReturnType<typeof source>;
  let server: ViewServer;
  let port: number;
  let handler: ViewHandler;

  before(async () => {
    ring = new EventRing({ capacity: 100, maxQueued: 1000 });
    ring.add(...[1, 2, 3, 4, 5].map((i) => ev(i)));
    src = source(ring);
    handler = new ViewHandler(src, { maxClientBytes: 256 * 1024, countersMs: 1000, maxClients: 64 });
    server = new ViewServer({ host: '127.0.0.1', port: 0 }, handler);
    await server.start();
    port = server.address!.port;
  });
  after(() => server.dispose());

  test('the page, its script and the snapshot are served with GET', async () => {
    const page = await http(port, 'GET', '/');
    assert.equal(page.status, 200);
    assert.match(page.body, /<script src="app.js"><\/script>/);
    assert.equal((await http(port, 'GET', '/app.js')).status, 200);
    const view = JSON.parse((await http(port, 'GET', '/v1/view')).body) as { ips: Array<{ ip: string; owner: string }>; lastEventId: number };
    assert.deepEqual(view.ips.map((x) => [x.ip, x.owner]), [['198.51.100.10', 'n2']]);
    assert.equal(view.lastEventId, 5);
  });

  test('no write path: every other method is refused on every path, and nothing changes', async () => {
    const before = ring.last;
    for (const path of ['/', '/app.js', '/v1/view', '/v1/events', '/v1/status', '/anything']) {
      for (const method of ['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
        const r = await http(port, method, path);
        assert.equal(r.status, 405, `${method} ${path}`);
      }
    }
    assert.equal(ring.last, before);
  });

  test('a reconnecting client resumes after its Last-Event-ID: no loss, no duplicate', async () => {
    const first = readEvents(port, { 'last-event-id': '3' }, 3);
    await new Promise((r) => setTimeout(r, 100));
    ring.add(ev(6));
    assert.deepEqual((await first).ids, [4, 5, 6]);
    // The same through ?after= (a page's first connection, which cannot set headers).
    assert.deepEqual((await readEvents(port, {}, 2, '/v1/events?after=4')).ids, [5, 6]);
  });

  test('a client whose events left the ring is told to reload the snapshot', async () => {
    const small = new EventRing({ capacity: 3, maxQueued: 100 });
    small.add(...[10, 11, 12, 13, 14].map((i) => ev(i)));
    const h = new ViewHandler(source(small));
    const s = new ViewServer({ host: '127.0.0.1', port: 0 }, h);
    await s.start();
    try {
      const got = await readEvents(s.address!.port, { 'last-event-id': '10' }, 3);
      assert.equal(got.names[0], 'reload');
      assert.deepEqual(got.ids, [12, 13, 14]);
    } finally {
      s.dispose();
    }
  });

  test('owner changes are pushed to open streams', async () => {
    const got = new Promise<string>((resolve) => {
      const req = request({ host: '127.0.0.1', port, path: '/v1/events' }, (res) => {
        let buf = '';
        res.setEncoding('utf8').on('data', (c: string) => {
          buf += c;
          const m = /event: owners\ndata: (.*)\n/.exec(buf);
          if (m) {
            req.destroy();
            resolve(m[1]!);
          }
        });
      });
      req.on('error', () => {});
      req.end();
    });
    await new Promise((r) => setTimeout(r, 100));
    src.owners(new Map([['198.51.100.10', 'n3']]));
    assert.deepEqual(JSON.parse(await got), { '198.51.100.10': 'n3' });
  });

  test('a client that stops reading is cut off; the agent never blocks and its memory stays bounded', async () => {
    // A raw socket that sends the request and never reads again.
    const stalled = connect({ host: '127.0.0.1', port });
    stalled.on('error', () => {});
    stalled.write('GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n');
    stalled.pause();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(handler.clientCount, 1);
    global.gc?.();
    const mem0 = process.memoryUsage();
    const big = 'x'.repeat(400);
    let id = ring.last;
    // 40,000 events of ~600 bytes (24 MB) while the client reads nothing.
    for (let batch = 0; batch < 400; batch++) {
      ring.add(...Array.from({ length: 100 }, () => ev(++id, { service: big } as Partial<ClusterEvent>)));
      await new Promise((r) => setImmediate(r));
    }
    await new Promise((r) => setTimeout(r, 100));
    const mem1 = process.memoryUsage();
    const grew = mem1.heapUsed + mem1.external + mem1.arrayBuffers - (mem0.heapUsed + mem0.external + mem0.arrayBuffers);
    console.log(`view: stalled client; 40k events (24 MB) sent; memory grew ${(grew / 1e6).toFixed(1)} MB; clients cut off ${handler.cutOff}`);
    assert.ok(handler.cutOff >= 1, 'the stalled client was cut off');
    assert.equal(handler.clientCount, 0);
    assert.ok(grew < 16e6, `memory grew ${grew} bytes`);
    stalled.destroy();
  });
});

describe('--view-listen', () => {
  test('loopback needs no token; any other address refuses to start without one', () => {
    assert.deepEqual(parseViewListen('127.0.0.1:9470', undefined), { host: '127.0.0.1', port: 9470 });
    assert.deepEqual(parseViewListen('[::1]:9470', undefined), { host: '::1', port: 9470 });
    assert.throws(() => parseViewListen('0.0.0.0:9470', undefined), (e) => isHeraldError(e, 'HERALD_VIEW_TOKEN_REQUIRED'));
    assert.throws(() => parseViewListen('192.0.2.1:9470', undefined), (e) => isHeraldError(e, 'HERALD_VIEW_TOKEN_REQUIRED'));
    assert.deepEqual(parseViewListen('192.0.2.1:9470', TOKEN), { host: '192.0.2.1', port: 9470 });
    assert.throws(() => parseViewListen('nonsense', TOKEN), (e) => isHeraldError(e, 'HERALD_BAD_ARGUMENT'));
  });

  test('with a token, every request needs it (header, or ?token= for a browser)', async () => {
    const ring = new EventRing();
    const server = new ViewServer({ host: '127.0.0.1', port: 0 }, new ViewHandler(source(ring), undefined, TOKEN));
    await server.start();
    const port = server.address!.port;
    try {
      for (const path of ['/', '/app.js', '/v1/view', '/v1/events']) {
        assert.equal((await http(port, 'GET', path)).status, 401, path);
        assert.equal((await http(port, 'GET', path, { authorization: 'Bearer wrong-token-wrong-token' })).status, 401, path);
      }
      assert.equal((await http(port, 'GET', '/v1/view', { authorization: `Bearer ${TOKEN}` })).status, 200);
      assert.equal((await http(port, 'GET', `/?token=${TOKEN}`)).status, 200);
      assert.equal((await http(port, 'POST', '/v1/view', { authorization: `Bearer ${TOKEN}` })).status, 405);
    } finally {
      server.dispose();
    }
  });
});

describe('counters push', () => {
  /** Reads the stream's `counters` pushes until `n` arrived. */
  const pushes = (port: number, n: number) =>
    new Promise<Array<Record<string, unknown>>>((resolve, reject) => {
      const got: Array<Record<string, unknown>> = [];
      const req = request({ host: '127.0.0.1', port, path: '/v1/events' }, (res) => {
        let buf = '';
        res.setEncoding('utf8').on('data', (c: string) => {
          buf += c;
          let i: number;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            if (!/^event: counters$/m.test(block)) continue;
            got.push(JSON.parse(/^data: (.*)$/m.exec(block)![1]!) as Record<string, unknown>);
            if (got.length >= n) {
              req.destroy();
              resolve(got);
            }
          }
        });
      });
      req.on('error', (e) => (got.length >= n ? undefined : reject(e)));
      req.end();
    });

  test("a stream's first push is whole, then only what changed; BGP advertisers only when they change", async () => {
    let tick = 0;
    const answers = () => ({ n1: { '198.51.100.10': 5, '198.51.100.11': tick }, n2: { '198.51.100.12': 1 } });
    const src: ViewSource = {
      ...source(new EventRing()),
      counters: () => {
        tick++;
        return { answers: answers(), advertised: { '198.51.100.10': ['n1', 'n2'] }, connections: { n1: { '198.51.100.10': 4 } }, health: {}, reconcile: {} };
      },
    };
    const server = new ViewServer({ host: '127.0.0.1', port: 0 }, new ViewHandler(src, { maxClientBytes: 1 << 20, countersMs: 40, maxClients: 8 }));
    await server.start();
    try {
      const [first, second, third] = await pushes(server.address!.port, 3);
      assert.equal(first!['full'], true);
      assert.deepEqual((first!['answers'] as Record<string, unknown>)['n2'], { '198.51.100.12': 1 });
      assert.deepEqual(first!['advertised'], { '198.51.100.10': ['n1', 'n2'] });
      assert.deepEqual(first!['nodes'], ['n1', 'n2']);
      for (const later of [second!, third!]) {
        assert.equal(later['full'], undefined);
        assert.deepEqual(Object.keys(later['answers'] as object), ['n1'], 'only the node whose answers changed');
        assert.deepEqual(Object.keys((later['answers'] as Record<string, object>)['n1']!), ['198.51.100.11'], 'only the IP whose count changed');
        assert.equal(later['advertised'], undefined, 'advertisers unchanged: not sent');
        assert.deepEqual(later['connections'], { n1: { '198.51.100.10': 4 } });
      }
    } finally {
      server.dispose();
    }
  });
});
