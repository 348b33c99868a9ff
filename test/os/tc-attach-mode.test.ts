/** HERALD_TC_ATTACH: tcx or cls_bpf forces how the tc programs attach; anything else is refused, precisely. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tcAttachModeDetail } from '../../src/os/tc-attach.js';

test('HERALD_TC_ATTACH: a bad value is a coded error, a good one is used as is and kept for the process', () => {
  const saved = process.env.HERALD_TC_ATTACH;
  try {
    process.env.HERALD_TC_ATTACH = 'xdp';
    assert.throws(() => tcAttachModeDetail(), (e: Error & { code?: string }) => e.code === 'HERALD_BAD_ARGUMENT' && /HERALD_TC_ATTACH="xdp": expected tcx or cls_bpf/.test(e.message));
    process.env.HERALD_TC_ATTACH = 'cls_bpf';
    assert.deepEqual(tcAttachModeDetail(), { mode: 'cls_bpf', reason: 'HERALD_TC_ATTACH' });
    process.env.HERALD_TC_ATTACH = 'tcx';
    assert.equal(tcAttachModeDetail().mode, 'cls_bpf', 'decided once per process');
  } finally {
    if (saved === undefined) delete process.env.HERALD_TC_ATTACH;
    else process.env.HERALD_TC_ATTACH = saved;
  }
});
