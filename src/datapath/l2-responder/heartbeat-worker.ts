/**
 * The heartbeat thread's entry (started by heartbeat-thread.ts): stamps
 * CLOCK_MONOTONIC nanoseconds into the runtime_config map every interval,
 * on a thread of its own, so a busy or blocked agent thread (a recompute of
 * thousands of Services, a large store read, a slow log reader) does not
 * silence the node — only a stopped or starved process, or a lease whose
 * validity ran out, does. What it may do is in the shared HeartbeatState;
 * a late tick or a lapse is reported to the agent's thread, which asks the
 * store before the thread stamps again.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { libbpf } from '../../os/libbpf.js';
import { HeartbeatState } from './heartbeat-state.js';

export interface HeartbeatWorkerData {
  buffer: SharedArrayBuffer;
  /** The runtime_config map's descriptor (the process's; the agent keeps it open while the thread runs). */
  mapFd: number;
  key: number;
  intervalMs: number;
  maxAgeMs: number;
}

export type HeartbeatMessage = { kind: 'late'; sleptMs: number } | { kind: 'lapsed' } | { kind: 'failed'; errno: number } | { kind: 'recovered' };

const data = workerData as HeartbeatWorkerData;
const state = new HeartbeatState(data.buffer);
const lib = libbpf();
const key = Buffer.alloc(4);
key.writeUInt32LE(data.key);
const value = Buffer.alloc(8);
const nowMs = () => Number(process.hrtime.bigint() / 1_000_000n);
const post = (m: HeartbeatMessage) => parentPort!.postMessage(m);

let last = nowMs();
let failing = false;

function write(): void {
  value.writeBigUInt64LE(process.hrtime.bigint());
  const rc = lib.mapUpdateElem(data.mapFd, key, value, 0n);
  if (rc < 0) throw Object.assign(new Error(`bpf_map_update_elem: errno ${-rc}`), { errno: -rc });
}

function tick(): void {
  const now = nowMs();
  const slept = now - last;
  last = now;
  const outcome = state.tick(now, slept, data.maxAgeMs, write);
  if (outcome === 'stopped') return; // no timer left: the thread ends
  setTimeout(tick, data.intervalMs);
  if (outcome === 'late') post({ kind: 'late', sleptMs: slept });
  else if (outcome === 'lapsed') post({ kind: 'lapsed' });
  else if (outcome === 'failed' && !failing) {
    failing = true;
    post({ kind: 'failed', errno: (state.lastError as { errno?: number }).errno ?? 0 });
  } else if (outcome === 'stamped' && failing) {
    failing = false;
    post({ kind: 'recovered' });
  }
}

setTimeout(tick, data.intervalMs);
