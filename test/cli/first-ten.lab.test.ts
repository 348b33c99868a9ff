/**
 * A new user's first ten minutes (issue 18), single node and real components:
 * `herald status` / `herald map dump` find the one running agent with no
 * flags (and ask for --node when several run), a missing or empty
 * --manifests path fails at start, a rejected manifest shows in the human
 * status view, and two agents with one --node on one etcd store are refused.
 *
 * The agents with default paths run in a private mount namespace with their
 * own /run/herald (tmpfs) and /sys/fs/bpf/herald (bpffs), so other agents on
 * this machine are not seen and nothing of theirs is touched.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import type { LabEtcd } from '../../lab/etcd.js';
import { EtcdLab } from '../helpers/etcd-lab.js';
import { Lab, type Host, type LabProcess } from '../../lab/lab.js';
import { HERALD, arping, labSkipReason, startAgent, startAgentReady, waitFor } from '../helpers/lab-tools.js';

const MANIFESTS = `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: { name: first-pool }
spec:
  blocks: [{ start: 198.51.100.40, stop: 198.51.100.49 }]
---
apiVersion: cilium.io/v2alpha1
kind: CiliumL2AnnouncementPolicy
metadata: { name: first-policy }
spec:
  loadBalancerIPs: true
  interfaces: ['^eth0$']
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec:
  type: LoadBalancer
  ports: [{ port: 80 }]
`;

/** `herald agent` with no path flags, in its own mount namespace (private /run/herald and bpffs). */
function startPrivateAgent(host: Host, args: string[], label: string, joinMountOf?: LabProcess): LabProcess {
  const agent = [HERALD, 'agent', '--node', host.netns, '--state-dir', host.stateDir, ...args];
  if (joinMountOf) return host.spawn(label, 'nsenter', [`--mount=/proc/${joinMountOf.pid}/ns/mnt`, '--', ...agent]);
  return host.spawn(label, 'unshare', [
    '--mount', '--propagation', 'private', 'sh', '-c',
    'mount -t tmpfs herald-run /run/herald && mount -t bpf herald-bpf /sys/fs/bpf/herald && exec "$@"', 'sh', ...agent,
  ]);
}

/** A herald command in the agent's mount namespace and a host's network namespace. */
function heraldIn(mountOf: LabProcess, host: Host, args: string[]) {
  const r = spawnSync('nsenter', [`--mount=/proc/${mountOf.pid}/ns/mnt`, `--net=/run/netns/${host.netns}`, '--', HERALD, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('a new user\'s first ten minutes (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let dir: string;

  before(() => {
    lab = Lab.create({ nodes: 2, tag: 'ft' });
    dir = mkdtempSync(join(tmpdir(), 'herald-first-'));
    writeFileSync(join(dir, 'all.yaml'), MANIFESTS);
    // Mount points for the private mounts (empty directories on the host).
    mkdirSync('/run/herald', { recursive: true });
    mkdirSync('/sys/fs/bpf/herald', { recursive: true });
  });

  after(async () => {
    await lab?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('status and map dump find the only agent without flags; with two, --node picks one', async (t) => {
    const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
    const t0 = performance.now();
    const a1 = startPrivateAgent(n1, ['--manifests', dir, '--garp-count', '0'], 'agent-private');
    // Agent start → first ARP answer (a measurement for the README, not asserted).
    let firstAnswerMs = -1;
    await waitFor(() => {
      if (arping(lab.client, '198.51.100.40', { count: 1, timeoutS: 1 }).received > 0) firstAnswerMs = performance.now() - t0;
      return firstAnswerMs >= 0;
    }, { timeoutMs: 30_000, what: 'the first ARP answer', abortIf: () => (a1.running ? undefined : a1.text()) });
    t.diagnostic(`agent start → first ARP answer: ${firstAnswerMs.toFixed(0)} ms`);

    const st = heraldIn(a1, n1, ['status', '--json']);
    assert.equal(st.code, 0, st.stderr);
    const status = JSON.parse(st.stdout) as { node: string; owned: Array<{ ip: string }> };
    assert.equal(status.node, n1.netns);
    assert.deepEqual(status.owned.map((o) => o.ip), ['198.51.100.40']);
    const human = heraldIn(a1, n1, ['status']);
    assert.match(human.stdout, /198\.51\.100\.40/);
    const dump = heraldIn(a1, n1, ['map', 'dump', '--json']);
    assert.equal(dump.code, 0, dump.stderr);
    const map = JSON.parse(dump.stdout) as { pinDir: string; entries: Array<{ ip: string }> };
    assert.equal(map.pinDir, `/sys/fs/bpf/herald/${n1.netns}`);
    assert.deepEqual(map.entries.map((e) => e.ip), ['198.51.100.40']);

    // A second agent on the same machine (same mount namespace): the commands ask which.
    const a2 = startPrivateAgent(n2, ['--manifests', dir, '--garp-count', '0'], 'agent-private-2', a1);
    await a2.waitForOutput('agent running', 20_000);
    const ambiguous = heraldIn(a1, n1, ['status']);
    assert.equal(ambiguous.code, 1);
    assert.match(ambiguous.stderr, /several agents run on this machine/);
    assert.ok(ambiguous.stderr.includes(`/run/herald/${n1.netns}.sock`) && ambiguous.stderr.includes(`/run/herald/${n2.netns}.sock`), ambiguous.stderr);
    const ambiguousDump = heraldIn(a1, n1, ['map', 'dump']);
    assert.equal(ambiguousDump.code, 1);
    assert.match(ambiguousDump.stderr, /several agents run on this machine.*--node/);
    const second = heraldIn(a1, n2, ['status', '--json', '--node', n2.netns]);
    assert.equal(second.code, 0, second.stderr);
    assert.equal((JSON.parse(second.stdout) as { node: string }).node, n2.netns);
    const secondDump = heraldIn(a1, n2, ['map', 'dump', '--json', '--node', n2.netns]);
    assert.equal(secondDump.code, 0, secondDump.stderr);
    assert.equal((JSON.parse(secondDump.stdout) as { pinDir: string }).pinDir, `/sys/fs/bpf/herald/${n2.netns}`);

    // A rejected edit is in the human view with file, document, field and reason.
    writeFileSync(join(dir, 'bad.yaml'), 'apiVersion: v1\nkind: Service\nmetadata: { name: bad, namespace: default }\nspec:\n  type: LoadBalancer\n  ports: [{ port: 70000 }]\n');
    await waitFor(() => /intent REJECTED/.test(heraldIn(a1, n1, ['status', '--node', n1.netns]).stdout), { what: 'the rejection in status' });
    const rejected = heraldIn(a1, n1, ['status', '--node', n1.netns]).stdout;
    assert.match(rejected, /bad\.yaml document 1 Service\/default\/bad spec\.ports\[0\]\.port: /);
    rmSync(join(dir, 'bad.yaml'));
    await a2.stop();
    await a1.stop();
  });

  test('a --manifests path that does not exist, or holds no manifest, fails at start', async () => {
    const n1 = lab.nodes[0]!;
    const missing = startAgent(n1, ['--manifests', join(dir, 'no-such-dir')], 'agent-missing');
    assert.equal((await missing.exited).code, 1);
    assert.match(missing.text(), /--manifests .*no-such-dir: no such file or directory/);
    const empty = mkdtempSync(join(tmpdir(), 'herald-empty-'));
    try {
      const none = startAgent(n1, ['--manifests', empty], 'agent-empty');
      assert.equal((await none.exited).code, 1);
      assert.match(none.text(), /no manifest file in it/);
      writeFileSync(join(empty, 'blank.yaml'), '# nothing yet\n');
      const blank = startAgent(n1, ['--manifests', empty], 'agent-blank');
      assert.equal((await blank.exited).code, 1);
      assert.match(blank.text(), /no manifest object in them/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe('one node name per etcd store (lab)', { skip: labSkipReason() }, () => {
  let e: EtcdLab;
  let lab: Lab;
  let etcd: LabEtcd;

  before(async () => {
    e = await EtcdLab.create({ nodes: 2, tag: 'fn' });
    ({ lab, etcd } = e);
  });

  after(async () => {
    await e?.destroy();
  });

  test('a second agent with the same --node is refused; a killed agent restarted at once gets its name back', async () => {
    const [n1, n2] = [lab.nodes[0]!, lab.nodes[1]!];
    const args = ['--store', 'etcd', '--etcd', etcd.endpoint, '--node', 'same-name'];
    const first = await startAgentReady(n1, args, 'agent-first');
    const dup = startAgent(n2, args, 'agent-dup');
    assert.equal((await dup.exited).code, 1);
    assert.match(dup.text(), /HERALD_NODE_NAME_TAKEN/);
    assert.match(dup.text(), /node name same-name is held by another agent/);
    assert.ok(first.running, 'the first agent keeps running');
    // kill -9 leaves the lease alive for up to one TTL: the restart waits it out instead of refusing.
    await first.stop('SIGKILL');
    await startAgentReady(n1, args, 'agent-restarted');
  });
});
