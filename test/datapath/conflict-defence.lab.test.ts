/**
 * Address conflicts in a real lab: n1 runs the agent and owns the IPs, n2 is a
 * foreign host that claims them with its own MAC (scapy / raw AF_PACKET), the
 * client's neighbour cache is the victim, and tcpdump on the client is the
 * witness. The responder's "never answer" rules are checked on the wire too,
 * over a direct veth (a Linux bridge drops frames whose source MAC is
 * multicast, so those could never reach the node through the lab switch).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, ROOT, craft, entry, labSkipReason, mapDump, startAgentReady, startCapture, stopCapture, waitFor, type CraftResult } from '../helpers/lab-tools.js';

const VIP = '198.51.100.50'; // claimed once (request form), then once (reply form)
const VIP_FLOOD = '198.51.100.51'; // flooded with claims
const VIP_ASK = '198.51.100.52'; // another host's gratuitous ARP for it must not be answered
const VIP_DIRECT = '198.51.100.53'; // on the direct veth: requests from multicast/broadcast sources
const VIP_TWIN = '198.51.100.54'; // announced on eth0 and eth2, two ports of the owner on the same segment
const UNOWNED = '198.51.100.59'; // nobody answers for it: the control for the client's cache
const DEFENCE_INTERVAL_MS = 1000; // the default
const METRICS = '127.0.0.1:9464'; // inside n1's namespace
const BROADCAST = 'ff:ff:ff:ff:ff:ff';

const skip = labSkipReason();

function must(netns: string, args: string[]): void {
  const r = spawnSync('ip', ['-n', netns, ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip -n ${netns} ${args.join(' ')}: ${r.stderr}`);
}

/** An answer is a reply to the asker; a defence is a broadcast gratuitous reply (THA broadcast, TPA = the IP). */
function answers(r: CraftResult, ip: string) {
  return r.replies.filter((x) => !(x.tha === BROADCAST && x.tpa === ip));
}

describe('conflict defence in a lab', { skip }, () => {
  let lab: Lab;
  let client: Host;
  let owner: Host;
  let foreign: Host;
  let agent: LabProcess;
  let ownerMac: string;
  let foreignMac: string;

  const status = () =>
    JSON.parse(owner.must(HERALD, ['status', '--json', '--status-socket', owner.statusSocket])) as {
      conflicts: Array<{ ip: string; interface: string; foreignMac: string; op: string; claims: number; defences: number; lastDefence: string | null }>;
    };
  const conflictOf = (ip: string) => status().conflicts.find((c) => c.ip === ip);
  const metric = (name: string, ip: string) => {
    const text = owner.must('curl', ['-sf', `http://${METRICS}/metrics`]);
    const m = new RegExp(`^${name}\\{ip="${ip.replace(/\./g, '\\.')}",interface="eth0"\\} (\\d+)$`, 'm').exec(text);
    return m ? Number(m[1]) : 0;
  };
  /** The owner's gratuitous frames for `ip` in a client capture (both forms, broadcast). */
  const ownerAnnouncements = (lines: string[], ip: string) => ({
    requests: lines.filter((l) => l.includes(`${ownerMac} > ${BROADCAST}`) && l.includes(`Request who-has ${ip} tell ${ip}`)),
    replies: lines.filter((l) => l.includes(`${ownerMac} > ${BROADCAST}`) && l.includes(`Reply ${ip} is-at ${ownerMac}`)),
  });
  const poisonClient = (ip: string, mac: string) => client.must('ip', ['neigh', 'replace', ip, 'lladdr', mac, 'dev', 'eth0', 'nud', 'stale']);

  before(async () => {
    lab = Lab.create({ nodes: 2, tag: 'def' });
    client = lab.client;
    owner = lab.nodes[0]!;
    foreign = lab.nodes[1]!;
    ownerMac = owner.mac('eth0');
    foreignMac = foreign.mac('eth0');
    // A direct cable from the client to the owner (no bridge in between).
    client.must('ip', ['link', 'add', 'dx0', 'type', 'veth', 'peer', 'name', 'dx0', 'netns', owner.netns]);
    client.must('ip', ['addr', 'add', '203.0.113.129/25', 'dev', 'dx0']);
    owner.must('ip', ['addr', 'add', '203.0.113.130/25', 'dev', 'dx0']);
    client.must('ip', ['link', 'set', 'dx0', 'up']);
    owner.must('ip', ['link', 'set', 'dx0', 'up']);
    // A second port of the owner on the same switch: it hears the owner's own announcements.
    owner.must('ip', ['link', 'add', 'eth2', 'type', 'veth', 'peer', 'name', 'n1-eth2', 'netns', `${lab.id}-sw`]);
    must(`${lab.id}-sw`, ['link', 'set', 'n1-eth2', 'master', 'br0', 'up']);
    owner.must('ip', ['link', 'set', 'eth2', 'up']);
    agent = await startAgentReady(owner, [
      '--announce', `${VIP}@eth0`,
      '--announce', `${VIP_FLOOD}@eth0`,
      '--announce', `${VIP_ASK}@eth0`,
      '--announce', `${VIP_DIRECT}@dx0`,
      '--announce', `${VIP_TWIN}@eth0`,
      '--announce', `${VIP_TWIN}@eth2`,
      '--garp-count', '1', // one round at start, so captures later see only defences
      '--metrics-listen', METRICS,
      '--log-format', 'json',
    ]);
  });

  after(async () => {
    await lab?.destroy();
  });

  test("control: the client's cache follows a foreign host's gratuitous claim of an IP nobody defends", async () => {
    poisonClient(UNOWNED, '02:00:5e:00:53:01');
    craft(foreign, UNOWNED, 'conflict', { count: 1, wait: 0.1 });
    await waitFor(() => client.neighbourMac(UNOWNED) === foreignMac, { what: `the client to learn ${UNOWNED} at the foreign MAC` });
  });

  test("a foreign claim of an owned IP is defended: the client's cache returns to the owner, and status, metrics and log show it", async () => {
    poisonClient(VIP, ownerMac); // the client talks to the owner
    const capture = await startCapture(client, `arp and host ${VIP}`);
    craft(foreign, VIP, 'conflict', { count: 1, wait: 0.1 }); // gratuitous request: "VIP is at foreignMac"
    await waitFor(() => client.neighbourMac(VIP) === ownerMac && ownerAnnouncements(capture.text().split('\n'), VIP).replies.length > 0, {
      what: `the owner's defence of ${VIP}`,
    });
    const lines = await stopCapture(capture);
    const claimAt = lines.findIndex((l) => l.includes(`${foreignMac} > ${BROADCAST}`) && l.includes(`Request who-has ${VIP} tell ${VIP}`));
    const { requests, replies } = ownerAnnouncements(lines, VIP);
    assert.ok(claimAt >= 0, `the claim is on the wire:\n${lines.join('\n')}`);
    assert.equal(requests.length, 1, lines.join('\n'));
    assert.equal(replies.length, 1, lines.join('\n'));
    assert.ok(lines.indexOf(requests[0]!) > claimAt && lines.indexOf(replies[0]!) > claimAt, 'the defence follows the claim');
    assert.equal(client.neighbourMac(VIP), ownerMac);

    const c = conflictOf(VIP)!;
    assert.equal(c.foreignMac, foreignMac);
    assert.equal(c.op, 'request');
    assert.equal(c.interface, 'eth0');
    assert.equal(c.claims, 1);
    assert.equal(c.defences, 1);
    assert.ok(c.lastDefence !== null);
    assert.equal(entry(mapDump(owner), VIP)!.conflicts, 1);
    assert.equal(metric('herald_arp_conflicts_total', VIP), 1);
    assert.equal(metric('herald_arp_defences_total', VIP), 1);
    await agent.waitForOutput(/address conflict: a foreign MAC claims an IP this node owns/);
    const text = owner.must(HERALD, ['status', '--status-socket', owner.statusSocket]);
    assert.match(text, new RegExp(`${VIP.replace(/\./g, '\\.')}\\s+eth0\\s+${foreignMac}\\s+request`), text);

    // The reply form of the claim is defended too (after the rate-limit interval at most).
    await waitFor(() => Date.now() - Date.parse(c.lastDefence!) > DEFENCE_INTERVAL_MS, { what: 'the rate-limit interval to pass' });
    craft(foreign, VIP, 'conflict-reply', { count: 1, wait: 0.1 });
    await waitFor(() => conflictOf(VIP)?.defences === 2, { what: 'a second defence' });
    await waitFor(() => client.neighbourMac(VIP) === ownerMac, { what: "the client's cache back at the owner" });
    assert.equal(conflictOf(VIP)!.op, 'reply');
    assert.equal(metric('herald_arp_defences_total', VIP), 2);
  });

  test('a flood of foreign claims gets only rate-limited defences, and the client ends at the owner', async (t) => {
    poisonClient(VIP_FLOOD, ownerMac);
    const before = entry(mapDump(owner), VIP_FLOOD)!.conflicts;
    // Only the owner's frames: a capture of the flood itself could drop some of them.
    const capture = await startCapture(client, `arp and host ${VIP_FLOOD} and ether src ${ownerMac}`);
    const r = foreign.exec('timeout', ['-s', 'KILL', '30', '/usr/bin/python3', `${ROOT}test/tools/arp_flood.py`, 'eth0', VIP_FLOOD, '2000', '1']);
    assert.equal(r.code, 0, r.stderr);
    const flood = JSON.parse(r.stdout.trim()) as { sent: number; elapsed: number };
    // The defence after the last claim restores the client's cache...
    await waitFor(() => client.neighbourMac(VIP_FLOOD) === ownerMac, { what: "the client's cache back at the owner after the flood", timeoutMs: 10_000 });
    // ...and the defending is over once an interval has passed after the last defence without another one.
    await waitFor(
      () => {
        const c = conflictOf(VIP_FLOOD);
        return c?.lastDefence != null && Date.now() - Date.parse(c.lastDefence) > DEFENCE_INTERVAL_MS + 500;
      },
      { what: 'the defence to settle', timeoutMs: 10_000 },
    );
    const lines = await stopCapture(capture);
    const claims = entry(mapDump(owner), VIP_FLOOD)!.conflicts - before;
    assert.equal(claims, flood.sent, 'the node saw every claim');
    const { requests, replies } = ownerAnnouncements(lines, VIP_FLOOD);
    // One round at once, one per interval during the flood, one after it.
    const bound = Math.ceil((flood.elapsed * 1000) / DEFENCE_INTERVAL_MS) + 2;
    assert.ok(requests.length >= 1 && requests.length <= bound, `${requests.length} defences for ${flood.sent} claims in ${flood.elapsed.toFixed(2)} s (bound ${bound})`);
    assert.equal(replies.length, requests.length, 'each defence is one request and one reply');
    t.diagnostic(`${flood.sent} claims in ${flood.elapsed.toFixed(2)} s → ${requests.length} defences (bound ${bound})`);
    const c = conflictOf(VIP_FLOOD)!;
    assert.equal(c.defences, requests.length);
    assert.equal(c.claims, Number(entry(mapDump(owner), VIP_FLOOD)!.conflicts));
    assert.equal(client.neighbourMac(VIP_FLOOD), ownerMac);
    const logLines = agent
      .text()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { msg: string; ip?: string; level: number; claimsSinceLastLine?: number; claimsTotal?: number })
      .filter((l) => l.msg.startsWith('address conflict') && l.ip === VIP_FLOOD);
    assert.equal(logLines.length, c.defences, 'one warn line per defence, not per claim');
    assert.ok(logLines.every((l) => l.level === 40), 'at warn level');
    // The first line stands for the claims counted before the first defence
    // (the program counts on, faster than one event reaches user space); each
    // later line for exactly those since the line before; the last one ends at
    // the node's counter.
    const first = logLines[0]!;
    const last = logLines[logLines.length - 1]!;
    assert.equal(
      logLines.slice(1).reduce((sum, l) => sum + (l.claimsSinceLastLine ?? 0), 0),
      last.claimsTotal! - first.claimsTotal!,
      'the lines after the first account for every claim since it',
    );
    assert.equal(last.claimsTotal! - Number(before), claims, 'the last line ends at the node counter');
  });

  test("another host's gratuitous ARP for an owned IP is never answered (only defended)", () => {
    const control = craft(foreign, VIP_ASK, 'valid', { count: 2 });
    assert.equal(answers(control, VIP_ASK).length, 2, 'a normal request from that host is answered');
    const request = craft(foreign, VIP_ASK, 'conflict', { count: 3, wait: 0.3 });
    assert.deepEqual(answers(request, VIP_ASK), [], 'a gratuitous request (sender IP = target IP) is an announcement, not a question');
    const reply = craft(foreign, VIP_ASK, 'conflict-reply', { count: 3, wait: 0.3 });
    assert.deepEqual(answers(reply, VIP_ASK), [], 'a gratuitous reply is not answered');
    assert.ok(request.replies.length + reply.replies.length > 0, 'the claims were defended with gratuitous frames instead');
  });

  test('a request from a multicast or broadcast source MAC is never answered', () => {
    const control = craft(client, VIP_DIRECT, 'valid', { iface: 'dx0', count: 2 });
    assert.equal(answers(control, VIP_DIRECT).length, 2, 'a normal request on the direct link is answered');
    const repliesBefore = entry(mapDump(owner), VIP_DIRECT, 'dx0')!.replies;
    for (const variant of ['mcast-eth-src', 'bcast-eth-src', 'mcast-sha']) {
      const r = craft(client, VIP_DIRECT, variant, { iface: 'dx0', count: 3, wait: 0.3 });
      assert.deepEqual(answers(r, VIP_DIRECT), [], `${variant} was answered`);
    }
    assert.equal(entry(mapDump(owner), VIP_DIRECT, 'dx0')!.replies, repliesBefore, 'no reply was counted either');
  });

  test("the node's own announcements heard on its other interface are not conflicts (no ping-pong)", async () => {
    const capture = await startCapture(owner, `arp and host ${VIP_TWIN} and ether src ${ownerMac}`, 'eth2');
    const r = owner.exec(HERALD, ['garp', 'eth0', VIP_TWIN, '--count', '2', '--interval', '100ms']);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(() => capture.text().split('\n').filter((l) => l.includes(`${ownerMac} > ${BROADCAST}`)).length >= 4, {
      what: "eth0's announcements to arrive on eth2",
    });
    await stopCapture(capture);
    const dump = mapDump(owner);
    assert.equal(entry(dump, VIP_TWIN, 'eth2')!.conflicts, 0, "eth0's MAC is ours: not a conflict on eth2");
    assert.equal(entry(dump, VIP_TWIN, 'eth0')!.conflicts, 0);
    assert.equal(conflictOf(VIP_TWIN), undefined, 'no conflict recorded, nothing defended');
  });

  test('a defence interval below 100 ms is refused with a precise error before anything is loaded', () => {
    const pinDir = `${owner.pinDir}-bad`;
    const r = owner.exec(HERALD, ['agent', '--node', 'bad', '--bpf-pin-dir', pinDir, '--state-dir', `${owner.stateDir}-bad`, '--status-socket', `${owner.statusSocket}-bad`, '--announce', `${VIP}@eth0`, '--conflict-defence-interval', '10ms']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /HERALD_BAD_ARGUMENT/);
    assert.match(r.stderr, /conflict defence interval must be at least 100 ms, got 10/);
    assert.equal(existsSync(pinDir), false, 'nothing was pinned');
  });
});
