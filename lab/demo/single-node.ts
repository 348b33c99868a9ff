/**
 * The single-node demo: a client and one node in a throw-away lab; herald's
 * agent on the node answers ARP for a service IP that is on no interface.
 * Run with `bash scripts/demo.sh` (installs and builds first).
 */
import { fileURLToPath } from 'node:url';
import { Lab } from '../lab.js';

const HERALD = fileURLToPath(new URL('../../bin/herald', import.meta.url));
const VIP = '198.51.100.10';

const step = (s: string) => process.stdout.write(`\n==> ${s}\n`);
const show = (s: string) => process.stdout.write(s.replace(/^/gm, '    ') + (s.endsWith('\n') ? '' : '\n'));

async function main(): Promise<void> {
  step('building a lab: a client (192.0.2.1) and a node n1 (192.0.2.11) on one bridge');
  const lab = Lab.create({ nodes: 1, tag: 'demo' });
  try {
    const node = lab.nodes[0]!;
    step(`starting herald on n1: serve eth0, answer ARP for ${VIP} (not configured on any interface)`);
    const agent = node.spawn('agent', HERALD, [
      'agent', '--node', node.name, '--bpf-pin-dir', node.pinDir, '--state-dir', node.stateDir, '--status-socket', node.statusSocket,
      '--announce', `${VIP}@eth0`,
    ]);
    await agent.waitForOutput('agent running', 20_000);
    show(`agent running (pid ${agent.pid}); n1's eth0 MAC is ${node.mac('eth0')}`);

    step(`client: arping ${VIP}`);
    show(lab.client.exec('arping', ['-c', '3', '-w', '4', '-I', 'eth0', VIP]).stdout);
    step(`client: the kernel resolves ${VIP} too (ping sends one packet; nothing serves ICMP on it yet)`);
    lab.client.exec('ping', ['-c', '1', '-W', '1', VIP]);
    show(lab.client.must('ip', ['neigh', 'show', VIP]));

    step('n1: herald map dump (read live from the pinned BPF map)');
    show(node.must(HERALD, ['map', 'dump', '--bpf-pin-dir', node.pinDir]));

    step('stopping the agent: without its heartbeat the datapath goes silent once the heartbeat is older than its limit (3 s with the local store)');
    agent.signal('SIGSTOP');
    await new Promise((r) => setTimeout(r, 3500));
    show(lab.client.exec('arping', ['-c', '2', '-w', '2', '-I', 'eth0', VIP]).stdout);
    agent.signal('SIGCONT');
    await agent.stop();
  } finally {
    step('tearing the lab down');
    await lab.destroy();
  }
  process.stdout.write('\ndone.\n');
}

main().catch((e) => {
  process.stderr.write(`demo failed: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
