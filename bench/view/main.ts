/**
 * bench/view — the cluster view, measured in a real browser (Debian's
 * chromium, playwright-core) against real agents in the lab.
 *
 *  1. Ownership change → open page: two agents on etcd, 20 service IPs;
 *     the owner of half of them is stopped (SIGTERM) and started again, over
 *     and over (a clean-stop move, then the spread rebalance back). For each
 *     move, the time from the claim (the `owner-took` event, stamped by the
 *     claiming agent right after its store commit) to the owner cell changing
 *     on an open page (SSE push), side by side with the way an operator
 *     watches today: `herald status` polled every second (`watch -n1`).
 *  2. 10,000 service IPs (one node, manifests): the page's time to
 *     interactive (navigation → table of 10,000 rows rendered, from the
 *     page's own performance mark), the snapshot's size, and the agent's
 *     memory (RSS) without a page, with one and with five pages open;
 *     beside it `herald status --json` for the same node.
 *
 *   node --import tsx bench/view/main.ts [--cycles 5] [--ips 10000] [--json]
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { LabEtcd } from '../../lab/etcd.js';
import { Lab, sleep, supervisedAgentPid, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, startAgentReady, waitFor } from '../../test/helpers/lab-tools.js';

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const CYCLES = Number(opt('cycles', '5'));
const BIG = Number(opt('ips', '10000'));

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

function wrapper(dir: string, netns: string): string {
  const path = join(dir, `chromium-${netns}`);
  writeFileSync(path, `#!/bin/sh\nexec ip netns exec ${netns} /usr/bin/chromium "$@"\n`);
  chmodSync(path, 0o755);
  return path;
}

function getJson(socketPath: string, path: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c));
      res.on('end', () => resolve(JSON.parse(body)));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Follows the SSE stream of an agent's status socket, collecting owner-took events (and when owner changes were pushed). */
function followTakes(socketPath: string, into: Array<{ ip: string; node: string; at: number }>, pushed: Array<{ ip: string; owner: string; t: number }> = []): () => void {
  const req = request({ socketPath, path: '/v1/events', headers: { 'last-event-id': '0' } }, (res) => {
    let buf = '';
    res.setEncoding('utf8').on('data', (c: string) => {
      buf += c;
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (/^event: owners$/m.test(block) && data) {
          const t = Date.now();
          for (const [ip, owner] of Object.entries(JSON.parse(data) as Record<string, string | null>)) if (owner) pushed.push({ ip, owner, t });
          continue;
        }
        if (!/^event: event$/m.test(block) || !data) continue;
        const e = JSON.parse(data) as { kind: string; ip: string; node: string; at: string };
        if (e.kind === 'owner-took') into.push({ ip: e.ip, node: e.node, at: Date.parse(e.at) });
      }
    });
  });
  req.on('error', () => {});
  req.end();
  return () => req.destroy();
}

const rss = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

interface Latency { moves: number; pushSeen: number; pushP50: number; pushP99: number; pushMax: number; pollSeen: number; pollP50: number; pollP99: number; agentP50: number; agentP99: number; pageP50: number; pageP99: number }
interface Big { ips: number; interactiveFirstMs: number; interactiveMedianMs: number; snapshotBytes: number; snapshotMs: number; compactBytes: number; compactMs: number; statusJsonBytes: number; statusMs: number; rssNoPageMB: number; rssOnePageMB: number; rssFivePagesMB: number; heapNoPageMB: number; heapOnePageMB: number; heapFivePagesMB: number }

async function ownershipLatency(dir: string): Promise<Latency> {
  const lab = Lab.create({ nodes: 2, storeHost: true, tag: 'bv' });
  const etcd = new LabEtcd(lab.store!);
  let browser: Browser | undefined;
  const stopFollow: Array<() => void> = [];
  try {
    await etcd.start();
    const svcs = Array.from({ length: 20 }, (_, k) => `---\napiVersion: v1\nkind: Service\nmetadata: { name: s${k}, namespace: default }\nspec:\n  type: LoadBalancer\n  ports: [{ port: 80 }]`).join('\n');
    writeFileSync(
      join(dir, 'lat.yaml'),
      `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: { name: p }\nspec:\n  blocks: [{ start: 198.51.100.10, stop: 198.51.100.59 }]\n---\napiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata: { name: l2 }\nspec:\n  loadBalancerIPs: true\n  interfaces: ['^eth0$']\n${svcs}\n`,
    );
    lab.nodes[0]!.must(HERALD, ['apply', '-f', join(dir, 'lat.yaml'), '--etcd', etcd.endpoint]);
    const agents = new Map<Host, LabProcess>();
    const start = async (n: Host) => agents.set(n, await startAgentReady(n, ['--store', 'etcd', '--etcd', etcd.endpoint, '--view-listen', '127.0.0.1:9470'], `agent-${Date.now()}`));
    const [n1, n2] = lab.nodes as [Host, Host];
    await start(n1);
    await start(n2);
    // Wait for the spread to settle (hand-overs after the 5 s hold).
    await sleep(8000);
    browser = await chromium.launch({ executablePath: wrapper(dir, n1.netns), args: ['--disable-gpu', '--disable-dev-shm-usage'] });
    const page = await browser.newPage();
    const seen: Array<{ ip: string; owner: string; t: number }> = [];
    await page.exposeFunction('heraldBenchOwner', (ip: string, owner: string, t: number) => seen.push({ ip, owner, t }));
    await page.goto('http://127.0.0.1:9470/');
    await page.locator('.live[data-live="true"]').waitFor();
    await page.evaluate(`new MutationObserver((ms) => { for (const m of ms) { const td = m.target.nodeType === 1 ? m.target : m.target.parentElement; const cell = td && td.closest && td.closest('td.owner'); if (cell) window.heraldBenchOwner(cell.parentElement.dataset.ip, cell.textContent, Date.now()); } }).observe(document.getElementById('ips'), { subtree: true, childList: true, characterData: true })`);
    const takes: Array<{ ip: string; node: string; at: number }> = [];
    const pushed: Array<{ ip: string; owner: string; t: number }> = [];
    stopFollow.push(followTakes(n1.statusSocket, takes, pushed));
    // The peer: `herald status` every second (what `watch -n1 herald status` shows).
    const polled: Array<{ ip: string; owner: string; t: number }> = [];
    let last = new Map<string, string>();
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const st = (await getJson(n1.statusSocket, '/v1/status').catch(() => undefined)) as { candidates: Array<{ ip: string; owner: string | null }> } | undefined;
        const t = Date.now();
        for (const c of st?.candidates ?? []) {
          if (c.owner && last.get(c.ip) !== c.owner) polled.push({ ip: c.ip, owner: c.owner, t });
        }
        if (st) last = new Map(st.candidates.filter((c) => c.owner).map((c) => [c.ip, c.owner!]));
        await sleep(1000);
      }
    })();
    await sleep(1500);
    const t0 = Date.now();
    for (let c = 0; c < CYCLES; c++) {
      await agents.get(n2)!.stop('SIGTERM'); // clean stop: n1 takes n2's IPs
      await sleep(1500);
      await start(n2); // after the hold, n1 hands n2's preferred IPs back (spread rebalance)
      await sleep(7000);
    }
    polling = false;
    await poller;
    const match = (obs: Array<{ ip: string; owner: string; t: number }>) =>
      takes
        .filter((k) => k.at >= t0)
        .flatMap((k) => {
          const o = obs.find((x) => x.ip === k.ip && x.owner === k.node && x.t >= k.at - 50);
          return o ? [Math.max(0, o.t - k.at)] : [];
        });
    const push = match(seen);
    const poll = match(polled);
    // Where it goes: claim → the agent pushes the change (watch, diff, SSE write), then push → the page's cell (network, parse, render).
    const agentSide = match(pushed);
    const pageSide = takes
      .filter((k) => k.at >= t0)
      .flatMap((k) => {
        const p = pushed.find((x) => x.ip === k.ip && x.owner === k.node && x.t >= k.at - 50);
        const o = seen.find((x) => x.ip === k.ip && x.owner === k.node && x.t >= k.at - 50);
        return p && o ? [o.t - p.t] : [];
      });
    const moves = takes.filter((k) => k.at >= t0).length;
    if (process.env['HERALD_BENCH_DEBUG'])
      for (const k of takes.filter((x) => x.at >= t0)) {
        const p = pushed.find((x) => x.ip === k.ip && x.owner === k.node && x.t >= k.at - 50);
        const o = seen.find((x) => x.ip === k.ip && x.owner === k.node && x.t >= k.at - 50);
        console.log(`${new Date(k.at).toISOString()} ${k.ip} → ${k.node}: push +${p ? p.t - k.at : '-'} page +${o ? o.t - k.at : '-'}`);
      }
    void supervisedAgentPid;
    return {
      moves,
      pushSeen: push.length,
      pushP50: pct(push, 50),
      pushP99: pct(push, 99),
      pushMax: Math.max(...push),
      pollSeen: poll.length,
      pollP50: pct(poll, 50),
      pollP99: pct(poll, 99),
      agentP50: pct(agentSide, 50),
      agentP99: pct(agentSide, 99),
      pageP50: pct(pageSide, 50),
      pageP99: pct(pageSide, 99),
    };
  } finally {
    for (const s of stopFollow) s();
    await browser?.close().catch(() => {});
    await lab.destroy();
    await etcd.stop();
  }
}

async function tenThousand(dir: string): Promise<Big> {
  const lab = Lab.create({ nodes: 1, tag: 'bv' });
  let browser: Browser | undefined;
  try {
    const n = lab.nodes[0]!;
    const mdir = join(dir, 'big');
    rmSync(mdir, { recursive: true, force: true });
    const docs = [
      `apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: { name: big }\nspec:\n  blocks: [{ cidr: '2001:db8::/112' }]`,
      `apiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata: { name: l2 }\nspec:\n  loadBalancerIPs: true\n  interfaces: ['^eth0$']`,
    ];
    // Files of 2,000 services (a file holds at most 10,000 documents).
    mkdirSync(mdir, { recursive: true });
    writeFileSync(join(mdir, 'pool.yaml'), docs.join('\n---\n') + '\n');
    for (let f = 0; f * 2000 < BIG; f++) {
      const svcs: string[] = [];
      for (let k = f * 2000; k < Math.min(BIG, (f + 1) * 2000); k++) svcs.push(`apiVersion: v1\nkind: Service\nmetadata: { name: svc-${k}, namespace: ns-${k % 50} }\nspec:\n  type: LoadBalancer\n  ipFamilies: [IPv6]\n  ports: [{ port: 80 }]`);
      writeFileSync(join(mdir, `svc-${f}.yaml`), svcs.join('\n---\n') + '\n');
    }
    const agent = await startAgentReady(n, ['--manifests', mdir, '--view-listen', '127.0.0.1:9470', '--metrics-listen', '127.0.0.1:9471']);
    // A busy agent (allocating 10k IPs) may answer late: not ready yet.
    // Ready when the view shows every IP owned (read over the status socket, without the CLI's 5 s timeout).
    const ownedNow = async () => ((await getJson(n.statusSocket, '/v1/view').catch(() => ({ ips: [] }))) as { ips: Array<{ owner: string | null }> }).ips.filter((x) => x.owner).length;
    let owned = 0;
    await waitFor(async () => (owned = await ownedNow()) === BIG, { timeoutMs: 120_000, intervalMs: 1000, what: `${BIG} IPs owned`, onTimeout: () => `owned ${owned}\n${agent.text().slice(-3000)}` });
    const pid = agent.pid; // local store: bin/herald runs the agent in-process (no supervisor)
    await sleep(3000);
    const inNs0 = (cmd: string, a: string[]) => spawnSync('nsenter', [`--net=/run/netns/${n.netns}`, '--', cmd, ...a], { encoding: 'utf8', maxBuffer: 1 << 28 });
    // The V8 heap in use (prom-client's default metric): less noisy than the RSS, which keeps freed pages.
    const heap = () => Number(/^herald_process_nodejs_heap_size_used_bytes (\S+)/m.exec(inNs0('curl', ['-s', 'http://127.0.0.1:9471/metrics']).stdout)?.[1] ?? NaN) / 1e6;
    const rss0 = rss(pid);
    const heap0 = heap();
    const inNs = (cmd: string, a: string[]) => spawnSync('nsenter', [`--net=/run/netns/${n.netns}`, '--', cmd, ...a], { encoding: 'utf8', maxBuffer: 1 << 28 });
    let t = Date.now();
    const snap = inNs('curl', ['-s', 'http://127.0.0.1:9470/v1/view']).stdout;
    const snapshotMs = Date.now() - t;
    t = Date.now();
    const compact = inNs('curl', ['-s', 'http://127.0.0.1:9470/v1/view?compact=1']).stdout; // what the page loads
    const compactMs = Date.now() - t;
    t = Date.now();
    const stRun = inNs('timeout', ['60', HERALD, 'status', '--json', '--status-socket', n.statusSocket]);
    const st = stRun.status === 0 ? stRun.stdout : '';
    const statusMs = Date.now() - t;
    await ownedNow(); // the agent has finished answering the status call
    browser = await chromium.launch({ executablePath: wrapper(dir, n.netns), args: ['--disable-gpu', '--disable-dev-shm-usage'] });
    const interactive: number[] = [];
    const pages = [];
    for (let k = 0; k < 5; k++) {
      const page = await browser.newPage();
      await page.goto('http://127.0.0.1:9470/');
      // The table draws only the rows in view: interactive when its title counts every IP and the first rows are drawn.
      await page.locator('#ips h2', { hasText: `Service IPs (${BIG})` }).waitFor({ timeout: 60_000 });
      await page.locator('tr[data-ip]').first().waitFor({ timeout: 60_000 });
      interactive.push(Number(await page.evaluate(`performance.getEntriesByName('herald-view-rendered')[0].startTime`)));
      if (process.env['HERALD_BENCH_DEBUG'])
        console.log(`page ${k}: ${await page.evaluate(`['herald-view-answered', 'herald-view-parsed', 'herald-view-rendered'].map((n) => n + ' ' + Math.round(performance.getEntriesByName(n)[0].startTime)).join(', ')`)}`);
      pages.push(page);
      if (k === 0) {
        await sleep(3000);
        (globalThis as { rss1?: number }).rss1 = rss(pid);
        (globalThis as { heap1?: number }).heap1 = heap();
      }
    }
    await sleep(3000);
    const rss5 = rss(pid);
    const heap5 = heap();
    const rss1 = (globalThis as { rss1?: number }).rss1 ?? NaN;
    return {
      ips: BIG,
      interactiveFirstMs: interactive[0]!,
      interactiveMedianMs: pct(interactive, 50),
      snapshotBytes: snap.length,
      snapshotMs,
      compactBytes: compact.length,
      compactMs,
      statusJsonBytes: st.length,
      statusMs,
      rssNoPageMB: rss0 / 1e6,
      rssOnePageMB: rss1 / 1e6,
      rssFivePagesMB: rss5 / 1e6,
      heapNoPageMB: heap0,
      heapOnePageMB: (globalThis as { heap1?: number }).heap1 ?? NaN,
      heapFivePagesMB: heap5,
    };
  } finally {
    await browser?.close().catch(() => {});
    await lab.destroy();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'herald-bench-view-'));
try {
  const f = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '-');
  if (!args.includes('--only-big')) {
  const lat = await ownershipLatency(dir);
  if (args.includes('--json')) console.log(JSON.stringify({ latency: lat }, null, 2));
  console.log(`\nbench/view — ownership change → what the operator sees (${lat.moves} moves, ${CYCLES} stop/start cycles, 2 nodes on etcd)`);
  console.log(`  herald view (SSE push, open page)   p50 ${f(lat.pushP50)} ms   p99 ${f(lat.pushP99)} ms   max ${f(lat.pushMax)} ms   (${lat.pushSeen}/${lat.moves} moves seen)`);
  console.log(`  herald status polled every 1 s      p50 ${f(lat.pollP50)} ms   p99 ${f(lat.pollP99)} ms   (${lat.pollSeen}/${lat.moves} moves seen)`);
  console.log(`  ratio p99 poll / push: ${(lat.pollP99 / lat.pushP99).toFixed(1)}×`);
  console.log(`  where the push's time goes: claim → agent's SSE push p50 ${f(lat.agentP50)} / p99 ${f(lat.agentP99)} ms; push → page cell p50 ${f(lat.pageP50)} / p99 ${f(lat.pageP99)} ms`);
  }
  if (!args.includes('--only-latency')) {
  const big = await tenThousand(dir);
  if (args.includes('--json')) console.log(JSON.stringify({ big }, null, 2));
  console.log(`\nbench/view — ${big.ips} service IPs on one node`);
  console.log(`  page interactive (navigation → 10k-row table rendered): first ${f(big.interactiveFirstMs)} ms, median of 5 ${f(big.interactiveMedianMs)} ms`);
  console.log(`  snapshot the page loads, GET /v1/view?compact=1: ${(big.compactBytes / 1e6).toFixed(2)} MB in ${f(big.compactMs)} ms (curl)`);
  console.log(`  snapshot GET /v1/view (one object per IP): ${(big.snapshotBytes / 1e6).toFixed(2)} MB in ${f(big.snapshotMs)} ms (curl); herald status --json: ${big.statusJsonBytes ? `${(big.statusJsonBytes / 1e6).toFixed(2)} MB in ${f(big.statusMs)} ms (CLI start included)` : `no answer within its 5 s timeout (${f(big.statusMs)} ms)`}`);
  console.log(`  agent V8 heap in use: no page ${big.heapNoPageMB.toFixed(1)} MB, one page ${big.heapOnePageMB.toFixed(1)} MB (+${(big.heapOnePageMB - big.heapNoPageMB).toFixed(1)}), five pages ${big.heapFivePagesMB.toFixed(1)} MB (+${(big.heapFivePagesMB - big.heapNoPageMB).toFixed(1)})`);
  console.log(`  agent RSS: no page ${big.rssNoPageMB.toFixed(1)} MB, one page ${big.rssOnePageMB.toFixed(1)} MB (+${(big.rssOnePageMB - big.rssNoPageMB).toFixed(1)}), five pages ${big.rssFivePagesMB.toFixed(1)} MB (+${(big.rssFivePagesMB - big.rssNoPageMB).toFixed(1)})`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
