/**
 * The policy spine in a lab node (run with nsenter --net): manifests →
 * intent parser → policy pipeline → service-policy table → generic
 * reconciler → BPF maps → tc ingress on --iface. Re-reads the manifest file
 * on SIGHUP (a replace-by-labels of every object in it) and prints
 * `realized <revision>` once the datapath enforces each revision, or
 * `rejected <errors>` when the file is invalid (nothing applied). SIGUSR2
 * prints `drops <total>` (every policy drop so far).
 *
 *   node --import tsx lab/policy-node.ts --manifest FILE --iface eth0
 *
 * Service IPs are taken from the lbipam.cilium.io/ips annotation.
 */
import { readFileSync } from 'node:fs';
import { systemClock } from '../src/core/clock.js';
import { silentLogger } from '../src/core/logger.js';
import { StateDB, type RWTable } from '../src/core/statedb/index.js';
import { ruleSetsFromSnapshot, servicePortsOf } from '../src/controlplane/policy/intake.js';
import { PolicyPipeline } from '../src/controlplane/policy/pipeline.js';
import type { ServiceInfo } from '../src/controlplane/policy/selection.js';
import { PolicyStack } from '../src/datapath/policy/stack.js';
import { servicePolicyTable, type ServicePolicyRow } from '../src/datapath/tables/service-policy.js';
import { formatErrors } from '../src/intent/diagnostics.js';
import { parseManifests } from '../src/intent/parse.js';
import { serviceSelectorLabels } from '../src/intent/service.js';
import { libbpf } from '../src/os/libbpf.js';

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : undefined;
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

const file = arg('manifest');
const iface = arg('iface');
const db = new StateDB([servicePolicyTable]);
const stack = new PolicyStack({ db, table: servicePolicyTable, clock: systemClock, log: silentLogger });
const pipeline = new PolicyPipeline({
  db,
  table: servicePolicyTable as RWTable<ServicePolicyRow>,
  clock: systemClock,
  log: silentLogger,
  waitRealized: (rev) => stack.realized(rev),
});
stack.start();
stack.attach(libbpf().ifNameToIndex(iface));

let previousKeys = new Set<string>();
let previousServices = new Set<string>();

async function load(): Promise<void> {
  const r = parseManifests(readFileSync(file, 'utf8'), file);
  if (!r.snapshot) {
    console.log(`rejected ${JSON.stringify(formatErrors(r.errors))}`);
    return;
  }
  const services: ServiceInfo[] = [...r.snapshot.services].map(([key, s]) => ({
    service: key,
    namespace: s.metadata.namespace,
    labels: serviceSelectorLabels(s),
    ips: (s.metadata.annotations['lbipam.cilium.io/ips'] ?? '').split(',').map((x) => x.trim()).filter((x) => x !== ''),
    ports: servicePortsOf(s),
  }));
  const gone = [...previousServices].filter((k) => !services.some((s) => s.service === k));
  previousServices = new Set(services.map((s) => s.service));
  await pipeline.submit({ kind: 'services', upsert: services, remove: gone }, 'file');
  const sets = ruleSetsFromSnapshot(r.snapshot);
  const keys = new Set(sets.map((s) => s.key));
  for (const k of previousKeys) if (!keys.has(k)) sets.push({ key: k, rules: [] });
  previousKeys = keys;
  const res = await pipeline.submit({ kind: 'rules', sets }, 'file');
  await res.realized;
  console.log(`realized ${res.revision} regenerated=${res.regenerated.length}`);
}

let chain = load();
process.on('SIGHUP', () => {
  chain = chain.then(load, load);
});
process.on('SIGUSR2', () => {
  const total = stack.program.drops().reduce((n, d) => n + d.packets, 0n);
  console.log(`drops ${total}`);
});
process.on('SIGTERM', () => {
  stack.detachAll();
  pipeline.dispose();
  stack.dispose();
  process.exit(0);
});
chain.catch((e: unknown) => {
  console.log(`failed ${String(e)}`);
  process.exit(1);
});
