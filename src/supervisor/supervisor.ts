/**
 * The agent's supervisor: a tiny parent that runs the real agent as its child
 * and, the moment the child dies without releasing (kill -9, OOM, a crash),
 * leaves the evidence a dead process cannot:
 *
 *   1. silence: the liveness stamp in the pinned runtime_config map is zeroed,
 *      so the in-kernel responder stops answering at once (instead of after
 *      the liveness limit, 0.8 s);
 *   2. then tell: a `node-crashed` event goes on the cluster view's timeline
 *      (under the key prefix the child reported), before the lease goes, so
 *      the takeovers that follow name a crash rather than a lease expiry;
 *   3. then hand over (etcd): the hand-over the child kept current (reported
 *      over fd 3: each owned IP's successor) is made as a stop makes it — the
 *      record on the child's lease, the successors answering as they see it,
 *      then each owner key moved onto its successor's lease —, so a crash
 *      of a node owning 1,000 IPs costs what a clean stop does, not a
 *      contention round per IP after the revoke;
 *   4. then free: the child's etcd lease (reported over fd 3) is revoked, so
 *      every key on it vanishes and candidates take over within milliseconds
 *      (instead of after wire fencing or the lease TTL). On the Kubernetes
 *      store the same step deletes the child's node Lease (reported over fd 3
 *      with the incarnation the child stamps on it): every IP Lease and
 *      election Lease naming the node is then held by a node without a Lease,
 *      and candidates watching Leases take over at once (instead of after the
 *      Lease duration). The delete is conditional — only while the Lease
 *      still carries the dead child's incarnation, with its uid and
 *      resourceVersion as preconditions — so a restarted agent's Lease is
 *      never touched.
 *
 * Silence always comes first: if the stamp cannot be zeroed (and the map
 * exists), the lease is left to expire by itself, as without a supervisor.
 * The in-kernel liveness gate stays the guard for a frozen or wedged agent,
 * which does not exit.
 *
 * Kept small on purpose: node's child_process, http and the BPF map binding,
 * nothing of the agent (no etcd3 client, no logger, no timers of its own).
 * The revoke goes over etcd's JSON gateway (POST /v3/lease/revoke); on
 * Kubernetes, the agent's one boundary to the API server (kube-client.ts),
 * loaded at start so that a crash does not wait for client-node to load.
 *
 * If the supervisor itself dies, the child sees fd 3 close and stops cleanly
 * (releases its IPs, revokes its lease, exits), like on SIGTERM: the service
 * manager restarts the pair. SIGTERM/SIGINT to the supervisor are
 * forwarded to the child; the supervisor exits with the child's status.
 */
import { spawn } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { constants } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { BpfMap } from '../os/bpf-map.js';
import { CONFIG_LIVENESS_NS, MAP_RUNTIME_CONFIG, runtimeConfigCodec } from '../datapath/l2-responder/layout.js';
import type { KubeClient } from '../intent/sources/kube-client.js';
import { HANDOVER_CHUNK, HANDOVER_MOVES_AFTER_MS, parseHandoverRecord, type CrashHandoverPlan } from '../store/etcd/handover-record.js';
import { INCARNATION_ANNOTATION, SUPERVISED_ENV, parseReport, type KubeLeaseReport } from './protocol.js';
import { performance } from 'node:perf_hooks';

export interface SupervisorOptions {
  /** The agent's command line (node, its flags, the script and its arguments); run with SUPERVISED_ENV set. */
  command: string;
  args: readonly string[];
  /** Where the child's datapath maps are pinned. */
  pinDir: string;
  /** etcd endpoints (http(s)://host:port or unix:///path). */
  endpoints: readonly string[];
  /** Kubernetes store: the API server the child uses (a kubeconfig file, else in-cluster). */
  kubernetes?: { kubeconfig?: string };
}

const log = (msg: string) => process.stderr.write(`herald supervisor: ${msg}\n`);

/** Runs the agent as a child until it exits; resolves with the exit code the supervisor should leave with. */
export async function runSupervisor(opts: SupervisorOptions): Promise<number> {
  const child = spawn(opts.command, [...opts.args], {
    stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
    env: { ...process.env, [SUPERVISED_ENV]: '3' },
  });
  log(`agent pid ${child.pid}`);
  const leases = new Set<string>();
  let journal: string | undefined;
  let kubeLease: KubeLeaseReport | undefined;
  let plan: CrashHandoverPlan | undefined;
  const kube = opts.kubernetes ? kubeClientFor(opts.kubernetes) : undefined;
  const channel = child.stdio[3] as Readable;
  createInterface({ input: channel }).on('line', (line) => {
    const report = parseReport(line);
    if (!report) return;
    if ('lease' in report) leases.add(report.lease);
    else if ('kubeLease' in report) kubeLease = report.kubeLease;
    else if ('handoverPlan' in report) plan = report.handoverPlan ?? undefined;
    else journal = report.journal;
  });
  channel.on('error', () => {}); // the child's end closes when it dies

  const forward = (sig: NodeJS.Signals) => () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
  };
  const handlers = (['SIGTERM', 'SIGINT'] as const).map((sig) => [sig, forward(sig)] as const);
  for (const [sig, h] of handlers) process.on(sig, h);

  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (c, s) => resolve({ code: c, signal: s })),
  );
  log(`agent exited (${signal ?? `code ${code}`})`);
  await afterDeath(opts, leases, journal ? { prefix: journal, signal, code } : undefined, kube && kubeLease ? { client: kube, lease: kubeLease } : undefined, plan);
  for (const [sig, h] of handlers) process.off(sig, h);
  return code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0);
}

/** The child is gone: silence its datapath, then free its leases. Exported for tests. */
export async function afterDeath(
  opts: Pick<SupervisorOptions, 'pinDir' | 'endpoints'>,
  leases: ReadonlySet<string>,
  crash?: { prefix: string; signal: NodeJS.Signals | null; code: number | null },
  kube?: { client: Promise<KubeClient | undefined>; lease: KubeLeaseReport },
  plan?: CrashHandoverPlan,
): Promise<void> {
  // Each step's line says how long after the death it ended: the crash failover's budget, readable in the log.
  const died = performance.now();
  const since = () => `(+${Math.round(performance.now() - died)} ms)`;
  if (!silence(opts.pinDir, since)) {
    if (leases.size > 0) log(`leases ${[...leases].join(', ')} left to expire: the datapath could not be silenced`);
    if (kube) log(`node Lease ${kube.lease.namespace}/${kube.lease.name} left to expire: the datapath could not be silenced`);
    return;
  }
  if (kube) {
    const client = await kube.client;
    const l = kube.lease;
    const outcome = client ? await releaseNodeLease(client, l) : 'failed';
    log(
      outcome === 'released'
        ? `released node Lease ${l.namespace}/${l.name}`
        : outcome === 'gone'
          ? `node Lease ${l.namespace}/${l.name} already gone`
          : outcome === 'other'
            ? `node Lease ${l.namespace}/${l.name} carries another incarnation: left alone`
            : `releasing node Lease ${l.namespace}/${l.name} failed: it expires by itself`,
    );
  }
  // Only when a lease is to be revoked (a child that had released everything needs no crash on record).
  if (crash && leases.size > 0) await recordCrash(opts.endpoints, crash, since);
  // Straight to the successors, as a stop would: they answer at the record instead of contending after the revoke.
  if (plan && leases.has(plan.lease)) await handOverAfterCrash(opts.endpoints, plan, since);
  for (const id of leases) {
    const outcome = await revokeLease(opts.endpoints, id);
    log(`${outcome === 'revoked' ? `revoked lease ${id}` : outcome === 'gone' ? `lease ${id} already gone` : `revoking lease ${id} failed: it expires by itself`} ${since()}`);
  }
}

/** The API client, created at start (client-node takes a while to load); undefined (logged) if the credentials cannot be read. */
function kubeClientFor(k: { kubeconfig?: string }): Promise<KubeClient | undefined> {
  return import('../intent/sources/kube-client.js')
    .then(({ KubeClient }) => KubeClient.create({ ...(k.kubeconfig ? { kubeconfig: k.kubeconfig } : {}), timeoutMs: 2000 }))
    .catch((e: Error) => {
      log(`kubernetes: ${e.message}; a crashed agent's node Lease will expire by itself`);
      return undefined;
    });
}

/**
 * Deletes the dead child's node Lease, only while it is the child's: it must
 * carry the child's incarnation, and the delete has the uid and
 * resourceVersion read as preconditions (a write in between — a renewal the
 * child sent just before dying, or a restarted agent's — is a 409: read again).
 */
export async function releaseNodeLease(client: KubeClient, l: KubeLeaseReport): Promise<'released' | 'gone' | 'other' | 'failed'> {
  const path = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(l.namespace)}/leases/${encodeURIComponent(l.name)}`;
  const { deleteAsRead } = await import('../intent/sources/kube-client.js');
  try {
    const outcome = await deleteAsRead(client, path, (cur) => (cur.metadata.annotations as Record<string, string> | undefined)?.[INCARNATION_ANNOTATION] === l.incarnation);
    return outcome === 'deleted' ? 'released' : outcome === 'refused' ? 'other' : outcome === 'gone' ? 'gone' : 'failed';
  } catch (e) {
    log(`kubernetes: releasing ${l.namespace}/${l.name}: ${(e as Error).message}`);
    return 'failed';
  }
}

/** Zeroes the liveness stamp: the program treats it as never written and answers nothing. True when silent. */
function silence(pinDir: string, since: () => string): boolean {
  const path = join(pinDir, MAP_RUNTIME_CONFIG);
  let map: BpfMap<number, bigint>;
  try {
    map = BpfMap.openPinned(path, runtimeConfigCodec);
  } catch (e) {
    // No pinned map: no datapath was loaded from this pin dir, nothing answers.
    if (/no pinned map/.test(String((e as Error).message))) return true;
    log(`opening ${path} failed: ${(e as Error).message}`);
    return false;
  }
  try {
    map.update(CONFIG_LIVENESS_NS, 0n);
    log(`datapath silenced (liveness stamp cleared) ${since()}`);
    return true;
  } catch (e) {
    log(`clearing the liveness stamp failed: ${(e as Error).message}`);
    return false;
  } finally {
    map.dispose();
  }
}

/**
 * Puts the `node-crashed` timeline event through etcd's JSON gateway (one
 * try per endpoint, 1 s each; a failure only costs the cause its precision).
 * Its key sorts after every key the child wrote (sequence = µs of the clock).
 */
export async function recordCrash(endpoints: readonly string[], crash: { prefix: string; signal: NodeJS.Signals | null; code: number | null }, since: () => string = () => ''): Promise<boolean> {
  const key = `${crash.prefix}${String(Date.now() * 1000 + 999).padStart(20, '0')}`;
  const value = JSON.stringify({ kind: 'node-crashed', ...(crash.signal ? { signal: crash.signal } : { code: crash.code ?? -1 }), at: new Date().toISOString() });
  const b64 = (t: string) => Buffer.from(t).toString('base64');
  for (const endpoint of endpoints) {
    try {
      const { status, body } = await postJson(endpoint, '/v3/kv/put', JSON.stringify({ key: b64(key), value: b64(value) }));
      if (status === 200) {
        log(`crash recorded on the timeline ${since()}`.trimEnd());
        return true;
      }
      log(`${endpoint}: recording the crash answered ${status}: ${body.trim().slice(0, 200)}`);
    } catch (e) {
      log(`${endpoint}: recording the crash failed: ${(e as Error).message}`);
    }
  }
  return false;
}

/**
 * The dead child's hand-over, from the plan it kept current: the record on
 * its lease (its successors answer as they see it), then — after the same
 * pause a stop makes — each owner key moved onto its successor's lease, one
 * compare per key (still on the child's lease), in transactions of
 * HANDOVER_CHUNK. A put onto a lease that is gone fails its transaction, so
 * no key lands on a dead node; whatever is not moved is freed by the revoke
 * that follows. Resolves with how many keys moved.
 */
export async function handOverAfterCrash(endpoints: readonly string[], plan: CrashHandoverPlan, since: () => string = () => ''): Promise<number> {
  const record = parseHandoverRecord(plan.record);
  if (!record || record.moves.size === 0) return 0;
  const b64 = (t: string) => Buffer.from(t).toString('base64');
  // Only if none stands: a node that fenced the child on its silence (frozen before it died)
  // may be handing its IPs over by a record of its own — two records could name two answerers.
  const put = await postFirst(
    endpoints,
    '/v3/kv/txn',
    JSON.stringify({
      compare: [{ key: b64(plan.recordKey), target: 'VERSION', result: 'EQUAL', version: '0' }],
      success: [{ request_put: { key: b64(plan.recordKey), value: b64(plan.record), lease: plan.lease } }],
    }),
  );
  if (put?.status !== 200) {
    log(`writing the hand-over record failed${put ? ` (${put.status}: ${put.body.trim().slice(0, 200)})` : ''}: the revoke frees the IPs`);
    return 0;
  }
  if ((JSON.parse(put.body) as { succeeded?: boolean }).succeeded !== true) {
    log('a hand-over record stands already (a node fencing the dead agent): left to it; the revoke frees the rest');
    return 0;
  }
  log(`hand-over record written for ${record.moves.size} IPs ${since()}`);
  await new Promise((r) => setTimeout(r, HANDOVER_MOVES_AFTER_MS));
  const moves = [...record.moves];
  const chunks: Array<typeof moves> = [];
  for (let i = 0; i < moves.length; i += HANDOVER_CHUNK) chunks.push(moves.slice(i, i + HANDOVER_CHUNK));
  const moved = await Promise.all(
    chunks.map(async (chunk) => {
      const txn = {
        compare: chunk.map(([ip]) => ({ key: b64(`${plan.ownersPrefix}${ip}`), target: 'LEASE', result: 'EQUAL', lease: plan.lease })),
        success: chunk.map(([ip, to]) => ({ request_put: { key: b64(`${plan.ownersPrefix}${ip}`), value: b64(to.node), lease: to.lease } })),
      };
      const res = await postFirst(endpoints, '/v3/kv/txn', JSON.stringify(txn));
      // proto3 JSON leaves a false `succeeded` out.
      return res?.status === 200 && (JSON.parse(res.body) as { succeeded?: boolean }).succeeded === true ? chunk.length : 0;
    }),
  );
  const n = moved.reduce((a, b) => a + b, 0);
  log(`handed ${n} of ${moves.length} IPs over to their successors ${since()}`);
  return n;
}

/** One request, to the first endpoint that answers at all; undefined when none does. */
async function postFirst(endpoints: readonly string[], path: string, body: string): Promise<{ status: number; body: string } | undefined> {
  for (const endpoint of endpoints) {
    try {
      return await postJson(endpoint, path, body);
    } catch (e) {
      log(`${endpoint}: ${path} failed: ${(e as Error).message}`);
    }
  }
  return undefined;
}

/** Revokes one lease through etcd's JSON gateway, trying each endpoint once. */
export async function revokeLease(endpoints: readonly string[], id: string): Promise<'revoked' | 'gone' | 'failed'> {
  for (const endpoint of endpoints) {
    try {
      const { status, body } = await postJson(endpoint, '/v3/lease/revoke', JSON.stringify({ ID: id }));
      if (status === 200) return 'revoked';
      if (/lease not found/i.test(body)) return 'gone';
      log(`${endpoint}: lease revoke answered ${status}: ${body.trim().slice(0, 200)}`);
    } catch (e) {
      log(`${endpoint}: lease revoke failed: ${(e as Error).message}`);
    }
  }
  return 'failed';
}

function postJson(endpoint: string, path: string, body: string): Promise<{ status: number; body: string }> {
  const unix = /^unix:\/\/(\/.+)$/.exec(endpoint);
  const url = unix ? undefined : new URL(path, endpoint);
  const request = url?.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        ...(unix ? { socketPath: unix[1], hostname: 'localhost' } : { hostname: url!.hostname, port: url!.port }),
        path,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        timeout: 1000,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(body);
  });
}
