/**
 * The etcd layout of intent, pure (no I/O): one object per key,
 *
 *   <prefix><Kind>/<namespace or _cluster>/<name>  →  the object as JSON
 *
 * e.g. `/herald/manifests/Service/shop/web`,
 * `/herald/manifests/CiliumLoadBalancerIPPool/_cluster/blue`.
 *
 * What is stored is the object as written by the operator (not the parsed,
 * canonicalised form, which is not valid input again), minus fields only a
 * Kubernetes API server writes, as canonical JSON (sorted keys) so that
 * re-applying the same object in another key order or layout is "unchanged".
 * Stored values are read back through the same validation as files, with the
 * key standing for the file name in every message.
 */
import { parseAllDocuments } from 'yaml';
import { HeraldError } from '../../core/errors.js';
import type { ManifestError } from '../diagnostics.js';
import { KINDS, isIntentKind, objectKey, type IntentKind } from '../kinds.js';
import { manifestLimitDefaults, type ManifestLimits } from '../limits.js';
import { customTags, finishLoad, isRecord, parseFile, readsKind, type ManifestLoad, type ParsedFile } from '../parse.js';

export const DEFAULT_MANIFEST_PREFIX = '/herald/manifests/';

/** The namespace segment of cluster-scoped kinds (`_` cannot start a namespace name). */
export const CLUSTER_SEGMENT = '_cluster';

/** A prefix is non-empty and ends with "/" (added when missing). */
export function normalizeManifestPrefix(prefix: string): string {
  const p = prefix.trim();
  if (p === '' || p === '/') {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `etcd prefix ${JSON.stringify(prefix)}: must name a key prefix such as ${DEFAULT_MANIFEST_PREFIX}`);
  }
  return p.endsWith('/') ? p : `${p}/`;
}

/** The key of one object; `key` is `objectKey(kind, …)` (`namespace/name` or `name`). */
export function storageKey(prefix: string, kind: IntentKind, key: string): string {
  return KINDS[kind].namespaced ? `${prefix}${kind}/${key}` : `${prefix}${kind}/${CLUSTER_SEGMENT}/${key}`;
}

/** `service/web`, `ciliumloadbalancerippool.cilium.io/blue`: the resource as kubectl prints it. */
export function kubectlRef(kind: string, apiVersion: string, name: string): string {
  const slash = apiVersion.indexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  return `${kind.toLowerCase()}${group ? `.${group}` : ''}/${name}`;
}

/** One object ready to store. */
export interface StoredManifest {
  readonly key: string;
  /** kubectl-style name for output (`service/web`). */
  readonly ref: string;
  /** Canonical JSON. */
  readonly value: string;
}

/** Null-valued entries dropped ("field: null" = unset), keys sorted, recursively. */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (!isRecord(v)) return v;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v).sort()) {
    const x = v[k];
    if (x !== null && x !== undefined) out[k] = canonical(x);
  }
  return out;
}

/** Written by an API server or by kubectl for itself; meaningless in herald's store. */
const SERVER_METADATA = ['managedFields', 'resourceVersion', 'uid', 'generation', 'selfLink'];
const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

function forStorage(raw: Record<string, unknown>, kind: IntentKind): Record<string, unknown> {
  const metadata = isRecord(raw.metadata) ? { ...raw.metadata } : {};
  for (const f of SERVER_METADATA) delete metadata[f];
  if (isRecord(metadata.annotations) && LAST_APPLIED in metadata.annotations) {
    const { [LAST_APPLIED]: _dropped, ...rest } = metadata.annotations;
    metadata.annotations = rest;
  }
  if (KINDS[kind].namespaced) {
    if (typeof metadata.namespace !== 'string' || metadata.namespace === '') metadata.namespace = 'default';
  } else {
    delete metadata.namespace;
  }
  return { ...raw, metadata };
}

/**
 * One object as read from a Kubernetes API server (kind and apiVersion set),
 * in the stored form: server-written metadata dropped, canonical JSON.
 */
export function storedValueOf(obj: Record<string, unknown>, kind: IntentKind): string {
  return JSON.stringify(canonical(forStorage(obj, kind)));
}

/**
 * The objects of one manifest text, as they will be stored. Call it only on
 * text that validated without errors: anything not an object of a known kind
 * with a name is skipped here (validation reports it).
 */
export function manifestsForStorage(text: string, prefix: string): StoredManifest[] {
  const docs = parseAllDocuments(text, { version: '1.1', customTags, uniqueKeys: true });
  const out: StoredManifest[] = [];
  const add = (item: unknown, defaults: Record<string, unknown>): void => {
    if (!isRecord(item)) return;
    const obj = { ...defaults, ...item };
    const { kind, apiVersion } = obj;
    const meta = isRecord(obj.metadata) ? obj.metadata : {};
    // Kinds herald does not read (validation counts them as ignored) are not stored.
    if (typeof kind !== 'string' || typeof apiVersion !== 'string' || !readsKind(kind, apiVersion)) return;
    if (typeof meta.name !== 'string' || meta.name === '') return;
    const namespace = typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : undefined;
    const key = objectKey(kind, meta.name, namespace);
    out.push({
      key: storageKey(prefix, kind, key),
      ref: kubectlRef(kind, apiVersion, meta.name),
      value: JSON.stringify(canonical(forStorage(obj, kind))),
    });
  };
  for (const doc of Array.isArray(docs) ? docs : [docs]) {
    if (doc.errors.length > 0) continue;
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch {
      continue; // validation reports it
    }
    if (!isRecord(value)) continue;
    if (typeof value.kind === 'string' && value.kind.endsWith('List')) {
      const itemKind = value.kind === 'List' ? undefined : value.kind.slice(0, -'List'.length);
      const defaults = itemKind !== undefined ? { kind: itemKind, apiVersion: value.apiVersion } : {};
      if (Array.isArray(value.items)) for (const item of value.items) add(item, defaults);
    } else {
      add(value, {});
    }
  }
  return out;
}

function keyError(key: string, message: string, object?: { kind: string; name: string }): ManifestError {
  return { severity: 'error', file: key, path: '', message, ...(object ? { object } : {}) };
}

/**
 * Reads one stored value back as a one-object file named by its key; the key
 * must be the object's own key under `prefix`.
 */
export function readStoredValue(prefix: string, key: string, value: string, limits: ManifestLimits = manifestLimitDefaults): ParsedFile {
  const parsed = parseFile(value, key, limits);
  const errors: ManifestError[] = [...parsed.errors];
  const entries = parsed.entries.filter((entry) => {
    if (!entry.identity) return true;
    const expected = storageKey(prefix, entry.identity.kind, entry.identity.key);
    if (expected === key) return true;
    errors.push(
      keyError(key, `stored under the wrong key: this object belongs at ${expected}`, { kind: entry.identity.kind, name: entry.identity.key }),
    );
    return false;
  });
  if (parsed.errors.length === 0 && parsed.entries.length !== 1) {
    errors.push(keyError(key, `expected exactly one object per key, found ${parsed.entries.length}`));
  }
  return { ...parsed, entries, errors };
}

/**
 * Reads stored values back (each with `readStoredValue`); the result is a
 * load like `loadManifestPath`'s (snapshot iff no errors).
 */
export function readStoredManifests(
  prefix: string,
  kvs: Iterable<{ readonly key: string; readonly value: string }>,
  limits: ManifestLimits = manifestLimitDefaults,
): ManifestLoad {
  const files: ParsedFile[] = [];
  for (const { key, value } of kvs) files.push(readStoredValue(prefix, key, value, limits));
  return finishLoad(files, [], limits.maxDiagnostics);
}
