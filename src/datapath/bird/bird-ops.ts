/** Reconciles the bird-config table into the running BIRD (see os/bird.ts). */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import type { BirdConfigRow } from '../tables/bird-config.js';
import { renderBirdConfig } from './render.js';

/** The part of the BIRD supervisor the reconciler needs. */
export interface BirdTarget {
  apply(config: string): Promise<void>;
  stop(): Promise<void>;
}

export class BirdOps implements ReconcilerOps<BirdConfigRow> {
  constructor(private readonly bird: BirdTarget) {}

  async update(row: BirdConfigRow): Promise<void> {
    await this.bird.apply(renderBirdConfig(row));
  }

  /** No BGP intent left: stop BIRD, which closes every session (peers withdraw). */
  async delete(): Promise<void> {
    await this.bird.stop();
  }

  prune(): void {}
}
