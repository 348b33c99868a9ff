/** The shipped Grafana dashboard references only metrics the agent's registry exports (and every panel has a query). */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { buildRegistry, type MetricsSource } from '../../src/api/metrics.js';

const DASHBOARD = new URL('../../deploy/grafana/herald-dashboard.json', import.meta.url);

interface Panel {
  type: string;
  title: string;
  targets?: Array<{ expr: string }>;
}

test('every herald_* metric the Grafana dashboard queries exists in the agent registry', async () => {
  const src: MetricsSource = {
    responderEntries: () => [],
    defences: () => [],
    garp: () => ({ sent: 0, failed: 0 }),
    ownershipChanges: () => 0,
    ownedIps: () => 0,
    reconciler: () => undefined,
    pools: () => [],
  };
  const exported = new Set((await buildRegistry(src).getMetricsAsJSON()).map((m) => m.name));
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[]; templating: { list: Array<{ query?: string }> } };
  const queries = [...dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: p.title, expr: t.expr }))), ...dashboard.templating.list.flatMap((v) => (v.query ? [{ where: 'variable', expr: v.query }] : []))];
  const referenced = queries.flatMap((q) => [...q.expr.matchAll(/\bherald_[a-z0-9_]+/g)].map((m) => ({ where: q.where, name: m[0] })));
  assert.ok(referenced.length >= 15, 'the scan finds the queries');
  // Histogram/summary series carry suffixes; herald exports none, so names must match exactly.
  assert.deepEqual(referenced.filter((r) => !exported.has(r.name)), []);
  for (const p of dashboard.panels) if (p.type !== 'row') assert.ok((p.targets ?? []).length > 0, `panel ${p.title} has a query`);
});
