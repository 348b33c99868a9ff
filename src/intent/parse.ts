/**
 * Manifest text → validated objects, errors and warnings. Pure: no I/O.
 *
 * YAML is read as Kubernetes reads it (YAML 1.1 scalars, so unquoted
 * yes/no/on/off are booleans; but timestamps and sexagesimal numbers stay
 * strings, as in sigs.k8s.io/yaml). A `null` mapping value means "unset", as
 * in Kubernetes' JSON decoding. Every problem in every document is reported;
 * a document with a YAML syntax error is not validated further.
 */
import { LineCounter, isAlias, isMap, isScalar, isSeq, parseAllDocuments, type Document, type Tags } from 'yaml';
import type { ManifestError, ManifestWarning, SourceRef } from './diagnostics.js';
import { formatPath } from './diagnostics.js';
import { manifestErrorMap, describeValue } from './fields.js';
import { KINDS, isIntentKind, keyOf, manifestWarnings, objectKey, type IntentKind, type IntentObject } from './kinds.js';
import { buildSnapshot, describePlace, type IntentSnapshot } from './snapshot.js';

export interface ManifestLoad {
  /** Every valid object (a later duplicate is left out). */
  readonly objects: readonly IntentObject[];
  readonly errors: readonly ManifestError[];
  readonly warnings: readonly ManifestWarning[];
  /** Set exactly when there are no errors. */
  readonly snapshot: IntentSnapshot | undefined;
}

/** The per-file result before cross-file checks (see `finishLoad`). */
export interface ParsedFile {
  readonly file: string;
  readonly entries: readonly ParsedEntry[];
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

const SUPPORTED = `${Object.keys(KINDS).join(', ')} and List`;

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

/** Parses one file's text; no cross-document checks beyond YAML itself. */
export function parseFile(text: string, file: string): ParsedFile {
  const lineCounter = new LineCounter();
  const docs = parseAllDocuments(text, { version: '1.1', customTags, lineCounter, prettyErrors: false, uniqueKeys: true });
  const entries: ParsedEntry[] = [];
  const errors: ManifestError[] = [];
  const warnings: ManifestWarning[] = [];
  const at = (offset: number | undefined): Position | undefined => {
    if (offset === undefined) return undefined;
    const p = lineCounter.linePos(offset);
    return { line: p.line, column: p.col };
  };

  // parseAllDocuments returns an EmptyStream (an empty array) for empty text.
  const list = Array.isArray(docs) ? docs : [docs];
  list.forEach((doc, index) => {
    const document = index + 1;
    for (const e of doc.errors) {
      errors.push({ severity: 'error', file, document, ...at(e.pos[0]), path: '', message: `YAML syntax error: ${e.message}` });
    }
    for (const w of doc.warnings) {
      warnings.push({ severity: 'warning', file, document, ...at(w.pos[0]), path: '', message: `YAML: ${w.message}` });
    }
    if (doc.errors.length > 0) return;
    const ctx: DocContext = { file, document, doc, at, entries, errors, warnings };
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      errors.push({ severity: 'error', file, document, ...at(doc.contents?.range[0]), path: '', message: `YAML: ${message}` });
      return;
    }
    if (value === null || value === undefined) return; // empty document
    value = stripNulls(value);
    if (isRecord(value) && typeof value.kind === 'string' && value.kind.endsWith('List')) {
      readList(ctx, value);
    } else {
      readObject(ctx, value, {}, undefined, []);
    }
  });
  return { file, entries, errors, warnings };
}

interface DocContext {
  readonly file: string;
  readonly document: number;
  readonly doc: Document.Parsed;
  readonly at: (offset: number | undefined) => Position | undefined;
  readonly entries: ParsedEntry[];
  readonly errors: ManifestError[];
  readonly warnings: ManifestWarning[];
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
): void {
  const d = { ...src, ...locate(ctx, docPath), ...(object ? { object } : {}), path: fieldPath, message };
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
  if (itemKind !== undefined && !isIntentKind(itemKind)) {
    report(ctx, 'error', src, ['kind'], 'kind', `unknown kind ${JSON.stringify(listKind)} (herald reads ${SUPPORTED})`, label);
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
  const error = (path: Path, message: string, object?: ObjectLabel): void =>
    report(ctx, 'error', src, [...prefix, ...path], formatPath(path), message, object);
  if (!isRecord(raw)) {
    error([], `expected a Kubernetes object (a mapping with apiVersion, kind and metadata), got ${describeValue(raw)}`);
    return;
  }
  const obj: Record<string, unknown> = { ...defaults, ...raw };
  const { kind, apiVersion } = obj;
  const metadata = isRecord(obj.metadata) ? obj.metadata : {};
  const name = typeof metadata.name === 'string' && metadata.name !== '' ? metadata.name : undefined;
  const namespace = typeof metadata.namespace === 'string' && metadata.namespace !== '' ? metadata.namespace : undefined;

  if (typeof kind !== 'string') {
    error(['kind'], describeType(kind));
    if (typeof apiVersion !== 'string') error(['apiVersion'], describeType(apiVersion));
    return;
  }
  if (prefix.length > 0 && kind.endsWith('List')) {
    error(['kind'], `a List item cannot be a ${kind}`);
    return;
  }
  if (!isIntentKind(kind)) {
    error(['kind'], `unknown kind ${JSON.stringify(kind)} (herald reads ${SUPPORTED})`, { kind, ...(name !== undefined ? { name } : {}) });
    return;
  }
  const info = KINDS[kind];
  const key = name !== undefined ? objectKey(kind, name, namespace) : undefined;
  const label = { kind, ...(key !== undefined ? { name: key } : {}) };
  if (typeof apiVersion !== 'string' || !info.apiVersions.includes(apiVersion)) {
    const expected = info.apiVersions.map((v) => JSON.stringify(v)).join(' or ');
    const message =
      typeof apiVersion === 'string'
        ? `unknown apiVersion ${JSON.stringify(apiVersion)} for ${kind}: expected ${expected}`
        : `${describeType(apiVersion)} (${expected})`;
    error(['apiVersion'], message, label);
    return;
  }

  // Known even when the object is invalid, so a duplicate is reported at once.
  const identity =
    key !== undefined ? { kind, key, at: { ...src, ...locate(ctx, [...prefix, 'metadata', 'name']) } } : undefined;
  const result = info.schema.safeParse(obj, { error: manifestErrorMap });
  if (!result.success) {
    for (const issue of result.error.issues) error(issue.path, issue.message, label);
    ctx.entries.push({ source: src, ...(identity ? { identity } : {}) });
    return;
  }
  // The spread loses the union's correlation between kind and shape; it is intact.
  const object = { ...result.data, source: src } as IntentObject;
  const objectLabel = { kind, name: keyOf(result.data) };
  for (const w of manifestWarnings(result.data)) {
    report(ctx, 'warning', src, [...prefix, ...w.path.split('.')], w.path, w.message, objectLabel);
  }
  ctx.entries.push({ source: src, object, ...(identity ? { identity } : {}) });
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
    if (isAlias(node)) node = node.resolve(ctx.doc);
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
export function finishLoad(files: readonly ParsedFile[], extraErrors: readonly ManifestError[] = []): ManifestLoad {
  const errors: ManifestError[] = [...extraErrors];
  const warnings: ManifestWarning[] = [];
  const objects: IntentObject[] = [];
  const seen = new Map<string, SourceRef>();
  for (const f of files) {
    errors.push(...f.errors);
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
            message: `duplicate ${kind} ${JSON.stringify(key)}: already defined in ${describePlace(first)}`,
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
    errors,
    warnings,
    snapshot: errors.length === 0 ? buildSnapshot(objects) : undefined,
  };
}

/**
 * Parses every YAML document of one file (a `List` counts as one document
 * with items) and checks for duplicates within it.
 */
export function parseManifests(text: string, file: string): ManifestLoad {
  return finishLoad([parseFile(text, file)]);
}
