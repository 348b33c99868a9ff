/**
 * bench/arp/claim-cost — what the responder program costs for a frame that
 * claims an IP this node holds, from a MAC that is not the receiving
 * interface's: another host's gratuitous ARP or unsolicited NA. During a
 * hand-over that is every announcement the successors send, and the old
 * owner's program sees each one (its entries stay until it withdraws them);
 * on veth the cost is charged to the sender's send.
 *
 * Side by side, in one run, on the kernel's own clock (BPF_PROG_TEST_RUN,
 * average ns per run over --repeat runs, --rounds interleaved rounds, median):
 *   claim     the frame claims an IP in the responder map (a conflict: counted)
 *   other     the same frame about an IP the node does not hold (one lookup)
 * for ARP and NDP, printed with the ratio claim/other. `--object PATH`
 * (repeatable) times other builds of the program in the same rounds (e.g. one
 * built from an older bpf/l2_responder.bpf.c) beside the current one.
 *
 *   node --import tsx bench/arp/claim-cost.ts [--repeat 20000] [--rounds 5] [--object old.bpf.o] [--json]
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { DEFAULT_OBJECT_PATH, L2ResponderProgram } from '../../src/datapath/l2-responder/program.js';
import { gratuitousRequest } from '../../src/net/arp.js';
import { unsolicitedAdvertisement } from '../../src/net/ndp.js';
import { progTestRun } from '../../src/os/prog-test-run.js';

const args = process.argv.slice(2);
const opt = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const REPEAT = opt('repeat', 20_000);
const ROUNDS = opt('rounds', 5);
const objects = [DEFAULT_OBJECT_PATH, ...args.flatMap((a, i) => (a === '--object' ? [args[i + 1]!] : []))];

/** The test run's skb arrives on loopback (ifindex 1): the program serves it as if it were an Ethernet port. */
const IFINDEX = 1;
const OUR_MAC = '02:00:5e:00:01:01';
const FOREIGN_MAC = '02:00:5e:00:01:99';
const HELD_V4 = '198.51.100.10';
const OTHER_V4 = '198.51.100.11';
const HELD_V6 = '2001:db8:100::10';
const OTHER_V6 = '2001:db8:100::11';

const frames = {
  'arp claim': gratuitousRequest(FOREIGN_MAC, HELD_V4),
  'arp other': gratuitousRequest(FOREIGN_MAC, OTHER_V4),
  'ndp claim': unsolicitedAdvertisement(FOREIGN_MAC, HELD_V6),
  'ndp other': unsolicitedAdvertisement(FOREIGN_MAC, OTHER_V6),
};
type Case = keyof typeof frames;

const pinDirs: string[] = [];
const loaded: Array<{ label: string; program: L2ResponderProgram; pinDir: string }> = [];
const load = (objectPath: string, n: number) => {
  const pinDir = `/sys/fs/bpf/herald/bench-claim-${process.pid}-${n}-${randomBytes(3).toString('hex')}`;
  pinDirs.push(pinDir);
  const program = L2ResponderProgram.load({ pinDir, responderMapSize: 1024, objectPath });
  loaded.push({ label: n === 0 ? 'current' : objectPath, program, pinDir });
  program.maps.interfaces.update(IFINDEX, { mac: OUR_MAC });
  // Other interfaces the node serves (a real node's few), each with its MAC in our_macs where the build has it.
  for (let i = 2; i < 6; i++) program.maps.interfaces.update(100 + i, { mac: `02:00:5e:00:02:0${i}` });
  try {
    for (const [, info] of program.maps.interfaces.entries()) program.maps.ourMacs.update(info.mac, 1);
  } catch {
    /* an older build without our_macs */
  }
  program.maps.responders.update({ ip: HELD_V4, ifindex: IFINDEX }, { replies: 0n, conflicts: 0n });
  program.maps.responders.update({ ip: HELD_V6, ifindex: IFINDEX }, { replies: 0n, conflicts: 0n });
};

const results = new Map<string, Map<Case, number[]>>();
try {
  objects.forEach(load);
  for (let round = 0; round < ROUNDS; round++) {
    // Interleaved, the order turned each round: no build always runs on warmer caches.
    const order = round % 2 === 0 ? loaded : [...loaded].reverse();
    for (const { label, program } of order) {
      const byCase = results.get(label) ?? new Map<Case, number[]>();
      results.set(label, byCase);
      for (const c of Object.keys(frames) as Case[]) {
        const r = progTestRun(program.progFd, frames[c], REPEAT, { skbIfindex: IFINDEX });
        byCase.set(c, [...(byCase.get(c) ?? []), r.durationNs]);
      }
    }
  }
} finally {
  for (const { program } of loaded) program.dispose();
  for (const pinDir of pinDirs) rmSync(pinDir, { recursive: true, force: true });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const table = [...results].map(([label, byCase]) => {
  const m = Object.fromEntries([...byCase].map(([c, xs]) => [c, median(xs)])) as Record<Case, number>;
  return { label, ...m, arpRatio: m['arp claim'] / m['arp other'], ndpRatio: m['ndp claim'] / m['ndp other'] };
});
if (args.includes('--json')) {
  console.log(JSON.stringify({ repeat: REPEAT, rounds: ROUNDS, results: table }, null, 2));
} else {
  console.log(`responder program, ns per frame (BPF_PROG_TEST_RUN, median of ${ROUNDS} rounds × ${REPEAT} runs)`);
  console.log('build'.padEnd(28) + 'arp claim  arp other  claim/other   ndp claim  ndp other  claim/other');
  for (const r of table) {
    console.log(
      r.label.slice(-27).padEnd(28) +
        `${r['arp claim'].toFixed(0).padStart(9)}  ${r['arp other'].toFixed(0).padStart(9)}  ${r.arpRatio.toFixed(2).padStart(10)}×   ` +
        `${r['ndp claim'].toFixed(0).padStart(9)}  ${r['ndp other'].toFixed(0).padStart(9)}  ${r.ndpRatio.toFixed(2).padStart(10)}×`,
    );
  }
  if (table.length > 1) {
    const [cur, ...rest] = table;
    for (const r of rest) console.log(`current / ${r.label.slice(-40)}: arp claim ${(cur!['arp claim'] / r['arp claim']).toFixed(2)}×, ndp claim ${(cur!['ndp claim'] / r['ndp claim']).toFixed(2)}×`);
  }
}
