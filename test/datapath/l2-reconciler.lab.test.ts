/**
 * The reconciler against the real pinned BPF map, answered over a real wire:
 * a table row makes the node answer arping, deleting it stops the answers.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { Lab, waitFor, type Host } from '../../lab/lab.js';
import { ROOT, arping, labSkipReason, mapDump } from '../helpers/lab-tools.js';

class Driver {
  private out = '';
  private readonly child;
  constructor(host: Host) {
    this.child = spawn('nsenter', [`--net=/run/netns/${host.netns}`, '--', process.execPath, '--import', 'tsx', `${ROOT}test/tools/l2-driver.ts`, host.pinDir], {
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd: ROOT,
    });
    this.child.stdout.on('data', (d: Buffer) => (this.out += d.toString()));
    this.child.stderr.on('data', (d: Buffer) => (this.out += d.toString()));
  }
  async ready(): Promise<void> {
    await waitFor(() => this.out.includes('ready'), { timeoutMs: 20_000, what: 'driver ready', onTimeout: () => this.out });
  }
  async send(cmd: string): Promise<void> {
    this.child.stdin.write(cmd + '\n');
    await waitFor(() => this.out.includes(`ok ${cmd}`), { timeoutMs: 10_000, what: cmd, onTimeout: () => this.out });
  }
  stop(): void {
    this.child.kill('SIGKILL');
  }
}

describe('reconciler with the real BPF map (lab)', { skip: labSkipReason() }, () => {
  let lab: Lab;
  let driver: Driver;
  before(async () => {
    lab = Lab.create({ nodes: 1, tag: 'rc' });
    driver = new Driver(lab.nodes[0]!);
    await driver.ready();
  });
  after(async () => {
    driver?.stop();
    await lab?.destroy();
  });

  test('inserting a row makes the IP answered; deleting it stops the answers', async () => {
    const node = lab.nodes[0]!;
    assert.equal(arping(lab.client, '198.51.100.60', { count: 1 }).received, 0);
    await driver.send('add 198.51.100.60 eth0 svc:a');
    const r = arping(lab.client, '198.51.100.60', { count: 2 });
    assert.equal(r.received, 2, r.output);
    assert.deepEqual(new Set(r.macs), new Set([node.mac('eth0')]));
    assert.equal(mapDump(node).entries.length, 1);

    await driver.send('add 198.51.100.60 eth0 svc:b'); // a second origin
    await driver.send('del 198.51.100.60 eth0 svc:a'); // one origin left: still answered
    assert.equal(arping(lab.client, '198.51.100.60', { count: 1 }).received, 1);
    await driver.send('del 198.51.100.60 eth0 svc:b');
    assert.equal(arping(lab.client, '198.51.100.60', { count: 2 }).received, 0);
    assert.deepEqual(mapDump(node).entries, []);
  });
});
