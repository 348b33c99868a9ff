/** In-memory edges of the liveness writer for its unit tests: runtime_config and the liveness gate. */
import type { BpfMap } from '../../src/os/bpf-map.js';

/** runtime_config in memory; `fail` makes every write throw. */
export function fakeConfig() {
  const m = new Map<number, bigint>();
  const ctl = { fail: false, writes: 0 };
  const map = {
    update(k: number, v: bigint) {
      if (ctl.fail) throw new Error('EPERM');
      ctl.writes++;
      m.set(k, v);
    },
    lookup: (k: number) => m.get(k),
  } as unknown as BpfMap<number, bigint>;
  return { map, m, ctl };
}

/** A gate whose validity the test sets and whose re-checks it answers (or not). */
export function testGate(opts: { until?: number; autoAnswer?: boolean; reject?: boolean } = {}) {
  const asked: Array<{ why: string; done: () => void }> = [];
  const gate = {
    until: opts.until ?? Infinity,
    answerUntilMs: () => gate.until,
    recheck: (why: string) =>
      new Promise<void>((resolve, reject) => {
        asked.push({ why, done: resolve });
        if (opts.reject) reject(new Error('store unreachable'));
        else if (opts.autoAnswer) resolve();
      }),
  };
  return { gate, asked };
}

export const settled = async () => {
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
};
