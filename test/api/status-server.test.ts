/**
 * Status socket safety (issue 9): --status-socket never deletes what is not
 * a socket, never takes over a socket another agent serves, replaces only a
 * stale one, is never reachable with permissions wider than 0600, and on
 * dispose removes only the socket it created.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { after, before, describe, it } from 'node:test';
import { StatusServer, fetchStatus } from '../../src/api/status-server.js';
import { isHeraldError } from '../../src/core/errors.js';

let dir = '';
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'herald-sock-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
const freshPath = (): string => join(dir, `s${++n}.sock`);

/** A socket file nobody listens on, as a SIGKILLed agent leaves behind. */
function staleSocket(path: string): void {
  const r = spawnSync('python3', ['-c', 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])', path]);
  assert.equal(r.status, 0, r.stderr.toString());
  assert.ok(lstatSync(path).isSocket());
}

const refusedWith = (pattern: RegExp) => (e: unknown) => isHeraldError(e, 'HERALD_STATUS_SOCKET') && pattern.test(e.message);

describe('StatusServer socket safety', () => {
  it('never deletes a regular file at the socket path: refuses, and the file is untouched', async () => {
    const path = freshPath();
    writeFileSync(path, 'precious data\n');
    const server = new StatusServer(path, () => ({}));
    await assert.rejects(server.start(), refusedWith(/is a regular file, not a socket; refusing to replace it/));
    assert.equal(readFileSync(path, 'utf8'), 'precious data\n');
    server.dispose();
    assert.equal(readFileSync(path, 'utf8'), 'precious data\n', 'dispose after a failed start removes nothing');
  });

  it('refuses a directory and a symlink (even one to a socket), leaving them as they were', async () => {
    const d = freshPath();
    mkdirSync(d);
    await assert.rejects(new StatusServer(d, () => ({})).start(), refusedWith(/is a directory, not a socket/));
    assert.ok(lstatSync(d).isDirectory());

    const target = freshPath();
    staleSocket(target);
    const link = freshPath();
    symlinkSync(target, link);
    await assert.rejects(new StatusServer(link, () => ({})).start(), refusedWith(/is a symbolic link, not a socket/));
    assert.equal(readlinkSync(link), target);
    assert.ok(lstatSync(target).isSocket());
  });

  it('refuses to start on a socket another agent is serving, which keeps serving', async () => {
    const path = freshPath();
    const first = new StatusServer(path, () => ({ agent: 'first' }));
    await first.start();
    try {
      const second = new StatusServer(path, () => ({ agent: 'second' }));
      await assert.rejects(second.start(), refusedWith(new RegExp(`^another agent is serving ${path}`)));
      second.dispose();
      assert.deepEqual(await fetchStatus(path), { agent: 'first' });
    } finally {
      first.dispose();
    }
  });

  it('replaces a stale socket (nobody answers on it)', async () => {
    const path = freshPath();
    staleSocket(path);
    const server = new StatusServer(path, () => ({ ok: true }));
    await server.start();
    try {
      assert.deepEqual(await fetchStatus(path), { ok: true });
    } finally {
      server.dispose();
    }
  });

  it('the socket is 0600 from the first moment it exists at its path, whatever the umask, and the umask is left alone', async () => {
    const path = freshPath();
    // Another thread watches the path while the server starts, recording every mode it sees.
    const watcher = new Worker(
      `const { lstatSync } = require('node:fs'); const { parentPort, workerData } = require('node:worker_threads');
       const seen = new Set(); let stop = false; parentPort.on('message', () => { stop = true; });
       parentPort.postMessage('ready');
       (function poll() { const end = Date.now() + 20; while (Date.now() < end) { try { seen.add(lstatSync(workerData).mode); } catch {} }
         if (stop) parentPort.postMessage([...seen]); else setImmediate(poll); })();`,
      { eval: true, workerData: path },
    );
    await new Promise((resolve) => watcher.once('message', resolve));
    const umask = process.umask(0); // the most permissive umask: a socket bound in place would be 0777
    const server = new StatusServer(path, () => ({}));
    try {
      await server.start();
      assert.equal(process.umask(), 0, 'the umask is not changed by start()');
      assert.equal(lstatSync(path).mode & 0o777, 0o600);
    } finally {
      process.umask(umask);
    }
    await new Promise((r) => setTimeout(r, 50));
    watcher.postMessage('stop');
    const modes = (await new Promise((resolve) => watcher.once('message', resolve))) as number[];
    await watcher.terminate();
    server.dispose();
    assert.ok(modes.length > 0, 'the watcher saw the socket');
    assert.deepEqual(modes.map((m) => (m & 0o777).toString(8)), ['600']);
  });

  it('dispose removes its own socket, and not one that replaced it', async () => {
    const path = freshPath();
    const server = new StatusServer(path, () => ({}));
    await server.start();
    server.dispose();
    assert.throws(() => lstatSync(path), /ENOENT/);

    const other = new StatusServer(path, () => ({}));
    await other.start();
    unlinkSync(path);
    staleSocket(path); // someone else's socket now
    const theirs = lstatSync(path).ino;
    other.dispose();
    assert.equal(lstatSync(path).ino, theirs);
  });
});
