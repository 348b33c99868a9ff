/**
 * The socket filter in the kernel: a listener on n1 opens a real AF_PACKET
 * socket (ETH_P_ALL) with the filter the owner watch uses, the client sends
 * real ARP frames over the lab switch, and we compare what arrived. A control
 * listener without a filter sees every frame, so the filtered one proves the
 * kernel dropped them (and the test fails if the filter is not attached).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { ROOT, labSkipReason } from '../helpers/lab-tools.js';

const TOOL = `${ROOT}test/tools/filter-listen.ts`;
const WATCHED = '198.51.100.10';
const RANGE = '198.51.100.64/26';
const FOREIGN = '198.51.100.11';
const PROBE_SRC = '02:00:00:00:77:01';
let markers = 0;
/** Every exchange ends with a frame from a fresh sender MAC, so we know when the listener has read all before it. */
const nextMarker = () => `02:00:00:00:99:${(++markers).toString(16).padStart(2, '0')}`;

const skip = labSkipReason();

interface Seen { src: string; ethType: number; op?: number; sha?: string; spa?: string; tpa?: string }

describe('socket filter on a real packet socket', { skip }, () => {
  let lab: Lab;
  let client: Host;
  let node: Host;
  const procs: LabProcess[] = [];

  before(() => {
    lab = Lab.create({ nodes: 1, tag: 'sf' });
    client = lab.client;
    node = lab.nodes[0]!;
  });
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL', 2000);
    await lab?.destroy();
  });

  async function listen(filter: object | 'none', env: NodeJS.ProcessEnv = {}): Promise<LabProcess> {
    const p = node.spawn(`listen-${procs.length}`, process.execPath, ['--import', 'tsx', TOOL, 'listen', String(node.ifindex('eth0')), filter === 'none' ? 'none' : JSON.stringify(filter)], env);
    procs.push(p);
    await p.waitForOutput(/ready drained=\d+/, 30_000);
    return p;
  }

  // Probe frames come from their own Ethernet source (02:00:00:00:77:…), so the
  // client's own traffic (IPv6 autoconfiguration, say) is never counted.
  const frame = (spa: string, op: number, extra: object = {}) => ({
    ethDst: 'ff:ff:ff:ff:ff:ff', ethSrc: PROBE_SRC, htype: 1, ptype: 0x0800, hlen: 6, plen: 4,
    op, sha: client.mac(), spa, tha: '00:00:00:00:00:00', tpa: '192.0.2.1', ...extra,
  });

  /** Sends the frames, then a marker the filter accepts; returns the ARP frames the listener read before the marker. */
  async function exchange(listener: LabProcess, frames: object[], markerSpa = WATCHED, markerExtra: object = {}, also: LabProcess[] = []): Promise<Seen[]> {
    const start = listener.text().length;
    const mark = nextMarker();
    client.must(process.execPath, ['--import', 'tsx', TOOL, 'send', String(client.ifindex('eth0')), JSON.stringify([...frames, frame(markerSpa, 2, { sha: mark, ethSrc: client.mac(), ...markerExtra })])]);
    for (const p of [listener, ...also]) await p.waitForOutput(mark, 10_000);
    return seen(listener, start).filter((s) => s.sha !== mark);
  }
  const seen = (p: LabProcess, start = 0) =>
    p.text().slice(start).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Seen).filter((s) => s.src === PROBE_SRC);

  const probeSet = () => [
    frame(WATCHED, 2), // a watched owner's reply
    frame('198.51.100.100', 2), // inside the watched range
    frame(FOREIGN, 2), // another host's reply
    frame(WATCHED, 1), // a request from the watched IP: not what the watch reads
    frame('203.0.113.9', 2, { tpa: WATCHED }), // only the target is watched
    frame(WATCHED, 2, { ethType: 0x88b5 }), // not ARP at all, same bytes (local experimental ethertype: br_netfilter would drop a bogus IPv4 header on the switch)
    frame(WATCHED, 2, { ptype: 0x86dd }), // ARP, but not IPv4
  ];

  test('only replies from watched IPs reach user space; without a filter everything does', async () => {
    const filtered = await listen({ ops: [2], sender: [WATCHED, RANGE] });
    const control = await listen('none');
    const got = await exchange(filtered, probeSet(), WATCHED, {}, [control]);
    assert.deepEqual(got.map((s) => s.spa).sort(), ['198.51.100.10', '198.51.100.100']);
    assert.ok(got.every((s) => s.op === 2 && s.ethType === 0x0806));
    // The control read up to the marker too: every probe frame had reached n1's sockets.
    assert.equal(seen(control).length, probeSet().length, `the unfiltered socket reads every probe frame: ${JSON.stringify(seen(control))}`);
  });

  test('sender or target matching', async () => {
    const l = await listen({ target: [WATCHED] });
    const got = await exchange(l, [frame('203.0.113.9', 1, { tpa: WATCHED }), frame('203.0.113.9', 1, { tpa: FOREIGN })], '203.0.113.9', { tpa: WATCHED });
    assert.deepEqual(got.map((s) => s.tpa), [WATCHED]);
  });

  test('frames queued before the filter went on are drained, never read', async () => {
    // A flood of foreign ARP from the client while n1 opens filtered sockets over and over.
    const conf = `{ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x77, 0x02, c16(0x0806), c16(1), c16(0x0800), c8(6), c8(4), c16(2), 0x02, 0x00, 0x00, 0x00, 0x77, 0x02, 203, 0, 113, drnd(1), 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 203, 0, 113, drnd(1) }`;
    const flood = client.spawn('trafgen', 'sh', ['-c', `printf '%s' '${conf}' > /tmp/${lab.id}-flood.cfg && exec timeout -s KILL 60 trafgen -o eth0 -i /tmp/${lab.id}-flood.cfg -P 1 -b 50000pps -q`]);
    procs.push(flood);
    try {
      const r = node.exec(process.execPath, ['--import', 'tsx', TOOL, 'reopen', String(node.ifindex('eth0')), JSON.stringify({ ops: [2], sender: [WATCHED] })]);
      assert.equal(r.code, 0, r.stdout);
      const res = JSON.parse(r.stdout.trim().split('\n').pop()!) as { opens: number; drained: number; unfiltered: number };
      assert.equal(res.unfiltered, 0, `a frame queued before the filter was read: ${JSON.stringify(res)}`);
      assert.ok(res.drained > 0, `the race was never exercised (nothing drained): ${JSON.stringify(res)}`);
    } finally {
      await flood.stop('SIGKILL', 2000);
      client.exec('rm', ['-f', `/tmp/${lab.id}-flood.cfg`]);
    }
  });

  test('replacing the filter takes effect at once, with no unfiltered gap', async () => {
    const l = await listen({ ops: [2], sender: [WATCHED] }, { SWAP_FILTER: JSON.stringify({ ops: [2], sender: [FOREIGN] }) });
    assert.deepEqual((await exchange(l, [frame(WATCHED, 2), frame(FOREIGN, 2)])).map((s) => s.spa), [WATCHED]);
    l.signal('SIGUSR2');
    await l.waitForOutput('swapped', 10_000);
    const got = await exchange(l, [frame(WATCHED, 2), frame(FOREIGN, 2), frame('203.0.113.9', 2)], FOREIGN);
    assert.deepEqual(got.map((s) => s.spa), [FOREIGN]);
  });
});
