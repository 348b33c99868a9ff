/** Aligned plain-text tables for CLI output. */
export function printTable(headers: string[], rows: string[][], out: NodeJS.WritableStream = process.stdout): void {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd() + '\n';
  out.write(line(headers));
  for (const r of rows) out.write(line(r));
}
