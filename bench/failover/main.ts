/**
 * bench/failover — how long a service IP is gone when its owner fails, and
 * whether two nodes ever answer for it at once.
 *
 * A probe in the client namespace sends a fresh broadcast ARP request for the
 * VIP every 10 ms (recording which MACs answer each one) and an HTTP GET every
 * 10 ms (each node's server answers with its name). Per trial: fresh cluster,
 * ~1 s steady (± half an advert, so the failure hits a random phase), the
 * failure, 5 s (2 s for fast adverts) of observation.
 *
 *   ARP gap   last reply by the old owner at/before the failure → first reply by another MAC
 *   HTTP gap  longest time between consecutive successful HTTP responses ('>': never recovered)
 *   dual      trials in which some request was answered by two MACs (split brain)
 *
 *   node --import tsx bench/failover/main.ts [--trials N | --quick] [--only SUBSTR[,SUBSTR]]
 *        [--family 4|6] [--json] [--raw-dir DIR]
 *
 * --family 6: the VIP is IPv6; the probe asks with Neighbor Solicitations
 * every 10 ms (advertisements read as replies, the unsolicited burst as
 * gratuitous announcements) and GETs over IPv6; herald cases only.
 *
 * herald-k8s/* cases (k8s-cases.ts): the same crash on the Kubernetes store
 * against a real kube-apiserver, e.g. beside etcd in one run:
 *   --only herald/crash,herald-k8s/crash --trials 10
 */
import { mkdirSync } from 'node:fs';
import type { Stat } from './analyze.js';
import { FailoverBench, type CaseResult, type FailoverCase } from './harness.js';
import { heraldCases } from './herald-cases.js';
import { k8sCases, stopK8s } from './k8s-cases.js';
import { keepalivedCases } from './keepalived-cases.js';

const args = process.argv.slice(2);
const value = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const QUICK = args.includes('--quick');
const TRIALS = Number(value('trials') ?? (QUICK ? 3 : 20));
const JSON_OUT = args.includes('--json');
const ONLY = value('only')?.split(',').filter(Boolean);
const RAW_DIR = value('raw-dir');
const FAMILY = Number(value('family') ?? 4);

const log = (s: string) => process.stderr.write(s + '\n');

function fmt(x: number | null): string {
  if (x === null) return '—';
  return x >= 10_000 ? `${(x / 1000).toFixed(1)} s` : `${Math.round(x)} ms`;
}

function table(results: CaseResult[]): string {
  const headers = ['case', 'n', 'ARP gap med', 'p99', 'max', 'HTTP gap med', 'p99', 'max', 'dual', 'notes'];
  const stat3 = (s: Stat, open = 0) => [fmt(s.median), fmt(s.p99), `${open ? '>' : ''}${fmt(s.max)}`];
  const rows = results.map((r) => {
    const s = r.summary;
    const notes: string[] = [];
    if (s.noTakeover) notes.push(`no takeover in ${s.noTakeover}`);
    if (s.oldKeptAnswering) notes.push(`old owner kept answering in ${s.oldKeptAnswering}`);
    if (s.httpOpen) notes.push(`HTTP not back in ${s.httpOpen}`);
    if (s.unsteady) notes.push(`${s.unsteady} unsteady`);
    const served = new Set(r.trials.map((t) => t.httpServedBy.join('→')));
    if (served.size) notes.push(`HTTP: ${[...served].join(' | ')}`);
    return [r.name, String(s.trials), ...stat3(s.arpGap), ...stat3(s.httpGap, s.httpOpen), `${s.dualAnswerTrials}/${s.trials}`, notes.join('; ')];
  });
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const right = new Set([1, 2, 3, 4, 5, 6, 7, 8]);
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : right.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** herald vs each keepalived variant, per failure: how many times shorter herald's p99 gaps are. */
function ratioLines(results: CaseResult[]): string[] {
  const by = new Map(results.map((r) => [r.name, r.summary]));
  const out: string[] = [];
  for (const failure of ['clean-stop', 'crash', 'node-loss']) {
    const h = by.get(`herald/${failure}`);
    if (!h) continue;
    for (const variant of ['default', 'fast']) {
      const k = by.get(`keepalived-${variant}/${failure}`);
      if (!k) continue;
      const arp = (k.arpGap.p99 ?? NaN) / Math.max(h.arpGap.p99 ?? NaN, 1);
      const http = (k.httpGap.p99 ?? NaN) / Math.max(h.httpGap.p99 ?? NaN, 1);
      const dual = k.dualAnswerTrials ? ` (keepalived: two MACs answered in ${k.dualAnswerTrials}/${k.trials} trials; herald: ${h.dualAnswerTrials}/${h.trials})` : '';
      out.push(`${failure.padEnd(10)} herald vs keepalived-${variant.padEnd(7)} ARP gap p99 ${arp.toFixed(2)}x shorter, HTTP gap p99 ${http.toFixed(2)}x shorter${dual}`);
    }
  }
  const sup = by.get('herald/crash');
  const unsup = by.get('herald/crash-unsupervised');
  if (sup && unsup) {
    const arp = (unsup.arpGap.p99 ?? NaN) / Math.max(sup.arpGap.p99 ?? NaN, 1);
    out.push(`crash      supervised vs --no-supervisor ARP gap p99 ${arp.toFixed(2)}x shorter (two MACs: ${sup.dualAnswerTrials}/${sup.trials} vs ${unsup.dualAnswerTrials}/${unsup.trials})`);
  }
  // The Kubernetes store beside etcd, and its supervised crash against its unsupervised one (the node Lease expiring).
  const k8s = by.get('herald-k8s/crash');
  const k8sUnsup = by.get('herald-k8s/crash-unsupervised');
  if (k8s && sup) out.push(`crash      Kubernetes store vs etcd store (both supervised) ARP gap p99 ${((k8s.arpGap.p99 ?? NaN) / Math.max(sup.arpGap.p99 ?? NaN, 1)).toFixed(2)}x (two MACs: ${k8s.dualAnswerTrials}/${k8s.trials} vs ${sup.dualAnswerTrials}/${sup.trials})`);
  for (const failure of ['node-loss', 'power-loss']) {
    const e = by.get(`herald/${failure}`);
    const kk = by.get(`herald-k8s/${failure}`);
    if (e && kk) out.push(`${failure.padEnd(10)} Kubernetes store vs etcd store ARP gap median ${((kk.arpGap.median ?? NaN) / Math.max(e.arpGap.median ?? NaN, 1)).toFixed(2)}x, p99 ${((kk.arpGap.p99 ?? NaN) / Math.max(e.arpGap.p99 ?? NaN, 1)).toFixed(2)}x (two MACs: ${kk.dualAnswerTrials}/${kk.trials} vs ${e.dualAnswerTrials}/${e.trials})`);
  }
  if (k8s && k8sUnsup) out.push(`crash      Kubernetes store: supervised vs --no-supervisor ARP gap p99 ${((k8sUnsup.arpGap.p99 ?? NaN) / Math.max(k8s.arpGap.p99 ?? NaN, 1)).toFixed(2)}x shorter (two MACs: ${k8s.dualAnswerTrials}/${k8s.trials} vs ${k8sUnsup.dualAnswerTrials}/${k8sUnsup.trials})`);
  return out;
}

async function main(): Promise<void> {
  if (!Number.isInteger(TRIALS) || TRIALS < 1) throw new Error('--trials must be a positive integer');
  if (FAMILY !== 4 && FAMILY !== 6) throw new Error('--family must be 4 or 6');
  // IPv6: herald only (the same three failures; compare with the IPv4 run).
  const all: FailoverCase[] = FAMILY === 6 ? heraldCases() : [...keepalivedCases(), ...heraldCases(), ...k8sCases()];
  const cases = ONLY ? all.filter((c) => ONLY.some((o) => c.name.includes(o))) : all;
  if (cases.length === 0) throw new Error(`no case matches --only ${ONLY?.join(',')}; cases: ${all.map((c) => c.name).join(', ')}`);
  if (RAW_DIR) mkdirSync(RAW_DIR, { recursive: true });

  const started = Date.now();
  log(`bench/failover: ${cases.length} cases × ${TRIALS} trials`);
  const bench = await FailoverBench.create({ log, family: FAMILY as 4 | 6, ...(RAW_DIR ? { rawDir: RAW_DIR } : {}) });
  const results: CaseResult[] = [];
  try {
    for (const c of cases) {
      log(`bench/failover: ${c.name}`);
      const r = await bench.runTrials(c.name, c.setup, c.trigger, TRIALS, c.options);
      results.push(r);
      log(`bench/failover: ${c.name} done in ${(r.wallMs / 1000).toFixed(1)} s`);
    }
  } finally {
    await bench.destroy();
    await stopK8s();
  }
  const wallS = (Date.now() - started) / 1000;

  if (JSON_OUT) {
    process.stdout.write(JSON.stringify({ trialsPerCase: TRIALS, vip: bench.vip, wallSeconds: wallS, cases: results }, null, 2) + '\n');
    return;
  }
  console.log(table(results));
  console.log('');
  const ratios = ratioLines(results);
  if (ratios.length) console.log(ratios.join('\n') + '\n');
  console.log('ARP gap: last reply by the old owner at/before the failure → first reply by another MAC (fresh broadcast request every 10 ms).');
  console.log('HTTP gap: longest time between consecutive successful GETs to VIP:8080 (one every 10 ms, 200 ms timeout); ">" never recovered.');
  console.log(`dual: trials in which one ARP request was answered by two MACs. p99 is nearest-rank (the max below 100 trials). Wall time ${wallS.toFixed(0)} s.`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
