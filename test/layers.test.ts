/**
 * The folder layout is the architecture, so its arrows are checked: src/ is
 * the product and never reaches into the lab (test tooling); the layers above
 * the datapath (intent, control plane, store) see the datapath only through
 * its table contract (datapath/tables) and the OS only through types, and the
 * datapath never reaches up into the store or intent.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

interface Import {
  from: string;
  /** Repository-relative target for a relative specifier; undefined for packages and node: builtins. */
  target: string | undefined;
  typeOnly: boolean;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

function importsOf(file: string): Import[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const found: Import[] = [];
  const add = (spec: string, typeOnly: boolean) =>
    found.push({
      from: file,
      target: spec.startsWith('.') ? relative(ROOT, resolve(ROOT, dirname(file), spec)) : undefined,
      typeOnly,
    });
  for (const m of text.matchAll(/^\s*(?:import|export)\s+(type\s+)?[^;'"]*?\bfrom\s+'([^']+)'/gm)) add(m[2]!, m[1] !== undefined);
  for (const m of text.matchAll(/^\s*import\s+'([^']+)'/gm)) add(m[1]!, false);
  for (const m of text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g)) add(m[1]!, false);
  return found;
}

const product = sourceFiles('src').flatMap(importsOf);
const under = (path: string | undefined, dir: string) => path !== undefined && (path === dir || path.startsWith(dir + '/'));
const show = (xs: Import[]) => xs.map((i) => `${i.from} → ${i.target}`);

test('the import scan sees the imports it checks', () => {
  // Guards the guard: a regex that matched nothing would pass every rule below.
  assert.ok(product.some((i) => i.from === 'src/store/etcd/ownership.ts' && i.target === 'src/controlplane/ownership/edges.js' && i.typeOnly));
  assert.ok(product.some((i) => i.from === 'src/agent.ts' && under(i.target, 'src/datapath') && !i.typeOnly));
});

test('src/ imports nothing outside src/ (the lab, tests and benchmarks are not product)', () => {
  assert.deepEqual(show(product.filter((i) => i.target !== undefined && !under(i.target, 'src'))), []);
});

test('intent, control plane and store see the datapath only through its tables', () => {
  const upper = product.filter((i) => ['src/intent', 'src/controlplane', 'src/store'].some((d) => under(i.from, d)));
  assert.deepEqual(show(upper.filter((i) => under(i.target, 'src/datapath') && !under(i.target, 'src/datapath/tables'))), []);
});

test('intent, control plane and store see the OS only through types (the stores own their state files)', () => {
  const upper = product.filter((i) => ['src/intent', 'src/controlplane', 'src/store'].some((d) => under(i.from, d)));
  const ownStateFile = (i: Import) => under(i.from, 'src/store') && i.target === 'src/os/state-file.js';
  assert.deepEqual(show(upper.filter((i) => under(i.target, 'src/os') && !i.typeOnly && !ownStateFile(i))), []);
});

test('the datapath never reaches up into the store, intent or the control plane beyond its edges', () => {
  const datapath = product.filter((i) => under(i.from, 'src/datapath'));
  const up = datapath.filter(
    (i) =>
      under(i.target, 'src/store') ||
      under(i.target, 'src/intent') ||
      (under(i.target, 'src/controlplane') && i.target !== 'src/controlplane/ownership/edges.js'),
  );
  assert.deepEqual(show(up), []);
});
