/** The BPF C sources under bpf/, read by tests that check the TypeScript layouts name what the C declares. */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export function bpfSource(file: string): string {
  return readFileSync(fileURLToPath(new URL(`../../bpf/${file}`, import.meta.url)), 'utf8');
}

/** Every map the source declares (`} name SEC(".maps")`). */
export function declaredMaps(source: string): Set<string> {
  return new Set([...source.matchAll(/\}\s*(\w+)\s+SEC\("\.maps"\)/g)].map((m) => m[1]!));
}

/** The pattern of a program entry point `SEC("<section>") int <name>(`. */
export function entryPoint(section: string, name: string): RegExp {
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`SEC\\("${escape(section)}"\\)\\s*int\\s+${escape(name)}\\s*\\(`);
}
