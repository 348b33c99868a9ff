/**
 * The BGP control plane: intent, LB-IPAM results and this node in; the
 * bgp-routes table (host routes) and the bird-config table (BIRD's
 * configuration) out, both written in one transaction and only where a row
 * changed. The reconcilers apply them.
 *
 *   snapshot × ingress × node ─► computeBgpDesired ─► bgp-routes
 *                             └► birdPeers ─────────► bird-config (rendered by the datapath)
 */
import type { Logger } from '../../core/logger.js';
import type { Initializer, StateDB, WriteTxn } from '../../core/statedb/index.js';
import { birdConfigTable, type BirdConfigRow } from '../../datapath/tables/bird-config.js';
import { bgpRoutesTable, type BgpRouteRow } from '../../datapath/tables/bgp-routes.js';
import type { NodeIdentity } from '../../intent/node-labels.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import { BgpDesiredEngine, type BgpPolicyWarning, type Withheld } from './desired.js';
import { AdvertisedRoutes, birdPeers } from './peers.js';

/**
 * What BIRD is told besides the peers: router ID, BFD, retry knobs; `fragment`
 * for an operator-run BIRD (the advertised prefixes then go into the row).
 */
export type BirdSettings = Omit<BirdConfigRow, 'name' | 'peers' | 'fragment'> & { fragment?: boolean };

export interface BgpInputs {
  snapshot: IntentSnapshot;
  ingress: ReadonlyMap<string, readonly string[]>;
  node: NodeIdentity;
  /** Local backends failing their health check ("namespace/name|address"). */
  unhealthy?: ReadonlySet<string>;
}

export interface BgpStatus {
  routes: BgpRouteRow[];
  withheld: readonly Withheld[];
  warnings: readonly BgpPolicyWarning[];
}

const sameList = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);
/** Field by field (a JSON.stringify per row was most of a pass at 10,000 routes). */
const sameRow = (a: BgpRouteRow | undefined, b: BgpRouteRow): boolean =>
  a !== undefined && a.ip === b.ip && a.prefix === b.prefix && sameList(a.nextHops, b.nextHops) && sameList(a.services, b.services) && sameList(a.peers, b.peers);

export class BgpControlPlane {
  private readonly routesInit: Initializer;
  private readonly birdInit: Initializer;
  private last: { routes: ReadonlyMap<string, BgpRouteRow>; withheld: readonly Withheld[]; warnings: readonly BgpPolicyWarning[] } = { routes: new Map(), withheld: [], warnings: [] };
  /** The routes in the bgp-routes table, counted per family and peer as rows change (for the peers' exports). */
  private readonly advertised = new AdvertisedRoutes(() => this.last.routes.values());
  private readonly warned = new Set<string>();
  /** Incremental: one readiness change re-evaluates that service's IPs only. */
  private readonly engine = new BgpDesiredEngine();

  constructor(private readonly deps: { db: StateDB; bird: BirdSettings; log: Logger }) {
    // Registered before the reconcilers start: nothing is pruned until intent is in.
    this.routesInit = deps.db.registerInitializer(bgpRoutesTable, 'bgp-control-plane');
    this.birdInit = deps.db.registerInitializer(birdConfigTable, 'bgp-control-plane');
  }

  private lastInputs: BgpInputs | undefined;
  /** The bgp-routes table holds exactly this.last.routes (false while an update is under way, and after one threw). */
  private inSync = true;

  /** Recomputes from the last inputs with a new set of unhealthy backends (a health check changed). */
  healthChanged(unhealthy: ReadonlySet<string>): void {
    if (this.lastInputs) this.update({ ...this.lastInputs, unhealthy });
  }

  update(inputs: BgpInputs): void {
    this.lastInputs = inputs;
    // The rows in the table now: this control plane is the table's only writer, so they are the last routes it wrote
    // (read before compute: an incremental pass edits that map in place). No read of 10,000 rows back from the table.
    const written = this.inSync ? this.last.routes : undefined;
    this.inSync = false;
    const desired = this.engine.compute(inputs);
    this.last = { ...this.last, routes: desired.routes };
    const { fragment, ...settings } = this.deps.bird;
    let warnings: readonly BgpPolicyWarning[] = desired.warnings;
    const put = (t: WriteTxn, r: BgpRouteRow, old: BgpRouteRow | undefined) => {
      if (sameRow(old, r)) return;
      if (old) this.advertised.remove(old);
      this.advertised.add(r);
      t.insert(bgpRoutesTable, r);
    };
    const drop = (t: WriteTxn, old: BgpRouteRow) => {
      this.advertised.remove(old);
      t.delete(bgpRoutesTable, old);
    };
    this.deps.db.update([bgpRoutesTable, birdConfigTable], (t) => {
      if (desired.changed !== undefined && written !== undefined) {
        // Only the prefixes the engine re-evaluated can differ from the table.
        for (const prefix of desired.changed) {
          const r = desired.routes.get(prefix);
          const old = t.get(bgpRoutesTable, prefix);
          if (r !== undefined) put(t, r, old);
          else if (old) drop(t, old);
        }
      } else if (written === undefined || written === desired.routes) {
        // A write that threw before — the engine took in changes the table never got, so its
        // `changed` no longer covers every difference — or a map edited in place: compared with the table itself.
        for (const old of t.list(bgpRoutesTable)) if (!desired.routes.has(old.prefix)) drop(t, old);
        for (const r of desired.routes.values()) put(t, r, t.get(bgpRoutesTable, r.prefix));
      } else {
        for (const old of written.values()) if (!desired.routes.has(old.prefix)) drop(t, old);
        for (const r of desired.routes.values()) put(t, r, written.get(r.prefix));
      }
      // The peers from the routes as just written: counted, not re-read (no pass over 10,000 routes per change).
      const { peers, skipped } = birdPeers(inputs.snapshot, inputs.node, this.advertised, desired.attributes);
      warnings = [...desired.warnings, ...skipped];
      const bird: BirdConfigRow | undefined =
        peers.length > 0 ? { name: 'bird', ...settings, peers, ...(fragment ? { fragment: { prefixes: [...desired.routes.keys()].sort() } } : {}) } : undefined;
      const current = t.get(birdConfigTable, 'bird');
      if (bird === undefined) {
        if (current) t.delete(birdConfigTable, current);
      } else if (JSON.stringify(current) !== JSON.stringify(bird)) {
        t.insert(birdConfigTable, bird);
      }
    });
    for (const w of warnings) {
      const key = `${w.peer}\u0000${w.message}`;
      if (!this.warned.has(key)) this.deps.log.warn(w, 'BGP peer not configured as written');
      this.warned.add(key);
    }
    this.inSync = true;
    this.routesInit.done();
    this.birdInit.done();
    this.last = { routes: desired.routes, withheld: desired.withheld, warnings };
  }

  status(): BgpStatus {
    return { routes: [...this.last.routes.values()], withheld: this.last.withheld, warnings: this.last.warnings };
  }
}
