/** The per-IP ARP counters read their values from the source at scrape time, one series per IP and interface. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildRegistry, type MetricsSource } from '../../src/api/metrics.js';

test('per-IP counters: replies, conflicts and defences per ip and interface', async () => {
  const src: MetricsSource = {
    responderEntries: () => [
      { ip: '192.0.2.10', iface: 'eth0', replies: 5, conflicts: 1 },
      { ip: '2001:db8::10', iface: 'eth1', replies: 2, conflicts: 0 },
    ],
    defences: () => [{ ip: '192.0.2.10', iface: 'eth0', defences: 3 }],
    garp: () => ({ sent: 0, failed: 0 }),
    ownershipChanges: () => 0,
    ownedIps: () => 0,
    reconciler: () => undefined,
    pools: () => [],
  };
  const text = await buildRegistry(src).metrics();
  const series = (name: string) => text.split('\n').filter((l) => l.startsWith(`${name}{`));
  // Per family: ARP replies for IPv4 addresses, Neighbor Advertisements for IPv6.
  assert.deepEqual(series('herald_arp_replies_total'), ['herald_arp_replies_total{ip="192.0.2.10",interface="eth0"} 5']);
  assert.deepEqual(series('herald_arp_conflicts_total'), ['herald_arp_conflicts_total{ip="192.0.2.10",interface="eth0"} 1']);
  assert.deepEqual(series('herald_ndp_replies_total'), ['herald_ndp_replies_total{ip="2001:db8::10",interface="eth1"} 2']);
  assert.deepEqual(series('herald_ndp_conflicts_total'), ['herald_ndp_conflicts_total{ip="2001:db8::10",interface="eth1"} 0']);
  assert.deepEqual(series('herald_arp_defences_total'), ['herald_arp_defences_total{ip="192.0.2.10",interface="eth0"} 3']);
});

test('load balancer: entries and pressure per table (ct4, ct6), LRU evictions', async () => {
  const src: MetricsSource = {
    responderEntries: () => [],
    defences: () => [],
    garp: () => ({ sent: 0, failed: 0 }),
    ownershipChanges: () => 0,
    ownedIps: () => 0,
    reconciler: () => undefined,
    pools: () => [],
    lb: () => ({ ctEntries: 50, ct6Entries: 25, ctMax: 100, gcDeleted: 7, ctEvicted: 12, gcPasses: 3, gcIntervalMs: 10_000 }),
    lbDatapath: () => ({ forwarded: 1000n, snat_exhausted: 2n }),
  };
  const text = await buildRegistry(src).metrics();
  const lines = text.split('\n');
  assert.ok(lines.includes('herald_ct_entries{map="ct4"} 50') && lines.includes('herald_ct_entries{map="ct6"} 25'));
  assert.ok(lines.includes('herald_ct_map_pressure{map="ct4"} 0.5') && lines.includes('herald_ct_map_pressure{map="ct6"} 0.25'));
  assert.ok(lines.includes('herald_ct_lru_evicted 12'), text.split('\n').filter((l) => l.includes('herald_ct')).join('\n'));
  assert.ok(lines.includes('herald_lb_datapath_events_total{event="snat_exhausted"} 2') && lines.includes('herald_lb_datapath_events_total{event="forwarded"} 1000'));
});
