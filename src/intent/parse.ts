/**
 * Manifest text → validated objects, errors and warnings. Pure: no I/O.
 *
 * YAML is read as Kubernetes reads it (YAML 1.1 scalars, so unquoted
 * yes/no/on/off are booleans; but timestamps and sexagesimal numbers stay
 * strings, as in sigs.k8s.io/yaml). A `null` mapping value means "unset", as
 * in Kubernetes' JSON decoding. Every problem in every document is reported;
 * a document with a YAML syntax error is not validated further.
 */
import { Composer, LineCounter, Parser, isAlias, isMap, isScalar, isSeq, type Alias, type Document, type Node, type Tags } from 'yaml';
import type { ManifestError, ManifestWarning, SourceRef } from './diagnostics.js';
import { formatPath } from './diagnostics.js';
import { manifestErrorMap, describeValue } from './fields.js';
import { KINDS, isIntentKind, keyOf, manifestWarnings, objectKey, type IntentKind, type IntentObject } from './kinds.js';
import { MAX_YAML_DEPTH, manifestLimitDefaults, maxYamlNodes, tooLargeError, utf8Length, type ManifestLimits } from './limits.js';
import { quote, truncate } from './quote.js';
import { removedFieldsIn } from './removed-fields.js';
import { buildSnapshot, describePlace, type IntentSnapshot } from './snapshot.js';
import { checkDocumentBudget, hasTooManyAliases, type DocumentBudget } from './yaml-budget.js';
import { compareStrings } from '../core/order.js';

export interface ManifestLoad {
  /** Every valid object (a later duplicate is left out). */
  readonly objects: readonly IntentObject[];
  /** Objects of kinds herald does not read (other controllers' business), in file order. */
  readonly ignored: readonly IgnoredObject[];
  readonly errors: readonly ManifestError[];
  readonly warnings: readonly ManifestWarning[];
  /** Set exactly when there are no errors. */
  readonly snapshot: IntentSnapshot | undefined;
}

/**
 * An object of a kind herald does not read (a Deployment, a HelmRelease, a
 * Cilium BGP kind): left to its own controller, counted, never an error.
 * Plain data, so it crosses the parser thread's boundary.
 */
export interface IgnoredObject {
  readonly kind: string;
  readonly apiVersion: string;
  readonly name?: string;
  readonly source: SourceRef;
}

/** The per-file result before cross-file checks (see `finishLoad`). */
export interface ParsedFile {
  readonly file: string;
  readonly entries: readonly ParsedEntry[];
  readonly ignored?: readonly IgnoredObject[];
  readonly errors: readonly ManifestError[];
  readonly warnings: readonly ManifestWarning[];
}

export interface ParsedEntry {
  readonly source: SourceRef;
  /** Set when kind, apiVersion and name are known, valid or not: for duplicate detection. */
  readonly identity?: { readonly kind: IntentKind; readonly key: string; readonly at: SourceRef };
  readonly object?: IntentObject;
}

type Position = { line: number; column: number };
type Path = readonly PropertyKey[];

const LEGACY_BGP_KIND = 'CiliumBGPPeeringPolicy';
const LEGACY_BGP_MESSAGE =
  'CiliumBGPPeeringPolicy (Cilium\'s older BGP API) is not read by herald: write its virtualRouters as a CiliumBGPClusterConfig (bgpInstances, peers), a CiliumBGPPeerConfig (timers, families) and a CiliumBGPAdvertisement (serviceSelector → advertisements of type Service)';

const KUSTOMIZE_API_VERSION = 'kustomize.config.k8s.io/v1beta1';
const KUSTOMIZATION_FILES = new Set(['kustomization.yaml', 'kustomization.yml', 'kustomization']);

function isKustomizationFile(file: string): boolean {
  return KUSTOMIZATION_FILES.has((file.split('/').pop() ?? '').toLowerCase());
}

/** The API group of an apiVersion ("" for the core group's "v1"). */
function groupOf(apiVersion: string): string {
  const slash = apiVersion.lastIndexOf('/');
  return slash < 0 ? '' : apiVersion.slice(0, slash);
}

/**
 * Whether an object is herald's to read: a kind herald knows, in that kind's
 * API group. A Knative `serving.knative.dev/v1` Service or a Gateway API kind
 * is another API's object and is ignored; `cilium.io/v3` for a pool is herald's
 * kind with a version it does not know, an error. Without an apiVersion the
 * kind alone decides (the error then names the missing apiVersion).
 */
export function readsKind(kind: string, apiVersion: unknown): kind is IntentKind {
  if (!isIntentKind(kind)) return false;
  if (typeof apiVersion !== 'string' || apiVersion === '') return true;
  const group = groupOf(apiVersion);
  return KINDS[kind].apiVersions.some((v) => groupOf(v) === group);
}

// Dropped from the YAML 1.1 schema: sigs.k8s.io/yaml keeps these as strings.
const STRING_TAGS = new Set(['tag:yaml.org,2002:timestamp', 'tag:yaml.org,2002:binary']);
const STRING_TAG_NAMES = new Set(['timestamp', 'binary', 'intTime', 'floatTime']);
/** The YAML tags as Kubernetes reads them (shared with the etcd store's canonical form). */
export const customTags = (tags: Tags): Tags =>
  tags.filter((t) =>
    typeof t === 'string' ? !STRING_TAG_NAMES.has(t) : !STRING_TAGS.has(t.tag) && !('format' in t && t.format === 'TIME'),
  );

export function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Removes null-valued mapping entries, recursively ("field: null" = unset). */
function stripNulls(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stripNulls);
  if (!isRecord(v)) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) if (x !== null) out[k] = stripNulls(x);
  return out;
}

/**
 * Parses one file's text; no cross-document checks beyond YAML itself.
 * Bounded by `limits` (see limits.ts): text over the size cap is not parsed,
 * documents are composed one at a time and each is checked for depth and
 * aliases before it is expanded into objects.
 */
export function parseFile(text: string, file: string, limits: ManifestLimits = manifestLimitDefaults): ParsedFile {
  const entries: ParsedEntry[] = [];
  const ignored: IgnoredObject[] = [];
  const errors: ManifestError[] = [];
  const warnings: ManifestWarning[] = [];
  // A UTF-16 length over the cap is always over it in UTF-8 too: no need to count.
  const bytes = text.length > limits.maxBytes ? text.length : utf8Length(text);
  if (bytes > limits.maxBytes) return { file, entries, errors: [tooLargeError(file, utf8Length(text), limits)], warnings };
  const lineCounter = new LineCounter();
  const at = (offset: number | undefined): Position | undefined => {
    if (offset === undefined) return undefined;
    const p = lineCounter.linePos(offset);
    return { line: p.line, column: p.col };
  };
  if (hasTooManyAliases(text, limits.maxAliases)) {
    const message = `more than ${limits.maxAliases} YAML aliases in the file; refused before parsing it`;
    return { file, entries, errors: [{ severity: 'error', code: 'HERALD_MANIFEST_TOO_LARGE', file, path: '', message }], warnings };
  }
  const budget: DocumentBudget = {
    aliasesLeft: limits.maxAliases,
    maxAliases: limits.maxAliases,
    maxNodes: maxYamlNodes(limits),
    maxDepth: MAX_YAML_DEPTH,
  };
  try {
    const composer = new Composer({ version: '1.1', customTags, prettyErrors: false, uniqueKeys: true });
    let document = 0;
    for (const doc of composer.compose(new Parser(lineCounter.addNewLine).parse(text))) {
      document++;
      if (document > limits.maxDocuments) {
        errors.push({
          severity: 'error',
          code: 'HERALD_MANIFEST_TOO_LARGE',
          file,
          document,
          ...at(doc.range[0]),
          path: '',
          message: `more than ${limits.maxDocuments} YAML documents in one file; the file is refused`,
        });
        break;
      }
      if (!readDocument({ file, document, doc, at, entries, ignored, errors, warnings, targets: new Map() }, budget)) break;
    }
  } catch (e) {
    // The YAML library itself gave up (e.g. nesting deep enough to exhaust the stack).
    const message = e instanceof Error ? e.message : String(e);
    errors.push({ severity: 'error', file, path: '', message: `YAML: ${truncate(message)}` });
  }
  return { file, entries, ignored, errors, warnings };
}

/** Checks and validates one document; false when the rest of the file must not be read. */
function readDocument(ctx: DocContext, budget: DocumentBudget): boolean {
  const { file, document, doc, at } = ctx;
  for (const e of doc.errors) {
    const dup = e.code === 'DUPLICATE_KEY' ? findDuplicateKey(doc.contents, e.pos[0]) : undefined;
    if (dup) {
      // As kubectl: a mapping with a key twice is refused, naming the key and both places.
      const first = at(dup.firstOffset);
      const message = `duplicate key ${quote(dup.key)}${first ? ` (first at line ${first.line})` : ''}: a mapping may have each key once; remove one`;
      ctx.errors.push({ severity: 'error', file, document, ...at(e.pos[0]), path: formatPath(dup.path), message });
      continue;
    }
    ctx.errors.push({ severity: 'error', file, document, ...at(e.pos[0]), path: '', message: `YAML syntax error: ${truncate(e.message)}` });
  }
  for (const w of doc.warnings) {
    ctx.warnings.push({ severity: 'warning', file, document, ...at(w.pos[0]), path: '', message: `YAML: ${truncate(w.message)}` });
  }
  if (doc.errors.length > 0) return true;
  const checked = checkDocumentBudget(doc, budget);
  if (!checked.ok) {
    ctx.errors.push({ severity: 'error', code: 'HERALD_MANIFEST_TOO_LARGE', file, document, ...at(checked.offset), path: '', message: checked.message });
    return false;
  }
  for (const [alias, target] of checked.targets) ctx.targets.set(alias, target);
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e);
    ctx.errors.push({ severity: 'error', file, document, ...at(doc.contents?.range[0]), path: '', message: `YAML: ${truncate(message)}` });
    return true;
  }
  if (value === null || value === undefined) return true; // empty document
  value = stripNulls(value);
  if (isRecord(value) && typeof value.kind === 'string' && value.kind.endsWith('List')) {
    readList(ctx, value);
  } else {
    readObject(ctx, value, {}, undefined, []);
  }
  return true;
}

/** The key whose second occurrence starts at `offset`: its text, its path, and where it first appeared. */
function findDuplicateKey(root: unknown, offset: number): { key: string; path: (string | number)[]; firstOffset: number | undefined } | undefined {
  const walk = (node: unknown, path: (string | number)[], depth: number): ReturnType<typeof findDuplicateKey> => {
    if (depth > MAX_YAML_DEPTH) return undefined;
    if (isSeq(node)) {
      for (const [i, item] of node.items.entries()) {
        const found = walk(item, [...path, i], depth + 1);
        if (found) return found;
      }
    } else if (isMap(node)) {
      const seen = new Map<string, number | undefined>();
      for (const pair of node.items) {
        const keyNode = pair.key as Node | null;
        const text = isScalar(keyNode) ? String(keyNode.value) : String(keyNode);
        const start = isScalar(keyNode) || isMap(keyNode) || isSeq(keyNode) ? keyNode.range?.[0] : undefined;
        if (start === offset) return { key: text, path: [...path, text], firstOffset: seen.get(text) };
        if (!seen.has(text)) seen.set(text, start);
        const found = walk(pair.value, [...path, text], depth + 1) ?? walk(keyNode, path, depth + 1);
        if (found) return found;
      }
    }
    return undefined;
  };
  return walk(root, [], 0);
}

interface DocContext {
  readonly file: string;
  readonly document: number;
  readonly doc: Document.Parsed;
  readonly at: (offset: number | undefined) => Position | undefined;
  readonly entries: ParsedEntry[];
  readonly ignored: IgnoredObject[];
  readonly errors: ManifestError[];
  readonly warnings: ManifestWarning[];
  /** Each alias's anchor node (see yaml-budget.ts). */
  readonly targets: Map<Alias, Node>;
}

type ObjectLabel = { readonly kind: string; readonly name?: string };

/** Records a diagnostic at `docPath` (a path from the document root), printed with `fieldPath`. */
function report(
  ctx: DocContext,
  severity: 'error' | 'warning',
  src: SourceRef,
  docPath: Path,
  fieldPath: string,
  message: string,
  object?: ObjectLabel,
  code?: ManifestError['code'],
): void {
  const d = { ...src, ...locate(ctx, docPath), ...(code !== undefined ? { code } : {}), ...(object ? { object } : {}), path: fieldPath, message };
  if (severity === 'error') ctx.errors.push({ severity, ...d });
  else ctx.warnings.push({ severity, ...d });
}

const describeType = (v: unknown): string => (v === undefined ? 'required' : `expected a string, got ${describeValue(v)}`);

/** `kind: List` (kubectl output) or a typed `<Kind>List`, whose items may omit kind and apiVersion. */
function readList(ctx: DocContext, list: Record<string, unknown>): void {
  const listKind = String(list.kind);
  const itemKind = listKind === 'List' ? undefined : listKind.slice(0, -'List'.length);
  const src: SourceRef = { file: ctx.file, document: ctx.document, ...locate(ctx, []) };
  const label = { kind: listKind };
  if (itemKind !== undefined && !readsKind(itemKind, list.apiVersion)) {
    // A DeploymentList and the like: every item is another controller's.
    if (typeof list.apiVersion === 'string') {
      const items = Array.isArray(list.items) ? list.items : [];
      if (items.length === 0) ctx.ignored.push({ kind: listKind, apiVersion: list.apiVersion, source: src });
      items.forEach((_, j) =>
        ctx.ignored.push({ kind: itemKind, apiVersion: String(list.apiVersion), source: { ...src, item: j + 1, ...locate(ctx, ['items', j]) } }),
      );
      return;
    }
    report(ctx, 'error', src, ['apiVersion'], 'apiVersion', describeType(list.apiVersion), label);
    return;
  }
  const items = list.items;
  if (!Array.isArray(items)) {
    const message = items === undefined ? 'required' : `expected a list, got ${describeValue(items)}`;
    report(ctx, 'error', src, ['items'], 'items', message, label);
    return;
  }
  const defaults = itemKind !== undefined ? { kind: itemKind, apiVersion: list.apiVersion } : {};
  items.forEach((item, j) => readObject(ctx, item, defaults, j + 1, ['items', j]));
}

/** Validates one object (a document, or an item of a List at `prefix`). */
function readObject(
  ctx: DocContext,
  raw: unknown,
  defaults: Record<string, unknown>,
  item: number | undefined,
  prefix: Path,
): void {
  const src: SourceRef = {
    file: ctx.file,
    document: ctx.document,
    ...(item !== undefined ? { item } : {}),
    ...locate(ctx, prefix),
  };
  const error = (path: Path, message: string, object?: ObjectLabel, code?: ManifestError['code']): void =>
    report(ctx, 'error', src, [...prefix, ...path], formatPath(path), message, object, code);
  if (!isRecord(raw)) {
    error([], `expected a Kubernetes object (a mapping with apiVersion, kind and metadata), got ${describeValue(raw)}`);
    return;
  }
  const obj: Record<string, unknown> = { ...defaults, ...raw };
  const { kind, apiVersion } = obj;
  const metadata = isRecord(obj.metadata) ? obj.metadata : {};
  const name = typeof metadata.name === 'string' && metadata.name !== '' ? metadata.name : undefined;
  const namespace = typeof metadata.namespace === 'string' && metadata.namespace !== '' ? metadata.namespace : undefined;

  if (kind === undefined && typeof apiVersion !== 'string' && isKustomizationFile(ctx.file)) {
    // kustomize lets kustomization.yaml omit apiVersion and kind.
    ctx.ignored.push({ kind: 'Kustomization', apiVersion: KUSTOMIZE_API_VERSION, source: src });
    return;
  }
  if (typeof kind !== 'string') {
    error(['kind'], describeType(kind));
    if (typeof apiVersion !== 'string') error(['apiVersion'], describeType(apiVersion));
    return;
  }
  if (prefix.length > 0 && kind.endsWith('List')) {
    error(['kind'], `a List item cannot be a ${kind}`);
    return;
  }
  if (kind === LEGACY_BGP_KIND && typeof apiVersion === 'string' && groupOf(apiVersion) === 'cilium.io') {
    // Cilium's older BGP API: refused rather than ignored, since ignoring it would silently advertise nothing.
    error(['kind'], LEGACY_BGP_MESSAGE, { kind, ...(name !== undefined ? { name } : {}) });
    return;
  }
  if (!readsKind(kind, apiVersion)) {
    if (typeof apiVersion !== 'string' || apiVersion === '') {
      // Without an apiVersion it is not a Kubernetes object at all (kubectl refuses it too).
      error(['apiVersion'], `${describeType(apiVersion)} (kind ${quote(kind)} is not one herald reads, but every object needs an apiVersion)`, { kind, ...(name !== undefined ? { name } : {}) });
      return;
    }
    ctx.ignored.push({ kind, apiVersion, ...(name !== undefined ? { name: namespace !== undefined ? `${namespace}/${name}` : name } : {}), source: src });
    return;
  }
  const info = KINDS[kind];
  const key = name !== undefined ? objectKey(kind, name, namespace) : undefined;
  const label = { kind, ...(key !== undefined ? { name: key } : {}) };
  if (typeof apiVersion !== 'string' || !info.apiVersions.includes(apiVersion)) {
    const expected = info.apiVersions.map((v) => JSON.stringify(v)).join(' or ');
    const message =
      typeof apiVersion === 'string'
        ? `unknown apiVersion ${quote(apiVersion)} for ${kind}: expected ${expected}`
        : `${describeType(apiVersion)} (${expected})`;
    error(['apiVersion'], message, label);
    return;
  }

  // Known even when the object is invalid, so a duplicate is reported at once.
  const identity =
    key !== undefined ? { kind, key, at: { ...src, ...locate(ctx, [...prefix, 'metadata', 'name']) } } : undefined;
  const result = info.schema.safeParse(obj, { error: manifestErrorMap });
  const removed = removedFieldsIn(kind, obj);
  for (const r of removed) error([...r.path], r.message, label);
  if (!result.success || removed.length > 0) {
    for (const issue of result.success ? [] : result.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        // As the API server's strict field validation: each unknown field by its own path.
        for (const k of issue.keys) error([...issue.path, k], unknownFieldMessage(kind, [...issue.path, k]), label);
      } else {
        // A coded check (e.g. HERALD_POLICY_INVALID_CIDR) passes its code in the issue's params.
        const params = issue.code === 'custom' ? (issue.params as { heraldCode?: ManifestError['code'] } | undefined) : undefined;
        error(issue.path, issue.message, label, params?.heraldCode);
      }
    }
    ctx.entries.push({ source: src, ...(identity ? { identity } : {}) });
    return;
  }
  // The spread loses the union's correlation between kind and shape; it is intact.
  const object = { ...result.data, source: src } as IntentObject;
  const objectLabel = { kind, name: keyOf(result.data) };
  for (const w of manifestWarnings(result.data)) {
    report(ctx, 'warning', src, [...prefix, ...(w.segments ?? w.path.split(/[.[\]]+/).filter((x) => x !== '').map((x) => (/^\d+$/.test(x) ? Number(x) : x)))], w.path, w.message, objectLabel);
  }
  ctx.entries.push({ source: src, object, ...(identity ? { identity } : {}) });
}

/**
 * Fields people still write that Cilium renamed or never had, with what to
 * write instead (the rest get the API server's plain "unknown field").
 */
const FIELD_HINTS: Readonly<Record<string, string>> = {
  'CiliumLoadBalancerIPPool spec.cidr': 'write spec.blocks: [{cidr: ...}]',
  'CiliumLoadBalancerIPPool spec.block': 'the field is spec.blocks',
  'CiliumLoadBalancerIPPool spec.allowFirstLastIps': 'the field is spec.allowFirstLastIPs',
  'CiliumLoadBalancerIPPool spec.nodeSelector': 'pools select services (spec.serviceSelector); nodes are chosen by a CiliumL2AnnouncementPolicy',
  'CiliumL2AnnouncementPolicy spec.interface': 'the field is spec.interfaces (a list of regexes)',
  'CiliumL2AnnouncementPolicy spec.loadBalancerIP': 'the field is spec.loadBalancerIPs (true/false)',
  'CiliumL2AnnouncementPolicy spec.externalIP': 'the field is spec.externalIPs (true/false)',
};

function unknownFieldMessage(kind: string, path: Path): string {
  const printed = formatPath(path);
  const hint = FIELD_HINTS[`${kind} ${printed}`];
  return `unknown field ${quote(printed)}${hint !== undefined ? `: ${hint}` : ''} (${kind} is read strictly, as kubectl's default field validation does)`;
}

/**
 * The line and column of the deepest node along `path` that exists: the key
 * of a mapping entry, or the value itself when the whole path resolves to a
 * scalar (so a bad value is pointed at, and a missing field at its parent).
 */
function locate(ctx: DocContext, path: Path): Partial<Position> {
  let node: unknown = ctx.doc.contents;
  let offset = rangeStart(node);
  let complete = true;
  for (const seg of path) {
    if (isAlias(node)) node = ctx.targets.get(node);
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(seg));
      if (!pair) {
        complete = false;
        break;
      }
      offset = rangeStart(pair.key) ?? offset;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === 'number' && node.items[seg] !== undefined) {
      node = node.items[seg];
      offset = rangeStart(node) ?? offset;
    } else {
      complete = false;
      break;
    }
  }
  if (complete && isScalar(node)) offset = rangeStart(node) ?? offset;
  return ctx.at(offset) ?? {};
}

function rangeStart(node: unknown): number | undefined {
  if (node !== null && typeof node === 'object' && 'range' in node && Array.isArray(node.range)) {
    const start: unknown = node.range[0];
    return typeof start === 'number' ? start : undefined;
  }
  return undefined;
}

/**
 * Cross-file checks over parsed files (duplicates of kind + key, naming both
 * places), then the snapshot if nothing is wrong.
 */
export function finishLoad(
  files: readonly ParsedFile[],
  extraErrors: readonly ManifestError[] = [],
  maxDiagnostics = manifestLimitDefaults.maxDiagnostics,
): ManifestLoad {
  const errors: ManifestError[] = [...extraErrors];
  const warnings: ManifestWarning[] = [];
  const objects: IntentObject[] = [];
  const ignored: IgnoredObject[] = [];
  const seen = new Map<string, SourceRef>();
  for (const f of files) {
    errors.push(...f.errors);
    ignored.push(...(f.ignored ?? []));
    warnings.push(...f.warnings);
    for (const entry of f.entries) {
      if (entry.identity) {
        const { kind, key, at } = entry.identity;
        const id = `${kind}\u0000${key}`;
        const first = seen.get(id);
        if (first) {
          errors.push({
            severity: 'error',
            ...at,
            object: { kind, name: key },
            path: 'metadata.name',
            message: `duplicate ${kind} ${quote(key)}: already defined in ${describePlace(first)}`,
            related: first,
          });
          continue;
        }
        seen.set(id, entry.source);
      }
      if (entry.object) objects.push(entry.object);
    }
  }
  const order = new Map(files.map((f, i) => [f.file, i]));
  const sortKey = (d: ManifestError | ManifestWarning): number[] => [
    order.get(d.file) ?? -1,
    d.document ?? 0,
    d.item ?? 0,
    d.line ?? 0,
    d.column ?? 0,
  ];
  const compare = (a: ManifestError | ManifestWarning, b: ManifestError | ManifestWarning): number => {
    const ka = sortKey(a);
    const kb = sortKey(b);
    for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return (ka[i] ?? 0) - (kb[i] ?? 0);
    return 0;
  };
  errors.sort(compare);
  warnings.sort(compare);
  return {
    objects,
    ignored,
    errors: capPerFile(errors, maxDiagnostics, 'error'),
    warnings: capPerFile(warnings, maxDiagnostics, 'warning'),
    snapshot: errors.length === 0 ? buildSnapshot(objects) : undefined,
  };
}

/**
 * At most `max` diagnostics per file (sorted input), then one line counting
 * the rest: a file with a hundred thousand bad items must not flood the log.
 */
function capPerFile<T extends ManifestError | ManifestWarning>(sorted: readonly T[], max: number, severity: T['severity']): T[] {
  const out: T[] = [];
  const counts = new Map<string, number>();
  for (const d of sorted) counts.set(d.file, (counts.get(d.file) ?? 0) + 1);
  const listed = new Map<string, number>();
  for (const d of sorted) {
    const n = (listed.get(d.file) ?? 0) + 1;
    listed.set(d.file, n);
    if (n <= max) out.push(d);
    const total = counts.get(d.file) ?? 0;
    if (n === max + 1) {
      const more = total - max;
      out.push({ severity, file: d.file, path: '', message: `… and ${more} more ${severity}${more === 1 ? '' : 's'} in this file (not listed)` } as T);
    }
  }
  return out;
}

/**
 * Parses every YAML document of one file (a `List` counts as one document
 * with items) and checks for duplicates within it.
 */
export function parseManifests(text: string, file: string, limits: ManifestLimits = manifestLimitDefaults): ManifestLoad {
  return finishLoad([parseFile(text, file, limits)], [], limits.maxDiagnostics);
}

/** Ignored objects counted per kind, most frequent first, then by name: [["Deployment", 2], ["HelmRelease", 1]]. */
export function countIgnoredKinds(ignored: readonly IgnoredObject[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const o of ignored) counts.set(o.kind, (counts.get(o.kind) ?? 0) + 1);
  return [...counts].sort(([a, x], [b, y]) => y - x || compareStrings(a, b));
}
