/**
 * The load balancer's XDP path (`--lb-xdp`) in a real kernel: native XDP on the
 * node's eth0 (a veth) in front of the tc programs, the same maps. Backends are
 * routed, each on its own veth (lab.addRoutedBackends, GRO on at the backend's
 * end so the veth takes redirected XDP frames), the redirect targets written
 * into lb_xdp_targets. Asserted with real traffic: curl and UDP through the
 * VIP (IPv4 and IPv6) handled by XDP (its counter), the same Maglev choice
 * and conntrack stickiness as tc (flows cross from one path to the other), a
 * policed service IP left to the tc policy (default deny holds), ARP/NDP
 * still answered, the agent's stop leaving no XDP program; and
 * BPF_PROG_TEST_RUN on crafted frames for the rewriting itself (checksums
 * recomputed from scratch, TTL, MACs, the entries tc would write).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Lab, waitFor, type Host } from '../../lab/lab.js';
import { HERALD, labSkipReason, startAgentReady, tcAttached } from '../helpers/lab-tools.js';
import { LbProgram, detachLbXdp, lbXdpProgramId } from '../../src/datapath/lb/program.js';
import { LbServiceWriter } from '../../src/datapath/lb/services.js';
import { ConntrackGc } from '../../src/datapath/lb/ct-gc.js';
import { CT_EGRESS, CT_SERVICE } from '../../src/datapath/lb/layout.js';
import type { LbServiceRow } from '../../src/datapath/tables/lb-services.js';
import { PolicyProgram } from '../../src/datapath/policy/program.js';
import { progTestRun } from '../../src/os/prog-test-run.js';
import { ipv4ToBytes, ipv6ToBytes } from '../../src/net/addr.js';

const VIP = '198.51.100.30';
const VIP_POLICED = '198.51.100.31';
const VIP6 = '2001:db8:100::30';
const CLIENT6 = '2001:db8::1';
const NODE6 = '2001:db8::11';
const PROBE = fileURLToPath(new URL('../tools/lb_probe.py', import.meta.url));
const HTTP = fileURLToPath(new URL('../../lab/http-server.ts', import.meta.url));
const UDP = fileURLToPath(new URL('../../lab/udp-echo.ts', import.meta.url));
const M = 251;
const XDP_TX = 3;
const XDP_REDIRECT = 4;
const XDP_PASS = 2;

type Probe = { sport: number; backend: string | null; seen: string | null; from: string | null };

/** Ones' complement sum of 16-bit words, folded. */
function csum(buf: Buffer, init = 0): number {
  let s = init;
  for (let i = 0; i + 1 < buf.length; i += 2) s += buf.readUInt16BE(i);
  if (buf.length % 2) s += buf[buf.length - 1]! << 8;
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** An Ethernet + IPv4 + TCP (SYN) frame with correct checksums. */
function tcp4Frame(src: string, dst: string, sport: number, dport: number, ttl = 64): Buffer {
  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip.writeUInt16BE(40, 2);
  ip.writeUInt16BE(0x1234, 4);
  ip[8] = ttl;
  ip[9] = 6;
  ipv4ToBytes(src).copy(ip, 12);
  ipv4ToBytes(dst).copy(ip, 16);
  ip.writeUInt16BE(~csum(ip) & 0xffff, 10);
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(sport, 0);
  tcp.writeUInt16BE(dport, 2);
  tcp.writeUInt32BE(0x01020304, 4);
  tcp[12] = 5 << 4;
  tcp[13] = 0x02;
  tcp.writeUInt16BE(0xffff, 14);
  tcp.writeUInt16BE(tcpChecksum(ip, tcp), 16);
  const eth = Buffer.from([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00]);
  return Buffer.concat([eth, ip, tcp]);
}

function tcpChecksum(ip: Buffer, tcp: Buffer): number {
  const t = Buffer.from(tcp);
  t.writeUInt16BE(0, 16);
  const pseudo = Buffer.concat([ip.subarray(12, 20), Buffer.from([0, 6]), Buffer.from([0, t.length])]);
  return ~csum(t, csum(pseudo)) & 0xffff;
}

/** Ethernet + IPv6 + TCP SYN with a correct checksum. */
function tcp6Frame(src: string, dst: string, sport: number, dport: number): Buffer {
  const ip = Buffer.alloc(40);
  ip[0] = 0x60;
  ip.writeUInt16BE(20, 4);
  ip[6] = 6;
  ip[7] = 64;
  ipv6ToBytes(src).copy(ip, 8);
  ipv6ToBytes(dst).copy(ip, 24);
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(sport, 0);
  tcp.writeUInt16BE(dport, 2);
  tcp[12] = 5 << 4;
  tcp[13] = 0x02;
  tcp.writeUInt16BE(0xffff, 14);
  tcp.writeUInt16BE(tcp6Checksum(ip, tcp), 16);
  return Buffer.concat([Buffer.from([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd]), ip, tcp]);
}

function tcp6Checksum(ip: Buffer, tcp: Buffer): number {
  const t = Buffer.from(tcp);
  t.writeUInt16BE(0, 16);
  const pseudo = Buffer.concat([ip.subarray(8, 40), Buffer.from([0, 0, 0, t.length, 0, 0, 0, 6])]);
  return ~csum(t, csum(pseudo)) & 0xffff;
}

/** Ethernet + IPv4 + UDP without a checksum (0: none). */
function udp4NoChecksum(src: string, dst: string, sport: number, dport: number): Buffer {
  const f = tcp4Frame(src, dst, sport, dport);
  const ip = f.subarray(14, 34);
  ip[9] = 17;
  ip.writeUInt16BE(28 + 8, 2);
  ip.writeUInt16BE(0, 10);
  ip.writeUInt16BE(~csum(ip) & 0xffff, 10);
  const udp = Buffer.alloc(16);
  udp.writeUInt16BE(sport, 0);
  udp.writeUInt16BE(dport, 2);
  udp.writeUInt16BE(16, 4);
  return Buffer.concat([f.subarray(0, 34), udp]);
}

describe('eBPF load balancer: the XDP path (XDP+tc)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let client: Host;
  let node: Host;
  let backends: Host[];
  let prog: LbProgram | undefined;
  let policy: PolicyProgram | undefined;
  let gc: ConntrackGc;
  let gc6: ConntrackGc;
  let writer: LbServiceWriter;
  let ifindex: number;
  const policyDir = () => join(node.pinDir, 'policy');
  const ip6 = (i: number) => `2001:db8:1::${10 + i}`;
  const row = (vip: string, proto: 'TCP' | 'UDP', port: number, targetPort: number, ips: string[], extra: Partial<LbServiceRow> = {}): LbServiceRow => ({
    key: `${vip.includes(':') ? `[${vip}]` : vip}:${port}/${proto}`,
    service: 'default/xdp',
    vip,
    port,
    proto,
    mode: 'dnat',
    affinity: 'None',
    affinityTimeoutS: 0,
    backends: ips.map((ip) => ({ ip, port: targetPort, terminating: false })),
    ...extra,
  });
  const v4 = (n = 3) => backends.slice(0, n).map((b) => b.ip);
  const probe = (vip: string, port: number, sports: number[]): Probe[] => JSON.parse(client.must('/usr/bin/python3', [PROBE, 'udp', vip, String(port), ...sports.map(String)]));
  const xdpCount = () => Number(prog!.stats().xdp_forwarded);
  const attachXdp = () => node.enter(() => prog!.attachXdp(ifindex));
  const detachXdp = () => node.enter(() => detachLbXdp(ifindex));
  const flushAll = async () => void (await Promise.all([gc.flushWhere(() => true), gc6.flushWhere(() => true)]));
  const xdpOnLink = (): boolean => {
    const j = JSON.parse(node.must('ip', ['-j', 'link', 'show', 'dev', 'eth0'])) as Array<{ xdp?: unknown }>;
    return j[0]?.xdp !== undefined;
  };

  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'lbx' });
    client = lab.client;
    node = lab.nodes[0]!;
    backends = lab.addRoutedBackends(node, 4, { xdpReady: true });
    client.must('ip', ['-6', 'addr', 'add', `${CLIENT6}/64`, 'dev', 'eth0', 'nodad']);
    node.must('ip', ['-6', 'addr', 'add', `${NODE6}/64`, 'dev', 'eth0', 'nodad']);
    node.must('sysctl', ['-q', '-w', 'net.ipv6.conf.all.forwarding=1']);
    backends.forEach((b, i) => {
      node.must('ip', ['-6', 'addr', 'add', '2001:db8:1::1/128', 'peer', `${ip6(i)}/128`, 'dev', `lbr${i + 1}`, 'nodad']);
      b.must('ip', ['-6', 'addr', 'add', `${ip6(i)}/128`, 'peer', '2001:db8:1::1/128', 'dev', 'eth0', 'nodad']);
      b.must('ip', ['-6', 'route', 'add', 'default', 'via', '2001:db8:1::1', 'dev', 'eth0', 'onlink']); // onlink: no wait for the peer route
    });
    client.must('ip', ['route', 'replace', '198.51.100.0/24', 'via', node.ip, 'dev', 'eth0']);
    client.must('ip', ['-6', 'route', 'replace', '2001:db8:100::/64', 'via', NODE6, 'dev', 'eth0']);
    // A socket's packets over veth carry a partial checksum (TX offload: the sum is left to a NIC
    // that never comes). XDP sees the bytes only; a redirected frame is checked in full by the
    // backend. A real NIC hands XDP complete checksums: here the client computes them itself.
    client.must('ethtool', ['-K', 'eth0', 'tx', 'off']);
    const procs = backends.flatMap((b) => [
      b.spawn('http', process.execPath, ['--import', 'tsx', HTTP, '--port', '8080', '--name', b.name, '--host', '::']),
      b.spawn('udp', process.execPath, ['--import', 'tsx', UDP, '--port', '5353', '--name', b.name]),
    ]);
    for (const p of procs) await p.waitForOutput('listening', 30_000);
    // Neighbours resolved (the FIB answers with MACs only then; else XDP passes to tc).
    backends.forEach((b, i) => {
      node.must('ping', ['-c', '1', '-W', '2', b.ip]);
      node.must('ping', ['-6', '-c', '1', '-W', '2', ip6(i)]);
    });
    ifindex = node.ifindex('eth0');
    const targets = backends.map((_b, i) => node.ifindex(`lbr${i + 1}`));
    ({ prog, policy } = node.enter(() => {
      const policy = PolicyProgram.load({ pinDir: policyDir() });
      policy.attach(ifindex);
      const p = LbProgram.load({ pinDir: node.pinDir, ctMapSize: 4096, maglevSize: M, policyPinDir: policyDir() });
      p.attach(ifindex);
      p.setXdpTargets(targets);
      p.attachXdp(ifindex);
      return { prog: p, policy };
    }));
    gc = new ConntrackGc(prog.maps.ct4, { batchSize: 64, recordDeleted: (n) => prog!.recordDeleted(n) });
    gc6 = new ConntrackGc(prog.maps.ct6, { batchSize: 64, recordDeleted: (n) => prog!.recordDeleted(n) });
    const pr = prog;
    writer = new LbServiceWriter({
      maps: pr.maps,
      maglevSize: M,
      setMaglevTable: (id, t) => pr.setMaglevTable(id, t),
      flush: async (r) => void (await Promise.all([gc.flush(r), gc6.flush(r)])),
    });
    await writer.update(row(VIP, 'TCP', 80, 8080, v4()));
    await writer.update(row(VIP, 'UDP', 53, 5353, v4()));
    await writer.update(row(VIP6, 'TCP', 80, 8080, [0, 1, 2].map(ip6)));
    await writer.update(row(VIP_POLICED, 'TCP', 80, 8080, v4()));
  });

  after(async () => {
    prog?.dispose();
    policy?.dispose();
    await lab?.destroy();
  });

  test('curl through the VIP (IPv4 and IPv6) reaches every backend through XDP', async () => {
    assert.ok(xdpOnLink(), 'an XDP program on eth0');
    for (const vip of [VIP, `[${VIP6}]`]) {
      const before = xdpCount();
      const seen = new Set<string>();
      for (let i = 0; i < 24; i++) {
        const r = client.exec('curl', ['-sS', '--max-time', '3', `http://${vip}/`]);
        assert.equal(r.code, 0, `${vip}: ${r.stderr}`);
        seen.add(r.stdout.trim().split(/\s+/)[0]!);
      }
      assert.deepEqual([...seen].sort(), ['b1', 'b2', 'b3'], `${vip}: ${[...seen]}`);
      // Every request's forward packets (SYN, ACK, request, FIN, ACK: ≥ 4) went through XDP.
      assert.ok(xdpCount() - before >= 24 * 4, `${vip}: XDP forwarded ${xdpCount() - before} packets`);
    }
  });

  test('UDP: the same Maglev choice as tc, and connections cross between the paths on their backend', async () => {
    const sports = Array.from({ length: 30 }, (_, i) => 32000 + i);
    const before = xdpCount();
    const viaXdp = probe(VIP, 53, sports).map((p) => p.backend);
    assert.ok(viaXdp.every((b) => b !== null), JSON.stringify(viaXdp));
    assert.ok(xdpCount() - before >= 30, 'the datagrams went through XDP');
    assert.ok(new Set(viaXdp).size === 3, `all backends: ${viaXdp}`);
    // Forget them, take XDP away: tc alone picks the same backends.
    await flushAll();
    detachXdp();
    assert.ok(!xdpOnLink());
    const beforeTc = xdpCount();
    const viaTc = probe(VIP, 53, sports).map((p) => p.backend);
    assert.deepEqual(viaTc, viaXdp, 'Maglev: the same flow, the same backend on both paths');
    assert.equal(xdpCount(), beforeTc, 'tc alone: XDP forwarded nothing');
    // Established under tc; a fourth backend moves ~1/4 of new flows; XDP keeps the tracked ones.
    await writer.update(row(VIP, 'UDP', 53, 5353, v4(4)));
    attachXdp();
    const b1 = xdpCount();
    assert.deepEqual(probe(VIP, 53, sports).map((p) => p.backend), viaXdp, 'flows started under tc keep their backend under XDP');
    assert.ok(xdpCount() - b1 >= 30, 'and XDP carried them');
    const fresh = Array.from({ length: 40 }, (_, i) => 33000 + i);
    const freshXdp = probe(VIP, 53, fresh).map((p) => p.backend);
    assert.ok(freshXdp.includes('b4'), `new flows reach the new backend: ${freshXdp}`);
    // Started under XDP; XDP away: tc continues them on the same backend.
    detachXdp();
    assert.deepEqual(probe(VIP, 53, fresh).map((p) => p.backend), freshXdp, 'flows started under XDP keep their backend under tc');
    attachXdp();
    await writer.update(row(VIP, 'UDP', 53, 5353, v4()));
  });

  test('round robin and ClientIP affinity through XDP: the same state as tc keeps', async () => {
    await flushAll();
    await writer.update(row(VIP, 'UDP', 53, 5353, v4(), { algorithm: 'round-robin' }));
    const x0 = xdpCount();
    const rr = probe(VIP, 53, Array.from({ length: 9 }, (_, i) => 34000 + i)).map((p) => p.backend);
    assert.ok(xdpCount() - x0 >= 9, 'through XDP');
    for (let i = 0; i + 1 < rr.length; i++) assert.notEqual(rr[i], rr[i + 1], `strict turn: ${rr}`);
    for (let i = 0; i + 3 < rr.length; i++) assert.equal(rr[i], rr[i + 3], `a cycle of three: ${rr}`);
    await flushAll();
    await writer.update(row(VIP, 'UDP', 53, 5353, v4(), { affinity: 'ClientIP', affinityTimeoutS: 60 }));
    const aff = probe(VIP, 53, Array.from({ length: 12 }, (_, i) => 35000 + i)).map((p) => p.backend);
    assert.equal(new Set(aff).size, 1, `one backend for the client: ${aff}`);
    // The affinity XDP wrote holds for tc too.
    detachXdp();
    assert.deepEqual(probe(VIP, 53, [35100, 35101]).map((p) => p.backend), [aff[0], aff[0]]);
    attachXdp();
    await writer.update(row(VIP, 'UDP', 53, 5353, v4()));
    await flushAll();
  });

  test('a policed service IP is left to the tc policy: default deny holds with XDP on', async () => {
    // The policy's svc_v4 entry with no rule: every source default-denied (the policy's pinned map, shared with XDP).
    policy!.maps.svc4.update(VIP_POLICED, { slot: 2, svcId: 7, gen: 1n });
    try {
      const before = xdpCount();
      for (let i = 0; i < 3; i++) {
        const r = client.exec('curl', ['-sS', '--max-time', '1', `http://${VIP_POLICED}/`]);
        assert.notEqual(r.code, 0, `the policy denies the client, but: ${r.stdout}`);
      }
      assert.equal(xdpCount(), before, 'XDP forwarded nothing to a policed IP');
      assert.ok(policy!.drops().some((d) => d.svcId === 7 && d.packets > 0n), 'the tc policy dropped them');
    } finally {
      policy!.maps.svc4.delete(VIP_POLICED);
    }
    // No policy: the same VIP goes through XDP.
    const before = xdpCount();
    const r = client.exec('curl', ['-sS', '--max-time', '3', `http://${VIP_POLICED}/`]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(xdpCount() > before);
  });

  test('ARP and NDP still answered with XDP on the interface', async () => {
    client.must('ip', ['neigh', 'flush', 'dev', 'eth0']);
    client.must('ip', ['-6', 'neigh', 'flush', 'dev', 'eth0']);
    for (const vip of [VIP, `[${VIP6}]`]) {
      const r = client.exec('curl', ['-sS', '--max-time', '3', `http://${vip}/`]);
      assert.equal(r.code, 0, `${vip}: ${r.stderr}`);
    }
    const n4 = client.must('ip', ['neigh', 'show', node.ip, 'dev', 'eth0']);
    const n6 = client.must('ip', ['-6', 'neigh', 'show', NODE6, 'dev', 'eth0']);
    assert.match(n4, /lladdr/, n4);
    assert.match(n6, /lladdr/, n6);
  });

  test('BPF_PROG_TEST_RUN: XDP rewrites like tc (checksums from scratch, TTL, MACs, the same entries)', async () => {
    await flushAll();
    const frame = tcp4Frame('192.0.2.77', VIP, 41000, 80);
    const x = node.enter(() => progTestRun(prog!.xdpFd, frame, 1, { output: true, xdpIngressIfindex: ifindex }));
    assert.equal(x.retval, XDP_REDIRECT, 'to a backend behind another interface: redirect');
    const out = x.dataOut!;
    const ip = out.subarray(14, 34);
    const tcp = out.subarray(34, 54);
    const backend = `${ip[16]}.${ip[17]}.${ip[18]}.${ip[19]}`;
    assert.ok(v4().includes(backend), backend);
    assert.equal(tcp.readUInt16BE(2), 8080);
    assert.equal(ip[8], 63, 'TTL decremented');
    assert.equal(csum(ip), 0xffff, 'IPv4 header checksum valid');
    assert.equal(tcp.readUInt16BE(16), tcpChecksum(ip, tcp), 'TCP checksum valid');
    const i = v4().indexOf(backend);
    const peerMac = JSON.parse(backends[i]!.must('ip', ['-j', 'link', 'show', 'dev', 'eth0']))[0].address as string;
    const ourMac = JSON.parse(node.must('ip', ['-j', 'link', 'show', 'dev', `lbr${i + 1}`]))[0].address as string;
    const mac = (b: Buffer) => [...b].map((v) => v.toString(16).padStart(2, '0')).join(':');
    assert.equal(mac(out.subarray(0, 6)), peerMac);
    assert.equal(mac(out.subarray(6, 12)), ourMac);
    const entries = () =>
      prog!.maps.ct4
        .entries()
        .filter(([k]) => k.sport === 41000)
        .map(([k, e]) => ({ dir: k.dir, daddr: k.daddr, dport: k.dport, backendId: e.backendId, serviceId: e.serviceId, nat: e.natAddr, natPort: e.natPort, flags: e.flags }))
        .sort((a, b) => a.dir - b.dir);
    const viaXdp = entries();
    assert.deepEqual(viaXdp.map((e) => e.dir), [CT_SERVICE, CT_EGRESS]);
    // The tc program on the same packet, after a flush: the same backend and entries.
    await flushAll();
    const t = node.enter(() => progTestRun(prog!.ingressFd, frame, 1, { output: true, skbIfindex: ifindex }));
    assert.notEqual(t.retval, 2 /* TC_ACT_SHOT */);
    assert.deepEqual(entries(), viaXdp);
    const tip = t.dataOut!.subarray(14, 34);
    assert.deepEqual([...tip.subarray(16, 20)], [...ip.subarray(16, 20)], 'tc chose the same backend');
    assert.equal(t.dataOut!.subarray(34, 54).readUInt16BE(16), tcp.readUInt16BE(16), 'the same TCP checksum as the skb helpers');
    // Left to tc, untouched: a fragment, IPv4 options, a policed IP, ARP, an SNAT service.
    const frag = Buffer.from(frame);
    frag.writeUInt16BE(0x2000, 14 + 6);
    const pass = (f: Buffer, what: string) => {
      const r = node.enter(() => progTestRun(prog!.xdpFd, f, 1, { output: true, xdpIngressIfindex: ifindex }));
      assert.equal(r.retval, XDP_PASS, what);
      assert.deepEqual(r.dataOut, f, `${what}: unchanged`);
    };
    pass(frag, 'a fragment');
    pass(Buffer.concat([Buffer.from([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x06]), Buffer.alloc(28)]), 'ARP');
    pass(tcp4Frame('192.0.2.77', VIP, 41000, 80, 1), 'TTL 1 (the kernel sends time exceeded)');
    policy!.maps.svc4.update(VIP_POLICED, { slot: 2, svcId: 7, gen: 1n });
    pass(tcp4Frame('192.0.2.78', VIP_POLICED, 41001, 80), 'a policed IP');
    policy!.maps.svc4.delete(VIP_POLICED);
    await writer.update(row(VIP_POLICED, 'TCP', 80, 8080, v4(), { mode: 'snat' }));
    pass(tcp4Frame('192.0.2.78', VIP_POLICED, 41002, 80), 'an SNAT service');
    await writer.update(row(VIP_POLICED, 'TCP', 80, 8080, v4()));
    // IPv6: hop limit − 1, the TCP checksum over the new pseudo header valid from scratch.
    const x6 = node.enter(() => progTestRun(prog!.xdpFd, tcp6Frame(CLIENT6, VIP6, 41004, 80), 1, { output: true, xdpIngressIfindex: ifindex }));
    assert.equal(x6.retval, XDP_REDIRECT);
    const ip6h = x6.dataOut!.subarray(14, 54);
    const tcp6 = x6.dataOut!.subarray(54, 74);
    assert.equal(ip6h[7], 63, 'hop limit decremented');
    assert.ok([0, 1, 2].map(ip6).some((a) => ipv6ToBytes(a).equals(ip6h.subarray(24, 40))), 'to a backend');
    assert.equal(tcp6.readUInt16BE(2), 8080);
    assert.equal(tcp6.readUInt16BE(16), tcp6Checksum(ip6h, tcp6), 'TCP checksum valid (IPv6 pseudo header)');
    // IPv4 UDP without a checksum keeps none (0 stays 0).
    const u = node.enter(() => progTestRun(prog!.xdpFd, udp4NoChecksum('192.0.2.80', VIP, 41005, 53), 1, { output: true, xdpIngressIfindex: ifindex }));
    assert.equal(u.retval, XDP_REDIRECT);
    assert.equal(u.dataOut!.readUInt16BE(34 + 2), 5353);
    assert.equal(u.dataOut!.readUInt16BE(34 + 6), 0, 'no UDP checksum stays none');
    assert.equal(csum(u.dataOut!.subarray(14, 34)), 0xffff);
    // A backend back out the interface the packet came in on (here: the client's own address
    // on eth0's segment, its neighbour entry resolved): XDP_TX, MACs from the FIB.
    node.must('ping', ['-c', '1', '-W', '2', client.ip]);
    await writer.update(row('198.51.100.32', 'TCP', 80, 8080, [client.ip]));
    const tx = node.enter(() => progTestRun(prog!.xdpFd, tcp4Frame('192.0.2.79', '198.51.100.32', 41003, 80), 1, { output: true, xdpIngressIfindex: ifindex }));
    assert.equal(tx.retval, XDP_TX);
    const clientMac = JSON.parse(client.must('ip', ['-j', 'link', 'show', 'dev', 'eth0']))[0].address as string;
    const nodeMac = JSON.parse(node.must('ip', ['-j', 'link', 'show', 'dev', 'eth0']))[0].address as string;
    assert.equal(mac(tx.dataOut!.subarray(0, 6)), clientMac);
    assert.equal(mac(tx.dataOut!.subarray(6, 12)), nodeMac);
    assert.equal(csum(tx.dataOut!.subarray(14, 34)), 0xffff);
    await writer.delete(row('198.51.100.32', 'TCP', 80, 8080, [client.ip]));
    await flushAll();
  });

  test('herald agent --lb-xdp: XDP attached with the tc programs, a policed service still denied, gone after a stop and after datapath remove', async () => {
    prog?.dispose();
    prog = undefined;
    policy?.dispose(); // the agent loads its own policy program (the pinned maps stay)
    policy = undefined;
    detachXdp();
    const dir = mkdtempSync(join(tmpdir(), 'herald-lbx-'));
    const svc = (name: string, ip: string) => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, labels: { app: ${name} }, annotations: { lbipam.cilium.io/ips: "${ip}" } }
spec:
  type: LoadBalancer
  ports: [{ name: http, port: 80, targetPort: 8080 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}-1, namespace: default, labels: { kubernetes.io/service-name: ${name} } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints:
${v4().map((ip) => `- { addresses: ["${ip}"], conditions: { ready: true } }`).join('\n')}
`;
    try {
      writeFileSync(
        join(dir, 'intent.yaml'),
        `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: blue }
spec: { blocks: [{ start: 198.51.100.40, stop: 198.51.100.41 }] }
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: lan }
spec: { loadBalancerIPs: true, interfaces: ['^eth0$'] }
---
${svc('web', '198.51.100.40')}---
${svc('locked', '198.51.100.41')}---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: { name: locked-in, namespace: default }
spec:
  endpointSelector: { matchLabels: { app: locked } }
  ingress:
  - fromCIDR: [203.0.113.0/24]
`,
      );
      const agent = await startAgentReady(node, ['--manifests', dir, '--lb-interfaces', 'eth0', '--lb-xdp', '--lb-xdp-targets', 'lbr1,lbr2,lbr3', '--lb-maglev-size', '1021']);
      client.must('ip', ['route', 'replace', '198.51.100.40/32', 'dev', 'eth0']); // on-link: ARP from the responder
      await waitFor(() => client.exec('curl', ['-sS', '--max-time', '1', 'http://198.51.100.40/']).code === 0, { timeoutMs: 15_000, what: 'the VIP to serve' });
      assert.ok(node.enter(() => lbXdpProgramId(ifindex)) !== undefined, 'XDP attached by the agent');
      const status = JSON.parse(node.must(HERALD, ['status', '--json', '--status-socket', node.statusSocket]));
      assert.ok(status.lb.counters.xdp_forwarded > 0, JSON.stringify(status.lb.counters));
      // The policed service: the client is not in its only source range; XDP must leave it to the policy.
      client.must('ip', ['route', 'replace', '198.51.100.41/32', 'dev', 'eth0']);
      await waitFor(() => node.exec(HERALD, ['policy', '--json', '--status-socket', node.statusSocket]).stdout.includes('198.51.100.41'), { timeoutMs: 15_000, what: 'the policy to be realized' });
      const hook = tcAttached(node, 'eth0');
      assert.deepEqual(hook.ingress.tcx.map((p) => p.name), ['herald_l2_ingre', 'herald_policy', 'herald_lb_ingre'], `herald's order on the hook: ${JSON.stringify(hook)}`);
      assert.deepEqual(hook.egress.tcx.map((p) => p.name), ['herald_lb_egres']);
      const counters = () => JSON.parse(node.must(HERALD, ['status', '--json', '--status-socket', node.statusSocket])).lb.counters as Record<string, number>;
      const x0 = counters().xdp_forwarded;
      for (let i = 0; i < 3; i++) assert.notEqual(client.exec('curl', ['-sS', '--max-time', '1', 'http://198.51.100.41/']).code, 0, 'the policy denies the client');
      assert.equal(counters().xdp_forwarded, x0, 'XDP forwarded nothing to the policed IP');
      assert.equal(client.exec('curl', ['-sS', '--max-time', '3', 'http://198.51.100.40/']).code, 0, 'the open service still serves');
      await agent.stop();
      assert.equal(node.enter(() => lbXdpProgramId(ifindex)), undefined, 'no XDP program after the stop');
      assert.ok(!xdpOnLink());
      // The tc programs stay (connections survive a restart): the VIP still serves.
      assert.equal(client.exec('curl', ['-sS', '--max-time', '3', 'http://198.51.100.40/']).code, 0);
      // `herald datapath remove` takes XDP away with the tc programs.
      const again = node.enter(() => {
        const p = LbProgram.load({ pinDir: node.pinDir, ctMapSize: 4096, maglevSize: 1021 });
        p.attachXdp(ifindex);
        return p;
      });
      again.dispose();
      assert.ok(xdpOnLink());
      node.must(HERALD, ['datapath', 'remove', '--bpf-pin-dir', node.pinDir]);
      assert.ok(!xdpOnLink(), 'datapath remove detached XDP');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
