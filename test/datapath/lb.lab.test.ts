/**
 * The eBPF load balancer in a real kernel: a client, a node and three backend
 * namespaces behind the node (veth on a bridge), each running node's HTTP
 * server and a UDP echo. The program is loaded and attached on the node's
 * eth0 in-process (setns), the maps are written by the same LbServiceWriter
 * the agent's reconciler uses, and traffic is real curl and real sockets.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Lab, sleep, waitFor, type Host } from '../../lab/lab.js';
import { labSkipReason } from '../helpers/lab-tools.js';
import { LbProgram } from '../../src/datapath/lb/program.js';
import { LbServiceWriter } from '../../src/datapath/lb/services.js';
import { ConntrackGc } from '../../src/datapath/lb/ct-gc.js';
import { CT_EGRESS, CT_SERVICE, CT_SNAT, ctEvictions } from '../../src/datapath/lb/layout.js';
import type { LbServiceRow } from '../../src/datapath/tables/lb-services.js';

const VIP = '198.51.100.10';
const PROBE = fileURLToPath(new URL('../tools/lb_probe.py', import.meta.url));
const HTTP = fileURLToPath(new URL('../../lab/http-server.ts', import.meta.url));
const UDP = fileURLToPath(new URL('../../lab/udp-echo.ts', import.meta.url));
const M = 251;

describe('eBPF L4 load balancer in a lab', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let client: Host;
  let backends: Host[];
  let prog: LbProgram;
  let gc: ConntrackGc;
  let gc6: ConntrackGc;
  let writer: LbServiceWriter;
  const row = (proto: 'TCP' | 'UDP', port: number, targetPort: number, bes: Host[], terminating: string[] = [], affinityTimeoutS = 0): LbServiceRow => ({
    key: `${VIP}:${port}/${proto}`,
    service: 'default/web',
    vip: VIP,
    port,
    proto,
    mode: 'dnat',
    affinity: affinityTimeoutS > 0 ? 'ClientIP' : 'None',
    affinityTimeoutS,
    backends: bes.map((b) => ({ ip: b.ip, port: targetPort, terminating: terminating.includes(b.name) })),
  });
  const udpProbe6 = (sports: number[], vip: string, port = 53): Array<{ sport: number; backend: string | null; seen: string | null; from: string | null }> =>
    JSON.parse(client.must('/usr/bin/python3', [PROBE, 'udp', vip, String(port), ...sports.map(String)]));
  const udpProbe = (sports: number[], port = 53): Array<{ sport: number; backend: string | null; seen: string | null; from: string | null }> =>
    JSON.parse(client.must('/usr/bin/python3', [PROBE, 'udp', VIP, String(port), ...sports.map(String)]));

  before(async () => {
    lab = Lab.create({ nodes: 2, tag: 'lb' }); // n2: a remote backend on the segment (SNAT)
    client = lab.client;
    const node = lab.nodes[0]!;
    backends = lab.addBackends(node, 3);
    const procs = backends.flatMap((b) => [
      b.spawn('http', process.execPath, ['--import', 'tsx', HTTP, '--port', '8080', '--name', b.name]),
      b.spawn('udp', process.execPath, ['--import', 'tsx', UDP, '--port', '5353', '--name', b.name]),
    ]);
    const n2 = lab.nodes[1]!;
    procs.push(
      n2.spawn('http', process.execPath, ['--import', 'tsx', HTTP, '--port', '8080', '--name', 'n2']),
      n2.spawn('udp', process.execPath, ['--import', 'tsx', UDP, '--port', '5353', '--name', 'n2']),
    );
    for (const p of procs) await p.waitForOutput('listening', 30_000);
    // The client reaches the VIP through the node (the L2 responder's part is tested elsewhere).
    client.must('ip', ['route', 'replace', '198.51.100.0/24', 'via', node.ip, 'dev', 'eth0']);
    const ifindex = node.ifindex('eth0');
    prog = node.enter(() => {
      const p = LbProgram.load({ pinDir: node.pinDir, ctMapSize: 4096, maglevSize: M });
      p.attach(ifindex);
      return p;
    });
    gc = new ConntrackGc(prog.maps.ct4, { batchSize: 64, recordDeleted: (n) => prog.recordDeleted(n) });
    gc6 = new ConntrackGc(prog.maps.ct6, { batchSize: 64, recordDeleted: (n) => prog.recordDeleted(n) });
    writer = new LbServiceWriter({
      maps: prog.maps,
      maglevSize: M,
      setMaglevTable: (id, t) => prog.setMaglevTable(id, t),
      flush: async (r) => void (await Promise.all([gc.flush(r), gc6.flush(r)])),
    });
    await writer.update(row('TCP', 80, 8080, backends));
    await writer.update(row('UDP', 53, 5353, backends));
  });

  after(async () => {
    prog?.dispose();
    await lab?.destroy();
  });

  test('TCP: new connections through the VIP reach every backend, replies come from VIP:80', () => {
    const seen = new Map<string, number>();
    for (let i = 0; i < 30; i++) {
      // curl only completes a handshake whose SYN-ACK comes from VIP:80: reverse NAT is exact.
      const r = client.exec('curl', ['-sS', '--max-time', '3', `http://${VIP}/`]);
      assert.equal(r.code, 0, r.stderr);
      const name = r.stdout.trim();
      seen.set(name, (seen.get(name) ?? 0) + 1);
    }
    assert.deepEqual([...seen.keys()].sort(), ['b1', 'b2', 'b3'], JSON.stringify([...seen]));
    const stats = prog.stats();
    assert.ok(stats.forwarded! > 0n && stats.revnat! > 0n, JSON.stringify(stats, (_k, v) => (typeof v === 'bigint' ? String(v) : v)));
  });

  test('UDP: balanced, the backend sees the client, the client sees only VIP:53', () => {
    const rows = udpProbe(Array.from({ length: 24 }, (_, i) => 20000 + i));
    for (const r of rows) {
      assert.ok(r.backend, `no answer for source port ${r.sport}`);
      assert.equal(r.from, `${VIP}:53`);
      assert.equal(r.seen, `${client.ip}:${r.sport}`);
    }
    assert.deepEqual([...new Set(rows.map((r) => r.backend))].sort(), ['b1', 'b2', 'b3']);
  });

  test('removing a backend moves only its flows and flushes its connection entries', async () => {
    const sports = Array.from({ length: 30 }, (_, i) => 21000 + i);
    const before = udpProbe(sports);
    const b3 = backends[2]!;
    const b3Id = prog.maps.backends.entries().find(([, b]) => b.ip === b3.ip)![0];
    assert.ok(prog.maps.ct4.entries().some(([, e]) => e.backendId === b3Id), 'b3 has connection entries before');
    await writer.update(row('UDP', 53, 5353, backends.slice(0, 2)));
    const left = prog.maps.ct4.entries().filter(([k, e]) => e.backendId === b3Id && k.proto === 17);
    assert.deepEqual(left, [], 'b3 UDP entries flushed at once');
    const afterRemoval = udpProbe(sports);
    for (let i = 0; i < sports.length; i++) {
      const was = before[i]!.backend;
      const now = afterRemoval[i]!.backend;
      if (was === 'b3') assert.notEqual(now, 'b3', `flow ${sports[i]} still on b3`);
      else assert.equal(now, was, `flow ${sports[i]} moved from ${was} to ${now}`);
    }
    assert.ok(before.some((r) => r.backend === 'b3'), 'some flows were on b3');
    await writer.update(row('UDP', 53, 5353, backends)); // back for the next tests
  });

  test('a terminating backend keeps its connections and gets no new ones', async () => {
    const sports = Array.from({ length: 24 }, (_, i) => 22000 + i);
    const first = udpProbe(sports);
    await writer.update(row('UDP', 53, 5353, backends, ['b2']));
    const again = udpProbe(sports);
    assert.deepEqual(again.map((r) => r.backend), first.map((r) => r.backend), 'established flows keep their backend');
    const fresh = udpProbe(Array.from({ length: 24 }, (_, i) => 23000 + i));
    assert.ok(!fresh.some((r) => r.backend === 'b2'), 'no new flow on the terminating backend');
    await writer.update(row('UDP', 53, 5353, backends));
  });

  test('sessionAffinity ClientIP: every new flow of a client goes to one backend; off again, flows spread', async () => {
    await writer.update(row('UDP', 53, 5353, backends, [], 300));
    const sticky = udpProbe(Array.from({ length: 16 }, (_, i) => 25000 + i));
    assert.equal(new Set(sticky.map((r) => r.backend)).size, 1, JSON.stringify(sticky));
    assert.ok(sticky.every((r) => r.from === `${VIP}:53`));
    await writer.update(row('UDP', 53, 5353, backends));
    const spread = udpProbe(Array.from({ length: 16 }, (_, i) => 25100 + i));
    assert.ok(new Set(spread.map((r) => r.backend)).size > 1, JSON.stringify(spread));
  });

  test('pinned maps: entries survive a reload; a map of another layout is recreated, not misread', () => {
    const node = lab.nodes[0]!;
    const before = prog.maps.ct4.keys().length;
    assert.ok(before > 0);
    const again = LbProgram.load({ pinDir: node.pinDir, ctMapSize: 4096, maglevSize: M });
    try {
      assert.equal(again.maps.ct4.keys().length, before, 'the pinned ct4 is reused');
    } finally {
      again.dispose();
    }
    // An older layout pinned where ct4 lives: value of 64 bytes instead of 72.
    const dir = `${node.pinDir}-upgrade`;
    mkdirSync(join(dir, 'lb'), { recursive: true });
    try {
      const mk = spawnSync('bpftool', ['map', 'create', join(dir, 'lb', 'ct4'), 'type', 'lru_hash', 'key', '16', 'value', '64', 'entries', '4096', 'name', 'ct4']);
      assert.equal(mk.status, 0, String(mk.stderr));
      const up = LbProgram.load({ pinDir: dir, ctMapSize: 4096, maglevSize: M });
      try {
        assert.equal(up.maps.ct4.info().valueSize, 80);
      } finally {
        up.dispose();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('ICMP errors of tracked flows are translated both ways', async () => {
    // From a backend: port unreachable for a port nobody listens on. A connected UDP
    // socket only sees ECONNREFUSED when the error names VIP:54 exactly.
    await writer.update(row('UDP', 54, 5999, backends));
    const r = JSON.parse(client.must('/usr/bin/python3', [PROBE, 'refused', VIP, '54']));
    assert.equal(r.result, 'refused');
    // To the VIP: "fragmentation needed" quoting a reply VIP:53 → client:26000 goes on to that flow's backend.
    const flow = udpProbe([26000])[0]!;
    const backend = backends.find((b) => b.name === flow.backend)!;
    const before = prog.stats().icmp_xlate!;
    const cap = backend.spawn('tcpdump', 'tcpdump', ['-i', 'eth0', '-n', '-l', '-v', '--immediate-mode', 'icmp']);
    await cap.waitForOutput('listening on', 10_000);
    client.must('/usr/bin/python3', [PROBE, 'icmp-to-vip', 'eth0', VIP, '53', '26000']);
    await waitFor(() => /need to frag/.test(cap.text()), { timeoutMs: 5000, what: 'the ICMP error at the backend', onTimeout: () => cap.text() });
    await cap.stop('SIGINT');
    assert.match(cap.text(), new RegExp(`> ${backend.ip.replace(/\./g, '\\.')}: ICMP`), cap.text());
    assert.match(cap.text(), new RegExp(`${backend.ip.replace(/\./g, '\\.')}\\.5353 > ${client.ip.replace(/\./g, '\\.')}\\.26000`), cap.text());
    assert.ok(prog.stats().icmp_xlate! >= before + 1n);
    await writer.delete(row('UDP', 54, 5999, backends));
  });

  test('SNAT mode: a remote backend on the segment answers through the node; NAT entries go with their connection', async () => {
    const node = lab.nodes[0]!;
    const n2 = lab.nodes[1]!;
    prog.setSnatAddress(node.ip);
    const snatRow = (proto: 'TCP' | 'UDP', port: number, target: number): LbServiceRow => ({ ...row(proto, port, target, []), mode: 'snat', backends: [{ ip: n2.ip, port: target, terminating: false }] });
    await writer.update(snatRow('UDP', 55, 5353));
    await writer.update(snatRow('TCP', 81, 8080));
    // n2 would answer the client directly (same segment): only SNAT brings the reply back to be un-NATed.
    const rows = udpProbe([28000, 28001, 28002], 55);
    for (const r of rows) {
      assert.equal(r.backend, 'n2');
      assert.equal(r.from, `${VIP}:55`);
      const [ip, port] = r.seen!.split(':');
      assert.equal(ip, node.ip, 'the backend sees the node, not the client');
      assert.ok(Number(port) >= 32768 && Number(port) < 61000, r.seen!);
    }
    const curl = client.exec('curl', ['-sS', '--max-time', '3', `http://${VIP}:81/`]);
    assert.equal(curl.code, 0, curl.stderr);
    assert.equal(curl.stdout.trim(), 'n2');
    const nat = () => prog.maps.ct4.entries().filter(([k]) => k.dir === CT_SNAT);
    assert.ok(nat().length >= 4, 'one NAT entry per connection');
    const egress = prog.maps.ct4.entries().filter(([k, e]) => k.dir === CT_EGRESS && e.snatPort !== 0);
    for (const [k, e] of egress) {
      assert.ok(nat().some(([nk, ne]) => nk.dport === e.snatPort && nk.saddr === k.daddr && ne.natAddr === k.saddr), 'each connection has its NAT entry');
    }
    // Expiry: connection and NAT entries expire together and go in one pass.
    prog.setLifetimes({ tcpSynS: 60, tcpEstablishedS: 3600, tcpClosingS: 1, nonTcpS: 1 });
    udpProbe([28000, 28001, 28002], 55); // refresh with the short lifetime
    await sleep(1300);
    prog.setLifetimes({ tcpSynS: 60, tcpEstablishedS: 3600, tcpClosingS: 10, nonTcpS: 60 });
    await gc.collect();
    assert.deepEqual(nat().filter(([k]) => k.proto === 17), [], 'the UDP connections and their NAT entries went in one pass');
    assert.deepEqual(prog.maps.ct4.entries().filter(([k, e]) => e.snatPort !== 0 && k.proto === 17), []);
    // What is left (the closed TCP connection, 10 s) still has both halves.
    for (const [nk] of nat()) {
      assert.ok(prog.maps.ct4.entries().some(([k, e]) => k.dir === CT_EGRESS && e.snatPort === nk.dport), 'no NAT entry without its connection');
    }
    // Deleting a connection deletes its NAT entry in the same batch (the GC feeds the NAT purge).
    const withNat = new ConntrackGc(prog.maps.ct4, { snatAddress: () => node.ip, recordDeleted: (n) => prog.recordDeleted(n) });
    const tcpNat = nat().filter(([k]) => k.proto === 6).length;
    assert.ok(tcpNat > 0);
    const purged = await withNat.flushWhere((k) => k.dir === CT_EGRESS && k.proto === 6 && k.daddr === n2.ip);
    assert.equal(nat().filter(([k]) => k.proto === 6).length, 0, 'NAT entries purged with their connections');
    assert.ok(purged.deleted >= 2 * tcpNat, JSON.stringify(purged));
    // Removal: the service's connections and NAT entries are flushed.
    udpProbe([28010], 55);
    assert.ok(nat().length > 0);
    await writer.delete(snatRow('UDP', 55, 5353));
    await writer.delete(snatRow('TCP', 81, 8080));
    assert.deepEqual(nat(), []);
    prog.setSnatAddress(undefined);
  });

  test('DSR mode: only the MAC changes, the backend answers the client directly from the VIP', async () => {
    const n2 = lab.nodes[1]!;
    // The backend holds the VIP on loopback and leaves ARP for it alone (IPVS direct routing).
    n2.must('ip', ['addr', 'add', `${VIP}/32`, 'dev', 'lo']);
    n2.must('sysctl', ['-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2']);
    // A DSR UDP server binds the VIP, so its replies leave from it.
    const echo = n2.spawn('udp-vip', process.execPath, ['--import', 'tsx', UDP, '--port', '5354', '--name', 'n2', '--host', VIP]);
    try {
      await echo.waitForOutput('listening', 30_000);
      const dsrRow: LbServiceRow = { ...row('UDP', 5354, 5354, []), mode: 'dsr', backends: [{ ip: n2.ip, port: 5354, terminating: false }] };
      await writer.update(dsrRow);
      const revBefore = prog.stats().revnat!;
      const rows = udpProbe([29000, 29001, 29002], 5354);
      for (const r of rows) {
        assert.equal(r.backend, 'n2');
        assert.equal(r.from, `${VIP}:5354`);
        assert.equal(r.seen, `${client.ip}:${r.sport}`, 'the backend sees the client itself');
      }
      assert.equal(prog.stats().revnat, revBefore, 'replies bypass the node');
      const svcEntries = prog.maps.ct4.entries().filter(([k]) => k.dir === CT_SERVICE && k.dport === 5354);
      assert.equal(svcEntries.length, 3, 'one CT_SERVICE entry per flow keeps it on its backend');
      await writer.delete(dsrRow);
    } finally {
      await echo.stop();
      n2.must('ip', ['addr', 'del', `${VIP}/32`, 'dev', 'lo']);
    }
  });

  test('GC deletes expired entries and only those (kernel clock, short lifetimes)', async () => {
    await gc.flushWhere(() => true);
    prog.setLifetimes({ tcpSynS: 60, tcpEstablishedS: 3600, tcpClosingS: 10, nonTcpS: 1.5 });
    udpProbe([24000, 24001, 24002]); // 6 entries: CT_SERVICE + CT_EGRESS each
    await sleep(1700);
    prog.setLifetimes({ tcpSynS: 60, tcpEstablishedS: 3600, tcpClosingS: 10, nonTcpS: 60 });
    udpProbe([24100, 24101]); // fresh, 60 s
    const r = await gc.collect();
    assert.equal(r.deleted, 6, JSON.stringify(r));
    const left = prog.maps.ct4.entries().map(([k]) => k);
    assert.deepEqual(left.filter((k) => k.proto === 17).map((k) => k.sport).sort(), [24100, 24100, 24101, 24101]);
    assert.ok(left.some((k) => k.dir === CT_SERVICE) && left.some((k) => k.dir === CT_EGRESS));
  });

  test('hostile packets (fragments, truncated headers, bad flags) never break it', () => {
    const fragBefore = prog.stats().fragment!;
    const icmpBefore = prog.stats().icmp_xlate!;
    const ct = prog.maps.ct4.keys().length;
    const r = client.exec('/usr/bin/python3', [PROBE, 'hostile', 'eth0', VIP, '53']);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(prog.stats().fragment! >= fragBefore + 3n, 'fragments to the VIP dropped and counted');
    assert.equal(prog.stats().icmp_xlate, icmpBefore, 'ICMP errors quoting unknown flows are not translated');
    // Bad-flag SYNs create at most their own two entries each; nothing else appears.
    assert.ok(prog.maps.ct4.keys().length <= ct + 4);
    const ok = client.exec('curl', ['-sS', '--max-time', '3', `http://${VIP}/`]);
    assert.equal(ok.code, 0, ok.stderr);
  });

  test('IPv6: TCP and UDP to an IPv6 VIP reach every backend; the client sees only [VIP]:port, the backends the client; ct6 holds the flows and a removed backend\'s are flushed', async () => {
    const node = lab.nodes[0]!;
    const VIP6 = '2001:db8:100::10';
    client.must('ip', ['-6', 'addr', 'add', '2001:db8::1/64', 'dev', 'eth0', 'nodad']);
    node.must('ip', ['-6', 'addr', 'add', '2001:db8::11/64', 'dev', 'eth0', 'nodad']);
    node.must('ip', ['-6', 'addr', 'add', '2001:db8:1::1/64', 'dev', 'lbbr', 'nodad']);
    node.must('sysctl', ['-q', '-w', 'net.ipv6.conf.all.forwarding=1']);
    const ip6 = (i: number) => `2001:db8:1::${10 + i}`;
    backends.forEach((b, i) => {
      b.must('ip', ['-6', 'addr', 'add', `${ip6(i)}/64`, 'dev', 'eth0', 'nodad']);
      b.must('ip', ['-6', 'route', 'add', 'default', 'via', '2001:db8:1::1']);
    });
    client.must('ip', ['-6', 'route', 'replace', '2001:db8:100::/64', 'via', '2001:db8::11', 'dev', 'eth0']);
    const procs = backends.flatMap((b) => [
      b.spawn('http6', process.execPath, ['--import', 'tsx', HTTP, '--port', '8086', '--name', b.name, '--host', '::']),
      b.spawn('udp6', process.execPath, ['--import', 'tsx', UDP, '--port', '5356', '--name', b.name, '--host', '::']),
    ]);
    for (const p of procs) await p.waitForOutput('listening', 30_000);
    const row6 = (proto: 'TCP' | 'UDP', port: number, targetPort: number, bes: Host[]): LbServiceRow => ({
      ...row(proto, port, targetPort, []),
      key: `[${VIP6}]:${port}/${proto}`,
      vip: VIP6,
      backends: bes.map((b) => ({ ip: ip6(backends.indexOf(b)), port: targetPort, terminating: false })),
    });
    await writer.update(row6('TCP', 80, 8086, backends));
    await writer.update(row6('UDP', 53, 5356, backends));
    assert.ok(prog.maps.services6.lookup({ vip: VIP6, port: 80, proto: 6 }), 'the IPv6 frontend is in lb6_services');

    const seen = new Map<string, number>();
    for (let i = 0; i < 24; i++) {
      // curl completes the handshake only if the SYN-ACK comes from [VIP]:80 (reverse NAT over IPv6, checksums right).
      const r = client.exec('curl', ['-g', '-sS', '--max-time', '3', `http://[${VIP6}]/`]);
      assert.equal(r.code, 0, r.stderr);
      seen.set(r.stdout.trim(), (seen.get(r.stdout.trim()) ?? 0) + 1);
    }
    assert.deepEqual([...seen.keys()].sort(), ['b1', 'b2', 'b3'], JSON.stringify([...seen]));
    const sports = Array.from({ length: 30 }, (_, i) => 36000 + i);
    const udp = udpProbe6(sports, VIP6);
    assert.ok(udp.every((r) => r.from === `[${VIP6}]:53`), `the client only ever hears [VIP]:53: ${JSON.stringify(udp.slice(0, 3))}`);
    assert.ok(udp.every((r) => r.seen === `2001:db8::1:${r.sport}`), 'the backend sees the client itself (DNAT, no SNAT)');
    assert.equal(new Set(udp.map((r) => r.backend)).size, 3);
    const ct6 = prog.maps.ct6.entries();
    assert.ok(ct6.some(([k]) => k.dir === CT_SERVICE && k.daddr === VIP6 && k.proto === 17));
    assert.ok(ct6.some(([k, e]) => k.dir === CT_EGRESS && k.saddr === '2001:db8::1' && e.natAddr === VIP6 && e.natPort === 80));
    assert.equal(prog.maps.ct4.entries().filter(([k]) => k.daddr === VIP6).length, 0);

    // One backend removed: only its UDP flows move, its ct6 entries are flushed.
    const b3 = ip6(2);
    await writer.update(row6('UDP', 53, 5356, backends.slice(0, 2)));
    assert.equal(prog.maps.ct6.entries().filter(([k, e]) => k.proto === 17 && (k.daddr === b3 || e.natAddr === b3)).length, 0, 'b3\'s flows flushed from ct6');
    const again = udpProbe6(sports, VIP6);
    again.forEach((r, i) => {
      if (udp[i]!.backend !== 'b3') assert.equal(r.backend, udp[i]!.backend, `flow ${r.sport} kept its backend`);
      else assert.notEqual(r.backend, 'b3');
    });

    // ICMPv6 errors of tracked flows: a backend's port unreachable names [VIP]:54 to the client, so its connected socket is refused.
    await writer.update(row6('UDP', 54, 5999, backends));
    const icmpBefore = prog.stats().icmp_xlate!;
    const refused = JSON.parse(client.must('/usr/bin/python3', [PROBE, 'refused', VIP6, '54']));
    assert.deepEqual(refused, { result: 'refused' });
    assert.ok(prog.stats().icmp_xlate! > icmpBefore, 'the ICMPv6 error was translated');
    await writer.delete(row6('UDP', 54, 5999, []));
    await writer.delete(row6('TCP', 80, 8086, []));
    await writer.delete(row6('UDP', 53, 5356, []));
    assert.equal(prog.maps.services6.keys().length, 0, 'frontends and the VIP marker gone');
    assert.equal(prog.maps.ct6.keys().length, 0, 'every IPv6 connection flushed with its service');
    for (const p of procs) await p.stop('SIGTERM', 3000);
  });

  test('a table with room evicts nothing: every entry created is live or was deleted (datapath, GC, flushes) — none counted as evicted', async () => {
    await gc.collect();
    await gc6.collect();
    const st = prog.stats();
    const live = prog.maps.ct4.keys().length + prog.maps.ct6.keys().length;
    assert.ok(st.ct_created! > 100n && st.ct_user_deleted! > 0n, JSON.stringify(st, (_, v) => (typeof v === 'bigint' ? String(v) : v)));
    assert.equal(ctEvictions(st, live), 0, `created ${st.ct_created}, deleted ${st.ct_deleted} + ${st.ct_user_deleted}, live ${live}`);
  });

  test('a full connection table degrades predictably: LRU eviction, every flow answered, the same backend again', async () => {
    // Last: replaces the program on eth0 with one whose ct4 holds 64 entries.
    const node = lab.nodes[0]!;
    const ifindex = node.ifindex('eth0');
    const dir = `${node.pinDir}-small`;
    const small = node.enter(() => {
      const p = LbProgram.load({ pinDir: dir, ctMapSize: 64, maglevSize: M });
      p.attach(ifindex);
      return p;
    });
    try {
      const w = new LbServiceWriter({ maps: small.maps, maglevSize: M, setMaglevTable: (id, t) => small.setMaglevTable(id, t), flush: async () => {} });
      await w.update(row('UDP', 53, 5353, backends));
      const sports = Array.from({ length: 100 }, (_, i) => 27000 + i);
      const first = udpProbe(sports);
      assert.ok(first.every((r) => r.backend !== null && r.from === `${VIP}:53`), 'every flow answered through a full table');
      assert.ok(small.maps.ct4.keys().length <= 64);
      // 100 flows, two entries each (client → VIP, client → backend), in a table of 64: the rest was evicted, and counted.
      const live = small.maps.ct4.keys().length;
      const st = small.stats();
      assert.equal(st.ct_created, 200n, 'every entry created once');
      assert.equal(ctEvictions(st, live), 200 - live, 'whatever is not live was evicted (nothing was deleted)');
      assert.ok(200 - live >= 136);
      // A GC flush of everything: its deletions are not evictions.
      const sgc = new ConntrackGc(small.maps.ct4, { recordDeleted: (n) => small.recordDeleted(n) });
      const f = await sgc.flushWhere(() => true);
      assert.equal(f.deleted, live);
      assert.equal(ctEvictions(small.stats(), small.maps.ct4.keys().length), 200 - live, 'the eviction count is unchanged by a flush');
      // An evicted flow is re-balanced by Maglev: the same hash, the same backend.
      const again = udpProbe(sports);
      assert.deepEqual(again.map((r) => r.backend), first.map((r) => r.backend));
    } finally {
      small.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
