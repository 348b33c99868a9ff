/**
 * bench/k8s — Kubernetes API write requests per second in steady state, at
 * 100, 1k (and 10k) IPs, for herald's Lease ownership (3 nodes, each a
 * candidate for every IP: one node Lease renewal per node per interval; an
 * IP's Lease is written only when it moves), counted by a real
 * kube-apiserver (apiserver_request_total, non-read verbs; the API server's
 * own writes in an idle window of the same length subtracted), next to
 * Cilium's per-Service Lease arithmetic (one Lease per Service, renewed by
 * its holder every retry period of 2 s: services / 2 writes per second; all
 * requests including the candidates' reads: anchors §4, 0.5 req/s per held
 * and 0.31 req/s per candidate lease per node).
 *
 *   node --import tsx bench/k8s/main.ts [--sizes 100,1000] [--seconds 10] [--json]
 */
import { readFileSync } from 'node:fs';
import { silentLogger } from '../../src/core/logger.js';
import { KubeClient } from '../../src/intent/sources/kube-client.js';
import { LeaseOwnership, leaseOwnershipDefaults } from '../../src/store/kubernetes/lease-ownership.js';
import { applyObject, applyYaml, requestTotal, startKube } from '../../test/helpers/kube.js';

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const SIZES = opt('sizes', '100,1000').split(',').map(Number);
const SECONDS = Number(opt('seconds', '10'));
const NODES = 3;
const ip = (i: number) => `2001:db8::${(0x1000 + i).toString(16)}`;
const WRITE_VERBS = ['POST', 'PUT', 'PATCH', 'DELETE', 'APPLY'];
const writes = (m: string) => requestTotal(m, (l) => WRITE_VERBS.includes(l.verb ?? ''));
const all = (m: string) => requestTotal(m, (l) => l.verb !== 'WATCH');

const ciliumWrites = (ips: number) => ips / 2;
const ciliumAll = (ips: number) => {
  const held = ips / NODES;
  return NODES * (0.5 * held + 0.31 * (ips - held));
};

async function main(): Promise<void> {
  const results: Array<{ ips: number; writesPerSec: number; requestsPerSec: number; ciliumWritesPerSec: number; ciliumRequestsPerSec: number; convergeMs: number }> = [];
  for (const n of SIZES) {
    const kube = await startKube();
    const members: LeaseOwnership[] = [];
    try {
      await applyYaml(kube, readFileSync(new URL('../../deploy/kubernetes/rbac.yaml', import.meta.url), 'utf8'));
      const subjects = [{ kind: 'Group', name: 'herald:agents', apiGroup: 'rbac.authorization.k8s.io' }];
      await applyObject(kube, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'herald-leases-bench', namespace: 'herald-system' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'herald-leases' }, subjects });
      // The API server's own writes (its identity Lease, bootstrap controllers) in an idle window.
      const i0 = await kube.metrics();
      await new Promise((r) => setTimeout(r, SECONDS * 1000));
      const i1 = await kube.metrics();
      const idleWrites = writes(i1) - writes(i0);
      const idleAll = all(i1) - all(i0) - 1;

      const candidates = new Map(Array.from({ length: n }, (_, i) => [ip(i), ['eth0']] as const));
      const owned = new Map<string, number>();
      const t0 = Date.now();
      for (let k = 0; k < NODES; k++) {
        const client = await KubeClient.create({ kubeconfig: kube.kubeconfig(`herald:node-${k}`, ['herald:agents']) });
        const own = new LeaseOwnership(client, `node-${k}`, { log: silentLogger }, leaseOwnershipDefaults);
        await own.start((v) => {
          owned.set(`node-${k}`, v.owned.size);
        });
        own.setCandidates(candidates);
        members.push(own);
      }
      const total = () => [...owned.values()].reduce((a, b) => a + b, 0);
      while (total() < n && Date.now() - t0 < 300_000) await new Promise((r) => setTimeout(r, 50));
      const convergeMs = Date.now() - t0;
      // Hand-overs to the preferred nodes, then a quiet window.
      const settleBy = Date.now() + 300_000;
      let last = -1;
      for (;;) {
        await new Promise((r) => setTimeout(r, leaseOwnershipDefaults.handoverHoldMs + 2000));
        const moved = members.reduce((a, m) => a + m.counters.claims + m.counters.takeovers + m.counters.releases, 0);
        if (moved === last || Date.now() > settleBy) break;
        last = moved;
      }
      const m0 = await kube.metrics();
      await new Promise((r) => setTimeout(r, SECONDS * 1000));
      const m1 = await kube.metrics();
      const w = (writes(m1) - writes(m0) - idleWrites) / SECONDS;
      const a = (all(m1) - all(m0) - 1 - idleAll) / SECONDS;
      results.push({ ips: n, writesPerSec: w, requestsPerSec: a, ciliumWritesPerSec: ciliumWrites(n), ciliumRequestsPerSec: ciliumAll(n), convergeMs });
      if (!args.includes('--json')) process.stderr.write(`k8s: ${n} IPs: ${w.toFixed(2)} writes/s, ${a.toFixed(2)} requests/s (every IP owned in ${convergeMs} ms)\n`);
    } finally {
      for (const m of members) m.dispose();
      await kube.stop();
    }
  }
  if (args.includes('--json')) {
    console.log(JSON.stringify(results, null, 2));
    return;
  }
  const renew = leaseOwnershipDefaults.renewMs / 1000;
  console.log(`3 nodes, node Lease renewed every ${renew} s (herald) vs one Lease per Service renewed every 2 s (Cilium)`);
  console.log(`IPs     herald writes/s   Cilium writes/s   ratio        herald requests/s   Cilium requests/s   ratio`);
  for (const r of results) {
    console.log(
      `${String(r.ips).padEnd(7)} ${r.writesPerSec.toFixed(2).padEnd(17)} ${r.ciliumWritesPerSec.toFixed(0).padEnd(17)} ${`${(r.ciliumWritesPerSec / Math.max(r.writesPerSec, 0.01)).toFixed(0)}x fewer`.padEnd(12)} ${r.requestsPerSec.toFixed(2).padEnd(19)} ${r.ciliumRequestsPerSec.toFixed(0).padEnd(19)} ${(r.ciliumRequestsPerSec / Math.max(r.requestsPerSec, 0.01)).toFixed(0)}x fewer`,
    );
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
