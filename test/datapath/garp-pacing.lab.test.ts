/**
 * A failover's gratuitous burst through a real AF_PACKET socket in front of a
 * slow link: n1's eth0 gets a token-bucket qdisc with a queue of ~100 frames,
 * so a 1,000-IP burst meets a full queue and sendto is refused (ENOBUFS) long
 * before the burst is out — as on a NIC whose ring and txqueuelen are full.
 * Every IP's announcement must still reach the client (tcpdump there is the
 * witness), none counted as failed. Before the paced queue, every refused
 * frame was a "send failed" and its IP waited for the next round, a second later.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Lab, sleep, type Host, type LabProcess } from '../../lab/lab.js';
import { systemClock } from '../../src/core/clock.js';
import { silentLogger } from '../../src/core/logger.js';
import { GarpAnnouncer } from '../../src/datapath/garp.js';
import { PacketFrameSender } from '../../src/datapath/packet-sender.js';
import { labSkipReason, waitFor } from '../helpers/lab-tools.js';

const N = 1000;
const ip = (i: number) => `2001:db8:100::${i.toString(16)}`;

describe('gratuitous bursts through a full send queue', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let node: Host;
  let capture: LabProcess | undefined;
  let sender: PacketFrameSender | undefined;
  let garp: GarpAnnouncer | undefined;

  before(() => {
    lab = Lab.create({ nodes: 1, tag: 'gp' });
    node = lab.nodes[0]!;
    // 512 kbit/s behind a queue of ~100 frames (10 kB): the 1,000 NAs (~90 kB)
    // take ~1.4 s to leave, and a frame sent while the queue is full is
    // refused (the qdisc drops it and sendto reports ENOBUFS) — a NIC whose
    // ring and txqueuelen are full of a larger burst does the same.
    node.must('tc', ['qdisc', 'add', 'dev', 'eth0', 'root', 'tbf', 'rate', '512kbit', 'burst', '1600', 'limit', '10000']);
  });

  after(async () => {
    garp?.dispose();
    sender?.dispose();
    if (capture?.running) await capture.stop('SIGKILL');
    await lab?.destroy();
  });

  test('every IP of a 1,000-IP burst reaches the client, none failed, the refused frames deferred', async () => {
    const link = JSON.parse(node.must('ip', ['-j', 'link', 'show', 'eth0'])) as Array<{ ifindex: number; address: string }>;
    // A ring that holds the whole burst (immediate mode's default snap length leaves a few slots).
    capture = lab.client.spawn('tcpdump', 'tcpdump', ['-i', 'eth0', '-n', '-e', '-l', '--immediate-mode', '-s', '128', '-B', '16384', 'icmp6 and ip6[40] == 136']);
    await capture.waitForOutput('listening on', 10_000);
    const seen = () => new Set([...capture!.text().matchAll(/tgt is ([0-9a-f:]+)/g)].map((m) => m[1]!));
    node.enter(() => {
      // The socket opens on the first send, in n1's namespace; the deferred frames go out later through it.
      sender = new PacketFrameSender();
      garp = new GarpAnnouncer({ sender, clock: systemClock, log: silentLogger }, { count: 1, intervalMs: 1000 });
      for (let i = 1; i <= N; i++) garp.announce({ ip: ip(i), ifindex: link[0]!.ifindex, mac: link[0]!.address });
    });
    await waitFor(() => garp!.queuedRounds === 0, { timeoutMs: 20_000, intervalMs: 50, what: 'the paced queue to drain', onTimeout: () => `${garp!.queuedRounds} rounds queued` });
    await waitFor(() => seen().size === N, { timeoutMs: 10_000, intervalMs: 100, what: `all ${N} announcements at the client`, onTimeout: () => `seen ${seen().size}` });
    await sleep(100);
    assert.deepEqual(garp!.stats, { sent: N, failed: 0 });
    assert.ok(garp!.deferred > 0, 'the queue was really full (otherwise this test proves nothing)');
    assert.equal(seen().size, N);
  });
});
