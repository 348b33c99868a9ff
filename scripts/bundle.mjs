// Bundles the compiled CLI (dist/cli/main.js and what it imports) into a few
// files under dist/bundle/, which bin/herald runs. Why: Node's ESM loader pays
// per module, and the agent imports about 300 (zod alone is 95 files); one
// file per lazily loaded command (esbuild splitting keeps `herald --help`
// free of the agent's modules) halves the time before the agent's first line.
//
// Same code, same behaviour: every `import.meta.url` in a bundled file is
// rewritten to that file's own URL under dist/ (so the BPF object, the parse
// worker and package.json are found where they always were), and packages
// with native parts or files read at run time stay external.
import { build } from 'esbuild';
import { readFile, rm } from 'node:fs/promises';
import { dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = resolve(root, 'dist');
const outdir = resolve(dist, 'bundle');

/** `import.meta.url` of each dist/ file as that file's URL, relative to the bundle's directory. */
const keepModuleUrls = {
  name: 'keep-module-urls',
  setup(b) {
    // herald's own compiled files only (packages' dist/ folders are not ours to rewrite).
    const ours = new RegExp(`^${dist.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/.*\\.js$`);
    b.onLoad({ filter: ours }, async (args) => {
      const text = await readFile(args.path, 'utf8');
      if (!text.includes('import.meta.url')) return undefined;
      const rel = relative(outdir, args.path).split('\\').join('/');
      return { contents: text.replaceAll('import.meta.url', `new URL(${JSON.stringify(rel)}, import.meta.url).href`), loader: 'js' };
    });
  },
};

/**
 * zod's `z.locales` namespace pulls in every language's error messages (about
 * 250 kB, a third of what the agent compiles at start); herald reports in
 * English only (zod's default, which zod imports directly), so the namespace
 * holds `en` alone.
 */
const englishOnly = {
  name: 'zod-english-only',
  setup(b) {
    b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]v4[\\/](classic|core)$/.test(args.resolveDir) ? { path: resolve(args.resolveDir, '../locales/en.js').replace(/en\.js$/, 'english-only'), namespace: 'zod-locales' } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: "export { default as en } from './en.js';",
      resolveDir: dirname(args.path),
      loader: 'js',
    }));
  },
};

await rm(outdir, { recursive: true, force: true });
const result = await build({
  metafile: process.argv.includes('--analyze'),
  entryPoints: { main: resolve(dist, 'cli/main.js') },
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // Native code (koffi, netlink), files read at run time (etcd3's gRPC protos), opt-in (prom-client).
  external: ['koffi', 'netlink', 'netlink/*', 'etcd3', 'prom-client'],
  banner: { js: "import { createRequire as __heraldCreateRequire } from 'node:module'; const require = __heraldCreateRequire(import.meta.url);" },
  plugins: [keepModuleUrls, englishOnly],
  sourcemap: true,
  minify: true,
  keepNames: true,
  logLevel: 'warning',
});
if (result.metafile) {
  const { analyzeMetafile } = await import('esbuild');
  console.log(await analyzeMetafile(result.metafile));
}
