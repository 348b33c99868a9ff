/**
 * A set of parked promises woken together: the building block of watch(),
 * iterator.wait() and whenInitialized(). Each wait can be cancelled by an
 * AbortSignal, which rejects it with the signal's reason and removes the
 * listener either way, so no waiter or listener outlives its caller.
 */
export class Waiters {
  private readonly pending = new Set<() => void>();

  get size(): number {
    return this.pending.size;
  }

  wait(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        this.pending.delete(wake);
        reject(signal?.reason);
      };
      const wake = (): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      this.pending.add(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  wakeAll(): void {
    const woken = [...this.pending];
    this.pending.clear();
    for (const wake of woken) wake();
  }
}

/** Waits on `waiters` until `ready()` holds; checks first, so it never misses a state already reached. */
export async function waitUntil(waiters: Waiters, ready: () => boolean, signal?: AbortSignal): Promise<void> {
  while (!ready()) await waiters.wait(signal);
}
