/**
 * Fault tools the HA lab tests share: the failover probe on the lab's client
 * (a fresh ARP request every few ms, counting requests answered by two MACs)
 * and a CPU-starved process (a cgroup v1 CPU quota). Lab tooling: test-side only.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ArpSummary } from '../../lab/failover-probe.js';
import type { Lab, LabProcess } from '../../lab/lab.js';

const PROBE = fileURLToPath(new URL('../../lab/failover-probe.ts', import.meta.url));
let probeN = 0;

/** The failover probe on `lab.client`: a fresh ARP request for `ip` every `intervalMs` for `durationMs` (its JSON written into `dir`). */
export function arpProbe(lab: Lab, dir: string, ip: string, durationMs: number, intervalMs = 10): Promise<ArpSummary> {
  const n = probeN++;
  const out = join(dir, `probe-${process.pid}-${n}.json`);
  const run = lab.client.execAsync(process.execPath, [
    '--import', 'tsx', PROBE, '--iface', 'eth0', '--src-ip', `192.0.2.${240 + (n % 10)}`, '--src-mac', `02:00:00:00:02:${(0xe0 + (n % 16)).toString(16)}`,
    '--target', ip, '--interval-ms', String(intervalMs), '--duration-ms', String(durationMs), '--http-port', '1', '--http-timeout-ms', '50', '--no-neigh', '--out-json', out,
  ]);
  return run.then((r) => {
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(readFileSync(out, 'utf8')) as { arp: ArpSummary }).arp;
  });
}

/** Gaps in which the IP itself was dark (requests went unanswered), not the probe's own late ticks. */
export const darkGaps = (arp: ArpSummary) => arp.gaps.filter((g) => (g.unanswered ?? 0) >= 3);

/** Runs `fn` with `proc` (and its threads) held to `percent` % of one CPU through a cgroup v1 CPU quota. */
export async function starved(proc: LabProcess, percent: number, fn: () => Promise<void>): Promise<void> {
  const cg = `/sys/fs/cgroup/cpu/herald-starve-${process.pid}`;
  mkdirSync(cg, { recursive: true });
  try {
    writeFileSync(join(cg, 'cpu.cfs_period_us'), '100000');
    writeFileSync(join(cg, 'cpu.cfs_quota_us'), String(percent * 1000));
    // Every process in the agent's group (nsenter and node), with all their threads.
    for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      try {
        if (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[2] === String(proc.pid)) writeFileSync(join(cg, 'cgroup.procs'), pid);
      } catch {
        /* exited */
      }
    }
    await fn();
  } finally {
    for (const pid of readFileSync(join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
      try {
        writeFileSync('/sys/fs/cgroup/cpu/cgroup.procs', pid);
      } catch {
        /* exited */
      }
    }
    rmdirSync(cg);
  }
}
