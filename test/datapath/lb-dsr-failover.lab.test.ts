/**
 * Issue 12: with DSR, an established TCP connection survives an L2 failover
 * of the service IP from one balancer to another.
 *
 * Two balancers (n1, n2) run the load balancer on eth0 with the same DSR
 * service and the same two backends (n3, n4: on the segment, the VIP on
 * loopback, ARP for it left alone). The client reaches the VIP on-link; the
 * failover is what the client sees of it: its neighbour entry for the VIP
 * moves from n1's MAC to n2's (what the new owner's gratuitous ARP does —
 * the agents' takeover itself is tested elsewhere), and n1 drops off the
 * segment (its port goes down, as when it dies).
 *
 * What is preserved, exactly: the connection's client → VIP packets now reach
 * n2, which never saw the SYN and holds no state for it; Maglev over the same
 * backends and the same flow hash picks the same backend, and the backend's
 * replies never went through a balancer (DSR), so the backend's TCP socket
 * goes on. What is not: nothing of n1's connection table moves; a backend
 * set that differs between the balancers moves the flows Maglev maps
 * differently (those are reset by the backend: the last check shows it).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { rmSync } from 'node:fs';
import { Lab, sleep, waitFor, type Host, type LabProcess } from '../../lab/lab.js';
import { labSkipReason } from '../helpers/lab-tools.js';
import { LbProgram } from '../../src/datapath/lb/program.js';
import { LbServiceWriter } from '../../src/datapath/lb/services.js';
import { CT_SERVICE } from '../../src/datapath/lb/layout.js';
import type { LbServiceRow } from '../../src/datapath/tables/lb-services.js';

const VIP = '198.51.100.20';
const PORT = 7000;
const M = 251;
const CLIENT = fileURLToPath(new URL('../tools/tcp-session.ts', import.meta.url));

// Echo with the backend's name: "<name> <line>".
const ECHO = `const name = process.argv[1];
require('node:net').createServer((s) => { s.setNoDelay(true); s.on('data', (d) => s.write(name + ' ' + d)); s.on('error', () => {}); })
  .listen(${PORT}, '0.0.0.0', () => console.log('listening'));
process.on('SIGTERM', () => process.exit(0));`;

describe('DSR: an established connection survives an L2 failover of the service IP', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let client: Host;
  let balancers: Host[];
  let backends: Host[];
  const progs: LbProgram[] = [];
  const row = (bes: Host[]): LbServiceRow => ({
    key: `${VIP}:${PORT}/TCP`,
    service: 'default/dsr',
    vip: VIP,
    port: PORT,
    proto: 'TCP',
    mode: 'dsr',
    affinity: 'None',
    affinityTimeoutS: 0,
    backends: bes.map((b) => ({ ip: b.ip, port: PORT, terminating: false })),
  });
  const writers: LbServiceWriter[] = [];

  before(async () => {
    lab = Lab.create({ nodes: 4, tag: 'dsrf' });
    client = lab.client;
    balancers = lab.nodes.slice(0, 2);
    backends = lab.nodes.slice(2);
    for (const b of backends) {
      b.must('ip', ['addr', 'add', `${VIP}/32`, 'dev', 'lo']);
      b.must('sysctl', ['-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2']);
    }
    const servers = backends.map((b) => b.spawn('echo', process.execPath, ['-e', ECHO, b.name]));
    for (const s of servers) await s.waitForOutput('listening', 30_000);
    for (const n of balancers) {
      // The FIB lookup that finds the backend's MAC answers only where the node forwards (a balancer is a router).
      n.must('sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
      const ifindex = n.ifindex('eth0');
      const p = n.enter(() => {
        const p = LbProgram.load({ pinDir: n.pinDir, ctMapSize: 4096, maglevSize: M });
        p.attach(ifindex);
        return p;
      });
      progs.push(p);
      const w = new LbServiceWriter({ maps: p.maps, maglevSize: M, setMaglevTable: (id, t) => p.setMaglevTable(id, t), flush: async () => {} });
      writers.push(w);
    }
    // The same backends on both balancers, written in a different order: Maglev depends on the backends, not the order.
    await writers[0]!.update(row(backends));
    await writers[1]!.update(row([...backends].reverse()));
  });

  after(async () => {
    for (const p of progs) p.dispose();
    for (const n of lab?.nodes ?? []) rmSync(n.pinDir, { recursive: true, force: true });
    await lab?.destroy();
  });

  const pointVipAt = (n: Host) => client.must('ip', ['neigh', 'replace', VIP, 'lladdr', n.mac('eth0'), 'dev', 'eth0', 'nud', 'permanent']);
  const session = (label: string, sport: number): LabProcess => client.spawn(label, process.execPath, ['--import', 'tsx', CLIENT, VIP, String(PORT), String(sport), '100']);
  const replies = (p: LabProcess): string[] =>
    p.output
      .join('')
      .split('\n')
      .filter((l) => l.length > 0);

  const diag = (sessions: LabProcess[]) =>
    [
      ...sessions.map((s) => `${s.name}: ${replies(s).slice(-3).join(' | ')}`),
      ...progs.map((p, i) => `n${i + 1}: ${JSON.stringify(p.stats(), (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`),
      client.must('ip', ['neigh', 'show', 'dev', 'eth0']),
      backends[0]!.must('ss', ['-tan']),
    ].join('\n');

  test('the connection keeps its backend across the move, with no reset; the new balancer picked the same backend without having seen the SYN', async () => {
    pointVipAt(balancers[0]!);
    const sessions = [session('s1', 41000), session('s2', 41001), session('s3', 41002), session('s4', 41003)];
    try {
      await waitFor(() => sessions.every((s) => replies(s).filter((l) => l.startsWith('reply')).length >= 5), { timeoutMs: 15_000, what: 'replies through n1', onTimeout: () => diag(sessions) });
      const n2Before = progs[1]!.stats().forwarded!;
      assert.equal(progs[1]!.maps.ct4.keys().length, 0, 'n2 has seen nothing yet');
      // Failover: the client's neighbour entry moves to n2 (the GARP), n1 leaves the segment.
      pointVipAt(balancers[1]!);
      lab.setPort(balancers[0]!, 'eth0', false);
      const counts = sessions.map((s) => replies(s).length);
      await waitFor(() => sessions.every((s, i) => replies(s).length >= counts[i]! + 10), { timeoutMs: 15_000, what: 'replies through n2', onTimeout: () => sessions.map((s) => replies(s).slice(-3).join(' | ')).join('\n') });
      assert.ok(progs[1]!.stats().forwarded! > n2Before + 10n, 'the packets now go through n2');
      const n2Flows = progs[1]!.maps.ct4.entries().filter(([k]) => k.dir === CT_SERVICE && k.dport === PORT);
      assert.equal(n2Flows.length, sessions.length, 'n2 tracks each connection from its first mid-stream packet');
      for (const s of sessions) {
        const lines = replies(s);
        assert.ok(!lines.some((l) => l.startsWith('error') || l.startsWith('closed')), `${s.name}: no reset, no close: ${lines.filter((l) => !l.startsWith('reply')).join(' | ')}`);
        const served = new Set(lines.filter((l) => l.startsWith('reply')).map((l) => l.split(' ')[1]));
        assert.equal(served.size, 1, `${s.name}: one backend before and after the move (${[...served]})`);
      }
      const used = new Set(sessions.map((s) => replies(s).find((l) => l.startsWith('reply'))!.split(' ')[1]));
      assert.equal(used.size, 2, `the four connections use both backends (${[...used]}), so the same choice is not luck`);
    } finally {
      for (const s of sessions) await s.stop('SIGTERM', 3000);
      lab.setPort(balancers[0]!, 'eth0', true);
    }
  });

  test('what is not preserved: a balancer whose backend set differs moves the flows Maglev maps elsewhere, and the backend resets them', async () => {
    pointVipAt(balancers[0]!);
    await sleep(200);
    const sessions = [session('t1', 42000), session('t2', 42001), session('t3', 42002), session('t4', 42003)];
    try {
      await waitFor(() => sessions.every((s) => replies(s).filter((l) => l.startsWith('reply')).length >= 3), { timeoutMs: 15_000, what: 'replies through n1' });
      const backendOf = (s: LabProcess) => replies(s).find((l) => l.startsWith('reply'))!.split(' ')[1];
      // n2 knows only n3: the connections on n4 land on n3, which has no such connection and resets it.
      await writers[1]!.update(row([backends[0]!]));
      pointVipAt(balancers[1]!);
      const onN4 = sessions.filter((s) => backendOf(s) === backends[1]!.name);
      const onN3 = sessions.filter((s) => backendOf(s) === backends[0]!.name);
      assert.ok(onN4.length > 0 && onN3.length > 0, 'both backends in use');
      await waitFor(() => onN4.every((s) => replies(s).some((l) => l.startsWith('error') || l.startsWith('closed'))), { timeoutMs: 15_000, what: 'the moved connections reset' });
      const counts = onN3.map((s) => replies(s).length);
      await waitFor(() => onN3.every((s, i) => replies(s).length >= counts[i]! + 5), { timeoutMs: 15_000, what: 'the others go on' });
      for (const s of onN3) assert.ok(!replies(s).some((l) => l.startsWith('error') || l.startsWith('closed')), `${s.name} kept going`);
    } finally {
      for (const s of sessions) await s.stop('SIGTERM', 3000);
      await writers[1]!.update(row(backends));
    }
  });
});
