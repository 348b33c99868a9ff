/**
 * Prometheus metrics on an opt-in listen address. Only this module imports
 * prom-client; every value is read from the agent's own state at scrape time
 * (the per-IP ARP counters straight from the pinned BPF map).
 */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { isIpv4 } from '../core/addr.js';
import { HeraldError } from '../core/errors.js';

export interface MetricsSource {
  responderEntries(): Array<{ ip: string; iface: string; replies: number; conflicts: number }>;
  garp(): { sent: number; failed: number };
  /** Conflict defences (re-announcements) per IP and interface. */
  defences?(): Array<{ ip: string; iface: string; defences: number }>;
  ownershipChanges(): number;
  ownedIps(): number;
  reconciler():
    | { errorCount: number; lastPartial?: { durationMs: number }; lastFull?: { durationMs: number }; partialRounds: number; fullRounds: number }
    | undefined;
  pools(): Array<{ pool: string; total: number; used: number; available: number }>;
  /** The load balancer's connection tracking (only with --lb). */
  lb?(): { ctEntries: number; ct6Entries?: number; ctMax: number; gcDeleted: number; ctEvicted?: number; gcPasses: number; gcIntervalMs: number } | undefined;
  /** The load balancer's datapath counters since its maps were created (only with --lb): forwarded, snat_exhausted, … */
  lbDatapath?(): Record<string, bigint> | undefined;
  /** Service traffic policy: subscribe to each change's implementation delay (enqueue → enforced in the datapath). */
  onPolicyDelay?(listener: (seconds: number, source: string) => void): void;
  /** Store session and fencing (etcd store only). */
  ha?(): { sessionLive: boolean; lastKeepaliveAgeMs?: number; leasesGranted: number; fencesIssued: number; staleKeysIgnored: number; heartbeatHeld: number; lateWakeups: number } | undefined;
}

export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(text);
  const port = Number(m?.[3]);
  if (!m || port < 1 || port > 65535) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `metrics listen address "${text}" must look like 127.0.0.1:9464 or [::1]:9464`);
  }
  return { host: m[1] ?? (m[2] || '0.0.0.0'), port };
}

export function buildRegistry(src: MetricsSource): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'herald_process_' });
  const setCounter = (c: Counter<string>, value: number, labels?: Record<string, string>) => {
    if (labels) c.inc(labels, value);
    else c.inc(value);
  };
  const perIpCounter = (name: string, help: string, rows: () => Iterable<{ ip: string; iface: string; value: number }>) =>
    new Counter({
      name,
      help,
      labelNames: ['ip', 'interface'],
      registers: [registry],
      collect() {
        this.reset();
        for (const r of rows()) setCounter(this, r.value, { ip: r.ip, interface: r.iface });
      },
    });
  const policyDelay = new Histogram({
    name: 'herald_policy_implementation_delay_seconds',
    help: "Time from a policy change entering the pipeline's queue to the datapath enforcing its revision (Cilium's policy_implementation_delay), by source",
    labelNames: ['source'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  src.onPolicyDelay?.((seconds, source) => policyDelay.observe({ source }, seconds));
  const family = (v4: boolean) => src.responderEntries().filter((e) => isIpv4(e.ip) === v4);
  perIpCounter('herald_arp_replies_total', 'ARP replies sent by the eBPF responder, per IPv4 address and interface (from the BPF map)', () =>
    family(true).map((e) => ({ ...e, value: e.replies })),
  );
  perIpCounter('herald_arp_conflicts_total', 'ARP frames from a foreign MAC claiming an announced IP, per IPv4 address and interface', () =>
    family(true).map((e) => ({ ...e, value: e.conflicts })),
  );
  perIpCounter('herald_ndp_replies_total', 'Neighbor Advertisements sent by the eBPF responder, per IPv6 address and interface (from the BPF map)', () =>
    family(false).map((e) => ({ ...e, value: e.replies })),
  );
  perIpCounter(
    'herald_ndp_conflicts_total',
    'Neighbor Advertisements (or solicitations from the address) from a foreign MAC claiming an announced IPv6 address, per IP and interface',
    () => family(false).map((e) => ({ ...e, value: e.conflicts })),
  );
  perIpCounter(
    'herald_arp_defences_total',
    'Gratuitous re-announcements of an IP after a foreign MAC claimed it (rate-limited), per IP and interface',
    () => (src.defences?.() ?? []).map((d) => ({ ...d, value: d.defences })),
  );
  new Counter({
    name: 'herald_garp_sent_total',
    help: 'Gratuitous ARP frames and unsolicited Neighbor Advertisements sent',
    registers: [registry],
    collect() {
      this.reset();
      setCounter(this, src.garp().sent);
    },
  });
  new Counter({
    name: 'herald_garp_failed_total',
    help: 'Gratuitous ARP frames and unsolicited Neighbor Advertisements that failed to send',
    registers: [registry],
    collect() {
      this.reset();
      setCounter(this, src.garp().failed);
    },
  });
  new Counter({
    name: 'herald_ownership_changes_total',
    help: 'Changes of the set of IPs this node owns',
    registers: [registry],
    collect() {
      this.reset();
      setCounter(this, src.ownershipChanges());
    },
  });
  const ha = () => src.ha?.();
  new Gauge({
    name: 'herald_store_session_live',
    help: '1 while the etcd session (lease) is live by our own clock, 0 when lost; absent with the local store',
    registers: [registry],
    collect() {
      this.reset();
      const h = ha();
      if (h) this.set(h.sessionLive ? 1 : 0);
    },
  });
  new Gauge({
    name: 'herald_store_keepalive_age_seconds',
    help: 'Age of the last successful lease keep-alive',
    registers: [registry],
    collect() {
      this.reset();
      const h = ha();
      if (h?.lastKeepaliveAgeMs !== undefined) this.set(h.lastKeepaliveAgeMs / 1000);
    },
  });
  for (const [name, help, pick] of [
    ['herald_store_leases_granted_total', 'Leases granted to this agent (more than 1: the session was lost and re-established)', (h: NonNullable<ReturnType<typeof ha>>) => h.leasesGranted],
    ['herald_fences_issued_total', 'Silent owners whose lease this node revoked', (h: NonNullable<ReturnType<typeof ha>>) => h.fencesIssued],
    ['herald_stale_store_keys_total', 'Store keys ignored because they had no live lease', (h: NonNullable<ReturnType<typeof ha>>) => h.staleKeysIgnored],
    ['herald_heartbeat_held_total', 'Heartbeat ticks held back (lease not valid by our clock, or re-checking after a late wake-up)', (h: NonNullable<ReturnType<typeof ha>>) => h.heartbeatHeld],
    ['herald_late_wakeups_total', 'Heartbeat timers that fired past the liveness limit (process stopped, starved or blocked)', (h: NonNullable<ReturnType<typeof ha>>) => h.lateWakeups],
  ] as const) {
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const h = ha();
        this.reset();
        if (h) this.inc(pick(h));
      },
    });
  }
  if (src.lb) {
    const lb = src.lb;
    new Gauge({
      name: 'herald_ct_map_pressure',
      help: 'Connection-tracking entries / capacity of the ct4 and ct6 maps (as of the last GC pass)',
      labelNames: ['map'],
      registers: [registry],
      collect() {
        const v = lb();
        if (v) this.set({ map: 'ct4' }, v.ctMax > 0 ? v.ctEntries / v.ctMax : 0);
        if (v) this.set({ map: 'ct6' }, v.ctMax > 0 ? (v.ct6Entries ?? 0) / v.ctMax : 0);
      },
    });
    new Gauge({
      name: 'herald_ct_entries',
      help: 'Connection-tracking entries (as of the last GC pass)',
      labelNames: ['map'],
      registers: [registry],
      collect() {
        const v = lb();
        if (v) this.set({ map: 'ct4' }, v.ctEntries);
        if (v) this.set({ map: 'ct6' }, v.ct6Entries ?? 0);
      },
    });
    new Gauge({
      name: 'herald_ct_gc_deleted',
      help: 'Connection-tracking entries deleted by the GC since start',
      registers: [registry],
      collect() {
        const v = lb();
        if (v) this.set(v.gcDeleted);
      },
    });
    new Gauge({
      name: 'herald_ct_lru_evicted',
      help: 'Connection-tracking entries the LRU evicted because a table (ct4 or ct6) was full (created - deleted - live, from the datapath counters, as of the last GC pass); rising = the tables are too small (--lb-ct-size)',
      registers: [registry],
      collect() {
        const v = lb();
        if (v) this.set(v.ctEvicted ?? 0);
      },
    });
    if (src.lbDatapath) {
      const counters = src.lbDatapath;
      new Counter({
        name: 'herald_lb_datapath_events_total',
        help: "The load balancer datapath's counters by event: forwarded, revnat, no_backend, ct_full, snat_exhausted (a SNAT flow dropped: every port probed was taken — widen --lb-snat-ports), …",
        labelNames: ['event'],
        registers: [registry],
        collect() {
          const v = counters();
          this.reset();
          if (v) for (const [event, n] of Object.entries(v)) this.inc({ event }, Number(n));
        },
      });
    }
    new Gauge({
      name: 'herald_ct_gc_interval_seconds',
      help: 'The GC interval chosen after the last pass',
      registers: [registry],
      collect() {
        const v = lb();
        if (v) this.set(v.gcIntervalMs / 1000);
      },
    });
  }

  new Gauge({
    name: 'herald_owned_ips',
    help: 'IPs this node owns',
    registers: [registry],
    collect() {
      this.set(src.ownedIps());
    },
  });
  new Gauge({
    name: 'herald_reconcile_last_duration_seconds',
    help: 'Duration of the last datapath reconciliation round',
    labelNames: ['kind'],
    registers: [registry],
    collect() {
      const h = src.reconciler();
      this.reset();
      if (h?.lastPartial) this.set({ kind: 'partial' }, h.lastPartial.durationMs / 1000);
      if (h?.lastFull) this.set({ kind: 'full' }, h.lastFull.durationMs / 1000);
    },
  });
  new Counter({
    name: 'herald_reconcile_rounds_total',
    help: 'Datapath reconciliation rounds',
    labelNames: ['kind'],
    registers: [registry],
    collect() {
      const h = src.reconciler();
      this.reset();
      if (h) {
        setCounter(this, h.partialRounds, { kind: 'partial' });
        setCounter(this, h.fullRounds, { kind: 'full' });
      }
    },
  });
  new Counter({
    name: 'herald_reconcile_errors_total',
    help: 'Failed datapath reconciliation operations (retried with backoff)',
    registers: [registry],
    collect() {
      this.reset();
      setCounter(this, src.reconciler()?.errorCount ?? 0);
    },
  });
  new Gauge({
    name: 'herald_ipam_pool_ips',
    help: 'Addresses per LB-IPAM pool, by state',
    labelNames: ['pool', 'state'],
    registers: [registry],
    collect() {
      this.reset();
      for (const p of src.pools()) {
        this.set({ pool: p.pool, state: 'total' }, p.total);
        this.set({ pool: p.pool, state: 'used' }, p.used);
        this.set({ pool: p.pool, state: 'available' }, p.available);
      }
    },
  });
  return registry;
}

export class MetricsServer {
  private server: Server | undefined;
  constructor(
    private readonly listen: { host: string; port: number },
    private readonly registry: Registry,
  ) {}

  async start(): Promise<void> {
    const server = createServer((req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end('see /metrics\n');
        return;
      }
      this.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        (e: unknown) => res.writeHead(500).end(String(e)),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) => reject(new HeraldError('HERALD_BAD_ARGUMENT', `metrics listener ${this.listen.host}:${this.listen.port}: ${String(e)}`)));
      server.listen(this.listen.port, this.listen.host, () => resolve());
    });
    server.unref();
    this.server = server;
  }

  dispose(): void {
    this.server?.close();
  }
}
