/**
 * The keepalived half of the failover benchmark: one VRRP instance with the
 * VIP on eth0, priorities 150/100/50 (n1 is the master), three failures:
 *
 *   clean-stop  SIGTERM to n1's keepalived: it sends priority-0 adverts and
 *               removes the VIP, n2 takes over after its skew time.
 *   crash       SIGKILL to n1's keepalived (parent and VRRP child): no goodbye,
 *               and the VIP STAYS on n1's eth0, so n1's kernel keeps answering
 *               ARP and serving HTTP; n2 adds the VIP after master-down, and
 *               from then on both answer (what the probe sees is recorded).
 *   node-loss   n1's switch port goes down: n1 loses carrier (keepalived goes
 *               to FAULT), n2 takes over after master-down.
 *
 * Each trial starts a fresh cluster (with a 1 s advert, n1 needs ~3.4 s to
 * become master: keepalived always starts in BACKUP, even with state MASTER).
 */
import type { FailoverBench, FailoverCase, Scenario, Setup, Trigger, TrialOptions } from './harness.js';
import { ownerLinkDown } from './harness.js';
import { startKeepalived, type KeepalivedCluster } from '../lib/keepalived.js';

export interface KeepalivedVariant {
  /** Label in case names: keepalived-<label>/<failure>. */
  label: string;
  advertIntMs: number;
  version: 2 | 3;
  /** Observation after the trigger. */
  postMs: number;
}

export const KEEPALIVED_VARIANTS: KeepalivedVariant[] = [
  // The default: VRRPv2, 1 s adverts; master-down for n2 = 3 + 156/256 s ≈ 3.61 s.
  { label: 'default', advertIntMs: 1000, version: 2, postMs: 5000 },
  // Fast: VRRPv3 with 100 ms adverts; master-down ≈ 361 ms, so 2 s of observation is ~5× that
  // (keepalived's second gARP burst, 5 s after the takeover, falls outside either window).
  { label: 'fast', advertIntMs: 100, version: 3, postMs: 2000 },
];

export const VRID = 51;

interface KeepalivedScenario extends Scenario {
  cluster: KeepalivedCluster;
}

export function keepalivedSetup(v: KeepalivedVariant): Setup {
  return async (bench: FailoverBench): Promise<KeepalivedScenario> => {
    const cluster = await startKeepalived(bench.lab, { advertIntMs: v.advertIntMs, version: v.version, vip: bench.vip, vrid: VRID });
    const owner = bench.nodes[0]!;
    return {
      owner,
      cluster,
      teardown: () => cluster.destroy('SIGKILL'),
      notes: () => ({ states: Object.fromEntries(cluster.nodes.map((n) => [n.host.name, n.state()])), vipOn: cluster.nodes.filter((n) => n.hasVip()).map((n) => n.host.name) }),
    };
  };
}

/** Trigger: stop the owner's keepalived with `signal` (SIGTERM: clean; SIGKILL: crash). */
export function stopOwnerKeepalived(signal: NodeJS.Signals): Trigger {
  return async (_bench, sc) => {
    const cluster = (sc as KeepalivedScenario).cluster;
    const node = cluster.node(sc.owner);
    if (signal === 'SIGKILL') await node.stop('SIGKILL');
    else void node.stop(signal); // a clean stop takes a while; the trigger is the signal
  };
}

export function keepalivedCases(variants = KEEPALIVED_VARIANTS): FailoverCase[] {
  return variants.flatMap((v) => {
    const setup = keepalivedSetup(v);
    // The failure lands at a random phase of n1's advert cycle.
    const options: TrialOptions = { preMs: 1000, phaseJitterMs: v.advertIntMs, postMs: v.postMs };
    return [
      { name: `keepalived-${v.label}/clean-stop`, setup, trigger: stopOwnerKeepalived('SIGTERM'), options },
      { name: `keepalived-${v.label}/crash`, setup, trigger: stopOwnerKeepalived('SIGKILL'), options },
      { name: `keepalived-${v.label}/node-loss`, setup, trigger: ownerLinkDown, options },
    ];
  });
}
