/**
 * The composition root: builds the whole agent by hand, one line per module.
 *
 *   infra         clock, logger, links (rtnetlink), frame sender (AF_PACKET), state tables
 *   control plane intent source → LB-IPAM (persisted) → announcement policy →
 *                 per-IP ownership → the l2-announce table
 *   datapath      L2 responder program + pinned maps + heartbeat, gratuitous ARP,
 *                 and the reconciler that applies the table to the kernel
 *   api           status socket, Prometheus metrics (opt-in)
 *
 * The etcd store's modules (agent-etcd.ts) are imported only with
 * `--store etcd` (Agent.create), so a local-store agent starts without them.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { StatusServer, claimStatusSocketPath } from './api/status-server.js';
import { buildStatus, type HaStatus } from './api/status.js';
import { IntentReport } from './api/intent-status.js';
import { systemClock, type Clock } from './core/clock.js';
import { DisposableStore, type Disposable } from './core/disposable.js';
import { HeraldError, describeError } from './core/errors.js';
import { Jobs } from './core/jobs.js';
import type { Logger } from './core/logger.js';
import type { ReconcilerConfig } from './core/reconciler/reconciler.js';
import { StateDB } from './core/statedb/index.js';
import { ControlPlane } from './controlplane/controller.js';
import type { IpamCoordinator } from './controlplane/ipam/coordinator.js';
import type { OwnershipBackend } from './controlplane/ownership/backend.js';
import { LocalOwnership } from './controlplane/ownership/local.js';
import type { StaticAnnouncement } from './controlplane/static-announcements.js';
import type { ConflictDefenceOptions } from './datapath/conflict-defence.js';
import type { GarpSchedule } from './datapath/garp.js';
import type { L2DatapathOptions } from './datapath/l2-responder/datapath.js';
import { L2Stack } from './datapath/l2-responder/stack.js';
import { AgentPolicy, type PolicyStatus } from './agent-policy.js';
import { PacketFrameSender } from './datapath/packet-sender.js';
import { l2AnnounceTable, type L2AnnounceRow } from './datapath/tables/l2-announce.js';
import { emptySnapshot } from './intent/snapshot.js';
import { formatErrors } from './intent/diagnostics.js';
import { FileIntentSource } from './intent/sources/files.js';
import { requireManifestFiles, requireManifestObjects } from './intent/sources/require-path.js';
import type { IntentSource } from './intent/sources/source.js';
import type { IntentSnapshot } from './intent/snapshot.js';
import type { ManifestLimits } from './intent/limits.js';
import { NetlinkLinks } from './os/links.js';
import type { EventBody, EventJournal } from './core/events.js';
import { FileJournal } from './store/local-journal.js';
import { buildCounters, buildDetails, buildView, type IpDetails, type NodeReport, type ViewInput } from './api/view/model.js';
import { PeerPoller } from './api/view/peers.js';
import { addrOf } from './core/addr.js';
import { blockOf, compilePools, type PoolView } from './controlplane/ipam/pools.js';
import { servicePolicyTable } from './datapath/tables/service-policy.js';
import { isLoopback, ViewHandler, ViewServer, type ViewSource } from './api/view/server.js';
import type { EtcdViewStore } from './store/etcd/view-store.js';
import { readFileSync } from 'node:fs';
import type { EtcdModules } from './agent-etcd.js';
import type { KubeModules } from './agent-kube.js';
import type { KubeClient } from './intent/sources/kube-client.js';
import type { KubernetesIntentSource } from './intent/sources/kubernetes.js';
import type { PoolStatusWriter, ServiceStatusWriter } from './store/kubernetes/service-status.js';
import type { KubeIntentEvents } from './store/kubernetes/events.js';
import type { IntentKind } from './intent/kinds.js';
import type { LeaderElection, LeaseOwnership } from './store/kubernetes/lease-ownership.js';
import type { IpamResult } from './controlplane/ipam/types.js';
import type { EtcdOwnership } from './store/etcd/ownership.js';
import type { OwnerWatchOptions, PacketOwnerWatch } from './datapath/owner-watch.js';
import type { EtcdSession } from './store/etcd/session.js';
import type { CrashHandoverPlan } from './store/etcd/handover-record.js';
import { LocalIpamCoordinator } from './store/local-ipam.js';
import { Reconciler } from './core/reconciler/reconciler.js';
import { LocalRoutesOps } from './datapath/routes/local-routes-ops.js';
import { BgpControlPlane, type BgpInputs } from './controlplane/bgp/controller.js';
import { BirdOps } from './datapath/bird/bird-ops.js';
import { HostRoutesOps } from './datapath/routes/host-routes-ops.js';
import { birdConfigTable, type BfdOptions, type BirdConfigRow } from './datapath/tables/bird-config.js';
import { bgpRoutesTable, type BgpRouteRow } from './datapath/tables/bgp-routes.js';
import { BirdDaemon, OperatorBird, birdDefaults } from './os/bird.js';
import { HealthChecker } from './controlplane/health/checker.js';
import { healthTargets } from './controlplane/health/targets.js';
import { NetBackendProber } from './os/health-probe.js';
import { NetlinkHostRoutes } from './os/host-routes.js';
import { IprouteLocalRoutes } from './os/local-routes.js';
import { LbControlPlane } from './controlplane/lb/controller.js';
import { LbStack, type LbOptions } from './datapath/lb/stack.js';
import { lbServicesTable } from './datapath/tables/lb-services.js';

export interface AgentConfig {
  node: string;
  /** --node-labels: between the kubelet's well-known labels and the Node manifest's. */
  nodeLabels?: Record<string, string>;
  /** A file or directory of manifests (the embedded default source). */
  manifests?: string;
  store: 'local' | 'etcd';
  etcd: { endpoints: string[]; prefix: string };
  /** Intent from a Kubernetes API server (informers) and status written back; in-cluster credentials unless `kubeconfig`. */
  kubernetes?: { kubeconfig?: string; namespace?: string; leaseDurationS?: number; leaseRenewMs?: number };
  stateDir: string;
  /** Size cap and YAML bounds of manifests (files or etcd); default manifestLimitDefaults. */
  manifestLimits?: ManifestLimits;
  announcements: StaticAnnouncement[];
  datapath: L2DatapathOptions;
  garp: GarpSchedule;
  /** Re-announcing IPs that a foreign MAC claims (default: once per second at most). */
  conflictDefence?: ConflictDefenceOptions;
  reconciler: ReconcilerConfig;
  statusSocket?: string;
  /** etcd store: what to do when it is unreachable. */
  onStoreLoss: 'withdraw' | 'keep';
  /** etcd and Kubernetes stores: watching owners on the wire (default ownerWatchDefaults: probes every 50 ms, silent after 300 ms). */
  ownerWatch?: { probeIntervalMs?: number; silenceMs?: number };
  /** etcd store: a more preferred candidate must be present this long before an owner hands an IP over (default 5 s). */
  handoverHoldMs?: number;
  /** Install a local route for each owned IP so host services can serve it. */
  localRoutes: boolean;
  /** LB-IPAM serves only Services of these load balancer classes (Cilium's TestRequiredLBClass). */
  lbClasses?: string[];
  metricsListen?: { host: string; port: number };
  /** BGP anycast through herald's own BIRD (state under stateDir/bird); off when unset. */
  bgp?: { routerId: string; bfd?: BfdOptions; operatorBird?: { socketPath: string; includePath?: string }; /** --bgp-tick-only: BGP reconcilers act on this tick only. */ tickMs?: number };
  /** L4 load balancing of service IPs in eBPF (--lb-interfaces); off when unset. */
  lb?: LbOptions;
  /** The cluster view over TCP (a browser); loopback unless a token is given. */
  viewListen?: { host: string; port: number };
  /** Bearer token required by the view (required beyond loopback). */
  viewToken?: string;
  /** Where other nodes reach this view server (published on the node card; viewAdvertiseUrl() from --view-listen and --view-advertise-address). */
  viewUrl?: string;
}

interface BgpStack {
  control: BgpControlPlane;
  bird: BirdDaemon | OperatorBird;
  routes: Reconciler<BgpRouteRow>;
  birdReconciler: Reconciler<BirdConfigRow>;
  health: HealthChecker;
}

export class Agent implements Disposable {
  private readonly store = new DisposableStore();
  readonly db = new StateDB([l2AnnounceTable, bgpRoutesTable, birdConfigTable, lbServicesTable]);
  readonly bgp: BgpStack | undefined;
  readonly lb: { control: LbControlPlane; stack: LbStack } | undefined;
  readonly l2: L2Stack;
  readonly controlPlane: ControlPlane;
  private readonly links: NetlinkLinks;
  private readonly ownership: OwnershipBackend;
  /** The same object as `ownership` with the etcd store (for its liveness gate and HA status). */
  private readonly etcdOwnership: EtcdOwnership | undefined;
  private readonly source: IntentSource | undefined;
  /** Kubernetes mode: LB-IPAM results written to Service status. */
  private readonly statusWriter: ServiceStatusWriter | undefined;
  /** The same object as `ownership` in Kubernetes mode (for its liveness gate). */
  private readonly kubeOwnership: LeaseOwnership | undefined;
  /** Kubernetes mode: the LB-IPAM allocator (and the one status writer) is the leader of Lease herald-ipam. */
  private readonly ipamElection: LeaderElection | undefined;
  /** Kubernetes mode: LB-IPAM pool conditions written to CiliumLoadBalancerIPPool status. */
  private readonly poolStatusWriter: PoolStatusWriter | undefined;
  /** Kubernetes mode: Events for ownership moves and refused objects. */
  private readonly kubeEvents: KubeIntentEvents | undefined;
  private readonly session: EtcdSession | undefined;
  private readonly ownerWatch: PacketOwnerWatch | undefined;
  private routes: Reconciler<L2AnnounceRow> | undefined;
  /** Long-lived work started in start(), stopped in reverse on dispose, with health by name in status. */
  private readonly jobs: Jobs;
  readonly startedAt = Date.now();
  private readonly intentReport: IntentReport;
  /** Service traffic policy: pipeline, service-policy table, tc program (agent-policy.ts). */
  readonly policy: AgentPolicy;
  /** The cluster view's timeline: in etcd (shared, survives restarts) or in memory. */
  readonly journal: EventJournal;
  private readonly viewStore: EtcdViewStore | undefined;
  /** The timeline kept in the state directory (local store): the view survives a restart there too. */
  private readonly fileJournal: FileJournal | undefined;
  private readonly poolsListeners = new Set<() => void>();
  private readonly ownersListeners = new Set<(changes: ReadonlyMap<string, string | null>) => void>();
  private lastOwners: ReadonlyMap<string, string> = new Map();
  private ownersDiffQueued = false;
  /** The crash hand-over plan's reporter and its job (etcd store under a supervisor). */
  private crashPlan: { report: (plan: CrashHandoverPlan | undefined) => void; job: { trigger(): void } } | undefined;
  private lastIngress: ReadonlyMap<string, readonly string[]> | undefined;
  private viewHandler: ViewHandler | undefined;
  private tcpViewHandler: ViewHandler | undefined;
  /** Other nodes' reports (their per-IP counters, rows not done, health) while a page is open. */
  private peerPoller: PeerPoller | undefined;
  /** The current intent's pools, compiled on first need (the view's pool column). */
  private viewPoolsOf: { pools: IntentSnapshot['pools']; compiled: PoolView[] } | undefined;
  private intentPools: IntentSnapshot['pools'] | undefined;

  /** Builds an agent, loading the etcd store's modules first when the configuration uses etcd. */
  static async create(config: AgentConfig, log: Logger, clock: Clock = systemClock): Promise<Agent> {
    const etcd = config.store === 'etcd' ? await import('./agent-etcd.js') : undefined;
    const kube = config.kubernetes ? await import('./agent-kube.js') : undefined;
    const kubeClient = kube && config.kubernetes ? await kube.KubeClient.create(config.kubernetes) : undefined;
    return new Agent(config, log, clock, etcd, kube && kubeClient ? { modules: kube, client: kubeClient } : undefined);
  }

  constructor(
    readonly config: AgentConfig,
    private readonly log: Logger,
    private readonly clock: Clock = systemClock,
    /** The etcd store's modules; required with `store: 'etcd'` (Agent.create loads them). */
    private readonly etcd?: EtcdModules,
    /** Kubernetes mode: client-node's modules and the API client (Agent.create loads them). */
    private readonly kube?: { modules: KubeModules; client: KubeClient },
  ) {
    if (config.kubernetes && !kube) throw new HeraldError('HERALD_INTERNAL', 'a Kubernetes agent needs its client (use Agent.create)');
    if (config.kubernetes && config.store === 'etcd') throw new HeraldError('HERALD_BAD_ARGUMENT', '--kubernetes coordinates through Leases: leave out --store etcd');
    if (config.kubernetes && config.manifests) throw new HeraldError('HERALD_BAD_ARGUMENT', '--kubernetes and --manifests are two intent sources: use one');
    if (config.store === 'etcd' && !etcd) throw new HeraldError('HERALD_INTERNAL', 'an etcd agent needs the etcd modules (use Agent.create)');
    this.intentReport = new IntentReport(config.node);
    // infra
    this.jobs = new Jobs({ clock, log: log.child({ module: 'jobs' }) });
    this.links = this.store.add(new NetlinkLinks()); // interface lookups and link events
    const sender = this.store.add(new PacketFrameSender()); // gratuitous ARP frames out
    this.session = etcd && config.store === 'etcd' ? this.store.add(new etcd.EtcdSession({ endpoints: config.etcd.endpoints, prefix: config.etcd.prefix, ...etcd.etcdSessionDefaults }, { clock, log })) : undefined; // lease on etcd
    // control plane
    this.source = this.makeSource(); // manifests from files, etcd or Kubernetes informers
    this.viewStore = etcd && this.session ? this.store.add(new etcd.EtcdViewStore(this.session, config.node, log.child({ module: 'view' }))) : undefined;
    this.fileJournal = this.viewStore ? undefined : new FileJournal(config.node, join(config.stateDir, 'view-events.json'), log.child({ module: 'view' }));
    this.journal = this.viewStore ?? this.fileJournal!;
    const watchModule = etcd && this.session ? etcd : kube?.modules;
    this.ownerWatch = watchModule ? this.store.add(new watchModule.PacketOwnerWatch({ links: this.links, clock, log }, ownerWatchOptions(watchModule.ownerWatchDefaults, config.ownerWatch))) : undefined; // silent owners on the wire
    this.etcdOwnership =
      etcd && this.session && this.ownerWatch
        ? new etcd.EtcdOwnership(
            this.session,
            config.node,
            { clock, log: log.child({ module: 'ownership' }), watch: this.ownerWatch, events: (e) => this.journal.record(e), onOwners: () => this.ownersMayHaveChanged() },
            { ...etcd.etcdOwnershipDefaults, onStoreLoss: config.onStoreLoss, ...(config.handoverHoldMs !== undefined ? { handoverHoldMs: config.handoverHoldMs } : {}) },
          )
        : undefined;
    // Kubernetes: one Lease per node, one per owned IP (written only when ownership moves)
    this.kubeOwnership = kube ? makeLeaseOwnership(kube, config, log.child({ module: 'ownership' }), this.ownerWatch) : undefined;
    this.ownership = this.store.add(this.etcdOwnership ?? this.kubeOwnership ?? new LocalOwnership(config.node)); // per-IP ownership
    this.ipamElection = kube ? this.kubeOwnership?.elect(kube.modules.IPAM_ELECTION) : undefined;
    this.statusWriter =
      kube && this.source instanceof kube.modules.KubernetesIntentSource
        ? this.store.add(makeStatusWriter(kube, this.source, this.ipamElection, config.node, log.child({ module: 'service-status' })))
        : undefined;
    this.poolStatusWriter =
      kube && this.source instanceof kube.modules.KubernetesIntentSource ? this.store.add(makePoolStatusWriter(kube, this.source, this.ipamElection, log.child({ module: 'pool-status' }))) : undefined;
    this.kubeEvents = kube && this.source instanceof kube.modules.KubernetesIntentSource ? makeKubeEvents(kube, this.source, (ip) => this.controlPlane.servicesFor(ip), this.kubeOwnership, this.ipamElection, config.node, log.child({ module: 'kube-events' })) : undefined;
    this.controlPlane = this.store.add(
      new ControlPlane({
        db: this.db,
        nodeName: config.node,
        ...(config.nodeLabels ? { nodeLabels: config.nodeLabels } : {}),
        links: this.links,
        ownership: this.ownership,
        ipam: this.makeIpamCoordinator(), // one allocator at a time, state persisted
        staticAnnouncements: config.announcements,
        ...(config.lbClasses ? { lbClasses: config.lbClasses } : {}),
        applied: async () => {
          const done = await this.l2.reconciler?.settled();
          // A withdrawal that failed (a row gone from the table, still in the
          // map) is not "applied": that IP must not be given away.
          const txn = this.db.readTxn();
          const stuck = (done?.failed ?? []).filter((key) => txn.get(l2AnnounceTable, key) === undefined);
          if (stuck.length > 0) throw new HeraldError('HERALD_BPF_MAP', `datapath could not withdraw ${stuck.join(', ')}`);
        },
        onServiceIps: (inputs: BgpInputs & { ipam?: IpamResult }) => {
          this.allocationsChanged(inputs.ingress);
          // This node's own backends first (health checks), then BGP's desired state with their results.
          if (this.bgp) {
            this.bgp.health.setTargets(healthTargets(inputs.snapshot, inputs.node.name));
            this.bgp.control.update({ ...inputs, unhealthy: this.bgp.health.down() });
          }
          this.lb?.control.update(inputs);
          // Kubernetes: Service.status.loadBalancer.ingress and IPAMRequestSatisfied, pool conditions (the LB-IPAM leader only)
          this.statusWriter?.update(inputs.ingress, new Map([...(inputs.ipam?.services ?? [])].map(([k, v]) => [k, v.condition] as const)));
          if (inputs.ipam && !inputs.ipam.dormant) this.poolStatusWriter?.update(inputs.ipam.pools);
        },
        onCandidates: (wanted) => void this.l2.ops?.standby.set(wanted).catch(() => {}), // errors surface on the rows once owned
        onIntentWarning: (w) => this.kubeEvents?.warned(w),
        clock,
        log: log.child({ module: 'control-plane' }),
      }),
    );
    // service traffic policy: CNP/CCNP/sourceRanges → pipeline → service-policy table → policy program (tc prio 2)
    this.policy = this.store.add(new AgentPolicy({ db: this.db, clock, log: log.child({ module: 'policy' }), pinDir: join(config.datapath.pinDir, 'policy') }));
    // BGP anycast: desired routes and bird.conf from intent; host routes and BIRD reconciled
    this.bgp = config.bgp ? this.makeBgp(config.bgp) : undefined;
    // L4 load balancing: lb-services from intent; program, maps, reconciler, conntrack GC
    this.lb = config.lb ? this.makeLb(config.lb) : undefined;
    // datapath: program, pinned maps, heartbeat, gratuitous ARP, table → map reconciler
    this.l2 = this.store.add(
      new L2Stack(
        // The heartbeat answers to the store session: no stamp while our lease may have lapsed.
        { db: this.db, links: this.links, sender, clock, log, ...(this.etcdOwnership ?? this.kubeOwnership ? { livenessGate: (this.etcdOwnership ?? this.kubeOwnership)!.livenessGate() } : {}) },
        { ...config, datapath: { ...config.datapath, resetEntriesOnStart: config.store === 'etcd' || Boolean(config.kubernetes) } },
      ),
    );
  }

  private makeBgp(bgp: NonNullable<AgentConfig['bgp']>): BgpStack {
    const log = this.log.child({ module: 'bgp' });
    const op = bgp.operatorBird;
    const control = new BgpControlPlane({ db: this.db, bird: { routerId: bgp.routerId, ...(bgp.bfd ? { bfd: bgp.bfd } : {}), ...(op ? { fragment: true } : {}) }, log });
    // --bird-socket: the operator's BIRD, herald owns only an include file; otherwise its own, supervised.
    const bird = op
      ? new OperatorBird({ socketPath: op.socketPath, includePath: op.includePath ?? join(this.config.stateDir, 'bird', 'herald.conf'), birdcBin: birdDefaults.birdcBin }, { clock: this.clock, log })
      : new BirdDaemon({ ...birdDefaults, stateDir: join(this.config.stateDir, 'bird') }, { clock: this.clock, log });
    const common = { db: this.db, clock: this.clock, log };
    const hostRoutes = new NetlinkHostRoutes();
    const reconcile = bgp.tickMs ? { ...this.config.reconciler, tickMs: bgp.tickMs } : this.config.reconciler;
    const routes = new Reconciler<BgpRouteRow>({ ...common, name: 'bgp-host-routes', table: bgpRoutesTable, ops: new HostRoutesOps(hostRoutes) }, reconcile);
    const birdReconciler = new Reconciler<BirdConfigRow>({ ...common, name: 'bird', table: birdConfigTable, ops: new BirdOps(bird) }, reconcile);
    this.jobs.hook('bgp-host-routes', { start: () => routes.start(), stop: async () => { await routes.dispose(); hostRoutes.dispose(); } });
    // Stopped before the routes (jobs stop in reverse): sessions close, peers withdraw.
    this.jobs.hook('bird', { start: () => birdReconciler.start(), stop: async () => { birdReconciler.dispose(); await bird.stop(); } });
    // Session state for status, read from BIRD off the status path.
    this.jobs.timer('bird-sessions', () => bird.refreshSessions(), 2000);
    // Health checks of this node's backends (herald.io/health-check): a backend going up or down recomputes the routes.
    const health: HealthChecker = new HealthChecker({ prober: new NetBackendProber(), clock: this.clock, log: log.child({ module: 'health' }), onChange: () => control.healthChanged(health.down()) });
    this.jobs.hook('health-checks', { start: () => {}, stop: () => health.dispose() });
    return { control, bird, routes, birdReconciler, health };
  }

  private makeLb(opts: LbOptions): { control: LbControlPlane; stack: LbStack } {
    const log = this.log.child({ module: 'lb' });
    const control = new LbControlPlane({ db: this.db, log });
    // XDP reads the service policy's own pinned maps (it must never bypass a policed IP).
    const lbOpts: LbOptions = opts.xdp ? { ...opts, policyPinDir: join(this.config.datapath.pinDir, 'policy') } : opts;
    const stack = this.store.add(new LbStack({ db: this.db, links: this.links, clock: this.clock, log, jobs: this.jobs }, lbOpts, this.config.reconciler));
    return { control, stack };
  }

  private makeSource(): IntentSource | undefined {
    const log = this.log.child({ module: 'intent' });
    const limits = this.config.manifestLimits;
    if (this.config.manifests) return this.store.add(new FileIntentSource({ path: this.config.manifests, log, ...(limits ? { limits } : {}) }));
    if (this.kube) return this.store.add(new this.kube.modules.KubernetesIntentSource({ client: this.kube.client, log, ...(limits ? { limits } : {}) }));
    if (this.config.store === 'etcd' && this.etcd) {
      return this.store.add(new this.etcd.EtcdIntentSource({ endpoints: this.config.etcd.endpoints, prefix: `${this.config.etcd.prefix}manifests/`, log, ...(limits ? { limits } : {}) }));
    }
    return undefined;
  }

  private makeIpamCoordinator(): IpamCoordinator {
    if (this.kube && this.ipamElection && this.source instanceof this.kube.modules.KubernetesIntentSource) {
      const source = this.source;
      return this.store.add(new this.kube.modules.KubeIpamCoordinator(this.ipamElection, () => source.objects('Service')));
    }
    if (this.session && this.etcd) return this.store.add(new this.etcd.EtcdIpamCoordinator(this.session, this.config.node, this.log.child({ module: 'ipam' }), { stateDir: this.config.stateDir }));
    return this.store.add(new LocalIpamCoordinator(join(this.config.stateDir, 'ipam.json'), this.config.node));
  }

  async start(): Promise<void> {
    // Before touching anything: refuse a path that is not a socket, or one another
    // agent serves, and a --manifests path that is missing or holds no manifest file.
    if (this.config.statusSocket) await claimStatusSocketPath(this.config.statusSocket);
    const manifestFiles = this.config.manifests ? await requireManifestFiles(this.config.manifests, this.config.manifestLimits) : 0;
    mkdirSync(this.config.stateDir, { recursive: true, mode: 0o700 });
    // Intent is read (and a large set parsed in a worker) while the datapath
    // loads and the control plane starts; snapshots wait for the control plane.
    const intent = this.startSource(manifestFiles);
    this.l2.start();
    // "agent running" means started; that the datapath serves what the table says is its own fact, logged when it is true.
    this.l2.reconciler?.firstFullRound().then(
      () => this.log.info({ rows: this.db.readTxn().count(l2AnnounceTable) }, 'serving: the datapath applied its first full reconciliation'),
      () => {},
    );
    this.policy.start();
    this.store.add(this.jobs);
    if (this.config.localRoutes) this.addLocalRoutesJob();
    await this.lb?.stack.start();
    await this.jobs.start();
    await this.session?.start();
    if (this.session) this.watchStoreOutages(this.session);
    // Refuse a second agent with our --node on this store before acting on anything.
    if (this.session && this.etcd) {
      const { NodeClaim, nodeClaimWait, etcdSessionDefaults } = this.etcd;
      await this.store.add(new NodeClaim(this.session, this.config.node, { clock: this.clock, log: this.log }, nodeClaimWait(etcdSessionDefaults.ttlSeconds))).claim();
    }
    await this.viewStore?.start();
    const fileJournal = this.fileJournal;
    if (fileJournal) {
      await fileJournal.start();
      // Stopped last of the jobs (hooked first): the clean stop's own events are kept too.
      this.jobs.hook('view-journal', { start: () => {}, stop: () => fileJournal.flush() });
    }
    this.record({ kind: 'node-started', version: heraldVersion() });
    await this.controlPlane.start();
    // Links change: re-resolve ifindexes (recreated interfaces) and re-run the
    // policy (an interface losing carrier withdraws its IPs, Cilium #35507).
    this.store.add(
      this.links.subscribe(() => {
        // The datapath first: a link regaining carrier is held silent before
        // the control plane re-adds its IPs.
        void this.l2.linksChanged().then(() => this.controlPlane.linksChanged());
        this.policy.linksChanged(); // a re-created interface (same name, maybe the same ifindex) has lost its filter
      }),
    );
    intent.controlPlaneReady();
    await intent.loaded;
    // On the status socket (owner-only permissions) no token is asked: the socket is the access control.
    const view = new ViewHandler(this.viewSource());
    this.viewHandler = view;
    this.store.add({ dispose: () => view.dispose() });
    let publishCard: { trigger(): void } | undefined;
    if (this.viewStore) {
      const vs = this.viewStore;
      publishCard = this.jobs.timer('view-card', () => vs.publishCard(this.nodeCard()), 2000);
      // Other nodes' counters and health for open pages: fetched from the view servers their cards name.
      const poller = new PeerPoller({
        peers: () => [...vs.nodes()].flatMap(([node, card]) => (node !== this.config.node && card.viewUrl ? [{ node, url: card.viewUrl }] : [])),
        wanted: () => (this.viewHandler?.clientCount ?? 0) + (this.tcpViewHandler?.clientCount ?? 0) > 0,
        ...(this.config.viewToken ? { token: this.config.viewToken } : {}),
      });
      this.peerPoller = poller;
      this.jobs.hook('view-peers', { start: () => poller.start(), stop: () => poller.dispose() });
    }
    this.jobs.timer('view-owners', () => this.ownersMayHaveChanged(), 1000);
    const viewListen = this.config.viewListen;
    if (viewListen) {
      this.tcpViewHandler = new ViewHandler(this.viewSource(), undefined, this.config.viewToken);
      const server = new ViewServer(viewListen, this.tcpViewHandler);
      this.jobs.hook('view-server', { start: () => server.start(), stop: () => server.dispose() });
    }
    const statusSocket = this.config.statusSocket;
    if (statusSocket) {
      const server = new StatusServer(statusSocket, () => this.status(), { '/v1/policy': () => this.policy.detail() }, (req, res) => req.url !== '/' && view.handle(req, res));
      this.jobs.hook('status-server', { start: () => server.start(), stop: () => server.dispose() });
    }
    const metricsListen = this.config.metricsListen;
    if (metricsListen) {
      const { MetricsServer, buildRegistry } = await import('./api/metrics.js'); // prom-client only when metrics are on
      const metrics = new MetricsServer(metricsListen, buildRegistry(this.metricsSource()));
      this.jobs.hook('metrics-server', { start: () => metrics.start(), stop: () => metrics.dispose() });
    }
    await this.jobs.start();
    // The card at once, not an interval later: a node that owns IPs within
    // its first 2 s would otherwise show on every page as gone (no card).
    publishCard?.trigger();
  }

  /**
   * Starts the intent source (or applies the empty snapshot when there is
   * none). Snapshots that arrive before `controlPlaneReady()` are held, the
   * latest one applied then. `loaded` resolves after the first read, and
   * rejects when the first snapshot of a --manifests path holds no object
   * (that snapshot is never applied: pinned entries of a previous run stay).
   */
  private startSource(manifestFiles: number): { loaded: Promise<void>; controlPlaneReady: () => void } {
    let ready = false;
    let starting = true;
    let held: IntentSnapshot | undefined;
    let refusal: Error | undefined;
    const source = this.source;
    if (!source) {
      let applied: (done: Promise<void>) => void = () => {};
      return {
        loaded: new Promise<void>((resolve) => (applied = resolve)),
        controlPlaneReady: () => applied(this.controlPlane.setSnapshot(emptySnapshot)),
      };
    }
    const loaded = source
      .start({
        onSnapshot: (snapshot) => {
          if (starting && this.config.manifests) {
            try {
              requireManifestObjects(this.config.manifests, manifestFiles, snapshot);
            } catch (e) {
              refusal = e as Error;
              return;
            }
          }
          starting = false;
          this.log.info(
            { services: snapshot.services.size, pools: snapshot.pools.size, policies: snapshot.policies.size, nodes: snapshot.nodes.size },
            'intent loaded',
          );
          const nodeWarning = this.intentReport.loaded(snapshot);
          if (nodeWarning) this.log.warn({ node: this.config.node }, nodeWarning);
          this.policy.setSnapshot(snapshot);
          this.intentPools = snapshot.pools;
          if (ready) void this.controlPlane.setSnapshot(snapshot);
          else held = snapshot;
        },
        onError: (problem) => {
          const text = 'errors' in problem ? formatErrors(problem.errors) : describeError(problem.error);
          if ('errors' in problem) this.intentReport.rejectedErrors(problem.errors, new Date());
          if ('errors' in problem) this.kubeEvents?.rejected(problem.errors);
          else this.intentReport.rejectedError(problem.error, new Date());
          this.log.error({ source: source.name, errors: text }, 'intent rejected; the previous good state stays in force');
          // With etcd every node reads the same intent: the allocator alone records the rejection (once on the timeline).
          if (this.config.store !== 'etcd' || this.controlPlane.status().allocator === this.config.node) this.record({ kind: 'intent-rejected', reasons: text.split('\n').filter(Boolean).slice(0, 20).map((r) => r.slice(0, 500)) });
        },
        onWarnings: (warnings) => this.log.warn({ warnings: formatErrors(warnings) }, 'intent warnings'),
      })
      .then(() => {
        starting = false;
        if (refusal) throw refusal;
      });
    loaded.catch(() => {}); // awaited by start(); not unhandled if start() fails first
    return {
      loaded,
      controlPlaneReady: () => {
        ready = true;
        if (held) void this.controlPlane.setSnapshot(held);
        held = undefined;
      },
    };
  }

  /** A local route per owned IP, so host services serve it (plain hosts; keepalived's users). */
  private addLocalRoutesJob(): void {
    const ops = new LocalRoutesOps(new IprouteLocalRoutes(), (ip) => this.db.readTxn().listBy(l2AnnounceTable, 'ip', ip).length > 0);
    const routes = new Reconciler({ name: 'local-routes', db: this.db, table: l2AnnounceTable, ops, clock: this.clock, log: this.log }, this.config.reconciler);
    this.routes = routes;
    this.jobs.hook('local-routes', { start: () => routes.start(), stop: () => routes.dispose() });
  }

  /** Where this node's timeline events go in etcd (reported to the supervisor, which records a crash there). */
  get journalPrefix(): string | undefined {
    return this.viewStore?.journalPrefix;
  }

  /** Kubernetes store: our node Lease and its incarnation (reported to the supervisor). */
  get kubeNodeLease(): { namespace: string; name: string; incarnation: string } | undefined {
    return this.kubeOwnership?.nodeLease();
  }

  /**
   * etcd store: keeps `report` told what our supervisor should hand over if
   * this process dies without releasing (EtcdOwnership.crashHandoverPlan):
   * after every owner change (coalesced over 250 ms, so a mass take-over costs
   * one pass after it) and every second (successors' candidacies change
   * without an owner change; a plan that is stale for an IP costs only that
   * IP the fast path: its move fails its compare or its successor's lease
   * check, and the revoke frees it). A pass for 10,000 owned IPs with two
   * candidates each takes ~20 ms of the event loop (the rendezvous scores and
   * the 0.5 MB record; only a changed plan is written to the supervisor).
   * Nothing is reported once the agent drains. Call before start().
   */
  reportCrashHandoverPlans(report: (plan: CrashHandoverPlan | undefined) => void): void {
    const own = this.etcdOwnership;
    if (!own || this.crashPlan) return;
    const job = this.jobs.timer('crash-handover-plan', () => report(own.crashHandoverPlan()), 1000, { triggerDelayMs: 250 });
    this.crashPlan = { report, job };
  }

  /** The etcd session (etcd store only): its leases are reported to the supervisor. */
  get etcdSession(): EtcdSession | undefined {
    return this.session;
  }

  status() {
    const base = buildStatus({
      config: this.config,
      startedAt: this.startedAt,
      controlPlane: this.controlPlane.status(),
      reconciler: this.l2.reconciler?.health(),
      rowsNotDone: [
        ...(this.l2.reconciler?.notDone() ?? []),
        ...(this.routes?.notDone() ?? []),
        ...(this.bgp?.routes.notDone() ?? []),
        ...(this.bgp?.birdReconciler.notDone() ?? []),
        ...(this.lb?.stack.reconciler.notDone() ?? []),
      ],
      table: this.db.readTxn().list(l2AnnounceTable),
      datapath: this.l2.datapath,
      garp: this.l2.garp.stats,
      conflicts: this.l2.conflicts.records(),
      now: this.clock.monotonicNs(),
      intent: this.intentReport.status(),
      jobs: this.jobs.health(),
      ...(this.bgp ? { bgp: this.bgpStatus(this.bgp) } : {}),
      ...(this.lb && this.config.lb ? { lb: this.lbStatus(this.lb, this.config.lb.interfaces) } : {}),
      ...(this.haStatus() ? { ha: this.haStatus()! } : {}),
      ...(this.kube
        ? {
            kubernetes: {
              source: this.kube && this.source instanceof this.kube.modules.KubernetesIntentSource ? this.source.status() : undefined,
              leases: this.kubeOwnership?.status(),
              serviceStatus: this.statusWriter?.stats,
            },
          }
        : {}),
    });
    return { ...base, policy: this.policy.status() as PolicyStatus };
  }

  private lbStatus(lb: NonNullable<Agent['lb']>, interfaces: readonly string[]) {
    const st = lb.stack.stats;
    return {
      interfaces,
      frontends: this.db.readTxn().list(lbServicesTable).map((r) => ({ key: r.key, service: r.service, mode: r.mode, algorithm: r.algorithm ?? 'maglev', backends: r.backends })),
      warnings: lb.control.status().warnings,
      ct: { entries: st.ctEntries, entries6: st.ct6Entries, capacity: st.ctMax, evicted: st.ctEvicted, gcPasses: st.gcPasses, gcDeleted: st.gcDeleted, gcIntervalMs: st.gcIntervalMs },
      counters: Object.fromEntries(Object.entries(lb.stack.program.stats()).map(([k, v]) => [k, Number(v)])),
    };
  }

  private bgpStatus(b: BgpStack) {
    const errors = (r: Reconciler<unknown>) => r.notDone().flatMap((s) => (s.kind === 'error' ? [{ key: s.key, error: s.error ?? '', attempts: s.attempts ?? 0 }] : []));
    const row = this.db.readTxn().get(birdConfigTable, 'bird');
    return {
      ...b.control.status(),
      bird: b.bird.status(),
      peers: (row?.peers ?? []).map((p) => ({ id: p.id, protocol: p.protocol, address: p.address, asn: p.asn })),
      ...(b.bird.lastSessions ? { sessions: b.bird.lastSessions } : {}),
      health: b.health.view(),
      rowErrors: [...errors(b.routes as Reconciler<unknown>), ...errors(b.birdReconciler as Reconciler<unknown>)],
    };
  }

  /** Store session and fencing state (etcd store only); cheap, for status and every metrics scrape. */
  private haStatus(): HaStatus | undefined {
    if (!this.session || !this.etcdOwnership) return undefined;
    const liveness = this.l2.datapath.liveness;
    return {
      session: this.session.status(),
      ownership: this.etcdOwnership.status(),
      ...(this.ownerWatch ? { ownerWatch: this.ownerWatch.stats() } : {}),
      ...(liveness ? { heartbeat: { held: liveness.held, lateWakeups: liveness.lateWakeups, failures: liveness.failures, thread: liveness.threaded, linksDark: liveness.linksDark } } : {}),
    };
  }

  private metricsSource() {
    return {
      onPolicyDelay: (l: (seconds: number, source: string) => void) => this.policy.onDelay(l),
      responderEntries: () => {
        const st = this.status();
        return st.datapath.entries.map((e) => ({ ip: e.ip, iface: e.interface, replies: e.replies, conflicts: e.conflicts }));
      },
      garp: () => this.l2.garp.stats,
      defences: () => (this.l2.conflicts.records()).map((r) => ({ ip: r.ip, iface: r.interface, defences: r.defences })),
      ownershipChanges: () => this.controlPlane.stats.ownershipChanges,
      ownedIps: () => this.ownership.view().owned.size,
      lb: () => this.lb?.stack.stats,
      lbDatapath: () => this.lb?.stack.program.stats(),
      ha: () => {
        const ha = this.haStatus(); // not status(): that reads the whole responder map
        if (!ha) return undefined;
        return {
          sessionLive: ha.session.state === 'live',
          ...(ha.session.lastKeepaliveAgeMs !== undefined ? { lastKeepaliveAgeMs: ha.session.lastKeepaliveAgeMs } : {}),
          leasesGranted: ha.session.leasesGranted,
          fencesIssued: ha.ownership.fencesIssued,
          staleKeysIgnored: ha.ownership.staleKeysIgnored,
          heartbeatHeld: ha.heartbeat?.held ?? 0,
          lateWakeups: ha.heartbeat?.lateWakeups ?? 0,
        };
      },
      reconciler: () => this.l2.reconciler?.health(),
      pools: () =>
        [...(this.controlPlane.status().ipam?.pools ?? new Map())].map(([pool, p]) => ({
          pool,
          total: Number(p.total),
          used: Number(p.used),
          available: Number(p.available),
        })),
    };
  }

  /**
   * Graceful stop: stop answering for what we own (the map entries are removed),
   * then free every IP at once by revoking the lease, so a successor takes over
   * without waiting for the lease to expire — and never while we still answer.
   */
  async drain(): Promise<void> {
    // Recorded, not waited for (an event carries no authority): the hand-over must not queue behind a store write.
    const stopping = this.record({ kind: 'node-stopping' });
    // With a shared store, fall silent first, in one map write (the liveness
    // stamp cleared, the heartbeat stopped for good): from then on nothing is
    // answered whatever the tables hold, so the IPs can go to their successors
    // at once instead of after the entry-by-entry withdrawal. The local store
    // keeps answering through a restart (nobody else takes over), so it never does this.
    const silenced = this.etcdOwnership ? (this.l2.datapath.liveness?.silence() ?? false) : false;
    // A stop makes its own hand-over: one killed half-way leaves the revoke to the supervisor.
    this.crashPlan?.report(undefined);
    await this.ownership.release({ silenced });
    if (silenced) {
      await this.session?.revoke(); // frees what was not handed over
      await this.controlPlane.idle();
      await this.l2.reconciler?.settled();
    } else {
      await this.controlPlane.idle();
      const withdrawn = await this.l2.reconciler?.settled();
      if (withdrawn && withdrawn.failed.length > 0) {
        // Still answering for some IP: freeing it now would make two answerers.
        // Keep the lease; it expires after we exit, and the heartbeat stops first.
        throw new HeraldError('HERALD_BPF_MAP', `withdrawing ${withdrawn.failed.join(', ')} failed: IPs are freed at lease expiry, not now`);
      }
      await this.session?.revoke(); // the map entries are gone: free every IP now
    }
    await this.routes?.settled(); // then the local routes (ARP has already moved)
    await stopping;
  }

  /**
   * Stops the jobs in reverse order and waits for them (within the jobs'
   * deadline) — BIRD's stop, for one, is asynchronous — then releases the rest.
   */
  async stop(): Promise<void> {
    await this.jobs.stop();
    this.store.dispose();
  }

  dispose(): void {
    this.store.dispose();
  }

  // ---- the cluster view -------------------------------------------------

  private record(body: EventBody): Promise<void> {
    return this.journal.record(body).catch(() => {});
  }

  /** Store outages on the timeline: recorded when the store answers again (nothing can be stored while it does not). */
  private watchStoreOutages(session: EtcdSession): void {
    let lostAt: number | undefined;
    let reason = '';
    session.onState((s) => {
      if (s === 'lost' && lostAt === undefined) {
        lostAt = Date.now();
        reason = session.lostReason ?? 'unknown';
      } else if (s === 'live' && lostAt !== undefined) {
        const outageMs = Date.now() - lostAt;
        lostAt = undefined;
        void this.record({ kind: 'store-lost', reason });
        void this.record({ kind: 'store-live', outageMs });
      }
    });
  }

  /** New and removed allocations, recorded by the allocator alone (every node computes the same). */
  private allocationsChanged(ingress: ReadonlyMap<string, readonly string[]>): void {
    for (const l of this.poolsListeners) l();
    const before = this.lastIngress;
    this.lastIngress = ingress;
    if (!before) return; // the first state is the baseline, not news
    const allocator = this.controlPlane.status().allocator;
    if (this.config.store === 'etcd' && allocator !== this.config.node) return;
    let n = 0;
    for (const [service, ips] of ingress) {
      if (before.get(service) === ips) continue; // unchanged (the allocator keeps an unchanged Service's list)
      const old = new Set(before.get(service) ?? []);
      for (const ip of ips) if (!old.has(ip) && n++ < 50) void this.record({ kind: 'allocated', service, ip });
    }
    for (const [service, ips] of before) {
      if (ingress.get(service) === ips) continue;
      const now = new Set(ingress.get(service) ?? []);
      for (const ip of ips) if (!now.has(ip) && n++ < 50) void this.record({ kind: 'freed', service, ip });
    }
  }

  /** Diffs the cluster's owners (coalesced): open pages get only what moved. */
  private ownersMayHaveChanged(): void {
    if (this.ownersDiffQueued) return;
    this.ownersDiffQueued = true;
    this.crashPlan?.job.trigger();
    queueMicrotask(() => {
      this.ownersDiffQueued = false;
      const now = this.ownership.view().owners;
      const changes = new Map<string, string | null>();
      for (const [ip, node] of now) if (this.lastOwners.get(ip) !== node) changes.set(ip, node);
      for (const ip of this.lastOwners.keys()) if (!now.has(ip)) changes.set(ip, null);
      this.lastOwners = new Map(now);
      if (changes.size > 0) for (const l of this.ownersListeners) l(changes);
    });
  }

  private nodeCard() {
    const st = this.controlPlane.status();
    return {
      version: heraldVersion(),
      startedAt: new Date(this.startedAt).toISOString(),
      // Where it announces, or would when it owns an IP (its candidates' interfaces).
      interfaces: [...new Set([...this.db.readTxn().list(l2AnnounceTable).map((r) => r.iface), ...st.candidates.flatMap((c) => c.interfaces)])].sort(),
      owned: this.ownership.view().owned.size,
      ...(st.lastError ? { lastError: st.lastError } : {}),
      ...(this.viewUrl() ? { viewUrl: this.viewUrl() } : {}),
    };
  }

  /** Where other nodes reach this node's view server: as configured (the CLI derives it), else only when it listens beyond loopback on a definite address. */
  private viewUrl(): string | undefined {
    if (this.config.viewUrl) return this.config.viewUrl;
    const l = this.config.viewListen;
    if (!l || isLoopback(l.host) || l.host === '0.0.0.0' || l.host === '::') return undefined;
    return `http://${l.host.includes(':') ? `[${l.host}]` : l.host}:${l.port}`;
  }

  private notDoneMemo: { revision: number; rows: NodeReport['notDone'] } | undefined;

  /** This node's rows not done, for every reconciler (as `herald status` lists them); recomputed only after a commit (a scan of every table). */
  private notDoneRows(): NodeReport['notDone'] {
    const revision = this.db.readTxn().globalRevision;
    if (this.notDoneMemo?.revision === revision) return this.notDoneMemo.rows;
    const rows = [
      ...(this.l2.reconciler?.notDone() ?? []),
      ...(this.routes?.notDone() ?? []),
      ...(this.bgp?.routes.notDone() ?? []),
      ...(this.lb?.stack.reconciler.notDone() ?? []),
      ...this.policy.notDone(),
    ].map((r) => ({ reconciler: r.reconciler, key: r.key, kind: r.kind, ...(r.error ? { error: r.error } : {}) }));
    this.notDoneMemo = { revision, rows };
    return rows;
  }

  /** What this node tells the other nodes' views (GET /v1/node): counters, rows not done, health. */
  private nodeReport(): NodeReport {
    const connections = this.lbConnections();
    return {
      ...this.selfReport(),
      replies: Object.fromEntries(this.replies()),
      advertised: [...this.bgpAdvertised()],
      ...(connections ? { connections: Object.fromEntries(connections) } : {}),
    };
  }

  /** The report without its counters (the snapshot and the counters push read those once, themselves: a walk of the responders map each). */
  private selfReport(): Omit<NodeReport, 'replies'> {
    const notDone = this.notDoneRows();
    const problems: string[] = [];
    for (const [name, h] of this.jobs.health()) if (h.level !== 'ok') problems.push(`${name}: ${h.level}${h.message ? ` (${h.message})` : ''}`);
    const errors = notDone.filter((r) => r.kind === 'error').length;
    if (errors > 0) problems.push(`${errors} row${errors === 1 ? '' : 's'} in error`);
    const lastError = this.controlPlane.status().lastError;
    if (lastError) problems.push(`last error: ${lastError}`);
    return { node: this.config.node, at: Date.now(), notDone, health: problems.length ? problems.join('; ').slice(0, 500) : 'ok' };
  }

  /** IPs this node advertises over BGP (its routes). */
  private bgpAdvertised(): Set<string> {
    return new Set(this.bgp ? this.bgp.control.status().routes.map((r) => r.ip) : []);
  }

  /** Live LB connections per VIP (the last count of the conntrack tables; undefined without the load balancer). */
  private lbConnections(): ReadonlyMap<string, number> | undefined {
    return this.lb?.stack.connections();
  }

  /** The per-IP columns the snapshot and the counters push share. */
  private viewExtras(): Pick<ViewInput, 'poolOf' | 'lbFrontends' | 'policies' | 'self' | 'peerReports' | 'details'> {
    const txn = this.db.readTxn();
    const self = this.selfReport();
    const poolOf = this.poolOfIps();
    return {
      poolOf,
      lbFrontends: txn.list(lbServicesTable),
      policies: txn.list(servicePolicyTable),
      self,
      peerReports: this.peerPoller?.current() ?? new Map(),
      details: this.viewDetails(),
    };
  }

  private detailsMemo: { key: string; poolOf: unknown; details: ReadonlyMap<string, IpDetails> } | undefined;

  /** Pool, LB backends, policy revision per IP: rebuilt only when the lb-services or service-policy table or the allocations changed (the same object otherwise). */
  private viewDetails(): ReadonlyMap<string, IpDetails> {
    const txn = this.db.readTxn();
    const poolOf = this.poolOfIps();
    const key = `${txn.revision(lbServicesTable)}/${txn.revision(servicePolicyTable)}`;
    if (this.detailsMemo?.key === key && this.detailsMemo.poolOf === poolOf) return this.detailsMemo.details;
    const services = this.controlPlane.status().ipam?.services;
    const details = buildDetails({ poolOf, lbFrontends: txn.list(lbServicesTable), policies: txn.list(servicePolicyTable), services: new Map([...(services ?? new Map())].map(([k, a]) => [k, a.ingress])) });
    this.detailsMemo = { key, poolOf, details };
    return details;
  }

  private poolOfMemo: { pools: unknown; services: unknown; out: Map<string, string> } | undefined;

  /** IP → pool, for the allocated IPs (pools compiled once per intent; recomputed only when pools or allocations change). */
  private poolOfIps(): Map<string, string> {
    const pools = this.intentPools;
    const out = new Map<string, string>();
    if (!pools) return out;
    const services = this.controlPlane.status().ipam?.services;
    if (this.poolOfMemo?.pools === pools && this.poolOfMemo.services === services) return this.poolOfMemo.out;
    if (this.viewPoolsOf?.pools !== pools) this.viewPoolsOf = { pools, compiled: compilePools(pools.values()) };
    const compiled = this.viewPoolsOf.compiled;
    this.poolOfMemo = { pools, services, out };
    for (const a of services?.values() ?? []) {
      for (const ip of a.ingress) {
        const addr = addrOf(ip);
        const pool = addr ? compiled.find((p) => blockOf(p, addr)) : undefined;
        if (pool) out.set(ip, pool.name);
      }
    }
    return out;
  }

  private viewSource(): ViewSource {
    return {
      ring: this.journal.ring,
      snapshot: () => this.viewSnapshot(),
      onOwners: (l) => {
        this.ownersListeners.add(l);
        return () => this.ownersListeners.delete(l);
      },
      onNodes: (l) => this.viewStore?.onNodes(l) ?? (() => {}),
      counters: () => {
        const cp = this.controlPlane.status();
        const extras = this.viewExtras();
        const connections = this.lbConnections();
        return buildCounters({
          node: this.config.node,
          replies: this.replies(),
          bgpAdvertised: this.bgpAdvertised(),
          ...(connections ? { connections } : {}),
          services: new Map([...(cp.ipam?.services ?? new Map())].map(([k, a]) => [k, a.ingress])),
          ...extras,
        });
      },
      nodeReport: () => this.nodeReport(),
      details: () => this.viewDetails(),
      pools: () => this.viewPools(),
      onPools: (l) => {
        this.poolsListeners.add(l);
        return () => this.poolsListeners.delete(l);
      },
    };
  }

  private viewPools() {
    const cp = this.controlPlane.status();
    return [...(cp.ipam?.pools ?? new Map())].map(([pool, p]) => ({ pool, total: p.total.toString(), used: p.used.toString(), free: p.available.toString(), conflicting: p.conflicting, disabled: p.disabled }));
  }

  private replies(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [k, v] of this.l2.datapath.maps.responders.entries()) out.set(k.ip, (out.get(k.ip) ?? 0) + Number(v.replies));
    return out;
  }

  /** The view's snapshot (also what the page loads first). */
  viewSnapshot() {
    const cp = this.controlPlane.status();
    const session = this.session?.status();
    const card = this.nodeCard();
    const connections = this.lbConnections();
    return buildView({
      node: this.config.node,
      version: card.version,
      store: this.config.store,
      startedAt: card.startedAt,
      lease: session ? `${session.state}${session.lease ? ` (lease ${session.lease}, valid ${(session.validForMs / 1000).toFixed(1)}s)` : ''}` : 'local',
      lastError: cp.lastError ?? null,
      interfaces: card.interfaces,
      services: new Map([...(cp.ipam?.services ?? new Map())].map(([k, a]) => [k, a.ingress])),
      owners: this.ownership.view().owners,
      bgpAdvertised: this.bgpAdvertised(),
      replies: this.replies(),
      ...(connections ? { connections } : {}),
      ...this.viewExtras(),
      peers: this.viewStore?.nodes() ?? new Map(),
      pools: [...(cp.ipam?.pools ?? new Map())].map(([pool, p]) => ({ pool, total: p.total.toString(), used: p.used.toString(), available: p.available.toString(), conflicting: p.conflicting, disabled: p.disabled })),
      rejected: this.intentReport.status().rejected,
      conflicts: this.l2.conflicts.records().map((c) => ({ ip: c.ip, foreignMac: c.foreignMac, claims: c.claims })),
      garp: this.l2.garp.stats,
      events: this.journal.ring.list(),
      lastEventId: this.journal.ring.last,
    });
  }
}

let versionText: string | undefined;
/** herald's version (package.json), read once. */
function heraldVersion(): string {
  versionText ??= (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  return versionText;
}

/** HERALD_WIRE_FILTER=off reads every ARP frame in JavaScript again: only to measure what the socket filter saves (bench/wire-filter). */
function ownerWatchOptions(defaults: OwnerWatchOptions, given: AgentConfig['ownerWatch'] = {}): OwnerWatchOptions {
  return { ...defaults, ...given, wireFilter: process.env['HERALD_WIRE_FILTER'] !== 'off' };
}

/** One writer of Service status at a time: the LB-IPAM leader (Lease herald-ipam), which is also the one allocator. */
function makeStatusWriter(kube: { modules: KubeModules; client: KubeClient }, source: KubernetesIntentSource, election: LeaderElection | undefined, node: string, log: Logger): ServiceStatusWriter {
  return new kube.modules.ServiceStatusWriter({
    client: kube.client,
    cached: (name, namespace) => source.cached('Service', name, namespace),
    events: new kube.modules.EventRecorder({ client: kube.client, node, log }),
    log,
    ...(election ? { active: () => election.isLeader() } : {}),
  });
}

function makeKubeEvents(kube: { modules: KubeModules; client: KubeClient }, source: KubernetesIntentSource, servicesOf: (ip: string) => readonly string[], ownership: LeaseOwnership | undefined, election: LeaderElection | undefined, node: string, log: Logger): KubeIntentEvents {
  const events = new kube.modules.KubeIntentEvents({
    events: new kube.modules.EventRecorder({ client: kube.client, node, log }),
    servicesOf,
    cached: (kind, name, namespace) => source.cached(kind as IntentKind, name, namespace),
    resources: kube.modules.KUBE_RESOURCES,
    active: () => election?.isLeader() ?? true,
  });
  ownership?.onMove((m) => events.moved(m));
  ownership?.onFence((f) => events.fenced(f));
  return events;
}

function makePoolStatusWriter(kube: { modules: KubeModules; client: KubeClient }, source: KubernetesIntentSource, election: LeaderElection | undefined, log: Logger): PoolStatusWriter {
  const pools = kube.modules.KUBE_RESOURCES.find((r) => r.kind === 'CiliumLoadBalancerIPPool')!;
  return new kube.modules.PoolStatusWriter({
    client: kube.client,
    cached: (name) => source.cached('CiliumLoadBalancerIPPool', name),
    collection: pools.path,
    apiVersion: pools.apiVersion,
    log,
    ...(election ? { active: () => election.isLeader() } : {}),
  });
}

function makeLeaseOwnership(kube: { modules: KubeModules; client: KubeClient }, config: AgentConfig, log: Logger, watch: PacketOwnerWatch | undefined): LeaseOwnership {
  const k = config.kubernetes ?? {};
  const d = kube.modules.leaseOwnershipDefaults;
  return new kube.modules.LeaseOwnership(kube.client, config.node, { log, ...(watch ? { watch } : {}) }, {
    ...d,
    ...(k.namespace ? { namespace: k.namespace } : {}),
    ...(k.leaseDurationS ? { durationS: k.leaseDurationS } : {}),
    ...(k.leaseRenewMs ? { renewMs: k.leaseRenewMs } : {}),
  });
}
