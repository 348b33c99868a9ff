/** policy_implementation_delay_seconds: one observation per change, once the datapath enforces it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildRegistry, type MetricsSource } from '../../src/api/metrics.js';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { StateDB, type RWTable } from '../../src/core/statedb/index.js';
import { toPrefix } from '../../src/controlplane/policy/intake.js';
import { PolicyPipeline } from '../../src/controlplane/policy/pipeline.js';
import { servicePolicyTable, type ServicePolicyRow } from '../../src/datapath/tables/service-policy.js';

test('the histogram counts each realized change, labelled by source', async () => {
  const listeners: Array<(s: number, source: string) => void> = [];
  const src: MetricsSource = {
    responderEntries: () => [],
    garp: () => ({ sent: 0, failed: 0 }),
    ownershipChanges: () => 0,
    ownedIps: () => 0,
    reconciler: () => undefined,
    pools: () => [],
    onPolicyDelay: (l) => listeners.push(l),
  };
  const registry = buildRegistry(src);
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const db = new StateDB([servicePolicyTable]);
  const p = new PolicyPipeline({
    db,
    table: servicePolicyTable as RWTable<ServicePolicyRow>,
    clock: systemClock,
    log: silentLogger,
    waitRealized: () => gate, // the datapath has not enforced it yet
    observeDelay: (s, source) => listeners.forEach((l) => l(s, source)),
  });
  const r = await p.submit(
    { kind: 'rules', sets: [{ key: 'x', rules: [{ verdict: 'allow', peers: [{ cidr: toPrefix('192.0.2.0/24'), except: [] }], selection: { kind: 'service', service: 'a/b' }, origin: 'test' }] }] },
    'file',
  );
  const count = async () => /herald_policy_implementation_delay_seconds_count\{source="file"\} (\d+)/.exec(await registry.metrics())?.[1];
  assert.equal(await count(), undefined, 'not observed before the datapath enforces it');
  release();
  await r.realized;
  assert.equal(await count(), '1');
  assert.equal(p.realizedRevision, 1);
  p.dispose();
});
