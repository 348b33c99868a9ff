/**
 * The view page with 10,000 service IPs in a real browser (Debian's chromium,
 * playwright-core) against the real view server on loopback, fed by a
 * synthetic source (the model and server are the agent's; only the agent's
 * tables are not there): the page loads the compact snapshot, draws only the
 * rows in view (not 10,000), scrolling reaches the last IP, and a counters
 * push carrying only what changed updates the one cell — for a row drawn
 * later too — while the ownership push moves an owner.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { EventRing } from '../../src/core/events.js';
import { buildView, type CountersPush, type ViewInput } from '../../src/api/view/model.js';
import { ViewHandler, ViewServer, type ViewSource } from '../../src/api/view/server.js';

const N = 10_000;
const ipOf = (k: number) => `2001:db8::${k.toString(16)}`;

describe('view page: 10,000 IPs in a browser', () => {
  let server: ViewServer;
  let browser: Browser;
  let page: Page;
  const replies = new Map<string, number>();
  const owners = new Map<string, string>();
  let ownersListener: (c: ReadonlyMap<string, string | null>) => void = () => {};
  let compactRequests = 0;

  before(async () => {
    const services = new Map<string, string[]>();
    for (let k = 1; k <= N; k++) {
      services.set(`ns-${k % 50}/svc-${k}`, [ipOf(k)]);
      owners.set(ipOf(k), 'n1');
      replies.set(ipOf(k), 0);
    }
    const input = (): ViewInput => ({ node: 'n1', version: '0.0.0', store: 'local', startedAt: new Date(0).toISOString(), lease: 'local', lastError: null, interfaces: ['eth0'], services, owners, bgpAdvertised: new Set(), replies, peers: new Map(), pools: [], rejected: null, conflicts: [], garp: { sent: 0, failed: 0 }, events: [], lastEventId: 0 });
    const src: ViewSource = {
      ring: new EventRing(),
      snapshot: () => buildView(input()),
      onOwners: (l) => {
        ownersListener = l;
        return () => {};
      },
      onNodes: () => () => {},
      pools: () => [],
      onPools: () => () => {},
      counters: (): CountersPush => ({ answers: { n1: Object.fromEntries(replies) }, health: { n1: 'ok' }, reconcile: {} }),
      nodeReport: () => ({ node: 'n1', at: 0, replies: {}, notDone: [], health: 'ok' }),
      details: () => new Map(),
    };
    const handler = new ViewHandler(src, { maxClientBytes: 8 << 20, countersMs: 200, maxClients: 4 });
    server = new ViewServer({ host: '127.0.0.1', port: 0 }, handler);
    await server.start();
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--disable-gpu', '--disable-dev-shm-usage'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on('request', (r) => (r.url().includes('/v1/view?compact=1') ? compactRequests++ : undefined));
  });

  after(async () => {
    await browser?.close().catch(() => {});
    server?.dispose();
  });

  test('loads the compact snapshot and draws only the rows in view', async () => {
    await page.goto(`http://127.0.0.1:${server.address!.port}/`);
    await page.locator('#ips h2', { hasText: `Service IPs (${N})` }).waitFor({ timeout: 30_000 });
    await page.locator('.live[data-live="true"]').waitFor({ timeout: 10_000 });
    assert.equal(compactRequests, 1, 'the page asked for the compact form');
    const drawn = await page.locator('tr[data-ip]').count();
    assert.ok(drawn > 20 && drawn < 300, `rows in the document: ${drawn} of ${N}`);
    assert.equal(await page.locator(`tr[data-ip="${ipOf(1)}"] td.services`).textContent(), 'ns-1/svc-1');
    assert.equal(await page.locator(`tr[data-ip="${ipOf(N)}"]`).count(), 0, 'the last row is not drawn before it is scrolled to');
  });

  test('scrolling reaches the last IP; a counters delta updates its cell; an owner move shows', async () => {
    await page.locator('.scroller').evaluate((e) => (e.scrollTop = e.scrollHeight));
    const last = page.locator(`tr[data-ip="${ipOf(N)}"]`);
    await last.waitFor({ timeout: 10_000 });
    assert.equal(await last.locator('td.services').textContent(), `ns-${N % 50}/svc-${N}`);
    assert.ok((await page.locator('tr[data-ip]').count()) < 300, 'still only a window of rows');
    // Only this IP's counter changes: the push carries it alone, and the page shows it.
    replies.set(ipOf(N), 42);
    await last.locator('td.replies', { hasText: /^n1 42$/ }).waitFor({ timeout: 5_000 });
    owners.set(ipOf(N), 'n2');
    ownersListener(new Map([[ipOf(N), 'n2']]));
    await last.locator('td.owner', { hasText: /^n2$/ }).waitFor({ timeout: 5_000 });
    // Scrolled back up and down again: the row is drawn afresh with what the page learned.
    await page.locator('.scroller').evaluate((e) => (e.scrollTop = 0));
    await page.locator(`tr[data-ip="${ipOf(1)}"]`).waitFor({ timeout: 5_000 });
    await page.locator('.scroller').evaluate((e) => (e.scrollTop = e.scrollHeight));
    await last.locator('td.replies', { hasText: /^n1 42$/ }).waitFor({ timeout: 5_000 });
    assert.equal(await last.locator('td.owner').textContent(), 'n2');
  });
});
