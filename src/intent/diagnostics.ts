/**
 * Where a manifest object came from, and the errors and warnings about it.
 *
 * Numbering: `document` and `item` are 1-based ordinals, stored exactly as
 * printed ("document 2" is the second YAML document of the file, "item 3" the
 * third entry of a List's `items`). Field paths use 0-based indexes, as
 * Kubernetes prints them (`spec.blocks[0].cidr`). `line`/`column` are 1-based.
 *
 * Printed form, one line each:
 *   pools.yaml:7:11: document 2 (CiliumLoadBalancerIPPool "blue"): spec.blocks[0].cidr: invalid CIDR "…": …
 */
import { quote, truncate } from './quote.js';
import type { PolicyIssueCode } from './network-policy.js';

/** Longest message printed (a safety net: values inside messages are quoted bounded already). */
const MAX_MESSAGE_CHARS = 2000;

export interface SourceRef {
  readonly file: string;
  /** 1-based YAML document number; absent for file-level problems (e.g. unreadable file). */
  readonly document?: number;
  /** 1-based entry number within a `List`'s items. */
  readonly item?: number;
  readonly line?: number;
  readonly column?: number;
}

export interface ManifestDiagnostic extends SourceRef {
  readonly severity: 'error' | 'warning';
  /** Set on problems a program may want to tell apart (e.g. HERALD_MANIFEST_TOO_LARGE). */
  readonly code?: 'HERALD_MANIFEST_TOO_LARGE' | PolicyIssueCode;
  /** The object concerned, when known: kind and `namespace/name` (or `name` when cluster-scoped). */
  readonly object?: { readonly kind: string; readonly name?: string };
  /** Field path inside the object (`spec.ports[0].port`); empty for the whole document or file. */
  readonly path: string;
  readonly message: string;
  /** Another place involved (the first definition of a duplicate). */
  readonly related?: SourceRef;
}

export type ManifestError = ManifestDiagnostic & { readonly severity: 'error' };
export type ManifestWarning = ManifestDiagnostic & { readonly severity: 'warning' };

/** Formats a field path: `spec.blocks[0].cidr`, `metadata.annotations["lbipam.cilium.io/ips"]`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else {
      const key = String(seg);
      if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) out += out === '' ? key : `.${key}`;
      else out += `[${quote(key)}]`;
    }
  }
  return out;
}

/** `file.yaml document 2, item 3` (with `:line:column` after the file when known). */
export function formatSource(src: SourceRef): string {
  let out = truncate(src.file);
  if (src.line !== undefined) out += `:${src.line}${src.column !== undefined ? `:${src.column}` : ''}`;
  if (src.document !== undefined) out += `: document ${src.document}`;
  if (src.item !== undefined) out += `, item ${src.item}`;
  return out;
}

/** One line: location, object, path, message. Warnings say so after the location. */
export function formatDiagnostic(d: ManifestDiagnostic): string {
  let out = formatSource(d);
  if (d.object) out += ` (${truncate(d.object.kind)}${d.object.name !== undefined ? ` ${quote(d.object.name)}` : ''})`;
  out += ': ';
  if (d.severity === 'warning') out += 'warning: ';
  if (d.code !== undefined) out += `${d.code}: `;
  if (d.path !== '') out += `${truncate(d.path)}: `;
  return out + truncate(d.message, MAX_MESSAGE_CHARS);
}

/** For CLI printing: one diagnostic per line, in the order given. */
export function formatErrors(diagnostics: readonly ManifestDiagnostic[]): string {
  return diagnostics.map(formatDiagnostic).join('\n');
}
