/**
 * Starts the heartbeat thread (heartbeat-worker.ts) over a HeartbeatState.
 * (core/worker.ts: the compiled module from dist/, the source under tsx).
 */
import { startModuleWorker } from '../../core/worker.js';
import type { HeartbeatState } from './heartbeat-state.js';
import type { HeartbeatMessage, HeartbeatWorkerData } from './heartbeat-worker.js';

const WORKER_JS = new URL('./heartbeat-worker.js', import.meta.url);

export interface HeartbeatThread {
  /** Ends the thread (after the state was stopped: it writes nothing more either way). */
  terminate(): Promise<void>;
}

export interface HeartbeatThreadOptions {
  state: HeartbeatState;
  mapFd: number;
  key: number;
  intervalMs: number;
  maxAgeMs: number;
  onMessage: (m: HeartbeatMessage) => void;
  /** The thread died (it cannot be trusted to stamp any more). */
  onExit: (why: string) => void;
}

export function startHeartbeatThread(opts: HeartbeatThreadOptions): HeartbeatThread {
  const workerData: HeartbeatWorkerData = { buffer: opts.state.buffer, mapFd: opts.mapFd, key: opts.key, intervalMs: opts.intervalMs, maxAgeMs: opts.maxAgeMs };
  // A small heap: the thread holds two buffers and a timer.
  const resourceLimits = { maxOldGenerationSizeMb: 32, maxYoungGenerationSizeMb: 4 };
  const worker = startModuleWorker(WORKER_JS, { workerData, resourceLimits });
  let ending = false;
  const ended = (why: string) => {
    if (ending) return;
    ending = true;
    opts.onExit(why);
  };
  worker.on('message', (m: HeartbeatMessage) => opts.onMessage(m));
  worker.on('error', (e) => ended(`heartbeat thread failed: ${e instanceof Error ? e.message : String(e)}`));
  worker.on('exit', (code) => ended(`heartbeat thread exited (code ${code})`));
  // The thread must not keep a stopping agent alive.
  worker.unref();
  return {
    terminate: async () => {
      ending = true;
      await worker.terminate();
    },
  };
}
