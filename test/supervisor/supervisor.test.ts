/**
 * The supervisor against a fake etcd JSON gateway and a stand-in child: a
 * child killed with SIGKILL has the leases it reported revoked, after its
 * death and only then; a child that exits by itself is treated the same; the
 * supervisor leaves with the child's status.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { runSupervisor } from '../../src/supervisor/supervisor.js';
import { parseReport } from '../../src/supervisor/protocol.js';

let server: Server;
let endpoint: string;
const revoked: Array<{ id: string; childAlive: boolean }> = [];
/** Gateway calls in order: `put <key> <value>` and `revoke <id>`. */
const calls: string[] = [];
let childPid = 0;
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const dir = mkdtempSync(join(tmpdir(), 'herald-supervisor-'));

before(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (req.url === '/v3/kv/put') {
        const put = JSON.parse(body) as { key: string; value: string };
        calls.push(`put ${Buffer.from(put.key, 'base64').toString()} ${Buffer.from(put.value, 'base64').toString()}`);
        return res.writeHead(200).end('{}');
      }
      assert.equal(req.url, '/v3/lease/revoke');
      calls.push(`revoke ${(JSON.parse(body) as { ID: string }).ID}`);
      const id = (JSON.parse(body) as { ID: string }).ID;
      revoked.push({ id, childAlive: alive(childPid) });
      if (id === '404') {
        res.writeHead(400).end('{"error":"etcdserver: requested lease not found","code":5}');
      } else res.writeHead(200).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A stand-in agent: reports leases on fd 3, then waits to be killed or exits with `code`. */
const childScript = (leases: string[], then: 'wait' | number, journal?: string) => `
  const fs = require('node:fs');
  for (const l of ${JSON.stringify(leases)}) fs.writeSync(Number(process.env.HERALD_SUPERVISOR_FD), 'lease ' + l + '\\n');
  ${journal ? `fs.writeSync(Number(process.env.HERALD_SUPERVISOR_FD), 'journal ${journal}\\n');` : ''}
  ${then === 'wait' ? 'setInterval(() => {}, 1000);' : `process.exit(${then});`}
`;

test('reports are lease lines and one journal prefix', () => {
  assert.deepEqual(parseReport('lease 7587874431234\n'), { lease: '7587874431234' });
  assert.deepEqual(parseReport('journal /herald/view/events/n1/\n'), { journal: '/herald/view/events/n1/' });
  assert.equal(parseReport('journal has spaces/ x/'), undefined);
  assert.equal(parseReport('lease abc'), undefined);
  assert.equal(parseReport('hello'), undefined);
  // Kubernetes store: the node Lease and its incarnation.
  assert.deepEqual(parseReport('kube-lease herald-system/node-n1.example 2b1f0c3e-1d2a-4b5c-8d9e-0f1a2b3c4d5e\n'), {
    kubeLease: { namespace: 'herald-system', name: 'node-n1.example', incarnation: '2b1f0c3e-1d2a-4b5c-8d9e-0f1a2b3c4d5e' },
  });
  assert.equal(parseReport('kube-lease Herald/node-n1 x'), undefined, 'not a DNS-1123 namespace');
  assert.equal(parseReport('kube-lease ns/node-n1'), undefined, 'no incarnation');
  assert.equal(parseReport('kube-lease ns/../x abc'), undefined);
  assert.equal(parseReport(`kube-lease ns/node-n1 ${'a'.repeat(65)}`), undefined, 'bounded');
});

test('kill -9 of the child: the crash goes on the timeline first, then the lease is revoked; each step says how long after the death it ended', async (t) => {
  calls.length = 0;
  const lines: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    lines.push(String(chunk));
    return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write;
  t.after(() => {
    process.stderr.write = write;
  });
  const run = runSupervisor({ command: process.execPath, args: ['-e', childScript(['21'], 'wait', '/herald/view/events/n1/')], pinDir: join(dir, 'none'), endpoints: [endpoint] });
  await new Promise((r) => setTimeout(r, 500));
  const pids = (await import('node:child_process')).execFileSync('pgrep', ['-P', String(process.pid), '-f', 'HERALD_SUPERVISOR_FD']).toString().trim().split('\n');
  childPid = Number(pids[0]);
  process.kill(childPid, 'SIGKILL');
  assert.equal(await run, 128 + 9);
  assert.equal(calls.length, 2, calls.join('\n'));
  assert.match(calls[0]!, /^put \/herald\/view\/events\/n1\/\d{20} \{"kind":"node-crashed","signal":"SIGKILL","at":"[^"]+"\}$/);
  assert.equal(calls[1], 'revoke 21');
  const text = lines.join('');
  assert.match(text, /herald supervisor: crash recorded on the timeline \(\+\d+ ms\)\n/);
  assert.match(text, /herald supervisor: revoked lease 21 \(\+\d+ ms\)\n/);
});

test('kill -9 of the child: every reported lease is revoked after its death, and the supervisor leaves with 128+9', async () => {
  revoked.length = 0;
  const run = runSupervisor({ command: process.execPath, args: ['-e', childScript(['11', '12'], 'wait')], pinDir: join(dir, 'none'), endpoints: [endpoint] });
  // The child is up once its reports could be written; find it through the supervisor's own line.
  await new Promise((r) => setTimeout(r, 500));
  const pids = (await import('node:child_process')).execFileSync('pgrep', ['-P', String(process.pid), '-f', 'HERALD_SUPERVISOR_FD']).toString().trim().split('\n');
  childPid = Number(pids[0]);
  process.kill(childPid, 'SIGKILL');
  assert.equal(await run, 128 + 9);
  assert.deepEqual(revoked.map((r) => r.id).sort(), ['11', '12']);
  assert.ok(revoked.every((r) => !r.childAlive), 'a lease revoked while the child still ran');
});

test('a child that exits by itself: its lease is revoked too (already gone is fine); its exit code is kept', async () => {
  revoked.length = 0;
  const code = await runSupervisor({ command: process.execPath, args: ['-e', childScript(['404'], 3)], pinDir: join(dir, 'none'), endpoints: ['http://127.0.0.1:1', endpoint] });
  assert.equal(code, 3);
  assert.deepEqual(revoked.map((r) => r.id), ['404']);
});

test("the agent's end: the supervisor's death (fd 3 closing) reaches onSupervisorGone", async () => {
  const { spawn } = await import('node:child_process');
  const link = new URL('../../src/supervisor/child.ts', import.meta.url).pathname;
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '-e', `import('${link}').then(({ SupervisorLink }) => { const l = SupervisorLink.fromEnv(); l.onSupervisorGone(() => { console.log('gone'); process.exit(0); }); setInterval(() => {}, 1000); console.log('ready'); })`],
    { stdio: ['ignore', 'pipe', 'inherit', 'pipe'], env: { ...process.env, HERALD_SUPERVISOR_FD: '3' } },
  );
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  await new Promise<void>((r) => {
    const t = setInterval(() => out.includes('ready') && (clearInterval(t), r()), 20);
  });
  const channel = child.stdio[3] as import('node:net').Socket;
  channel.destroy(); // as if the supervisor died
  const code = await new Promise((r) => child.once('exit', (c) => r(c)));
  assert.equal(code, 0);
  assert.match(out, /gone/);
});
