/**
 * The "initialized" flag of a table. Every source that fills the table
 * registers an initializer and marks it done once its first full listing is
 * in; the table is initialized when none is pending. Reconcilers prune kernel
 * state only after that, which is what makes a hitless restart possible:
 * a half-filled table must never read as "these entries are unwanted".
 */
import { HeraldError } from '../errors.js';
import { Waiters, waitUntil } from './waiters.js';

export interface Initializer {
  readonly name: string;
  /** Marks this source as done; idempotent. */
  done(): void;
}

export class InitTracker {
  private readonly pending = new Set<string>();
  private readonly waiters = new Waiters();
  // Set once anyone has seen the table initialized. Registering after that
  // would let a reconciler that already pruned believe the table was complete.
  private observedInitialized = false;

  constructor(private readonly tableName: string) {}

  get pendingNames(): string[] {
    return [...this.pending].sort();
  }

  register(name: string): Initializer {
    if (this.observedInitialized) {
      throw new HeraldError(
        'HERALD_BAD_ARGUMENT',
        `table ${this.tableName} is already initialized; register initializer ${JSON.stringify(name)} before anyone reads it`,
      );
    }
    if (this.pending.has(name)) {
      throw new HeraldError('HERALD_BAD_ARGUMENT', `table ${this.tableName} already has a pending initializer ${JSON.stringify(name)}`);
    }
    this.pending.add(name);
    let done = false;
    return {
      name,
      done: () => {
        if (done) return;
        done = true;
        this.pending.delete(name);
        if (this.pending.size === 0) this.waiters.wakeAll();
      },
    };
  }

  isInitialized(): boolean {
    if (this.pending.size > 0) return false;
    this.observedInitialized = true;
    return true;
  }

  whenInitialized(signal?: AbortSignal): Promise<void> {
    return waitUntil(this.waiters, () => this.isInitialized(), signal);
  }
}
