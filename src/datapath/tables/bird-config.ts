/**
 * The BIRD configuration table: one row, the rendered bird.conf. Written by
 * the BGP control plane, applied by the BIRD reconciler (its status on the
 * row says whether BIRD took it).
 */
import { defineTable } from '../../core/statedb/index.js';

export interface BirdConfigRow {
  readonly name: 'bird';
  readonly text: string;
  /** Peers configured ("clusterConfig/instance/peer"), for status. */
  readonly peers: readonly string[];
}

export const birdConfigTable = defineTable<BirdConfigRow>({
  name: 'bird-config',
  primaryKey: (r) => r.name,
  columns: ['NAME', 'PEERS', 'LINES'],
  toColumns: (r) => [r.name, r.peers.join(','), String(r.text.split('\n').length)],
});
