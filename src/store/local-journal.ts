/**
 * The cluster view's timeline without a shared store: the ring (ids from a
 * counter seeded by the clock, increasing across restarts), kept in a state
 * file next to the local LB-IPAM state so that the view survives an agent
 * restart in local-store mode too.
 *
 * Writes are coalesced: the ring is saved (atomically, through StateFile) at
 * most every `flushMs` after a change, and once more when the agent stops; a
 * crash loses at most the last `flushMs` of events. The file holds at most
 * the ring's capacity (2,000 events); entries it cannot read are skipped, a
 * corrupt file is set aside with a warning (the timeline is not worth
 * refusing to start over).
 */
import { rename } from 'node:fs/promises';
import { z } from 'zod';
import { describeError } from '../core/errors.js';
import { EventRing, eventRingDefaults, type ClusterEvent, type EventBody, type EventJournal } from '../core/events.js';
import type { Logger } from '../core/logger.js';
import { StateFile } from '../os/state-file.js';

const storedEvent = z.looseObject({ id: z.number().int().positive(), node: z.string().max(253), at: z.string().max(64), kind: z.string().max(64) });
const storedEvents = z.array(z.unknown()).max(eventRingDefaults.capacity * 2);

export interface FileJournalOptions {
  flushMs: number;
}

export const fileJournalDefaults: FileJournalOptions = { flushMs: 500 };

export class FileJournal implements EventJournal {
  readonly ring = new EventRing(eventRingDefaults);
  private next = Date.now();
  private readonly file: StateFile<unknown[]>;
  private timer: NodeJS.Timeout | undefined;
  private started = false;

  constructor(
    private readonly node: string,
    private readonly path: string,
    private readonly log: Logger,
    private readonly opts: FileJournalOptions = fileJournalDefaults,
  ) {
    this.file = new StateFile({ path, schema: storedEvents });
  }

  /** Reads the kept timeline (the state directory exists by now). */
  async start(): Promise<void> {
    let stored: unknown[] = [];
    try {
      stored = (await this.file.load()) ?? [];
    } catch (e) {
      this.log.warn({ err: describeError(e), path: this.path }, 'cluster view: the kept timeline is unreadable; set aside, starting a new one');
      await rename(this.path, `${this.path}.corrupt`).catch(() => {});
    }
    const events = stored.flatMap((x) => {
      const r = storedEvent.safeParse(x);
      return r.success ? [r.data as unknown as ClusterEvent] : [];
    });
    events.sort((a, b) => a.id - b.id);
    // Called before anything is recorded (the ring takes ids in increasing order only).
    this.ring.add(...events);
    this.next = Math.max(this.next, this.ring.last);
    this.started = true;
  }

  record(body: EventBody): Promise<void> {
    this.next = Math.max(this.next + 1, Date.now());
    this.ring.add({ ...body, id: this.next, node: this.node, at: new Date().toISOString() } as ClusterEvent);
    this.schedule();
    return Promise.resolve();
  }

  private schedule(): void {
    if (this.timer || !this.started) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, this.opts.flushMs);
    this.timer.unref();
  }

  /** Saves the ring now (the agent calls it when it stops). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.started) return;
    try {
      await this.file.save([...this.ring.list()]);
    } catch (e) {
      this.log.warn({ err: describeError(e), path: this.path }, 'cluster view: keeping the timeline failed');
    }
  }
}
