/**
 * The wire watch in a lab: an owner (a node's kernel answering ARP probes for
 * its own address) loses its link; the watch must report it silent only after
 * the whole silence window without an answer, and probe it densely once it is
 * overdue (every 10 ms instead of every 50 ms), so the verdict rests on many
 * unanswered probes and comes when the window ends.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { Lab, sleep } from '../../lab/lab.js';
import { labSkipReason, waitFor } from '../helpers/lab-tools.js';

const DRIVER = fileURLToPath(new URL('../tools/owner-watch-driver.ts', import.meta.url));
const skip = labSkipReason();

describe('wire watch of another owner', { skip }, () => {
  let lab: Lab;
  before(() => {
    lab = Lab.create({ nodes: 1, tag: 'ow' });
  });
  after(async () => {
    await lab?.destroy();
  });

  test('an owner that goes quiet is probed every 10 ms once overdue, and reported only after the full window', async () => {
    const [node] = lab.nodes;
    const SILENCE = 200;
    const p = lab.client.spawn('watch', process.execPath, ['--import', 'tsx', DRIVER, node!.ip, 'eth0', String(SILENCE)]);
    await p.waitForOutput('"ready"', 20_000);
    await sleep(600); // heard: the node's kernel answers the RFC 5227 probes
    const before = p.text();
    assert.ok(!before.includes('"silent"'), 'a node that answers is never reported');
    const events = () => p.text().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { t: number; ev: string; n?: number; probes?: number });
    const at = events().at(-1)!.t;
    lab.setPort(node!, 'eth0', false);
    await waitFor(() => p.text().includes('"silent"'), { timeoutMs: 5000, what: 'the silent report' });
    const evs = events();
    const silent = evs.find((e) => e.ev === 'silent')!;
    const probesAt = (t: number) => [...evs].reverse().find((e) => e.ev === 'probes' && e.t <= t)?.n ?? 0;
    // The last answer came at most one probe interval before the port went down.
    assert.ok(silent.t - at >= SILENCE - 50, `reported ${silent.t - at} ms after the link went down: never before the window (${SILENCE} ms) can have passed`);
    assert.ok(silent.t - at < SILENCE + 150, `reported ${silent.t - at} ms after the link went down`);
    // Overdue from ~100 ms on: the last 80 ms before the verdict carry ≥ 5 probes (at 50 ms pace: 1–2).
    const dense = silent.probes! - probesAt(silent.t - 80);
    assert.ok(dense >= 5, `probes in the last 80 ms before the verdict: ${dense}`);
    await p.stop('SIGKILL');
    lab.setPort(node!, 'eth0', true);
  });
});
