/**
 * The eBPF L2 responder in a real lab: a client and a node in network
 * namespaces on a bridge, herald's agent on the node, iputils arping, scapy
 * and tcpdump on the client. Nothing here is faked.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Lab, sleep, type Host, type LabProcess } from '../../lab/lab.js';
import {
  HERALD,
  arping,
  craft,
  craftAsync,
  entry,
  labSkipReason,
  mapDump,
  startAgentReady,
  startCapture,
  stopCapture,
  tcAttached,
  tcPrograms,
  waitFor,
} from '../helpers/lab-tools.js';

const VIP = '198.51.100.10'; // announced on eth0
const VIP_ETH1 = '198.51.100.20'; // announced on eth1 only
const VIP_COUNT = '198.51.100.30'; // dedicated to the counter test
const VIP_CRAFT = '198.51.100.31'; // dedicated to the malformed-frame test
const VIP_CONFLICT = '198.51.100.32'; // dedicated to the conflict test
const VIP_NEW = '198.51.100.40'; // added on restart: its gratuitous burst is captured
const UNKNOWN = '198.51.100.99'; // never announced

const skip = labSkipReason();

describe('eBPF L2 responder in a lab', { skip }, () => {
  let lab: Lab;
  let client: Host;
  let node: Host;
  let agent: LabProcess;
  const baseArgs = [
    '--announce', `${VIP}@eth0`,
    '--announce', `${VIP_ETH1}@eth1`,
    '--announce', `${VIP_COUNT}@eth0`,
    '--announce', `${VIP_CRAFT}@eth0`,
    '--announce', `${VIP_CONFLICT}@eth0`,
    '--garp-interval', '200ms',
  ];

  before(async () => {
    lab = Lab.create({ nodes: 1, secondSegment: true, tag: 'l2' });
    client = lab.client;
    node = lab.nodes[0]!;
    agent = await startAgentReady(node, baseArgs);
  });

  after(async () => {
    await lab?.destroy();
  });

  test('an IP in the map is answered with the node MAC on its interface', async () => {
    // "agent running" means started; the agent says when the datapath serves, and from then on the IP is answered.
    await agent.waitForOutput('serving: the datapath applied its first full reconciliation', 10_000);
    assert.equal(arping(client, VIP, { count: 1 }).received, 1, 'answered at the first request once the agent says it serves');
    const r = arping(client, VIP, { count: 3 });
    assert.equal(r.received, 3, r.output);
    assert.deepEqual(new Set(r.macs), new Set([node.mac('eth0')]));
  });

  test('an IP not in the map is not answered', () => {
    const r = arping(client, UNKNOWN, { count: 2 });
    assert.equal(r.received, 0, r.output);
  });

  test('an IP in the map for another interface is answered only there', () => {
    const wrong = arping(client, VIP_ETH1, { count: 2 });
    assert.equal(wrong.received, 0, `answered on eth0: ${wrong.output}`);
    const right = arping(client, VIP_ETH1, { count: 2, iface: 'eth1', source: client.ip2! });
    assert.equal(right.received, 2, right.output);
    assert.deepEqual(new Set(right.macs), new Set([node.mac('eth1')]), 'the reply carries the receiving interface MAC');
  });

  test('the reply counter matches the replies the client received', () => {
    const before = entry(mapDump(node), VIP_COUNT)!.replies;
    const r = arping(client, VIP_COUNT, { count: 7 });
    assert.equal(r.received, 7, r.output);
    const afterDump = mapDump(node);
    assert.equal(entry(afterDump, VIP_COUNT)!.replies - before, r.received);
  });

  test('malformed ARP frames are never answered, and do not count as replies', () => {
    const control = craft(client, VIP_CRAFT, 'valid', { count: 2 });
    assert.equal(control.replies.length, 2, 'a well-formed request crafted the same way is answered');
    const before = entry(mapDump(node), VIP_CRAFT)!.replies;
    for (const variant of ['wrong-htype', 'wrong-ptype', 'wrong-hlen', 'wrong-plen', 'reply-opcode', 'truncated', 'foreign-unicast']) {
      const r = craft(client, VIP_CRAFT, variant, { count: 3, wait: 0.3 });
      assert.deepEqual(r.replies, [], `${variant} was answered`);
    }
    assert.equal(entry(mapDump(node), VIP_CRAFT)!.replies, before, 'no reply was counted for malformed frames');
  });

  test('a tagged (802.1Q) request seen on the parent device is left to the VLAN sub-interface', () => {
    const r = client.exec('/usr/bin/python3', [
      '-c',
      [
        'from scapy.all import *; conf.verb=0',
        "m=get_if_hwaddr('eth0')",
        `p=Ether(src=m,dst='ff:ff:ff:ff:ff:ff')/Dot1Q(vlan=100)/ARP(op=1,hwsrc=m,psrc='${client.ip}',pdst='${VIP}')`,
        `a=AsyncSniffer(iface='eth0',filter='arp or vlan',store=True); a.start(); time.sleep(0.3)`,
        "sendp(p,iface='eth0',count=3,inter=0.05); time.sleep(0.5)",
        `print(sum(1 for x in a.stop() if ARP in x and x[ARP].op==2 and x[ARP].psrc=='${VIP}'))`,
      ].join('\n'),
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), '0', 'a tagged request must not be answered untagged from the parent');
  });

  test('an RFC 5227 probe (sender 0.0.0.0) is answered, so duplicate-address detection sees the owner', () => {
    const dad = arping(client, VIP, { count: 2, dad: true });
    assert.equal(dad.code, 1, `arping -D must report the address in use: ${dad.output}`);
    assert.ok(dad.macs.includes(node.mac('eth0')), dad.output);
    const probe = craft(client, VIP, 'probe', { count: 1 });
    assert.equal(probe.replies.length, 1);
    assert.equal(probe.replies[0]!.tpa, '0.0.0.0', 'the reply goes back to the unconfigured prober');
    assert.equal(probe.replies[0]!.tha, client.mac('eth0'));
  });

  test('a foreign MAC claiming an owned IP increments its conflict counter', () => {
    const before = entry(mapDump(node), VIP_CONFLICT)!.conflicts;
    craft(client, VIP_CONFLICT, 'conflict', { count: 3, wait: 0.2 });
    craft(client, VIP_CONFLICT, 'conflict-reply', { count: 2, wait: 0.2 });
    const now = entry(mapDump(node), VIP_CONFLICT)!;
    assert.equal(now.conflicts - before, 5);
    // Frames claiming the IP are announcements, not questions: never answered.
    assert.equal(entry(mapDump(node), VIP)!.conflicts, 0, 'other entries are untouched');
  });

  test('a stale liveness stamp silences the node and a fresh one brings it back', async () => {
    assert.equal(arping(client, VIP, { count: 1 }).received, 1);
    agent.signal('SIGSTOP'); // the agent stops stamping; the kernel state stays
    try {
      await sleep(3500); // default limit 3 s
      const silent = arping(client, VIP, { count: 2 });
      assert.equal(silent.received, 0, `a frozen agent's node must go silent: ${silent.output}`);
      assert.ok((mapDump(node).liveness.ageMs ?? 0) > 3000);
    } finally {
      agent.signal('SIGCONT');
    }
    await waitFor(() => (mapDump(node).liveness.ageMs ?? Infinity) < 1500, { what: 'a fresh stamp' });
    assert.equal(arping(client, VIP, { count: 2 }).received, 2);
  });

  test('an agent restart keeps ARP answered throughout, and a new IP gets its gratuitous burst', async () => {
    const progId = () => tcPrograms(tcAttached(node).ingress).find((p) => p.name === 'herald_l2_ingre')?.progId;
    const oldProg = progId();
    const repliesBefore = entry(mapDump(node), VIP)!.replies;
    // The client believes VIP_NEW lives at some old MAC, as after a failover.
    client.must('ip', ['neigh', 'replace', VIP_NEW, 'lladdr', '02:00:5e:00:53:01', 'dev', 'eth0', 'nud', 'stale']);
    const capture = await startCapture(client, `arp and host ${VIP_NEW}`);
    // Requests every 20 ms (scapy) while the agent is replaced.
    const pinger = craftAsync(client, VIP, 'valid', { count: 150, interval: 0.02, wait: 0.5 });
    let pingerDone = false;
    void pinger.finally(() => (pingerDone = true));
    await sleep(500);
    await agent.stop('SIGTERM');
    agent = await startAgentReady(node, [...baseArgs, '--announce', `${VIP_NEW}@eth0`], 'agent-2');
    assert.equal(pingerDone, false, 'the restart must happen while the requests are flowing');
    const pings = await pinger;
    assert.equal(pings.replies.length, pings.sent, `${pings.sent - pings.replies.length} requests went unanswered during the restart`);
    assert.notEqual(progId(), oldProg, 'the new agent replaced the program');
    assert.ok(entry(mapDump(node), VIP)!.replies >= repliesBefore + pings.sent, 'the pinned entry and its counter survived');

    // Gratuitous burst for the new IP: 5 rounds, each a request and a reply.
    await sleep(1300);
    const lines = await stopCapture(capture);
    const mac = node.mac('eth0');
    const requests = lines.filter((l) => l.includes(`Request who-has ${VIP_NEW} tell ${VIP_NEW}`));
    const replies = lines.filter((l) => l.includes(`Reply ${VIP_NEW} is-at ${mac}`));
    assert.equal(requests.length, 5, lines.join('\n'));
    assert.equal(replies.length, 5, lines.join('\n'));
    assert.ok([...requests, ...replies].every((l) => l.includes(mac) && l.includes('ff:ff:ff:ff:ff:ff')), lines.join('\n'));
    assert.equal(client.neighbourMac(VIP_NEW), mac, "the client's neighbour entry follows the burst");
  });

  test('the responder runs through a tcx link pinned beside its maps, alone on the hook', () => {
    const seen = tcAttached(node).ingress;
    assert.deepEqual(seen.tcx.map((p) => p.name), ['herald_l2_ingre'], JSON.stringify(seen));
    assert.ok(seen.tcx[0]!.linkId! > 0, 'attached through a link');
    assert.deepEqual(seen.clsBpf, [], 'no legacy filter beside it');
    const pinned = JSON.parse(node.must('bpftool', ['-j', 'link', 'show', 'pinned', `${node.pinDir}/tcx_herald_l2_ingress_${node.ifindex('eth0')}`])) as { id: number; prog_id: number };
    assert.equal(pinned.id, seen.tcx[0]!.linkId);
    assert.equal(pinned.prog_id, seen.tcx[0]!.progId);
    const status = node.must(HERALD, ['status', '--status-socket', node.statusSocket]);
    assert.match(status, /tc programs: tcx links/);
  });

  test("an older herald's cls_bpf filter and the tcx link replace each other: every request answered exactly once", async () => {
    const capture = await startCapture(client, `arp and host ${VIP}`);
    // 20 ms requests across two restarts: tcx → an agent forced to the legacy attach (as an older
    // herald attaches) → a current agent taking over with its tcx link.
    const pinger = craftAsync(client, VIP, 'valid', { count: 250, interval: 0.02, wait: 0.5 });
    let pingerDone = false;
    void pinger.finally(() => (pingerDone = true));
    await sleep(300);
    await agent.stop('SIGTERM');
    agent = await startAgentReady(node, baseArgs, 'agent-legacy', { HERALD_TC_ATTACH: 'cls_bpf' });
    const legacy = tcAttached(node).ingress;
    assert.deepEqual(legacy.tcx, [], `the link went when the filter took over: ${JSON.stringify(legacy)}`);
    assert.deepEqual(legacy.clsBpf.map((f) => [f.pref, f.name]), [[1, 'herald_l2_ingre']]);
    assert.match(node.must(HERALD, ['status', '--status-socket', node.statusSocket]), /tc programs: cls_bpf filters/);
    await agent.stop('SIGTERM');
    agent = await startAgentReady(node, baseArgs, 'agent-tcx');
    assert.equal(pingerDone, false, 'both changes happened while the requests were flowing');
    const pings = await pinger;
    await sleep(200);
    const lines = await stopCapture(capture);
    const requests = lines.filter((l) => l.includes(`Request who-has ${VIP}`)).length;
    const replies = lines.filter((l) => l.includes(`Reply ${VIP} is-at`)).length;
    assert.equal(pings.replies.length, pings.sent, `${pings.sent - pings.replies.length} requests went unanswered`);
    assert.equal(requests, pings.sent, lines.slice(0, 5).join('\n'));
    assert.equal(replies, requests, 'one reply per request: never two responders, never none');
    const now = tcAttached(node).ingress;
    assert.deepEqual(now.tcx.map((p) => p.name), ['herald_l2_ingre']);
    assert.deepEqual(now.clsBpf, [], 'the legacy filter is gone');
    assert.equal(node.must('tc', ['qdisc', 'show', 'dev', 'eth0']).includes('clsact'), false, 'and its clsact qdisc');
  });

  test('a pinned map of another size is refused with a precise error, and the running node is untouched', () => {
    const r = node.exec(HERALD, ['agent', '--node', 'x', '--bpf-pin-dir', node.pinDir, '--state-dir', node.stateDir, '--status-socket', `${node.statusSocket}-x`, '--responder-map-size', '1024']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /the pinned responder_v4 holds 65536 entries, configured 1024/);
    assert.equal(arping(client, VIP, { count: 1 }).received, 1);
  });

  test('gratuitous ARP goes out of an interface that has no IPv4 address', async () => {
    node.must('ip', ['addr', 'flush', 'dev', 'eth1']);
    const capture = await startCapture(client, 'arp and host 198.51.100.60', 'eth1');
    const r = node.exec(HERALD, ['garp', 'eth1', '198.51.100.60', '--count', '2', '--interval', '100ms']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /sent 4 frame\(s\), 0 failed/);
    await sleep(300);
    const lines = await stopCapture(capture);
    assert.equal(lines.filter((l) => l.includes(node.mac('eth1'))).length, 4, lines.join('\n'));
  });

  test('herald map dump shows IP, interface, replies and conflicts read from the pinned map', () => {
    const r = node.exec(HERALD, ['map', 'dump', '--bpf-pin-dir', node.pinDir]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /IP\s+INTERFACE\s+REPLIES\s+CONFLICTS/);
    assert.match(r.stdout, new RegExp(`${VIP_ETH1.replace(/\./g, '\\.')}\\s+eth1\\s+\\d+\\s+0`));
  });

  test('an interface without an Ethernet header is refused with a precise error, and other IPs are unaffected', async () => {
    node.must('ip', ['tuntap', 'add', 'mode', 'tun', 'name', 'tun0']);
    node.must('ip', ['link', 'set', 'tun0', 'up']);
    const other = await startAgentReady(lab.nodes[0]!, ['--node', 'x', '--bpf-pin-dir', `${node.pinDir}-tun`, '--status-socket', `${node.statusSocket}-tun`, '--announce', '198.51.100.70@tun0'], 'agent-tun');
    try {
      await other.waitForOutput(/tun0 has no Ethernet header/);
      assert.equal(entry(mapDump(node, `${node.pinDir}-tun`), '198.51.100.70', 'tun0'), undefined);
    } finally {
      await other.stop();
      node.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', `${node.pinDir}-tun`]);
    }
  });

  test('herald datapath remove detaches cleanly and unpins', async () => {
    await agent.stop('SIGTERM');
    const r = node.exec(HERALD, ['datapath', 'remove', '--bpf-pin-dir', node.pinDir]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /detached from 2 interface/);
    for (const iface of ['eth0', 'eth1']) assert.deepEqual(tcPrograms(tcAttached(node, iface).ingress), [], `nothing left on ${iface}`);
    assert.equal(node.must('tc', ['qdisc', 'show', 'dev', 'eth0']).includes('clsact'), false, 'clsact removed');
    assert.equal(arping(client, VIP, { count: 1 }).received, 0);
  });
});
