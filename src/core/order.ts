/**
 * The one order for names and keys: code-unit order, what `<` does on
 * strings. Locale-free and cheap, so every node sorts the same input the same
 * way — allocation, fingerprints, reports and messages depend on that.
 */

/** Code-unit order of two strings (-1, 0, 1). */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A comparator ordering values by a string each one carries. */
export function byString<T>(key: (value: T) => string): (a: T, b: T) => number {
  return (a, b) => compareStrings(key(a), key(b));
}

/** Entries (of a record, a map or any iterable of pairs) sorted by key; a new array. */
export function sortedEntries<V>(from: Readonly<Record<string, V>> | Iterable<readonly [string, V]>): [string, V][] {
  const entries: [string, V][] = isIterable(from) ? [...from].map(([k, v]) => [k, v]) : Object.entries(from);
  return entries.sort((a, b) => compareStrings(a[0], b[0]));
}

function isIterable<V>(x: Readonly<Record<string, V>> | Iterable<readonly [string, V]>): x is Iterable<readonly [string, V]> {
  return typeof (x as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function';
}
