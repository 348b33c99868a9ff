/**
 * The cluster view's BGP column in a real browser: two agents on etcd, each
 * running BGP anycast (its own BIRD; the upstream peer need not answer — what
 * a node advertises is its desired routes), one anycast service. n1's page
 * shows every node advertising the IP — n2's routes come from n2's own report
 * (its view server, on 0.0.0.0: the URL its card publishes is derived) — and
 * follows live when n2 stops.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { EtcdLab } from '../helpers/etcd-lab.js';
import { ROOT, labSkipReason } from '../helpers/lab-tools.js';
import { anycastBgpManifests } from '../helpers/bgp-manifests.js';

const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: anycast }
spec: { blocks: [{ start: 198.51.100.40, stop: 198.51.100.41 }] }
---
${anycastBgpManifests(
  { peer: { name: 'upstream', address: '192.0.2.250', asn: 65100 }, labTimers: false },
  { externalTrafficPolicy: 'Cluster', endpoints: [{ address: '192.0.2.200', ready: true }] },
)}`;
const TOKEN = 'lab-view-bgp-token-0123456789';
const ARTIFACTS = join(ROOT, 'artifacts', 'view');

describe('cluster view: BGP advertised by every node (lab, browser)', { skip: labSkipReason() }, () => {
  let env: EtcdLab;
  let browser: Browser | undefined;
  let page: Page;

  before(async () => {
    env = await EtcdLab.create({
      nodes: 2,
      tag: 'vb',
      agentArgs: (n) => ['--bgp-router-id', n.ip, '--view-listen', n === env.lab.nodes[0] ? `${n.ip}:9470` : '0.0.0.0:9470', '--view-token-file', join(env.dir, 'token')],
    });
    env.write('m.yaml', MANIFESTS);
    env.write('token', TOKEN + '\n', 0o600);
    env.apply('m.yaml');
    for (const n of env.lab.nodes) await env.start(n);
    const wrapper = join(env.dir, 'chromium-in-client');
    writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${env.lab.client.netns} /usr/bin/chromium "$@"\n`);
    chmodSync(wrapper, 0o755);
    browser = await chromium.launch({ executablePath: wrapper, args: ['--disable-gpu', '--disable-dev-shm-usage'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on('pageerror', (e) => console.log(`view-bgp: page error: ${e.message}`));
  });

  after(async () => {
    await browser?.close().catch(() => {});
    await env?.destroy();
  });

  test("n1's page names both advertising nodes, and drops n2 when it stops", async () => {
    const [n1, n2] = env.lab.nodes as [typeof env.lab.nodes[0], typeof env.lab.nodes[0]];
    await page.goto(`http://${n1.ip}:9470/?token=${TOKEN}`);
    const mode = page.locator('tr[data-ip]:has(td.services:text-is("default/web")) td.mode');
    const both = [n1.netns, n2.netns].sort().join(', ');
    await mode.filter({ hasText: new RegExp(`^BGP \\(${both}\\)$`) }).waitFor({ timeout: 30_000 }).catch(async (e: Error) => {
      throw new Error(`${e.message}\nmode cell: ${await mode.textContent().catch(() => '(no row)')}`);
    });
    console.log(`view-bgp: ${await mode.textContent()}`);
    // No L2 announcement selects it: no owner, and that is not shown as a fault.
    assert.equal(await page.locator('tr[data-ip]:has(td.services:text-is("default/web")) td.owner').textContent(), '-');
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, '4-bgp-advertised-by.png') });
    await page.evaluate('window.notReloaded = true');
    await env.agents.get(n2)!.stop('SIGTERM');
    await mode.filter({ hasText: new RegExp(`^BGP \\(${n1.netns}\\)$`) }).waitFor({ timeout: 15_000 });
    assert.equal(await page.evaluate('window.notReloaded'), true, 'followed live, no reload');
  });
});
