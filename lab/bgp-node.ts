/**
 * One herald BGP node for lab tests, in a named network namespace: the BGP
 * control plane, the host-route and BIRD reconcilers, and its own BIRD — the
 * agent's BGP pieces without the rest of the agent.
 */
import assert from 'node:assert/strict';
import { systemClock } from '../src/core/clock.js';
import { silentLogger } from '../src/core/logger.js';
import { Reconciler, reconcilerDefaults } from '../src/core/reconciler/reconciler.js';
import { StateDB } from '../src/core/statedb/index.js';
import { BgpControlPlane } from '../src/controlplane/bgp/controller.js';
import { BirdOps } from '../src/datapath/bird/bird-ops.js';
import { renderBirdConfig } from '../src/datapath/bird/render.js';
import { HostRoutesOps } from '../src/datapath/routes/host-routes-ops.js';
import { birdConfigTable, type BfdOptions, type BirdConfigRow } from '../src/datapath/tables/bird-config.js';
import { bgpRoutesTable, type BgpRouteRow } from '../src/datapath/tables/bgp-routes.js';
import { parseManifests, type IntentSnapshot } from '../src/intent/index.js';
import { BirdDaemon, birdDefaults } from '../src/os/bird.js';
import { NetlinkHostRoutes } from '../src/os/host-routes.js';

export class HeraldBgpNode {
  readonly db = new StateDB([bgpRoutesTable, birdConfigTable]);
  readonly bird: BirdDaemon;
  readonly control: BgpControlPlane;
  readonly routes: Reconciler<BgpRouteRow>;
  readonly birdReconciler: Reconciler<BirdConfigRow>;
  private readonly hostRoutes: NetlinkHostRoutes;

  constructor(
    readonly opts: { netns: string; nodeName: string; routerId: string; stateDir: string; ingress: ReadonlyMap<string, readonly string[]>; bfd?: BfdOptions; /** Tick-only reconcilers (the agent's --bgp-tick-only). */ tickMs?: number },
  ) {
    this.bird = new BirdDaemon({ ...birdDefaults, stateDir: opts.stateDir, netns: opts.netns }, { clock: systemClock, log: silentLogger });
    this.control = new BgpControlPlane({
      db: this.db,
      bird: { routerId: opts.routerId, connectDelaySeconds: 1, errorWaitSeconds: [1, 5], ...(opts.bfd ? { bfd: opts.bfd } : {}) },
      log: silentLogger,
    });
    const common = { db: this.db, clock: systemClock, log: silentLogger };
    const config = opts.tickMs ? { ...reconcilerDefaults, tickMs: opts.tickMs } : reconcilerDefaults;
    this.routes = new Reconciler<BgpRouteRow>({ ...common, name: 'host-routes', table: bgpRoutesTable, ops: new HostRoutesOps((this.hostRoutes = new NetlinkHostRoutes({ netns: opts.netns }))) }, config);
    this.birdReconciler = new Reconciler<BirdConfigRow>({ ...common, name: 'bird', table: birdConfigTable, ops: new BirdOps(this.bird) }, config);
    this.routes.start();
    this.birdReconciler.start();
  }

  /** Applies manifests text as the node's intent and waits until routes and BIRD hold it. */
  async set(text: string | IntentSnapshot): Promise<void> {
    const snapshot = typeof text === 'string' ? parse(text) : text;
    this.control.update({ snapshot, ingress: this.opts.ingress, node: { name: this.opts.nodeName, labels: {} } });
    const a = await this.routes.settled();
    const b = await this.birdReconciler.settled();
    assert.deepEqual([...a.failed, ...b.failed], []);
  }

  /** The bird.conf in force, for failure messages. */
  birdConf(): string {
    const row = this.db.readTxn().get(birdConfigTable, 'bird');
    return row ? renderBirdConfig(row) : '(none)';
  }

  async stop(): Promise<void> {
    await this.routes.dispose();
    await this.birdReconciler.dispose();
    this.hostRoutes.dispose();
    await this.bird.stop();
  }
}

/** Manifests text → snapshot; throws on any error. */
export function parse(text: string): IntentSnapshot {
  const load = parseManifests(text, 'lab.yaml');
  assert.deepEqual(load.errors, []);
  return load.snapshot!;
}
