/**
 * bench/store-load — coordination-store requests per second in steady state,
 * at 100, 1k and 10k IPs, for herald's per-IP ownership on etcd (3 agents, each
 * a candidate for every IP), counted by the etcd server itself
 * (grpc_server_handled_total), next to Cilium's per-Service Lease cost from its
 * own arithmetic (anchors §4: per node 0.5 req/s per held lease + 0.31 req/s
 * per candidate lease at the default 15/5/2 s timings).
 *
 *   node --import tsx bench/store-load/main.ts [--sizes 100,1000,10000] [--seconds 10] [--json]
 */
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { EtcdOwnership, etcdOwnershipDefaults } from '../../src/store/etcd/ownership.js';
import { EtcdSession, etcdSessionDefaults } from '../../src/store/etcd/session.js';
import { startEtcd } from '../../test/helpers/etcd.js';

const args = process.argv.slice(2);
const opt = (name: string, def: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : def;
};
const SIZES = opt('sizes', '100,1000,10000').split(',').map(Number);
const SECONDS = Number(opt('seconds', '10'));
const NODES = 3;

/** IPv6 documentation addresses: 10k IPv4 service IPs do not fit the documentation ranges. */
const ip = (i: number) => `2001:db8::${(0x1000 + i).toString(16)}`;

async function serverRequests(endpoint: string): Promise<number> {
  const text = await (await fetch(`${endpoint}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('grpc_server_handled_total{')) continue;
    if (line.includes('grpc_type="bidi_stream"') && !line.includes('LeaseKeepAlive')) continue; // watch streams
    total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  // Keep-alives ride one bidi stream per lease: count them from the lease metric instead.
  const ka = /etcd_debugging_server_lease_renewed_total (\d+)/.exec(text) ?? /etcd_server_lease_renewed_total (\d+)/.exec(text);
  return total + Number(ka?.[1] ?? 0);
}

const cilium = (ips: number) => {
  // One Lease per Service (one IP each); every node runs an elector for each.
  const held = ips / NODES;
  return NODES * (0.5 * held + 0.31 * (ips - held));
};

async function main(): Promise<void> {
  const results: Array<{ ips: number; heraldReqPerSec: number; perNode: number; ciliumReqPerSec: number; convergeMs: number }> = [];
  for (const n of SIZES) {
    const etcd = await startEtcd();
    const members: Array<{ session: EtcdSession; own: EtcdOwnership }> = [];
    try {
      const candidates = new Map(Array.from({ length: n }, (_, i) => [ip(i), ['eth0']] as const));
      const owned = new Map<string, number>();
      const t0 = Date.now();
      for (let k = 0; k < NODES; k++) {
        const session = new EtcdSession({ endpoints: [etcd.endpoint], prefix: '/herald/', ...etcdSessionDefaults }, { clock: systemClock, log: silentLogger });
        await session.start();
        const own = new EtcdOwnership(session, `node-${k}`, { clock: systemClock, log: silentLogger }, etcdOwnershipDefaults);
        await own.start((v) => {
          owned.set(`node-${k}`, v.owned.size);
        });
        own.setCandidates(candidates);
        members.push({ session, own });
      }
      const total = () => [...owned.values()].reduce((a, b) => a + b, 0);
      while (total() < n && Date.now() - t0 < 120_000) await new Promise((r) => setTimeout(r, 50));
      const convergeMs = Date.now() - t0;
      // Let hand-overs to the preferred nodes finish, then measure a quiet window.
      await new Promise((r) => setTimeout(r, etcdOwnershipDefaults.handoverHoldMs + 3000));
      const before = await serverRequests(etcd.endpoint);
      await new Promise((r) => setTimeout(r, SECONDS * 1000));
      const after = await serverRequests(etcd.endpoint);
      const rate = (after - before - 2) / SECONDS; // minus our own two /metrics reads (HTTP, not gRPC: 0)
      results.push({ ips: n, heraldReqPerSec: rate, perNode: rate / NODES, ciliumReqPerSec: cilium(n), convergeMs });
      if (!args.includes('--json')) process.stderr.write(`store-load: ${n} IPs: ${rate.toFixed(1)} req/s (converged in ${convergeMs} ms)\n`);
    } finally {
      for (const m of members) {
        m.own.dispose();
        m.session.dispose();
      }
      await etcd.stop();
    }
  }
  if (args.includes('--json')) {
    console.log(JSON.stringify(results, null, 2));
    return;
  }
  console.log(`IPs     herald req/s (3 nodes)   per node   Cilium per-Service Leases (arithmetic)   ratio`);
  for (const r of results) {
    console.log(
      `${String(r.ips).padEnd(7)} ${r.heraldReqPerSec.toFixed(1).padEnd(24)} ${r.perNode.toFixed(2).padEnd(10)} ${r.ciliumReqPerSec.toFixed(0).padEnd(40)} ${(r.ciliumReqPerSec / Math.max(r.heraldReqPerSec, 0.01)).toFixed(0)}x fewer`,
    );
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
