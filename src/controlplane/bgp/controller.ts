/**
 * The BGP control plane: intent, LB-IPAM results and this node in; the
 * bgp-routes table (host routes) and the bird-config table (BIRD's
 * configuration) out, both written in one transaction and only where a row
 * changed. The reconcilers apply them.
 *
 *   snapshot × ingress × node ─► computeBgpDesired ─► bgp-routes
 *                             └► birdPeers ─► renderBirdConfig ─► bird-config
 */
import type { Logger } from '../../core/logger.js';
import type { Initializer, StateDB } from '../../core/statedb/index.js';
import { birdPeers, renderBirdConfig, type BirdRenderOptions } from '../../datapath/bird/render.js';
import { birdConfigTable } from '../../datapath/tables/bird-config.js';
import { bgpRoutesTable, type BgpRouteRow } from '../../datapath/tables/bgp-routes.js';
import type { NodeIdentity } from '../../intent/node-labels.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import { computeBgpDesired, type BgpPolicyWarning, type Withheld } from './desired.js';

export interface BgpInputs {
  snapshot: IntentSnapshot;
  ingress: ReadonlyMap<string, readonly string[]>;
  node: NodeIdentity;
}

export interface BgpStatus {
  routes: BgpRouteRow[];
  withheld: readonly Withheld[];
  warnings: readonly BgpPolicyWarning[];
}

const sameRow = (a: BgpRouteRow | undefined, b: BgpRouteRow): boolean => a !== undefined && JSON.stringify(a) === JSON.stringify(b);

export class BgpControlPlane {
  private readonly routesInit: Initializer;
  private readonly birdInit: Initializer;
  private last: BgpStatus = { routes: [], withheld: [], warnings: [] };
  private readonly warned = new Set<string>();

  constructor(private readonly deps: { db: StateDB; render: BirdRenderOptions; log: Logger }) {
    // Registered before the reconcilers start: nothing is pruned until intent is in.
    this.routesInit = deps.db.registerInitializer(bgpRoutesTable, 'bgp-control-plane');
    this.birdInit = deps.db.registerInitializer(birdConfigTable, 'bgp-control-plane');
  }

  update(inputs: BgpInputs): void {
    const desired = computeBgpDesired(inputs);
    const { peers, skipped } = birdPeers(inputs.snapshot, inputs.node);
    const warnings = [...desired.warnings, ...skipped];
    for (const w of warnings) {
      const key = `${w.peer}\u0000${w.message}`;
      if (!this.warned.has(key)) this.deps.log.warn(w, 'BGP peer not configured as written');
      this.warned.add(key);
    }
    const routes = [...desired.routes.values()];
    const text = peers.length > 0 ? renderBirdConfig({ peers, routes, options: this.deps.render }) : undefined;
    this.deps.db.update([bgpRoutesTable, birdConfigTable], (t) => {
      for (const old of t.list(bgpRoutesTable)) if (!desired.routes.has(old.prefix)) t.delete(bgpRoutesTable, old);
      for (const r of routes) if (!sameRow(t.get(bgpRoutesTable, r.prefix), r)) t.insert(bgpRoutesTable, r);
      const current = t.get(birdConfigTable, 'bird');
      if (text === undefined) {
        if (current) t.delete(birdConfigTable, current);
      } else if (current?.text !== text) {
        t.insert(birdConfigTable, { name: 'bird', text, peers: peers.map((p) => p.id) });
      }
    });
    this.routesInit.done();
    this.birdInit.done();
    this.last = { routes, withheld: desired.withheld, warnings };
  }

  status(): BgpStatus {
    return this.last;
  }
}
