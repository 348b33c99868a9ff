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
