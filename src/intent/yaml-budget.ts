/**
 * One pass over a composed YAML document, before it is turned into objects:
 * nesting depth, alias count and the node count with aliases expanded are
 * checked against the limits (an alias bomb is refused here, before
 * `toJS` and validation would expand it), and every alias is resolved to
 * its anchor once, for error locations (yaml's own `Alias.resolve` scans
 * the whole document on every call).
 */
import { Lexer, isAlias, isMap, isPair, isScalar, isSeq, type Alias, type Document, type Node } from 'yaml';

/**
 * Whether `text` has more than `max` YAML aliases, decided before parsing:
 * composing a document with half a million aliases takes gigabytes, so the
 * count cannot wait for the composed document. Each alias needs a `*`, so
 * text with few is passed at once; otherwise the lexer (a generator, light
 * on memory) counts alias tokens and stops at the first one too many.
 */
export function hasTooManyAliases(text: string, max: number): boolean {
  let stars = 0;
  for (let i = text.indexOf('*'); i >= 0 && stars <= max; i = text.indexOf('*', i + 1)) stars++;
  if (stars <= max) return false;
  let aliases = 0;
  for (const token of new Lexer().lex(text)) {
    if (token.charCodeAt(0) === 42 /* '*' */ && ++aliases > max) return true;
  }
  return false;
}

export interface DocumentBudget {
  /** Alias nodes still allowed in this file. */
  aliasesLeft: number;
  readonly maxAliases: number;
  readonly maxNodes: number;
  readonly maxDepth: number;
}

export type BudgetResult =
  | { readonly ok: true; readonly aliases: number; readonly targets: ReadonlyMap<Alias, Node> }
  | { readonly ok: false; readonly message: string; readonly offset: number | undefined };

class Refused {
  constructor(
    readonly message: string,
    readonly node: unknown,
  ) {}
}

function start(node: unknown): number | undefined {
  const range = (node as { range?: unknown } | null)?.range;
  return Array.isArray(range) && typeof range[0] === 'number' ? range[0] : undefined;
}

/**
 * Walks `doc` in document order (an alias refers to the last node with its
 * anchor before it, as in yaml), counting expanded nodes with memoisation,
 * so the walk is linear in the literal document however much aliases expand.
 */
export function checkDocumentBudget(doc: Document.Parsed, budget: DocumentBudget): BudgetResult {
  const anchors = new Map<string, Node>();
  const targets = new Map<Alias, Node>();
  const sizes = new Map<Node, number>();
  const open = new Set<Node>();
  let aliases = 0;

  const size = (node: unknown, depth: number): number => {
    if (node === null || node === undefined) return 0;
    if (depth > budget.maxDepth) throw new Refused(`nested deeper than ${budget.maxDepth} levels`, node);
    if (isAlias(node)) {
      aliases++;
      if (--budget.aliasesLeft < 0) throw new Refused(`more than ${budget.maxAliases} YAML aliases in the file; refused before resolving them`, node);
      const target = anchors.get(node.source);
      if (!target) return 1; // unresolved: toJS reports it
      if (open.has(target)) throw new Refused(`alias *${node.source} refers to a node that contains it`, node);
      targets.set(node, target);
      return sizes.get(target) ?? 1;
    }
    const n = node as Node;
    if (n.anchor) anchors.set(n.anchor, n);
    let total = 1;
    if (isMap(n) || isSeq(n)) {
      open.add(n);
      for (const item of n.items as unknown[]) {
        if (isPair(item)) total += size(item.key, depth + 1) + size(item.value, depth + 1);
        else total += size(item, depth + 1);
        if (total > budget.maxNodes) throw new Refused('', n);
      }
      open.delete(n);
    } else if (!isScalar(n)) {
      return 1;
    }
    sizes.set(n, total);
    return total;
  };

  try {
    const total = size(doc.contents, 0);
    if (total > budget.maxNodes) throw new Refused('', doc.contents);
  } catch (e) {
    if (!(e instanceof Refused)) throw e;
    const message =
      e.message === ''
        ? `the document has more than ${budget.maxNodes} YAML nodes with its aliases expanded (an alias bomb?); refused before expanding it`
        : e.message;
    return { ok: false, message, offset: start(e.node) };
  }
  return { ok: true, aliases, targets };
}
