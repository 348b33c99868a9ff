/**
 * The load balancer's third slice in a real kernel: backend selection other
 * than Maglev (random, round robin), IPv6 session affinity, SNAT and DSR, ICMP
 * errors about SNATed connections, and SNAT port pressure. A client, a node
 * with three backends behind it (IPv4 and IPv6) and a second node on the
 * client's segment as the remote backend (SNAT, DSR); the program is loaded
 * on the node's eth0 in-process, the maps written by the agent's
 * LbServiceWriter, and the traffic is real sockets and curl.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Lab, waitFor, type Host } from '../../lab/lab.js';
import { labSkipReason } from '../helpers/lab-tools.js';
import { LbProgram } from '../../src/datapath/lb/program.js';
import { LbServiceWriter } from '../../src/datapath/lb/services.js';
import { ConntrackGc } from '../../src/datapath/lb/ct-gc.js';
import { CT_EGRESS, CT_SNAT } from '../../src/datapath/lb/layout.js';
import type { LbAlgorithm, LbServiceRow } from '../../src/datapath/tables/lb-services.js';

const VIP = '198.51.100.20';
const VIP6 = '2001:db8:100::20';
const CLIENT6 = '2001:db8::1';
const NODE6 = '2001:db8::11';
const N2_6 = '2001:db8::12';
const PROBE = fileURLToPath(new URL('../tools/lb_probe.py', import.meta.url));
const HTTP = fileURLToPath(new URL('../../lab/http-server.ts', import.meta.url));
const UDP = fileURLToPath(new URL('../../lab/udp-echo.ts', import.meta.url));
const M = 251;

type Probe = { sport: number; backend: string | null; seen: string | null; from: string | null };

describe('eBPF load balancer: selection, IPv6 modes, ICMP for SNAT, port pressure', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let client: Host;
  let node: Host;
  let n2: Host;
  let backends: Host[];
  let prog: LbProgram;
  let gc: ConntrackGc;
  let gc6: ConntrackGc;
  let writer: LbServiceWriter;
  const ip6 = (i: number) => `2001:db8:1::${10 + i}`;
  const row = (vip: string, proto: 'TCP' | 'UDP', port: number, targetPort: number, bes: Array<{ ip: string }>, extra: Partial<LbServiceRow> = {}): LbServiceRow => ({
    key: `${vip.includes(':') ? `[${vip}]` : vip}:${port}/${proto}`,
    service: 'default/sel',
    vip,
    port,
    proto,
    mode: 'dnat',
    affinity: 'None',
    affinityTimeoutS: 0,
    backends: bes.map((b) => ({ ip: b.ip, port: targetPort, terminating: false })),
    ...extra,
  });
  const v4 = () => backends.map((b) => ({ ip: b.ip }));
  const v6 = () => backends.map((_b, i) => ({ ip: ip6(i) }));
  const probe = (vip: string, port: number, sports: number[], quick = false): Probe[] =>
    JSON.parse(client.must('/usr/bin/python3', [PROBE, quick ? 'udp1' : 'udp', vip, String(port), ...sports.map(String)]));
  const flushAll = async () => void (await Promise.all([gc.flushWhere(() => true), gc6.flushWhere(() => true)]));

  before(async () => {
    lab = Lab.create({ nodes: 2, tag: 'lbs' });
    client = lab.client;
    node = lab.nodes[0]!;
    n2 = lab.nodes[1]!;
    backends = lab.addBackends(node, 3);
    // IPv6 everywhere: the client's segment 2001:db8::/64, the backends' 2001:db8:1::/64 behind the node.
    client.must('ip', ['-6', 'addr', 'add', `${CLIENT6}/64`, 'dev', 'eth0', 'nodad']);
    node.must('ip', ['-6', 'addr', 'add', `${NODE6}/64`, 'dev', 'eth0', 'nodad']);
    n2.must('ip', ['-6', 'addr', 'add', `${N2_6}/64`, 'dev', 'eth0', 'nodad']);
    node.must('ip', ['-6', 'addr', 'add', '2001:db8:1::1/64', 'dev', 'lbbr', 'nodad']);
    node.must('sysctl', ['-q', '-w', 'net.ipv6.conf.all.forwarding=1']);
    backends.forEach((b, i) => {
      b.must('ip', ['-6', 'addr', 'add', `${ip6(i)}/64`, 'dev', 'eth0', 'nodad']);
      b.must('ip', ['-6', 'route', 'add', 'default', 'via', '2001:db8:1::1']);
    });
    client.must('ip', ['route', 'replace', '198.51.100.0/24', 'via', node.ip, 'dev', 'eth0']);
    client.must('ip', ['-6', 'route', 'replace', '2001:db8:100::/64', 'via', NODE6, 'dev', 'eth0']);
    const procs = [
      ...backends.flatMap((b) => [
        b.spawn('udp', process.execPath, ['--import', 'tsx', UDP, '--port', '5353', '--name', b.name]),
        b.spawn('udp6', process.execPath, ['--import', 'tsx', UDP, '--port', '5356', '--name', b.name, '--host', '::']),
      ]),
      n2.spawn('udp', process.execPath, ['--import', 'tsx', UDP, '--port', '5353', '--name', 'n2']),
      n2.spawn('udp6', process.execPath, ['--import', 'tsx', UDP, '--port', '5356', '--name', 'n2', '--host', '::']),
      n2.spawn('http6', process.execPath, ['--import', 'tsx', HTTP, '--port', '8086', '--name', 'n2', '--host', '::']),
    ];
    for (const p of procs) await p.waitForOutput('listening', 30_000);
    const ifindex = node.ifindex('eth0');
    prog = node.enter(() => {
      const p = LbProgram.load({ pinDir: node.pinDir, ctMapSize: 4096, maglevSize: M });
      p.attach(ifindex);
      return p;
    });
    prog.setSnatAddress(node.ip);
    prog.setSnatAddress(NODE6);
    gc = new ConntrackGc(prog.maps.ct4, { batchSize: 64, snatAddress: () => node.ip, recordDeleted: (n) => prog.recordDeleted(n) });
    gc6 = new ConntrackGc(prog.maps.ct6, { batchSize: 64, snatAddress: () => NODE6, recordDeleted: (n) => prog.recordDeleted(n) });
    writer = new LbServiceWriter({
      maps: prog.maps,
      maglevSize: M,
      setMaglevTable: (id, t) => prog.setMaglevTable(id, t),
      flush: async (r) => void (await Promise.all([gc.flush(r), gc6.flush(r)])),
    });
  });

  after(async () => {
    prog?.dispose();
    await lab?.destroy();
  });

  test('round robin: new flows take the backends in turn (both families); established flows keep theirs', async () => {
    for (const [vip, port, bes] of [[VIP, 5353, v4()], [VIP6, 5356, v6()]] as const) {
      const r = row(vip, 'UDP', 53, port, bes, { algorithm: 'round-robin' });
      await writer.update(r);
      const sports = Array.from({ length: 9 }, (_, i) => 30000 + i);
      const got = probe(vip, 53, sports).map((x) => x.backend);
      assert.ok(got.every((b) => b !== null), JSON.stringify(got));
      // b_i, b_i+1, b_i+2, b_i, ...: each flow the next backend, a cycle of three.
      for (let i = 0; i < got.length; i++) {
        if (i + 1 < got.length) assert.notEqual(got[i], got[i + 1], `${vip}: flows ${i} and ${i + 1} on one backend: ${got}`);
        if (i + 3 < got.length) assert.equal(got[i], got[i + 3], `${vip}: not a cycle of three: ${got}`);
      }
      assert.deepEqual(new Set(got).size, 3);
      assert.deepEqual(probe(vip, 53, sports).map((x) => x.backend), got, 'established flows keep their backend');
      await writer.delete(r);
    }
  });

  test('random: the same flows, once forgotten, land elsewhere (Maglev puts them back where they were)', async () => {
    const sports = Array.from({ length: 30 }, (_, i) => 31000 + i);
    const rounds = async (algorithm: LbAlgorithm): Promise<[Probe[], Probe[]]> => {
      await writer.update(row(VIP, 'UDP', 53, 5353, v4(), { algorithm }));
      const a = probe(VIP, 53, sports);
      await flushAll();
      const b = probe(VIP, 53, sports);
      await flushAll();
      return [a, b];
    };
    const [m1, m2] = await rounds('maglev');
    assert.deepEqual(m2.map((x) => x.backend), m1.map((x) => x.backend), 'Maglev: a flow hashes to the same backend');
    const [r1, r2] = await rounds('random');
    assert.ok(r1.every((x) => x.backend && x.from === `${VIP}:53`));
    const moved = r1.filter((x, i) => x.backend !== r2[i]!.backend).length;
    assert.ok(moved >= 5, `random: only ${moved} of 30 flows changed backend`);
    assert.equal(new Set(r1.map((x) => x.backend)).size, 3, 'every backend gets flows');
    await writer.delete(row(VIP, 'UDP', 53, 5353, []));
  });

  test('IPv6 sessionAffinity ClientIP: every new flow of the client goes to one backend; off again, flows spread', async () => {
    await writer.update(row(VIP6, 'UDP', 53, 5356, v6(), { affinity: 'ClientIP', affinityTimeoutS: 300 }));
    const sticky = probe(VIP6, 53, Array.from({ length: 16 }, (_, i) => 32000 + i));
    assert.equal(new Set(sticky.map((r) => r.backend)).size, 1, JSON.stringify(sticky));
    assert.ok(sticky.every((r) => r.from === `[${VIP6}]:53` && r.seen === `${CLIENT6}:${r.sport}`));
    await writer.update(row(VIP6, 'UDP', 53, 5356, v6()));
    const spread = probe(VIP6, 53, Array.from({ length: 16 }, (_, i) => 32100 + i));
    assert.ok(new Set(spread.map((r) => r.backend)).size > 1, JSON.stringify(spread));
    await writer.delete(row(VIP6, 'UDP', 53, 5356, []));
  });

  test('IPv6 SNAT: a remote backend on the segment answers through the node; NAT entries live and go with their connection', async () => {
    // n2 would answer the client directly (same segment): only SNAT brings the reply back to be un-NATed.
    const udp = row(VIP6, 'UDP', 55, 5356, [{ ip: N2_6 }], { mode: 'snat' });
    const tcp = row(VIP6, 'TCP', 81, 8086, [{ ip: N2_6 }], { mode: 'snat' });
    await writer.update(udp);
    await writer.update(tcp);
    const rows = probe(VIP6, 55, [33000, 33001, 33002]);
    for (const r of rows) {
      assert.equal(r.backend, 'n2');
      assert.equal(r.from, `[${VIP6}]:55`);
      const m = /^(.*):(\d+)$/.exec(r.seen!)!;
      assert.equal(m[1], NODE6, 'the backend sees the node, not the client');
      assert.ok(Number(m[2]) >= 32768 && Number(m[2]) <= 60999, r.seen!);
    }
    const curl = client.exec('curl', ['-g', '-sS', '--max-time', '3', `http://[${VIP6}]:81/`]);
    assert.equal(curl.code, 0, curl.stderr);
    assert.equal(curl.stdout.trim(), 'n2');
    const nat = () => prog.maps.ct6.entries().filter(([k]) => k.dir === CT_SNAT);
    assert.ok(nat().length >= 4, 'one NAT entry per connection');
    for (const [k, e] of prog.maps.ct6.entries().filter(([k, e]) => k.dir === CT_EGRESS && e.snatPort !== 0)) {
      assert.ok(nat().some(([nk, ne]) => nk.dport === e.snatPort && nk.saddr === k.daddr && nk.daddr === NODE6 && ne.natAddr === k.saddr), 'each connection has its NAT entry');
    }
    // Deleting a connection deletes its NAT entry in the same batch (IPv6 keys).
    const tcpNat = nat().filter(([k]) => k.proto === 6).length;
    assert.ok(tcpNat > 0);
    await gc6.flushWhere((k) => k.dir === CT_EGRESS && k.proto === 6);
    assert.equal(nat().filter(([k]) => k.proto === 6).length, 0, 'NAT entries purged with their connections');
    await writer.delete(udp);
    await writer.delete(tcp);
    assert.deepEqual(nat(), [], 'a removed service takes its NAT entries');
  });

  test('IPv6 DSR: only the MAC changes, the backend answers the client directly from [VIP]', async () => {
    n2.must('ip', ['-6', 'addr', 'add', `${VIP6}/128`, 'dev', 'lo']);
    const echo = n2.spawn('udp-vip6', process.execPath, ['--import', 'tsx', UDP, '--port', '5357', '--name', 'n2', '--host', VIP6]);
    try {
      await echo.waitForOutput('listening', 30_000);
      const dsr = row(VIP6, 'UDP', 5357, 5357, [{ ip: N2_6 }], { mode: 'dsr' });
      await writer.update(dsr);
      const revBefore = prog.stats().revnat!;
      const rows = probe(VIP6, 5357, [34000, 34001, 34002]);
      for (const r of rows) {
        assert.equal(r.backend, 'n2');
        assert.equal(r.from, `[${VIP6}]:5357`);
        assert.equal(r.seen, `${CLIENT6}:${r.sport}`, 'the backend sees the client itself');
      }
      assert.equal(prog.stats().revnat, revBefore, 'replies bypass the node');
      assert.equal(prog.maps.ct6.entries().filter(([k]) => k.dport === 5357).length, 3, 'one CT_SERVICE entry per flow, nothing else');
      await writer.delete(dsr);
    } finally {
      await echo.stop();
      n2.must('ip', ['-6', 'addr', 'del', `${VIP6}/128`, 'dev', 'lo']);
    }
  });

  test('ICMP errors about SNATed connections reach the client as the service\'s (IPv4 and IPv6): a backend\'s port unreachable refuses the client\'s socket; fragmentation needed / packet too big for a reply reaches the backend as it knows the flow (DNAT and SNAT, IPv4 and IPv6)', async () => {
    // n2 is the backend; nobody listens on 5999 there, so it sends port unreachable to the node's SNAT address.
    const r = row(VIP, 'UDP', 56, 5999, [{ ip: n2.ip }], { mode: 'snat' });
    await writer.update(r);
    const before = prog.stats().icmp_xlate!;
    const res = JSON.parse(client.must('/usr/bin/python3', [PROBE, 'refused', VIP, '56']));
    assert.deepEqual(res, { result: 'refused' }, 'a connected socket is refused only by an error naming VIP:56 exactly');
    assert.ok(prog.stats().icmp_xlate! > before);
    await writer.delete(r);
    // The other way: "fragmentation needed" sent to the VIP about a reply VIP:58 → client:26100 of an
    // SNATed flow reaches the backend quoting what it sent: n2:5353 → node:nport.
    const s4 = row(VIP, 'UDP', 58, 5353, [{ ip: n2.ip }], { mode: 'snat' });
    await writer.update(s4);
    const flow = probe(VIP, 58, [26100])[0]!;
    assert.equal(flow.backend, 'n2');
    const nport = flow.seen!.split(':')[1]!;
    const cap = n2.spawn('tcpdump', 'tcpdump', ['-i', 'eth0', '-n', '-l', '-v', '--immediate-mode', 'icmp']);
    try {
      await cap.waitForOutput('listening on', 10_000);
      const mid = prog.stats().icmp_xlate!;
      client.must('/usr/bin/python3', [PROBE, 'icmp-to-vip', 'eth0', VIP, '58', '26100']);
      await waitFor(() => /need to frag/.test(cap.text()), { timeoutMs: 5000, what: 'the ICMP error at the backend', onTimeout: () => cap.text() });
      await cap.stop('SIGINT');
      const esc = (x: string) => x.replace(/\./g, '\\.');
      assert.match(cap.text(), new RegExp(`> ${esc(n2.ip)}: ICMP`), cap.text());
      assert.match(cap.text(), new RegExp(`${esc(n2.ip)}\\.5353 > ${esc(node.ip)}\\.${nport}`), cap.text());
      assert.ok(prog.stats().icmp_xlate! > mid);
    } finally {
      await cap.stop('SIGINT').catch(() => {});
    }
    await writer.delete(s4);
    // IPv6: n2's ICMPv6 port unreachable to the node's IPv6 SNAT address reaches the client about [VIP]:56.
    const r6 = row(VIP6, 'UDP', 56, 5999, [{ ip: N2_6 }], { mode: 'snat' });
    await writer.update(r6);
    const before6 = prog.stats().icmp_xlate!;
    assert.deepEqual(JSON.parse(client.must('/usr/bin/python3', [PROBE, 'refused', VIP6, '56'])), { result: 'refused' });
    assert.ok(prog.stats().icmp_xlate! > before6);
    await writer.delete(r6);
    // IPv6, toward the backend: packet too big sent to [VIP] about a reply — DNAT (a backend behind the
    // node) and SNAT (n2, quoting node:nport) — reaches the backend quoting the flow as it knows it.
    // tcpdump prints no quoted packet for "packet too big": the capture filter checks it instead —
    // the quoted ports (ip6[88:2] source, ip6[90:2] destination) and the low words of the quoted addresses.
    const tooBig = async (r: LbServiceRow, sport: number, filter: (seen: string, backend: string) => string) => {
      await writer.update(r);
      const f = probe(VIP6, r.port, [sport])[0]!;
      assert.ok(f.backend, JSON.stringify(f));
      const host = f.backend === 'n2' ? n2 : backends.find((b) => b.name === f.backend)!;
      const backendIp = f.backend === 'n2' ? N2_6 : ip6(backends.indexOf(host));
      const cap = host.spawn('tcpdump6', 'tcpdump', ['-i', 'eth0', '-n', '-l', '-v', '--immediate-mode', `icmp6 and ip6[40] == 2 and ${filter(f.seen!, backendIp)}`]);
      try {
        await cap.waitForOutput('listening on', 10_000);
        const mid = prog.stats().icmp_xlate!;
        client.must('/usr/bin/python3', [PROBE, 'icmp6-to-vip', 'eth0', CLIENT6, VIP6, String(r.port), String(sport)]);
        await waitFor(() => /packet too big/.test(cap.text()), { timeoutMs: 5000, what: 'packet too big, quoting the flow as the backend knows it', onTimeout: () => cap.text() });
        await cap.stop('SIGINT');
        assert.match(cap.text(), new RegExp(`> ${backendIp}: \\[icmp6 sum ok\\]`), cap.text());
        assert.ok(prog.stats().icmp_xlate! > mid);
      } finally {
        await cap.stop('SIGINT').catch(() => {});
      }
      await writer.delete(r);
    };
    const low = (ip: string) => `0x${Buffer.from(ip.split(':').pop()!.padStart(8, '0'), 'hex').toString('hex')}`;
    // DNAT: quoted [backend]:5356 → [client]:26200 (was [VIP]:59 → [client]:26200).
    await tooBig(row(VIP6, 'UDP', 59, 5356, v6()), 26200, (_seen, b) => `ip6[88:2] == 5356 and ip6[90:2] == 26200 and ip6[68:4] == ${low(b)}`);
    // SNAT: quoted [n2]:5356 → [node]:nport.
    await tooBig(row(VIP6, 'UDP', 60, 5356, [{ ip: N2_6 }], { mode: 'snat' }), 26201, (seen) => `ip6[88:2] == 5356 and ip6[90:2] == ${seen.split(':').pop()} and ip6[68:4] == ${low(N2_6)} and ip6[84:4] == ${low(NODE6)}`);
  });

  test('SNAT under port pressure: every free port is found (beyond 8 probes), the rest dropped and counted exactly, live flows untouched', async () => {
    prog.setSnatPortRange(40000, 40011);
    try {
      const r = row(VIP, 'UDP', 57, 5353, [{ ip: n2.ip }], { mode: 'snat' });
      await writer.update(r);
      const sports = Array.from({ length: 12 }, (_, i) => 35000 + i);
      const first = probe(VIP, 57, sports);
      const ports = first.map((x) => Number(x.seen?.split(':')[1]));
      assert.ok(first.every((x) => x.backend === 'n2'), JSON.stringify(first));
      assert.deepEqual([...ports].sort((a, b) => a - b), Array.from({ length: 12 }, (_, i) => 40000 + i), 'all 12 ports of the range in use, each once');
      const exhausted = prog.stats().snat_exhausted!;
      const more = probe(VIP, 57, [35100, 35101], true);
      assert.deepEqual(more.map((x) => x.backend), [null, null], 'no port left: dropped');
      assert.equal(prog.stats().snat_exhausted! - exhausted, 2n, 'each dropped connection counted once');
      assert.equal(prog.maps.ct4.entries().filter(([k]) => k.sport === 35100 || k.sport === 35101).length, 0, 'a dropped connection leaves no entry');
      const again = probe(VIP, 57, sports);
      assert.deepEqual(again.map((x) => x.seen), first.map((x) => x.seen), 'live flows keep their ports');
      await writer.delete(r);
    } finally {
      prog.setSnatPortRange(32768, 60999);
    }
  });
});
