/**
 * Ownership of resources: everything that holds a socket, a timer or a kernel
 * object is a Disposable, and a parent owns its children through a store.
 * dispose() is idempotent and disposes every child even when some throw.
 */
export interface Disposable {
  dispose(): void;
}

export function toDisposable(fn: () => void): Disposable {
  let done = false;
  return {
    dispose() {
      if (done) return;
      done = true;
      fn();
    },
  };
}

export class DisposableStore implements Disposable {
  private readonly items = new Set<Disposable>();
  private disposed = false;

  get isDisposed(): boolean {
    return this.disposed;
  }

  add<T extends Disposable>(item: T): T {
    if (this.disposed) {
      item.dispose();
      throw new Error('DisposableStore: add() after dispose()');
    }
    this.items.add(item);
    return item;
  }

  /** Dispose and forget one child early. */
  delete(item: Disposable): void {
    if (this.items.delete(item)) item.dispose();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    const errors: unknown[] = [];
    // Reverse order: the last resource acquired is released first.
    for (const item of [...this.items].reverse()) {
      try {
        item.dispose();
      } catch (e) {
        errors.push(e);
      }
    }
    this.items.clear();
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateError(errors, 'DisposableStore: several children failed to dispose');
  }
}

/** A map whose values are disposed when replaced or removed. */
export class DisposableMap<K, V extends Disposable> implements Disposable {
  private readonly map = new Map<K, V>();

  get size(): number {
    return this.map.size;
  }
  get(key: K): V | undefined {
    return this.map.get(key);
  }
  has(key: K): boolean {
    return this.map.has(key);
  }
  keys(): IterableIterator<K> {
    return this.map.keys();
  }
  set(key: K, value: V): void {
    const old = this.map.get(key);
    this.map.set(key, value);
    if (old && old !== value) old.dispose();
  }
  deleteAndDispose(key: K): void {
    const old = this.map.get(key);
    if (!old) return;
    this.map.delete(key);
    old.dispose();
  }
  dispose(): void {
    const values = [...this.map.values()];
    this.map.clear();
    for (const v of values) v.dispose();
  }
}
