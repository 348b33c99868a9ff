/**
 * `herald validate PATH...`, `herald apply -f PATH --etcd URL`, `herald delete -f PATH --etcd URL`.
 *
 * validate: every diagnostic and a one-line summary on stdout; exit 1 on any error.
 * apply/delete: validate first (nothing is written if anything is wrong), then
 * one etcd transaction for every object, and one kubectl-style line per object
 * on stdout (`service/web created`). Problems go to stderr with exit 1.
 */
import { Command, Option } from 'commander';
import { HeraldError } from '../../core/errors.js';
import { formatErrors, type ManifestError, type ManifestWarning } from '../../intent/diagnostics.js';
import { manifestLimitDefaults, type ManifestLimits } from '../../intent/limits.js';
import { loadManifestPath, readManifestFile } from '../../intent/load.js';
import { countIgnoredKinds, type IgnoredObject } from '../../intent/parse.js';
import { createEtcdClient, parseEtcdEndpoints, storeError } from '../../intent/sources/etcd-client.js';
import { writeManifests, type StoreChange } from '../../intent/sources/etcd-store.js';
import {
  DEFAULT_MANIFEST_PREFIX,
  manifestsForStorage,
  normalizeManifestPrefix,
  readStoredManifests,
  type StoredManifest,
} from '../../intent/sources/stored-manifest.js';
import { defaultNodeName, durationOption, parseByteSize, parseDuration, parseNodeName } from '../options.js';
import { knownNodes, nodeIdentity, parseNodeLabels, unmatchedNodeSelectors } from '../../intent/node-labels.js';
import type { IntentSnapshot } from '../../intent/snapshot.js';
import { missingCidrGroups } from '../../controlplane/policy/intake.js';

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/** How many ignored objects of each kind are named in the summary before "…". */
const SUMMARY_KINDS = 6;

/**
 * `3 files, 7 objects: ok` / `…: ok, 1 warning` / `…: 2 errors, 1 warning`
 * (objects = valid ones). With ignored objects (kinds herald does not read):
 * `3 files, 12 objects: 7 read, 5 ignored (Deployment ×2, HelmRelease ×1, …): ok`.
 */
export function validationSummary(
  files: number,
  objects: number,
  errors: number,
  warnings: number,
  ignoredKinds: readonly (readonly [string, number])[] = [],
): string {
  const ignored = ignoredKinds.reduce((n, [, c]) => n + c, 0);
  let head = `${plural(files, 'file')}, ${plural(objects + ignored, 'object')}`;
  if (ignored > 0) {
    const named = ignoredKinds.slice(0, SUMMARY_KINDS).map(([kind, n]) => `${kind} ×${n}`);
    if (ignoredKinds.length > SUMMARY_KINDS) named.push('…');
    head += `: ${objects} read, ${ignored} ignored (${named.join(', ')})`;
  }
  if (errors === 0) return `${head}: ok${warnings > 0 ? `, ${plural(warnings, 'warning')}` : ''}`;
  return `${head}: ${plural(errors, 'error')}${warnings > 0 ? `, ${plural(warnings, 'warning')}` : ''}`;
}

export interface ValidationReport {
  readonly files: number;
  readonly objects: number;
  readonly ignored: readonly IgnoredObject[];
  readonly errors: readonly ManifestError[];
  readonly warnings: readonly ManifestWarning[];
}

/**
 * Each path is loaded on its own, as the agent would load it (with the same
 * limits). A policy whose nodeSelector matches no node known (`node`, by
 * default this host with the kubelet's labels, and each Node manifest) is a warning.
 */
export async function validatePaths(
  paths: readonly string[],
  limits: ManifestLimits = manifestLimitDefaults,
  node: { readonly name: string; readonly labels?: Readonly<Record<string, string>> } = { name: defaultNodeName() },
): Promise<ValidationReport> {
  let files = 0;
  let objects = 0;
  const ignored: IgnoredObject[] = [];
  const errors: ManifestError[] = [];
  const warnings: ManifestWarning[] = [];
  for (const path of paths) {
    const load = await loadManifestPath(path, limits);
    files += load.files.length;
    objects += load.objects.length;
    ignored.push(...load.ignored);
    errors.push(...load.errors);
    warnings.push(...load.warnings);
    if (load.snapshot) warnings.push(...selectorWarnings(load.snapshot, node), ...cidrGroupWarnings(load.snapshot));
  }
  return { files, objects, ignored, errors, warnings };
}

function selectorWarnings(snapshot: IntentSnapshot, node: { readonly name: string; readonly labels?: Readonly<Record<string, string>> }): ManifestWarning[] {
  const self = nodeIdentity(snapshot, node.name, node.labels);
  return unmatchedNodeSelectors(snapshot, knownNodes(snapshot, self)).map((u) => {
    const policy = snapshot.policies.get(u.policy);
    return {
      severity: 'warning' as const,
      ...(policy?.source ?? { file: '' }),
      object: { kind: 'CiliumL2AnnouncementPolicy', name: u.policy },
      path: 'spec.nodeSelector',
      message: u.message,
    };
  });
}

/** fromCIDRSet entries naming a CiliumCIDRGroup that does not exist (the rule goes without those CIDRs, as in Cilium). */
function cidrGroupWarnings(snapshot: IntentSnapshot): ManifestWarning[] {
  return missingCidrGroups(snapshot).map((w) => ({
    severity: 'warning' as const,
    ...(w.object.source ?? { file: '' }),
    object: { kind: w.object.kind, name: w.policy.slice(w.object.kind.length + 1) },
    path: `${w.path}.${w.field}`,
    message: w.detail,
  }));
}

export interface StoreWriteOptions {
  readonly path: string;
  readonly endpoints: readonly string[];
  readonly prefix?: string;
  readonly mode: 'apply' | 'delete';
  /** Bound on all etcd calls together (ms); default 5 s. */
  readonly timeoutMs?: number;
  /** The agent's limits: what it would refuse is not written. */
  readonly limits?: ManifestLimits;
}

export type StoreWriteResult =
  | { readonly ok: false; readonly errors: readonly ManifestError[]; readonly warnings: readonly ManifestWarning[] }
  | { readonly ok: true; readonly changes: readonly StoreChange[]; readonly warnings: readonly ManifestWarning[] };

/**
 * Validates `path` and, only if it has no errors, writes (or deletes) every
 * object in one transaction. Manifest errors are returned; store problems
 * throw HERALD_STORE (one line, cause kept).
 */
export async function writeManifestPath(opts: StoreWriteOptions): Promise<StoreWriteResult> {
  const prefix = normalizeManifestPrefix(opts.prefix ?? DEFAULT_MANIFEST_PREFIX);
  const endpoints = parseEtcdEndpoints(opts.endpoints);
  const limits = opts.limits ?? manifestLimitDefaults;
  const load = await loadManifestPath(opts.path, limits);
  if (load.errors.length > 0) return { ok: false, errors: load.errors, warnings: load.warnings };
  if (load.objects.length === 0) throw new HeraldError('HERALD_BAD_ARGUMENT', `no objects to ${opts.mode} in ${opts.path}`);

  const items: StoredManifest[] = [];
  for (const file of load.files) {
    const read = await readManifestFile(file, limits);
    if ('error' in read) return { ok: false, errors: [read.error], warnings: load.warnings };
    items.push(...manifestsForStorage(read.text, prefix));
  }
  // What is stored must read back exactly as the source will read it (a
  // value over the size cap included); this also catches a file edited
  // between validation and now.
  const check = readStoredManifests(prefix, items, limits);
  if (check.errors.length > 0 || items.length !== load.objects.length) {
    const errors = check.errors.length > 0
      ? check.errors
      : [{ severity: 'error' as const, file: opts.path, path: '', message: `read ${items.length} objects to store but validated ${load.objects.length} (did a file change?)` }];
    return { ok: false, errors, warnings: load.warnings };
  }

  const timeoutMs = opts.timeoutMs ?? 5000;
  const client = createEtcdClient({ endpoints, callTimeoutMs: Math.min(timeoutMs, 2000), deadline: Date.now() + timeoutMs });
  try {
    const changes = await writeManifests(client, prefix, items, opts.mode);
    return { ok: true, changes, warnings: load.warnings };
  } catch (e) {
    throw storeError(opts.mode === 'apply' ? 'write to' : 'delete from', endpoints, e, timeoutMs);
  } finally {
    client.close();
  }
}

/** Prints a HeraldError as one line and sets exit code 1; anything else goes to main's handler. */
function reportFailure(e: unknown): void {
  if (!(e instanceof HeraldError)) throw e;
  process.stderr.write(`herald: ${e.message}\n`);
  process.exitCode = 1;
}

export function validateCommand(): Command {
  return new Command('validate')
    .description('check manifest files or directories offline: every error with file, line, document and field')
    .argument('<path...>', 'manifest files or directories (directories are read recursively)')
    .option('--max-manifest-size <size>', 'refuse a file larger than this, as the agent does', parseByteSize, manifestLimitDefaults.maxBytes)
    .option('--node <name>', 'the node policies are checked against, besides Node manifests (as the agent\'s --node)', parseNodeName, defaultNodeName())
    .option('--node-labels <k=v,...>', "that node's labels besides kubernetes.io/os, arch and hostname (as the agent's --node-labels)", parseNodeLabels)
    .action(async (paths: string[], opts: { maxManifestSize: number; node: string; nodeLabels?: Record<string, string> }) => {
      const node = { name: opts.node, ...(opts.nodeLabels ? { labels: opts.nodeLabels } : {}) };
      const report = await validatePaths(paths, { ...manifestLimitDefaults, maxBytes: opts.maxManifestSize }, node);
      const lines = [...report.errors, ...report.warnings];
      if (lines.length > 0) process.stdout.write(`${formatErrors(lines)}\n`);
      const summary = validationSummary(report.files, report.objects, report.errors.length, report.warnings.length, countIgnoredKinds(report.ignored));
      process.stdout.write(`${summary}\n`);
      if (report.errors.length > 0) process.exitCode = 1;
    });
}

interface StoreCommandOptions {
  filename: string;
  etcd?: string;
  prefix: string;
  ignoreNotFound?: boolean;
  timeout: number;
  maxManifestSize: number;
}

function storeCommand(mode: 'apply' | 'delete'): Command {
  const cmd = new Command(mode)
    .description(
      mode === 'apply'
        ? 'validate manifests and store them in etcd in one transaction (created / configured / unchanged)'
        : 'validate manifests and delete their objects from etcd in one transaction',
    )
    .requiredOption('-f, --filename <path>', 'a manifest file or a directory of them')
    .addOption(new Option('--etcd <urls>', 'etcd endpoints, comma-separated: http://host:port or unix:///path').env('HERALD_ETCD'))
    .option('--prefix <prefix>', 'key prefix of the manifests in etcd', DEFAULT_MANIFEST_PREFIX)
    .addOption(durationOption('--timeout <duration>', 'give up on etcd after this long', 5000))
    .option('--max-manifest-size <size>', "refuse a file or stored object larger than this (the agents' --max-manifest-size)", parseByteSize, manifestLimitDefaults.maxBytes);
  if (mode === 'delete') cmd.option('--ignore-not-found', 'objects that are not stored are not an error');
  return cmd.action(async (opts: StoreCommandOptions) => {
    try {
      if (opts.etcd === undefined || opts.etcd.trim() === '') {
        throw new HeraldError('HERALD_BAD_ARGUMENT', 'no etcd endpoint: use --etcd URL[,URL] or set HERALD_ETCD');
      }
      const result = await writeManifestPath({ path: opts.filename, endpoints: [opts.etcd], prefix: opts.prefix, mode, timeoutMs: opts.timeout, limits: { ...manifestLimitDefaults, maxBytes: opts.maxManifestSize } });
      if (!result.ok) {
        const lines = [...result.errors, ...result.warnings];
        process.stderr.write(`${formatErrors(lines)}\n`);
        process.stderr.write(`herald: ${plural(result.errors.length, 'error')} in manifests; nothing written\n`);
        process.exitCode = 1;
        return;
      }
      if (result.warnings.length > 0) process.stderr.write(`${formatErrors(result.warnings)}\n`);
      let missing = 0;
      for (const c of result.changes) {
        if (c.result === 'not found') {
          missing++;
          if (opts.ignoreNotFound) continue;
        }
        process.stdout.write(`${c.ref} ${c.result}\n`);
      }
      if (missing > 0 && !opts.ignoreNotFound) process.exitCode = 1;
    } catch (e) {
      reportFailure(e);
    }
  });
}

export const applyCommand = (): Command => storeCommand('apply');
export const deleteCommand = (): Command => storeCommand('delete');
