/**
 * The eBPF NDP responder (issue 11) in a real lab: a client and two nodes in
 * network namespaces on a bridge, herald's agent on the nodes, ndisc6, ping,
 * scapy, tcpdump and the client kernel's own neighbour cache as the oracles.
 * Nothing here is faked. Mirrors l2-responder.lab.test.ts for ARP.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Lab, sleep, type Host, type LabProcess } from '../../lab/lab.js';
import { fileURLToPath } from 'node:url';
import { HERALD, addIpv6, entry, labSkipReason, mapDump, ndisc6, ndpCraft, neigh6, startAgentReady, startCapture, stopCapture, waitFor } from '../helpers/lab-tools.js';

const OWNER_WATCH = fileURLToPath(new URL('../../lab/owner-watch-run.ts', import.meta.url));
const CLIENT6 = '2001:db8::1';
const N1_6 = '2001:db8::11';
const N2_6 = '2001:db8::12';
const SERVICES6 = '2001:db8:100::/64';
const VIP = '2001:db8:100::10'; // announced on eth0
const VIP_CRAFT = '2001:db8:100::31'; // the malformed-frame test
const VIP_COUNT = '2001:db8:100::30'; // the counter test
const VIP_CONFLICT = '2001:db8:100::32'; // the conflict test
const VIP_DAD = '2001:db8:100::33'; // the DAD test
const VIP4 = '198.51.100.10'; // dual stack with VIP
const VIP_MV = '2001:db8:100::40'; // on a macvlan
const VIP_MOVE = '2001:db8:100::50'; // moves from n1 to n2
const VIP_UNTRACKED = '2001:db8:100::51'; // moves; the client has no entry for it
const UNKNOWN = '2001:db8:100::99'; // never announced

const skip = labSkipReason();

describe('eBPF NDP responder in a lab', { skip }, () => {
  let lab: Lab;
  let client: Host;
  let n1: Host;
  let n2: Host;
  let agent: LabProcess;
  const baseArgs = [
    '--announce', `${VIP}@eth0`,
    '--announce', `${VIP4}@eth0`,
    '--announce', `${VIP_CRAFT}@eth0`,
    '--announce', `${VIP_COUNT}@eth0`,
    '--announce', `${VIP_CONFLICT}@eth0`,
    '--announce', `${VIP_DAD}@eth0`,
    '--local-routes',
    '--garp-interval', '200ms',
  ];

  before(async () => {
    lab = Lab.create({ nodes: 2, tag: 'ndp' });
    client = lab.client;
    n1 = lab.nodes[0]!;
    n2 = lab.nodes[1]!;
    addIpv6(client, `${CLIENT6}/64`);
    addIpv6(n1, `${N1_6}/64`);
    addIpv6(n2, `${N2_6}/64`);
    // Service addresses are on-link for the client, so it solicits them directly.
    client.must('ip', ['-6', 'route', 'add', SERVICES6, 'dev', 'eth0']);
    agent = await startAgentReady(n1, baseArgs);
  });

  after(async () => {
    await lab?.destroy();
    // The extra agents' pins and state (the lab removes each host's own).
    for (const suffix of ['-mv', '-move']) {
      for (const path of [`${n1.pinDir}${suffix}`, `${n1.stateDir}${suffix}`, `${n1.statusSocket}${suffix}`]) rmSync(path, { recursive: true, force: true });
    }
  });

  test('ndisc6 resolves an owned IPv6 address to the node MAC; an unknown one gets no answer', () => {
    const r = ndisc6(client, VIP);
    assert.equal(r.code, 0, r.output);
    assert.equal(r.mac, n1.mac('eth0'), r.output);
    const none = ndisc6(client, UNKNOWN, { retries: 1 });
    assert.notEqual(none.code, 0, none.output);
    assert.equal(none.mac, '');
  });

  test('ping -6 reaches the owner through the answer, and the client caches the node MAC', () => {
    const r = client.exec('ping', ['-6', '-c', '3', '-i', '0.2', '-W', '1', VIP]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /3 received/);
    assert.equal(neigh6(client, VIP)?.lladdr, n1.mac('eth0'));
  });

  test('the advertisement is RFC 4861 conformant: S and O set, R clear, TLLA, hop limit 255, code 0, correct checksum, to the solicitor', () => {
    const [r] = ndpCraft(client, VIP_CRAFT, 'valid', { src: CLIENT6, count: 1 }).replies;
    assert.ok(r, 'answered');
    assert.deepEqual(
      { S: r.S, O: r.O, R: r.R, code: r.code, hlim: r.hlim, tlla: r.tlla, checksumOk: r.checksumOk, plen: r.plen },
      { S: 1, O: 1, R: 0, code: 0, hlim: 255, tlla: n1.mac('eth0'), checksumOk: true, plen: 32 },
    );
    assert.deepEqual({ src: r.src, dst: r.dst, ethSrc: r.ethSrc, ethDst: r.ethDst }, { src: VIP_CRAFT, dst: CLIENT6, ethSrc: n1.mac('eth0'), ethDst: client.mac('eth0') });
  });

  test('the reply goes to the source link-layer option when present, else to the frame source; unicast NUD is answered', () => {
    const other = ndpCraft(client, VIP_CRAFT, 'other-slla', { src: CLIENT6, count: 1 }).replies;
    assert.deepEqual(other.map((r) => r.ethDst), ['02:00:5e:10:00:77']);
    const bare = ndpCraft(client, VIP_CRAFT, 'no-slla', { src: CLIENT6, count: 1 }).replies;
    assert.deepEqual(bare.map((r) => r.ethDst), [client.mac('eth0')]);
    const nud = ndpCraft(client, VIP_CRAFT, 'unicast', { src: CLIENT6, count: 2, dstMac: n1.mac('eth0') }).replies;
    assert.equal(nud.length, 2);
    assert.ok(nud.every((r) => r.S === 1 && r.dst === CLIENT6 && r.checksumOk));
  });

  test('malformed or misaddressed solicitations are never answered nor counted, and good ones still are after them', () => {
    const before = entry(mapDump(n1), VIP_CRAFT)!.replies;
    const variants = [
      'bad-checksum', 'hop-limit-254', 'code-1', 'option-length-0', 'option-truncated', 'truncated', 'short',
      'multicast-target', 'wrong-group', 'dad-with-slla', 'slla-length-2', 'foreign-unicast',
    ];
    for (const variant of variants) {
      const r = ndpCraft(client, VIP_CRAFT, variant, { src: CLIENT6, count: 3, wait: 0.3 });
      assert.deepEqual(r.replies, [], `${variant} was answered`);
    }
    assert.equal(entry(mapDump(n1), VIP_CRAFT)!.replies, before, 'no reply was counted for malformed frames');
    assert.equal(agent.running, true);
    const control = ndpCraft(client, VIP_CRAFT, 'valid', { src: CLIENT6, count: 2 });
    assert.equal(control.replies.length, 2, 'a well-formed solicitation crafted the same way is answered');
    assert.equal(ndisc6(client, VIP_CRAFT).mac, n1.mac('eth0'));
  });

  test('the reply counter matches the advertisements the client received', () => {
    const before = entry(mapDump(n1), VIP_COUNT)!.replies;
    const r = ndpCraft(client, VIP_COUNT, 'valid', { src: CLIENT6, count: 7 });
    assert.equal(r.replies.length, 7);
    assert.equal(entry(mapDump(n1), VIP_COUNT)!.replies - before, 7);
  });

  test('DAD: a probe for an owned address is answered to all-nodes with Solicited clear, so the prober does not take the address', async () => {
    const [r] = ndpCraft(client, VIP_DAD, 'dad', { src: '::', count: 1 }).replies;
    assert.ok(r, 'answered');
    assert.deepEqual({ dst: r.dst, ethDst: r.ethDst, S: r.S, O: r.O, tlla: r.tlla, checksumOk: r.checksumOk }, { dst: 'ff02::1', ethDst: '33:33:00:00:00:01', S: 0, O: 1, tlla: n1.mac('eth0'), checksumOk: true });
    // The client's own kernel runs DAD for the address and must find it in use.
    // (addIpv6 turned DAD off for the lab's own addresses: turn it back on for this one.)
    client.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.accept_dad=1']);
    client.must('ip', ['-6', 'addr', 'add', `${VIP_DAD}/128`, 'dev', 'eth0']);
    try {
      await waitFor(() => client.must('ip', ['-6', 'addr', 'show', 'dev', 'eth0']).includes('dadfailed'), { what: 'DAD to fail', timeoutMs: 5000 });
    } finally {
      client.must('ip', ['-6', 'addr', 'del', `${VIP_DAD}/128`, 'dev', 'eth0']);
    }
  });

  test('a foreign MAC advertising an owned address increments its conflict counter and is defended with an unsolicited NA', async () => {
    const before = entry(mapDump(n1), VIP_CONFLICT)!.conflicts;
    const capture = await startCapture(client, `icmp6 and ip6[40] == 136 and ether src ${n1.mac('eth0')}`);
    const r = client.exec('/usr/bin/python3', [
      '-c',
      [
        'from scapy.all import *; conf.verb=0',
        `p=Ether(src='02:00:5e:10:00:66',dst='33:33:00:00:00:01')/IPv6(src='${VIP_CONFLICT}',dst='ff02::1',hlim=255)/ICMPv6ND_NA(tgt='${VIP_CONFLICT}',R=0,S=0,O=1)/ICMPv6NDOptDstLLAddr(lladdr='02:00:5e:10:00:66')`,
        "sendp(p,iface='eth0',count=3,inter=0.05)",
      ].join('\n'),
    ]);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(() => entry(mapDump(n1), VIP_CONFLICT)!.conflicts - before === 3, { what: 'three conflicts counted' });
    await sleep(300);
    const lines = await stopCapture(capture);
    assert.ok(lines.some((l) => l.includes(`tgt is ${VIP_CONFLICT}`)), `defended: ${lines.join('\n')}`);
    assert.equal(entry(mapDump(n1), VIP)!.conflicts, 0, 'other entries are untouched');
  });

  test('herald map dump and status list IPv6 entries next to IPv4 ones, with per-family answer counters', () => {
    const r = n1.exec(HERALD, ['map', 'dump', '--bpf-pin-dir', n1.pinDir]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`${VIP4.replace(/\./g, '\\.')}\\s+eth0\\s+\\d+\\s+0`));
    assert.match(r.stdout, new RegExp(`${VIP}\\s+eth0\\s+[1-9]\\d*\\s+0`));
    const st = n1.exec(HERALD, ['status', '--status-socket', n1.statusSocket]);
    assert.equal(st.code, 0, st.stderr);
    assert.match(st.stdout, /answers: ARP \d+, NDP [1-9]\d*/);
    assert.doesNotMatch(st.stdout, /not announced/);
    assert.match(st.stdout, new RegExp(`^  ${VIP}\\s+eth0`, 'm'));
  });

  test('a stale liveness stamp silences NDP answers too, and a fresh one brings them back', async () => {
    assert.equal(ndisc6(client, VIP).mac, n1.mac('eth0'));
    agent.signal('SIGSTOP');
    try {
      await sleep(3500);
      assert.equal(ndisc6(client, VIP, { retries: 1 }).mac, '', 'a frozen agent must go silent');
    } finally {
      agent.signal('SIGCONT');
    }
    await waitFor(() => (mapDump(n1).liveness.ageMs ?? Infinity) < 1500, { what: 'a fresh stamp' });
    assert.equal(ndisc6(client, VIP).mac, n1.mac('eth0'));
  });

  test("a candidate's wire watch hears an IPv6 owner through NS probes, and reports it once its datapath goes silent", async () => {
    const watcher = n2.spawn('owner-watch', process.execPath, ['--import', 'tsx', OWNER_WATCH, '--node', 'n1', '--ip', VIP, '--iface', 'eth0']);
    try {
      await watcher.waitForOutput('watching', 20_000);
      await sleep(1000); // probes answered: the owner is heard
      assert.doesNotMatch(watcher.text(), /silent/, 'a live owner is never reported');
      agent.signal('SIGSTOP'); // its liveness stamp goes stale: the datapath stops answering
      try {
        // Only an owner once heard can be reported: this fails if the probes are never answered.
        await watcher.waitForOutput('silent n1', 15_000);
      } finally {
        agent.signal('SIGCONT');
      }
    } finally {
      await watcher.stop();
    }
    await waitFor(() => (mapDump(n1).liveness.ageMs ?? Infinity) < 1500, { what: 'a fresh stamp' });
  });

  test('on a macvlan the agent joins the solicited-node group, so the solicitation reaches the program', async () => {
    n1.must('ip', ['link', 'add', 'mv0', 'link', 'eth0', 'type', 'macvlan', 'mode', 'bridge']);
    n1.must('ip', ['link', 'set', 'mv0', 'up']);
    const mv = await startAgentReady(n1, ['--node', 'mv', '--bpf-pin-dir', `${n1.pinDir}-mv`, '--state-dir', `${n1.stateDir}-mv`, '--status-socket', `${n1.statusSocket}-mv`, '--announce', `${VIP_MV}@mv0`], 'agent-mv');
    try {
      const r = ndisc6(client, VIP_MV);
      assert.equal(r.mac, n1.mac('mv0'), r.output);
      await waitFor(() => n1.must('ip', ['maddr', 'show', 'dev', 'mv0']).includes('33:33:ff:00:00:40'), { what: 'the group joined on mv0' });
    } finally {
      await mv.stop();
      n1.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', `${n1.pinDir}-mv`]);
    }
    assert.equal(n1.must('ip', ['maddr', 'show', 'dev', 'mv0']).includes('33:33:ff:00:00:40'), false, 'the membership ends with the agent');
    n1.must('ip', ['link', 'del', 'mv0']);
  });

  test('an ownership move: the unsolicited NA burst updates an existing client entry, and creates one only on a router with accept_untracked_na', async () => {
    const moveArgs = ['--announce', `${VIP_MOVE}@eth0`, '--announce', `${VIP_UNTRACKED}@eth0`, '--garp-interval', '200ms'];
    const onN1 = await startAgentReady(n1, ['--node', 'mv1', '--bpf-pin-dir', `${n1.pinDir}-move`, '--state-dir', `${n1.stateDir}-move`, '--status-socket', `${n1.statusSocket}-move`, ...moveArgs], 'agent-move');
    let onN2: LabProcess | undefined;
    try {
      // The client learns n1 for VIP_MOVE; it has no entry for VIP_UNTRACKED.
      assert.equal(ndisc6(client, VIP_MOVE).mac, n1.mac('eth0'));
      // A packet to it makes the client's kernel resolve it (no echo reply needed: no local route here).
      client.exec('ping', ['-6', '-c', '1', '-W', '1', VIP_MOVE]);
      assert.equal(neigh6(client, VIP_MOVE)?.lladdr, n1.mac('eth0'));
      client.exec('ip', ['-6', 'neigh', 'del', VIP_UNTRACKED, 'dev', 'eth0']);
      client.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.accept_untracked_na=0']);

      await onN1.stop('SIGTERM');
      n1.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', `${n1.pinDir}-move`]);
      const capture = await startCapture(client, `icmp6 and ip6[40] == 136 and ether src ${n2.mac('eth0')}`);
      onN2 = await startAgentReady(n2, moveArgs, 'agent-n2');
      await sleep(1200); // the burst: 5 rounds 200 ms apart
      const lines = await stopCapture(capture);
      const burst = lines.filter((l) => l.includes(`tgt is ${VIP_MOVE}`));
      assert.equal(burst.length, 5, lines.join('\n'));
      assert.ok(burst.every((l) => l.includes('33:33:00:00:00:01') && l.includes('> ff02::1')), lines.join('\n'));
      assert.equal(neigh6(client, VIP_MOVE)?.lladdr, n2.mac('eth0'), "the client's existing entry follows the burst");
      assert.equal(neigh6(client, VIP_UNTRACKED), undefined, 'without accept_untracked_na no entry is created');

      // accept_untracked_na=1 alone changes nothing on a host: the kernel
      // (ndisc_recv_na, RFC 9131) creates the entry only when the interface
      // also forwards (a router).
      const burst2 = () => {
        const r = n2.exec(HERALD, ['garp', 'eth0', VIP_UNTRACKED, '--count', '2', '--interval', '100ms']);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /sent 2 frame\(s\), 0 failed/);
      };
      client.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.accept_untracked_na=1']);
      burst2();
      await sleep(200);
      assert.equal(neigh6(client, VIP_UNTRACKED), undefined, 'a host with accept_untracked_na=1 still creates no entry');
      client.must('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.forwarding=1']);
      burst2();
      await waitFor(() => neigh6(client, VIP_UNTRACKED)?.lladdr === n2.mac('eth0'), { what: 'an entry created from the unsolicited NA' });
      assert.ok(neigh6(client, VIP_UNTRACKED)?.state.includes('STALE'));
    } finally {
      client.exec('sysctl', ['-q', '-w', 'net.ipv6.conf.eth0.accept_untracked_na=0', 'net.ipv6.conf.eth0.forwarding=0']);
      await onN1.stop();
      await onN2?.stop();
    }
  });
});
