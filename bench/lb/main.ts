/**
 * bench/lb — herald's eBPF L4 load balancer side by side with nftables DNAT +
 * the kernel's conntrack (IPVS is unavailable here), in one lab and one run:
 *
 *   n1  herald: bpf/lb.bpf.c on eth0 (tc ingress DNAT + egress reverse NAT, Maglev), measured
 *       twice: tc only, and XDP+tc (the XDP program in front, redirecting to the backends' veths)
 *   n2  nftables: `dnat to numgen random mod 3 map { … }` at prerouting, kernel conntrack
 *
 * Each node has three routed backend namespaces behind it (bench/lb/server.ts, keep-alive HTTP).
 * wrk runs in the client against each VIP in turn, rounds interleaved, medians reported:
 * keep-alive (requests/s, p99) and a new connection per request (Connection: close).
 * Then, without traffic: a GC pass over 1,000,000 connection entries (half expired)
 * with the longest event-loop block, and the Maglev rebuild for 1,000 backends.
 *
 * And the datapath's cost per packet inside the kernel (BPF_PROG_TEST_RUN, the
 * loaded programs on crafted frames): an established flow's packet at ingress
 * (DNAT) and its reply at egress (reverse NAT), IPv4 and IPv6, and a packet
 * that is not for a service (what every other packet pays).
 *
 *   node --import tsx bench/lb/main.ts [--seconds 5] [--rounds 3] [--connections 32] [--gc-entries 1000000] [--only maglev|gc|traffic|pkt] [--json]
 */
import { spawnSync } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Lab, type Host } from '../../lab/lab.js';
import { ConntrackGc } from '../../src/datapath/lb/ct-gc.js';
import { CT_EGRESS, CT_ENTRY_SIZE, CT_KEY4_SIZE, ct4Codec } from '../../src/datapath/lb/layout.js';
import { maglevTable, movedFraction } from '../../src/datapath/lb/maglev.js';
import { LbProgram, detachLbXdp } from '../../src/datapath/lb/program.js';
import { LbServiceWriter } from '../../src/datapath/lb/services.js';
import { CT_EGRESS as EGRESS } from '../../src/datapath/lb/layout.js';
import { progTestRun } from '../../src/os/prog-test-run.js';
import { ipv4ToBytes, ipv6ToBytes } from '../../src/net/addr.js';

const args = process.argv.slice(2);
const opt = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const SECONDS = opt('seconds', 5);
const ROUNDS = opt('rounds', 3);
const CONNS = opt('connections', 32);
const GC_ENTRIES = opt('gc-entries', 1_000_000);
const JSON_OUT = args.includes('--json');
const SERVER = fileURLToPath(new URL('./server.ts', import.meta.url));
const log = (s: string) => {
  if (!JSON_OUT) process.stderr.write(s + '\n');
};
const VIP_HERALD = '198.51.100.10';
const VIP_NFT = '198.51.100.20';

interface WrkResult {
  rps: number;
  p99Ms: number;
  errors: number;
}

function parseWrk(out: string): WrkResult {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN);
  const p99 = /\s99%\s+([\d.]+)(us|ms|s)/.exec(out);
  const scale = p99?.[2] === 'us' ? 1e-3 : p99?.[2] === 's' ? 1e3 : 1;
  const errs = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  const errors = (errs ? Number(errs[1]) + Number(errs[2]) + Number(errs[3]) + Number(errs[4]) : 0) + non2xx;
  return { rps, p99Ms: Number(p99?.[1] ?? NaN) * scale, errors };
}

function wrk(client: Host, vip: string, close: boolean): WrkResult {
  const a = ['-t', '1', '-c', String(CONNS), '-d', `${SECONDS}s`, '--latency'];
  if (close) a.push('-H', 'Connection: close');
  const r = client.exec('wrk', [...a, `http://${vip}/`]);
  if (r.code !== 0) throw new Error(`wrk failed: ${r.stderr}`);
  return parseWrk(r.stdout);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

type Arm = 'herald-tc' | 'herald-xdp' | 'nftables';
const ARMS: readonly Arm[] = ['herald-tc', 'herald-xdp', 'nftables'];

async function traffic(): Promise<Record<string, unknown>> {
  const lab = Lab.create({ nodes: 2, tag: 'blb' });
  try {
    const [n1, n2] = lab.nodes as [Host, Host];
    // Routed backends (each on its own veth): what XDP can redirect to (a bridge takes no XDP
    // frames); GRO on at n1's backends' ends gives those veths the NAPI context redirected
    // frames need. nftables gets the same topology.
    const b1 = lab.addRoutedBackends(n1, 3, { xdpReady: true });
    const b2 = lab.addRoutedBackends(n2, 3);
    const procs = [...b1, ...b2].map((b) => b.spawn('http', process.execPath, ['--import', 'tsx', SERVER, '--port', '8080', '--name', b.name]));
    for (const p of procs) await p.waitForOutput('listening', 30_000);
    lab.client.must('ip', ['route', 'replace', `${VIP_HERALD}/32`, 'via', n1.ip, 'dev', 'eth0']);
    lab.client.must('ip', ['route', 'replace', `${VIP_NFT}/32`, 'via', n2.ip, 'dev', 'eth0']);
    // Plenty of ephemeral ports and quick reuse for the connection-per-request runs, on both paths alike.
    lab.client.must('sysctl', ['-q', '-w', 'net.ipv4.ip_local_port_range=10000 65000', 'net.ipv4.tcp_tw_reuse=1']);
    // Over veth a socket's packets carry a partial checksum (TX offload) that XDP cannot finish:
    // the client computes full checksums, as a real NIC delivers them (all three arms alike).
    lab.client.must('ethtool', ['-K', 'eth0', 'tx', 'off']);
    // herald on n1: tc always; XDP attached for the herald-xdp arm only.
    const ifindex = n1.ifindex('eth0');
    const targets = b1.map((_b, i) => n1.ifindex(`lbr${i + 1}`));
    const prog = n1.enter(() => {
      const p = LbProgram.load({ pinDir: n1.pinDir, ctMapSize: 262_144, maglevSize: 16381 });
      p.attach(ifindex);
      p.setXdpTargets(targets);
      return p;
    });
    const gc = new ConntrackGc(prog.maps.ct4);
    const writer = new LbServiceWriter({ maps: prog.maps, maglevSize: 16381, setMaglevTable: (id, t) => prog.setMaglevTable(id, t), flush: async (r) => void (await gc.flush(r)) });
    await writer.update({ key: 'k', service: 'bench/web', vip: VIP_HERALD, port: 80, proto: 'TCP', mode: 'dnat', affinity: 'None', affinityTimeoutS: 0, backends: b1.map((b) => ({ ip: b.ip, port: 8080, terminating: false })) });
    // nftables on n2
    const map = b2.map((b, i) => `${i} : ${b.ip}`).join(', ');
    n2.must('nft', ['-f', '-'], `table ip hlb {\n chain pre { type nat hook prerouting priority dstnat; policy accept;\n  ip daddr ${VIP_NFT} tcp dport 80 dnat to numgen random mod 3 map { ${map} } : 8080\n }\n}\n`);
    const xdp = (on: boolean) => n1.enter(() => (on ? prog.attachXdp(ifindex) : void detachLbXdp(ifindex)));
    for (const on of [true, false]) {
      xdp(on);
      for (const vip of [VIP_HERALD, VIP_NFT]) {
        const r = lab.client.exec('curl', ['-sS', '--max-time', '3', `http://${vip}/`]);
        if (r.code !== 0) throw new Error(`warm-up to ${vip} (XDP ${on}) failed: ${r.stderr}`);
      }
    }
    const res: Record<Arm, Record<'keepalive' | 'close', WrkResult[]>> = {
      'herald-tc': { keepalive: [], close: [] },
      'herald-xdp': { keepalive: [], close: [] },
      nftables: { keepalive: [], close: [] },
    };
    const xdpForwarded: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      for (const mode of ['keepalive', 'close'] as const) {
        const order = [...ARMS.slice(round % 3), ...ARMS.slice(0, round % 3)]; // rotated each round
        for (const who of order) {
          xdp(who === 'herald-xdp');
          const x0 = Number(prog.stats().xdp_forwarded);
          const r = wrk(lab.client, who === 'nftables' ? VIP_NFT : VIP_HERALD, mode === 'close');
          if (who === 'herald-xdp') xdpForwarded.push(Number(prog.stats().xdp_forwarded) - x0);
          res[who][mode].push(r);
          log(`round ${round + 1} ${mode.padEnd(9)} ${who.padEnd(10)} ${r.rps.toFixed(0).padStart(7)} req/s  p99 ${r.p99Ms.toFixed(2)} ms  errors ${r.errors}`);
        }
      }
    }
    xdp(false);
    const summary: Record<string, unknown> = {};
    for (const mode of ['keepalive', 'close'] as const) {
      const m = (who: Arm) => ({ rps: median(res[who][mode].map((x) => x.rps)), p99Ms: median(res[who][mode].map((x) => x.p99Ms)), errors: res[who][mode].reduce((a, x) => a + x.errors, 0) });
      const tc = m('herald-tc');
      const xd = m('herald-xdp');
      const nf = m('nftables');
      summary[mode] = {
        'herald-tc': tc,
        'herald-xdp': xd,
        nftables: nf,
        xdpOverTc: { rps: xd.rps / tc.rps, p99: xd.p99Ms / tc.p99Ms },
        tcOverNft: { rps: tc.rps / nf.rps, p99: tc.p99Ms / nf.p99Ms },
        xdpOverNft: { rps: xd.rps / nf.rps, p99: xd.p99Ms / nf.p99Ms },
      };
    }
    summary['xdpForwardedPerRun'] = xdpForwarded;
    summary['heraldStats'] = Object.fromEntries(Object.entries(prog.stats()).map(([k, v]) => [k, Number(v)]));
    prog.dispose();
    return summary;
  } finally {
    await lab.destroy();
  }
}

async function gcBench(): Promise<Record<string, unknown>> {
  const lab = Lab.create({ nodes: 1, tag: 'bgc' });
  try {
    const n1 = lab.nodes[0]!;
    const size = Math.ceil(GC_ENTRIES * 1.1);
    const prog = LbProgram.load({ pinDir: n1.pinDir, ctMapSize: size, maglevSize: 251 });
    try {
      const map = prog.maps.ct4;
      const now = process.hrtime.bigint();
      const chunk = 50_000;
      const fillStart = performance.now();
      for (let base = 0; base < GC_ENTRIES; base += chunk) {
        const n = Math.min(chunk, GC_ENTRIES - base);
        const keys = Buffer.alloc(n * CT_KEY4_SIZE);
        const values = Buffer.alloc(n * CT_ENTRY_SIZE);
        for (let i = 0; i < n; i++) {
          const id = base + i;
          const k = ct4Codec.encodeKey({ saddr: `192.0.${2 + ((id >> 16) & 1)}.${(id >> 8) & 255}`, daddr: '203.0.113.130', sport: 1024 + (id & 255) + ((id >> 17) << 8), dport: 8080, proto: 6, dir: CT_EGRESS });
          k.copy(keys, i * CT_KEY4_SIZE);
          // Half expired (even ids), half alive for an hour.
          const expires = id % 2 === 0 ? now - 1_000_000_000n : now + 3_600_000_000_000n;
          values.writeBigUInt64LE(expires, i * CT_ENTRY_SIZE);
          values.writeUInt32LE(1 + (id % 3), i * CT_ENTRY_SIZE + 40);
        }
        map.updateBatch(keys, values, n);
      }
      const filled = map.info();
      log(`gc: filled ${GC_ENTRIES} entries in ${(performance.now() - fillStart).toFixed(0)} ms (map max ${filled.maxEntries})`);
      const h = monitorEventLoopDelay({ resolution: 1 });
      h.enable();
      // A 1 ms ticker: the longest gap between ticks is the longest event-loop block.
      let last = performance.now();
      let maxGap = 0;
      const tick = setInterval(() => {
        const t = performance.now();
        maxGap = Math.max(maxGap, t - last);
        last = t;
      }, 1);
      const gc = new ConntrackGc(map); // default batch (1024)
      const r = await gc.collect();
      clearInterval(tick);
      h.disable();
      log(
        `gc: pass over ${r.scanned} entries deleted ${r.deleted} in ${r.durationMs.toFixed(0)} ms wall / ${r.cpuMs.toFixed(0)} ms CPU; ` +
          `longest batch ${r.maxBlockMs.toFixed(1)} ms wall / ${r.maxBlockCpuMs.toFixed(1)} ms CPU; event loop max delay ${(h.max / 1e6).toFixed(1)} ms, max tick gap ${maxGap.toFixed(1)} ms`,
      );
      return { entries: GC_ENTRIES, scanned: r.scanned, deleted: r.deleted, passMs: r.durationMs, passCpuMs: r.cpuMs, maxBatchMs: r.maxBlockMs, maxBatchCpuMs: r.maxBlockCpuMs, eventLoopMaxDelayMs: h.max / 1e6, maxTickGapMs: maxGap };
    } finally {
      prog.dispose();
    }
  } finally {
    await lab.destroy();
  }
}

/** An Ethernet frame carrying a TCP ACK (checksums are not checked on this path). */
function tcpFrame(src: string, dst: string, sport: number, dport: number, flags = 0x10): Buffer {
  const v6 = src.includes(':');
  const ip = v6 ? Buffer.alloc(40) : Buffer.alloc(20);
  if (v6) {
    ip[0] = 0x60;
    ip.writeUInt16BE(20, 4);
    ip[6] = 6;
    ip[7] = 64;
    ipv6ToBytes(src).copy(ip, 8);
    ipv6ToBytes(dst).copy(ip, 24);
  } else {
    ip[0] = 0x45;
    ip.writeUInt16BE(40, 2);
    ip[8] = 64;
    ip[9] = 6;
    ipv4ToBytes(src).copy(ip, 12);
    ipv4ToBytes(dst).copy(ip, 16);
  }
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(sport, 0);
  tcp.writeUInt16BE(dport, 2);
  tcp[12] = 5 << 4;
  tcp[13] = flags; // ACK by default; 0x02 for a SYN
  const eth = Buffer.from([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, ...(v6 ? [0x86, 0xdd] : [0x08, 0x00])]);
  return Buffer.concat([eth, ip, tcp, Buffer.alloc(64)]);
}

async function pktBench(): Promise<Record<string, unknown>> {
  const lab = Lab.create({ nodes: 1, tag: 'bpk' });
  try {
    const n1 = lab.nodes[0]!;
    const prog = LbProgram.load({ pinDir: n1.pinDir, ctMapSize: 65536, maglevSize: 251 });
    try {
      const writer = new LbServiceWriter({ maps: prog.maps, maglevSize: 251, setMaglevTable: (id, t) => prog.setMaglevTable(id, t), flush: async () => {} });
      const base = { service: 'default/bench', proto: 'TCP' as const, mode: 'dnat' as const, affinity: 'None' as const, affinityTimeoutS: 0, port: 80 };
      await writer.update({ ...base, key: '198.51.100.10:80/TCP', vip: '198.51.100.10', backends: [130, 131, 132].map((i) => ({ ip: `203.0.113.${i}`, port: 8080, terminating: false })) });
      await writer.update({ ...base, key: '[2001:db8:100::10]:80/TCP', vip: '2001:db8:100::10', backends: [1, 2, 3].map((i) => ({ ip: `2001:db8:1::${i}`, port: 8080, terminating: false })) });
      // One run per call: a repeated run works on the same skb, which the first run already
      // rewrote (the VIP is gone from it), so repeats would measure the pass-through path.
      // The kernel times each run (ktime around it: a few tens of ns of its own, the same for all).
      const CALLS = 20_000;
      const out: Record<string, unknown> = {};
      const measure = (name: string, fd: number, frame: Buffer) => {
        progTestRun(fd, frame, 1); // the first packet creates the flow's entries
        const ns: number[] = [];
        for (let i = 0; i < CALLS; i++) ns.push(progTestRun(fd, frame, 1).durationNs);
        ns.sort((a, b) => a - b);
        const p50 = ns[Math.floor(CALLS / 2)]!;
        out[name] = p50;
        log(`per packet: ${name.padEnd(24)} ${p50.toFixed(0)} ns (median of ${CALLS} single runs)`);
      };
      for (const [fam, client, vip, ct] of [
        ['ipv4', '192.0.2.1', '198.51.100.10', prog.maps.ct4],
        ['ipv6', '2001:db8::1', '2001:db8:100::10', prog.maps.ct6],
      ] as const) {
        measure(`${fam} ingress DNAT`, prog.ingressFd, tcpFrame(client, vip, 40000, 80));
        const e = ct.entries().find(([k]) => k.dir === EGRESS && k.sport === 40000);
        if (!e) throw new Error(`${fam}: no connection entry after the first packet`);
        measure(`${fam} egress reverse NAT`, prog.egressFd, tcpFrame(e[0].daddr, client, e[0].dport, 40000));
        measure(`${fam} not a service`, prog.ingressFd, tcpFrame(client, fam === 'ipv4' ? '192.0.2.99' : '2001:db8::99', 40001, 80));
      }
      // A new connection's first packet (a SYN: two ct misses, the backend pick, two inserts), a
      // fresh source for every run, by selection algorithm — and in SNAT mode (a third insert: the
      // port reservation). The table is flushed between cases (same fill for each).
      prog.setSnatAddress('192.0.2.11');
      const NEW = 20_000;
      const measureNew = (name: string, vip: string, clientOf: (i: number) => string) => {
        for (const [k] of prog.maps.ct4.entries()) prog.maps.ct4.delete(k);
        const ns: number[] = [];
        for (let i = 0; i < NEW; i++) ns.push(progTestRun(prog.ingressFd, tcpFrame(clientOf(i), vip, 1024 + (i % 60000), 80, 0x02), 1).durationNs);
        ns.sort((a, b) => a - b);
        const p50 = ns[Math.floor(NEW / 2)]!;
        const p99 = ns[Math.floor(NEW * 0.99)]!;
        out[name] = { p50, p99 };
        log(`new connection: ${name.padEnd(22)} ${p50.toFixed(0)} ns median, p99 ${p99.toFixed(0)} ns (${NEW} SYNs, each a new flow)`);
      };
      const bes = [130, 131, 132].map((i) => ({ ip: `203.0.113.${i}`, port: 8080, terminating: false }));
      for (const algorithm of ['maglev', 'random', 'round-robin'] as const) {
        await writer.update({ ...base, algorithm, key: '198.51.100.10:80/TCP', vip: '198.51.100.10', backends: bes });
        measureNew(`ipv4 ${algorithm}`, '198.51.100.10', (i) => `192.0.2.${1 + Math.floor(i / 60000)}`);
      }
      await writer.update({ ...base, mode: 'snat', key: '198.51.100.11:80/TCP', vip: '198.51.100.11', backends: bes });
      measureNew('ipv4 maglev snat', '198.51.100.11', (i) => `192.0.2.${1 + Math.floor(i / 60000)}`);

      // tc vs XDP on the whole forward path: routed backends with resolved neighbours, so both
      // get a FIB answer and send the packet on themselves (tc: bpf_redirect; XDP: XDP_REDIRECT
      // through lb_xdp_targets). Run in n1's namespace (the FIB is per namespace), XDP with
      // ctx->ingress_ifindex = eth0. The kernel times the program only: what XDP saves besides
      // (no skb allocated for the packets it sends on) shows on the wire, not here.
      const routed = lab.addRoutedBackends(n1, 3, { xdpReady: true });
      for (const b of routed) n1.must('ping', ['-c', '1', '-W', '2', b.ip]);
      const targets = routed.map((_b, i) => n1.ifindex(`lbr${i + 1}`));
      n1.enter(() => prog.setXdpTargets(targets)); // a devmap checks the interfaces in the writer's namespace
      const eth0 = n1.ifindex('eth0');
      await writer.update({ ...base, key: '198.51.100.10:80/TCP', vip: '198.51.100.10', backends: bes });
      const fwd = (name: string, run: (frame: Buffer) => { retval: number; durationNs: number }, frameOf: (i: number) => Buffer, expect: number, fresh: boolean) => {
        for (const [k] of prog.maps.ct4.entries()) prog.maps.ct4.delete(k);
        const first = n1.enter(() => run(frameOf(0)));
        if (first.retval !== expect) throw new Error(`${name}: return code ${first.retval}, expected ${expect}`);
        const n = fresh ? NEW : CALLS;
        const ns = n1.enter(() => {
          const xs: number[] = [];
          for (let i = 1; i <= n; i++) xs.push(run(frameOf(fresh ? i : 0)).durationNs);
          return xs;
        });
        ns.sort((a, b) => a - b);
        const p50 = ns[Math.floor(n / 2)]!;
        const p99 = ns[Math.floor(n * 0.99)]!;
        out[name] = { p50, p99 };
        log(`forward path: ${name.padEnd(30)} ${p50.toFixed(0)} ns median, p99 ${p99.toFixed(0)} ns (${n} runs)`);
      };
      const tcRun = (f: Buffer) => progTestRun(prog.ingressFd, f, 1, { skbIfindex: eth0 });
      const xdpRun = (f: Buffer) => progTestRun(prog.xdpFd, f, 1, { xdpIngressIfindex: eth0 });
      const TC_ACT_REDIRECT = 7;
      const XDP_REDIRECT = 4;
      const XDP_PASS = 2;
      const est = () => tcpFrame('192.0.2.1', '198.51.100.10', 40000, 80);
      const syn = (i: number) => tcpFrame(`192.0.2.${1 + Math.floor(i / 60000)}`, '198.51.100.10', 1024 + (i % 60000), 80, 0x02);
      fwd('tc established', tcRun, est, TC_ACT_REDIRECT, false);
      fwd('xdp established', xdpRun, est, XDP_REDIRECT, false);
      fwd('tc new connection', tcRun, syn, TC_ACT_REDIRECT, true);
      fwd('xdp new connection', xdpRun, syn, XDP_REDIRECT, true);
      // What a packet that is not for a service pays in front of tc with XDP on (then tc's own cost too).
      fwd('xdp not a service (pass)', xdpRun, () => tcpFrame('192.0.2.1', '192.0.2.99', 40001, 80), XDP_PASS, false);
      return out;
    } finally {
      prog.dispose();
    }
  } finally {
    await lab.destroy();
  }
}

function maglevBench(): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const m of [16381, 65537]) {
    const backends = Array.from({ length: 1000 }, (_, i) => ({ key: `10.${i >> 8}.${i & 255}.1:8080/TCP`, id: i + 1 }));
    maglevTable(backends, m); // warm-up
    const times: number[] = [];
    let table: Uint32Array = new Uint32Array(0);
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      table = maglevTable(backends, m);
      times.push(performance.now() - t0);
    }
    const moved = movedFraction(table, maglevTable(backends.slice(1), m));
    out[`M${m}`] = { backends: 1000, rebuildMs: median(times), movedOnRemoval: moved, idealMoved: 1 / 1000 };
    log(`maglev M=${m}: rebuild 1000 backends ${median(times).toFixed(1)} ms (median of 5); one removal moves ${(moved * 100).toFixed(2)} % of slots (1/N = 0.10 %)`);
  }
  for (const n of [3, 10, 100]) {
    const backends = Array.from({ length: n }, (_, i) => ({ key: `b${i}`, id: i + 1 }));
    const moved = movedFraction(maglevTable(backends, 16381), maglevTable(backends.slice(1), 16381));
    out[`N${n}`] = { movedOnRemoval: moved, idealMoved: 1 / n };
    log(`maglev M=16381 N=${n}: one removal moves ${(moved * 100).toFixed(2)} % (1/N = ${(100 / n).toFixed(2)} %)`);
  }
  return out;
}

const ONLY0 = args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined;
if (ONLY0 !== 'pkt' && spawnSync('wrk', ['--version']).error) throw new Error('wrk is missing: run scripts/setup.sh');
const result: Record<string, unknown> = {};
result['loadAverage'] = (await import('node:os')).loadavg();
log(`load average ${(result['loadAverage'] as number[]).map((x) => x.toFixed(1)).join(' ')} on ${(await import('node:os')).cpus().length} CPUs (timings are inflated on a shared machine)`);
const ONLY = args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined;
if (!ONLY || ONLY === 'maglev') result['maglev'] = maglevBench();
if (!ONLY || ONLY === 'gc') result['gc'] = await gcBench();
if (!ONLY || ONLY === 'pkt') result['perPacketNs'] = await pktBench();
if (!ONLY || ONLY === 'traffic') result['traffic'] = await traffic();
const t = result['traffic'] as Record<string, Record<string, { rps: number; p99Ms: number }>> | undefined;
if (JSON_OUT) process.stdout.write(JSON.stringify(result, null, 2) + '\n');
else if (t) {
  for (const mode of ['keepalive', 'close']) {
    const x = t[mode]!;
    const arm = (k: string) => `${k} ${x[k]!.rps.toFixed(0)} req/s p99 ${x[k]!.p99Ms.toFixed(2)} ms`;
    const ratio = (k: string) => `${(x[k] as unknown as { rps: number }).rps.toFixed(2)}× req/s, ${(x[k] as unknown as { p99: number }).p99.toFixed(2)}× p99`;
    process.stdout.write(`${mode.padEnd(9)}  ${arm('herald-tc')} | ${arm('herald-xdp')} | ${arm('nftables')}\n`);
    process.stdout.write(`${' '.repeat(11)}XDP/tc ${ratio('xdpOverTc')} | tc/nft ${ratio('tcOverNft')} | XDP/nft ${ratio('xdpOverNft')}\n`);
  }
}
process.exit(0);
