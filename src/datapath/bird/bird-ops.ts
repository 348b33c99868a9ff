/** Reconciles the bird-config table into the running BIRD (see os/bird.ts). */
import type { ReconcilerOps } from '../../core/reconciler/reconciler.js';
import type { BirdConfigRow } from '../tables/bird-config.js';
import { renderBirdConfig } from './render.js';

/** The part of the BIRD supervisor the reconciler needs. */
export interface BirdTarget {
  /** `gracefulRestart`: some peer negotiates graceful restart (BIRD then starts in recovery and stops for a restart). */
  apply(config: string, opts: { gracefulRestart: boolean }): Promise<void>;
  stop(opts?: { withdraw?: boolean }): Promise<void>;
}

export class BirdOps implements ReconcilerOps<BirdConfigRow> {
  constructor(private readonly bird: BirdTarget) {}

  async update(row: BirdConfigRow): Promise<void> {
    await this.bird.apply(renderBirdConfig(row), { gracefulRestart: row.peers.some((p) => p.gracefulRestart !== undefined) });
  }

  /** No BGP intent left: stop BIRD, which closes every session (peers withdraw, graceful restart or not). */
  async delete(): Promise<void> {
    await this.bird.stop({ withdraw: true });
  }

  prune(): void {}
}
