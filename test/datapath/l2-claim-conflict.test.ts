/**
 * The responder program's conflict check against the real kernel
 * (BPF_PROG_TEST_RUN): a frame claiming a held IP counts as a conflict unless
 * its MAC is one of this node's — the receiving interface's, or one in
 * `our_macs` (another interface the node serves: it hears its own
 * announcements there). One lookup, not a walk of the interfaces map (issue 16:
 * the walk cost ~20 µs per successor announcement during a hand-over).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { L2ResponderProgram } from '../../src/datapath/l2-responder/program.js';
import { gratuitousRequest } from '../../src/net/arp.js';
import { unsolicitedAdvertisement } from '../../src/net/ndp.js';
import { progTestRun } from '../../src/os/prog-test-run.js';

const IFINDEX = 1; // the test run's skb arrives on loopback
const RECEIVING_MAC = '02:00:5e:00:01:01';
const OTHER_IFACE_MAC = '02:00:5e:00:01:02';
const FOREIGN_MAC = '02:00:5e:00:01:99';
const V4 = '198.51.100.10';
const V6 = '2001:db8:100::10';

describe('responder program: a claim of a held IP is a conflict unless the MAC is ours', () => {
  const pinDir = `/sys/fs/bpf/herald/test-claim-${process.pid}-${randomBytes(3).toString('hex')}`;
  let program: L2ResponderProgram;

  before(() => {
    program = L2ResponderProgram.load({ pinDir, responderMapSize: 64 });
    program.maps.interfaces.update(IFINDEX, { mac: RECEIVING_MAC });
    program.maps.interfaces.update(105, { mac: OTHER_IFACE_MAC });
    for (const ip of [V4, V6]) program.maps.responders.update({ ip, ifindex: IFINDEX }, { replies: 0n, conflicts: 0n });
  });
  after(() => {
    program?.dispose();
    rmSync(pinDir, { recursive: true, force: true });
  });

  const conflicts = (ip: string) => program.maps.responders.lookup({ ip, ifindex: IFINDEX })!.conflicts;
  const claim = (family: 4 | 6, mac: string) => {
    const frame = family === 4 ? gratuitousRequest(mac, V4) : unsolicitedAdvertisement(mac, V6);
    progTestRun(program.progFd, frame, 1, { skbIfindex: IFINDEX });
  };

  for (const family of [4, 6] as const) {
    const ip = family === 4 ? V4 : V6;
    test(`IPv${family}: foreign MAC counted; the receiving interface's MAC and a MAC in our_macs are not`, () => {
      program.maps.ourMacs.update(OTHER_IFACE_MAC, 1);
      const start = conflicts(ip);
      claim(family, FOREIGN_MAC);
      assert.equal(conflicts(ip), start + 1n, 'a foreign claim is a conflict');
      claim(family, RECEIVING_MAC);
      claim(family, OTHER_IFACE_MAC);
      assert.equal(conflicts(ip), start + 1n, 'our own announcements are not conflicts');
      // our_macs is what the program asks: the interfaces map alone does not make a MAC ours.
      program.maps.ourMacs.delete(OTHER_IFACE_MAC);
      claim(family, OTHER_IFACE_MAC);
      assert.equal(conflicts(ip), start + 2n);
    });
  }
});
