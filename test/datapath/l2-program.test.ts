/**
 * L2ResponderProgram's own rules that need no interface: a missing object is
 * refused before anything touches bpffs, and a loaded program (root: real
 * object, pins in a directory of its own) closes once and refuses to attach
 * after. Attaching, detaching and pin mismatches are the lab tests' part.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { isHeraldError } from '../../src/core/errors.js';
import { DEFAULT_OBJECT_PATH, L2ResponderProgram } from '../../src/datapath/l2-responder/program.js';

/** build/bpf/ beside the sources, or the nearest above a copy of the tree (Stryker's sandbox leaves build/ out). */
function objectPath(): string {
  if (existsSync(DEFAULT_OBJECT_PATH)) return DEFAULT_OBJECT_PATH;
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const candidate = join(dir, 'build', 'bpf', 'l2_responder.bpf.o');
    if (existsSync(candidate)) return candidate;
  }
  return DEFAULT_OBJECT_PATH;
}

test('a missing object is refused with HERALD_BPF_LOAD before the pin directory is made', () => {
  const pinDir = `/sys/fs/bpf/herald/hlpm${process.pid}-${randomBytes(4).toString('hex')}`;
  assert.throws(
    () => L2ResponderProgram.load({ pinDir, responderMapSize: 4, objectPath: '/nonexistent/l2_responder.bpf.o' }),
    (e) => isHeraldError(e, 'HERALD_BPF_LOAD') && (e as Error).message === 'BPF object /nonexistent/l2_responder.bpf.o is missing (run npm run build)',
  );
  assert.equal(existsSync(pinDir), false);
});

test('a loaded program closes once (a second dispose is a no-op) and refuses to attach once closed', { skip: process.getuid?.() !== 0 ? 'needs root (BPF)' : false }, () => {
  const pinDir = `/sys/fs/bpf/herald/hlpg${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    const program = L2ResponderProgram.load({ pinDir, responderMapSize: 4, objectPath: objectPath() });
    assert.ok(program.progFd > 0 && program.conflictEventsFd > 0);
    assert.equal(program.maps.responders.info().maxEntries, 4, 'the configured size');
    program.dispose();
    program.dispose();
    assert.throws(() => program.attach(1), (e) => isHeraldError(e, 'HERALD_STOPPED') && (e as Error).message === 'L2 responder program is closed');
  } finally {
    rmSync(pinDir, { recursive: true, force: true });
  }
});
